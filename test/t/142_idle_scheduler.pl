# 142_idle_scheduler.pl -- a database with nothing to do holds no worker
# slot (issue 16; attacker finding F6).
#
# (a) A scheduler with no running pass, no watch and no outbox message for
#     backfill.scheduler_idle_exit exits, says so, and the launcher does not
#     start it again by itself.
# (b) A backfill_run afterwards wakes the launcher, which starts the
#     scheduler at once: the pass runs, each row exactly once.
# (c) A watched backfill keeps its scheduler; re-declaring one without the
#     watch lets it go, and declaring the watch again brings it back.
# (d) With no background worker slot for a scheduler, the launcher says so
#     once (whatever the wakes that make it try again), with what
#     pg_backfill needs; with slots the waiting pass runs.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $schedulers =
  q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill scheduler'};

sub fill_table
{
	my ($node, $table, $rows) = @_;
	sq($node, qq{
		CREATE TABLE $table (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO $table (id) SELECT g FROM generate_series(1, $rows) g;
		SELECT backfill_declare(name => '$table', relation => '$table', predicate => 'n = 0',
			action => 'UPDATE $table SET n = n + 1 WHERE id BETWEEN \$1 AND \$2 AND n = 0',
			batch_size => 100, rate => 200);
	});
	return;
}

sub count_in_log
{
	my ($node, $re) = @_;
	my @hits = (slurp_file($node->logfile) =~ /$re/g);
	return scalar(@hits);
}

my $node = BackfillTest::node('idle_scheduler',
	extra_conf => "backfill.scheduler_idle_exit = 3\n");
my $idle_line = qr/pg_backfill scheduler for database "postgres" stops: nothing to do for 3 s/;
my $started_line = qr/pg_backfill scheduler started for database "postgres"/;

# --- (a) a pass, then nothing to do: the scheduler leaves
sq($node, 'CREATE EXTENSION pg_backfill');
fill_table($node, 'first', 500);
my $run = sq($node, q{SELECT backfill_run('first')});
is(wait_pass_end($node, $run, 300), 'completed', 'the first pass completes');
each_row_done_once($node, 'first', 500, $run);

ok(poll_until($node, $schedulers, '0', 120),
	'with nothing to do the scheduler exits (backfill.scheduler_idle_exit = 3 s)');
is(count_in_log($node, $idle_line), 1, 'and says why, once');
is(holds_for($node, $schedulers, '0', 6), undef,
	'the launcher does not start it again by itself (naptime 1 s)');

# --- (b) a backfill_run wakes the launcher: the pass runs at once, exactly once
fill_table($node, 'second', 700);
my $starts = count_in_log($node, $started_line);
$run = sq($node, q{SELECT backfill_run('second')});
is(wait_pass_end($node, $run, 300), 'completed',
	'a backfill_run in the database with no scheduler runs its pass');
each_row_done_once($node, 'second', 700, $run);
is(sq($node, q{SELECT count(*) FROM backfill.ledger WHERE ledger_name = 'second'}), '1',
	'one ledger row for it');
is(count_in_log($node, $started_line), $starts + 1, 'its run started the scheduler again, once');
ok(poll_until($node, $schedulers, '0', 120), 'and it leaves again when the pass is done');

# --- (c) a watched backfill keeps its scheduler
sq($node, q{
	CREATE TABLE watched (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO watched (id) SELECT g FROM generate_series(1, 300) g;
	SELECT backfill_declare(name => 'watched', relation => 'watched', predicate => 'n = 0',
		action => 'UPDATE watched SET n = n + 1 WHERE id BETWEEN $1 AND $2 AND n = 0',
		batch_size => 100, rate => 200, watch => interval '1 hour');
});
$run = sq($node, q{SELECT backfill_run('watched')});
is(wait_pass_end($node, $run, 300), 'completed', 'the watched backfill completes');
is(holds_for($node, $schedulers, '1', 8), undef,
	'its watch keeps the scheduler, well past the idle exit');

my $redeclare = q{SELECT backfill_declare(name => 'watched', relation => 'watched',
	predicate => 'n = 0',
	action => 'UPDATE watched SET n = n + 1 WHERE id BETWEEN $1 AND $2 AND n = 0',
	batch_size => 100, rate => 200%s)};
sq($node, sprintf($redeclare, ''));
ok(poll_until($node, $schedulers, '0', 120), 'without the watch the scheduler leaves');
sq($node, sprintf($redeclare, q{, watch => interval '1 hour'}));
ok(poll_until($node, $schedulers, '1', 120), 'declaring the watch again brings it back');
is(holds_for($node, $schedulers, '1', 6), undef, 'and it stays');
$node->stop;

# --- (d) no background worker slot for a scheduler: said once
my $tight = BackfillTest::node('idle_no_slot',
	extra_conf => "max_worker_processes = 1\nmax_logical_replication_workers = 0\n");
sq($tight, 'CREATE EXTENSION pg_backfill');
fill_table($tight, 'waits', 300);
$run = sq($tight, q{SELECT backfill_run('waits')});
my $no_slot = qr/WARNING:  pg_backfill cannot start the scheduler of database "postgres": no background worker slot is free/;
my $deadline = time() + 120;
sleep 1 while count_in_log($tight, $no_slot) == 0 && time() < $deadline;
is(count_in_log($tight, $no_slot), 1, 'the launcher says it cannot start the scheduler');
like(slurp_file($tight->logfile), qr/DETAIL:  max_worker_processes is 1\.  pg_backfill takes one for its launcher/,
	'with what pg_backfill needs');
like(slurp_file($tight->logfile), qr/HINT:  Raise max_worker_processes/, 'and the fix');
# each backfill_run wakes the launcher, which tries again at once
for my $i (1 .. 3)
{
	fill_table($tight, "waits_$i", 50);
	sq($tight, qq{SELECT backfill_run('waits_$i')});
	usleep(300_000);
}
is(holds_for($tight, q{SELECT status FROM backfill.ledger WHERE run_id = } . $run, 'running', 3),
	undef, 'the pass waits');
is(count_in_log($tight, $no_slot), 1, 'still one warning after the wakes that retried it');

$tight->append_conf('postgresql.conf', "max_worker_processes = 8\n");
$tight->restart;
is(wait_pass_end($tight, $run, 300), 'completed', 'with slots the waiting pass runs');
each_row_done_once($tight, 'waits', 300, $run);
$tight->stop;

done_testing();
