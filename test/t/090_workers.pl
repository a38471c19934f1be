# 090_workers.pl
#
# Lanes and schedulers tell the truth about what runs (issue 10, findings 6
# and 9's worker parts):
#  (1) a new rate wakes a lane that waits out the old one: declared at
#      rate 0.002 (a batch every 500 s), then declared again at rate 100,
#      the pass completes at once;
#  (2) a pause wakes it too: the lane leaves its partition at once; resumed,
#      a lane waits out the pass's rate from its last batch (the rate is the
#      pass's, issue 24), and a cancel ends that sleeping lane at once;
#  (3) a scheduler that is stopped and started again counts the lanes its
#      predecessor started: never more than backfill.max_workers;
#  (4) a launcher that is stopped and started again does not start a
#      second scheduler for a database whose scheduler still runs;
#  (5) a setting that its module refuses fails the pass with BF011 instead
#      of killing every lane in its start-up behind the restart backoff.
# Every action is non-idempotent (n = n + 1): rows are done exactly once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('workers',
	extra_conf => "backfill.max_workers = 2\n"
	  . "shared_preload_libraries = 'pg_backfill,auto_explain'\n");
$BackfillTest::poll_interval = 0.1;

sq($node, 'CREATE EXTENSION pg_backfill');

my $LANES = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'};

# ------------------------------------------------------------------
# (1) a new rate takes effect at once
# ------------------------------------------------------------------
sq($node, q{
	CREATE TABLE w1 (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO w1 (id) SELECT g FROM generate_series(1, 30) g;
});
my $decl_w1 = q{
	SELECT backfill_declare(name => 'w1', relation => 'w1', predicate => 'n = 0',
		action => 'UPDATE w1 SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 10, rate => %s, guard => false)};
sq($node, sprintf($decl_w1, '0.002'));
my $r1 = sq($node, q{SELECT backfill_run('w1')});
ok(poll_until($node, "SELECT rows FROM backfill.partition WHERE run_id = $r1", '10', 120),
	'rate 0.002: the first batch commits, then the lane waits 500 s for the next');
sq($node, sprintf($decl_w1, '100'));
is(wait_pass_end($node, $r1, 120), 'completed',
	'declared again with rate 100: the waiting lane goes on at once and the pass completes');
is(sq($node, 'SELECT count(*), sum(n) FROM w1 WHERE n = 1'), '30|30',
	'every row done exactly once');

# ------------------------------------------------------------------
# (2) pause and cancel wake a lane that waits out its rate
# ------------------------------------------------------------------
sq($node, q{
	CREATE TABLE w2 (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO w2 (id) SELECT g FROM generate_series(1, 30) g;
	SELECT backfill_declare(name => 'w2', relation => 'w2', predicate => 'n = 0',
		action => 'UPDATE w2 SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 10, rate => 0.002, guard => false);
});
my $r2 = sq($node, q{SELECT backfill_run('w2')});
ok(poll_until($node, "SELECT rows FROM backfill.partition WHERE run_id = $r2", '10', 120),
	'the first batch of w2 commits; its lane waits 500 s');
is(sq($node, q{SELECT backfill_pause('w2')}), 't', 'backfill_pause answers true');
ok(poll_until($node,
		"SELECT state, holder_pid IS NULL FROM backfill.partition WHERE run_id = $r2",
		'pending|t', 120),
	'paused: the waiting lane leaves its partition at once');
ok(poll_until($node, $LANES, '0', 120), 'and the lane exits');

is(sq($node, q{SELECT backfill_resume('w2')}), 't', 'backfill_resume answers true');
ok(poll_until($node,
		"SELECT state, holder_pid IS NOT NULL FROM backfill.partition WHERE run_id = $r2",
		'running|t', 120),
	'resumed: a lane claims the partition again');
ok(poll_until($node, $LANES, '1', 120), 'one lane waits');
# the rate is the pass's (issue 24): the pass's last batch started less than
# 500 s ago, so the resumed lane waits out the rest before its next one
is(holds_for($node, "SELECT rows FROM backfill.partition WHERE run_id = $r2", '10', 3), undef,
	'the resumed lane waits out the pass\'s rate: no batch before it');
is(sq($node, q{SELECT backfill_cancel('w2')}), 't', 'backfill_cancel answers true');
ok(poll_until($node, $LANES, '0', 120), 'cancelled: the waiting lane exits at once');
is(ledger($node, $r2, 'status, rows'), 'cancelled|10', 'the ledger says cancelled, 10 rows');
is(sq($node, 'SELECT count(*) FILTER (WHERE n = 1), sum(n) FROM w2'), '10|10',
	'the 10 rows the ledger counts were done exactly once, the others not at all');

# ------------------------------------------------------------------
# (3) a restarted scheduler counts the lanes of the one before it
# ------------------------------------------------------------------
# 4000 batches of 0.2 s on 2 lanes: the pass runs for at least 400 s, so it
# is certainly still running when it is cancelled below
sq($node, q{
	CREATE TABLE w3 (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO w3 (id) SELECT g FROM generate_series(1, 20000) g;
	SELECT backfill_declare(name => 'w3', relation => 'w3', predicate => 'n = 0',
		action => 'UPDATE w3 SET n = n + 1 + 0 * (SELECT count(*) FROM pg_sleep(0.2))'
		       || ' WHERE id BETWEEN $1 AND $2',
		batch_size => 5, rate => 100, max_parallel => 4, guard => false);
});
my $r3 = sq($node, q{SELECT backfill_run('w3')});
ok(poll_until($node, $LANES, '2', 120), 'w3 (max_parallel 4) gets backfill.max_workers = 2 lanes');
my $SCHED = q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill scheduler'
	AND datname = 'postgres'};
my $old_sched = sq($node, $SCHED);
sq($node, "SELECT pg_terminate_backend($old_sched)");
ok(poll_until($node, "SELECT count(*) FROM ($SCHED) s WHERE pid <> $old_sched", '1', 180),
	'the launcher starts the scheduler again');
is(holds_for($node, "SELECT ($LANES) <= 2", 't', 6), undef,
	'the new scheduler counts the lanes it did not start: never more than 2');
is(sq($node, q{SELECT backfill_cancel('w3')}), 't', 'w3 cancelled');
ok(poll_until($node, $LANES, '0', 120), 'its lanes exit');
is(sq($node, "SELECT (SELECT rows FROM backfill.ledger WHERE run_id = $r3) = sum(n)"
	  . " AND count(*) FILTER (WHERE n > 1) = 0 FROM w3"),
	't', 'w3: the ledger counts exactly the rows done, each once');

# ------------------------------------------------------------------
# (4) a restarted launcher: still one scheduler per database
# ------------------------------------------------------------------
my $LAUNCHER = q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill launcher'};
my $old_launcher = sq($node, $LAUNCHER);
my $launcher_log = -s $node->logfile;
sq($node, "SELECT pg_terminate_backend($old_launcher)");
ok(poll_until($node, "SELECT count(*) FROM ($LAUNCHER) s WHERE pid <> $old_launcher", '1', 180),
	'the postmaster starts the launcher again');
is(holds_for($node, "SELECT count(*) FROM ($SCHED) s", '1', 5), undef,
	'the new launcher does not start a second scheduler for postgres');
# the new launcher's scheduler may say so after the window above: wait for it
my $leaves = 0;
for my $i (1 .. 1800)
{
	$leaves = 1, last
	  if slurp_file($node->logfile, $launcher_log)
	  =~ /pg_backfill scheduler for database "postgres" is already running/;
	usleep(100_000);
}
ok($leaves, 'the second scheduler says why it leaves');

# ------------------------------------------------------------------
# (5) a setting its module refuses: the pass fails BF011, no lane loop
# ------------------------------------------------------------------
sq($node, q{
	CREATE TABLE w5 (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO w5 (id) SELECT g FROM generate_series(1, 10) g;
});
my ($rc, $out, $err) = $node->psql('postgres', q{
	SELECT backfill_declare(name => 'w5bad', relation => 'w5', predicate => 'n = 0',
		action => 'UPDATE w5 SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		settings => '{"auto_explain.log_format": "bogus"}', guard => false)});
like($err, qr/BF011|cannot be set to "bogus"/,
	'declare refuses a value the setting refuses (auto_explain.log_format = bogus)');
# the value comes from the scoped run's input: known only when the lane starts
sq($node, q{
	SELECT backfill_declare(name => 'w5', relation => 'w5', predicate => 'n = 0',
		action => 'UPDATE w5 SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		input => '{"fmt": "text"}', scope => 'input->>''fmt''',
		settings => '{"auto_explain.log_format": ":fmt"}', rate => 100, guard => false);
});
my $r5 = sq($node, q{SELECT backfill_run('w5', input => '{"fmt": "bogus"}')});
is(wait_pass_end($node, $r5, 120), 'failed', 'the pass with the refused value fails');
is(ledger($node, $r5, 'error_code'), 'BF011', 'with BF011');
like(ledger($node, $r5, 'error_message'), qr/auto_explain\.log_format.*bogus/,
	'naming the setting and the value');
is(sq($node, "SELECT lane_starts FROM backfill.run WHERE run_id = $r5"), '1',
	'one lane start, not a lane dying again and again');
is(sq($node, 'SELECT sum(n) FROM w5'), '0', 'no row was touched');
my $r5ok = sq($node, q{SELECT backfill_run('w5', input => '{"fmt": "json"}')});
is(wait_pass_end($node, $r5ok, 120), 'completed', 'with a good value the same backfill completes');
is(sq($node, 'SELECT count(*) FROM w5 WHERE n = 1'), '10', 'every row once');

$node->stop;
done_testing();
