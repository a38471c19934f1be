# 130_revert.pl
#
# The way back (issue 14, part 2), end to end with a crash.  A forward pass
# (n = n + 1, not idempotent) completes over 40,000 rows; backfill_drop is
# refused (BF009).  The revert pass (n = n - 1, not idempotent, no
# revert_predicate: it walks every row once) runs with two lanes; while it
# runs a forward run is refused (BF022); one of its lanes is killed with
# SIGKILL mid-way (the postmaster restarts every backend).  The revert
# resumes from its checkpoints and completes: every row is back at n = 0,
# none at -1 (undone twice) or 1 (missed), the ledger counts each row once
# and says direction revert.  Then the drop succeeds, and the CLI's revert
# command answers the completed revert.
#
# "Mid-way" is made, not hoped for: before the revert starts, a session
# holds the row locks of rows 4,000, 9,000, ... 39,000 (one inside each of
# the revert's eight partitions, whose bounds the histogram puts near
# multiples of 5,000), so each lane's batch waits at the first it meets;
# the test acts once both lanes wait there.  The kill's crash restart ends
# that session, and the revert goes on.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $ROWS = 40_000;

my $node = BackfillTest::node('revert', crash_restart => 1);

$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO t (id) SELECT g FROM generate_series(1, $ROWS) g;
	ANALYZE t;
});

# forward fast; the revert's pace is set before it runs (not in the checksum)
$node->safe_psql('postgres', q{
	SELECT backfill_declare(name => 'rv', relation => 't', predicate => 'n = 0',
		action => 'UPDATE t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		revert => 'UPDATE t SET n = n - 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 2000, rate => 100, max_parallel => 2, guard => false);
});
my $fwd = sq($node, q{SELECT backfill_run('rv')});
is(wait_pass_end($node, $fwd, 300), 'completed', 'the forward pass completed');
each_row_done_once($node, 't', $ROWS, $fwd);

my ($rc, $out, $err) = $node->psql('postgres', q{SELECT backfill_drop('rv')});
like($err, qr/cannot be dropped: it has written $ROWS rows/, 'drop after the forward pass is refused');
like($err, qr/backfill_revert\('rv'\)/, 'and its hint says to run the revert');

# the revert at 2 lanes x 10 batches/s x 250 rows; its batches wait on a
# held row lock as long as the test needs
sq($node, q{
	SELECT backfill_declare(name => 'rv', relation => 't', predicate => 'n = 0',
		action => 'UPDATE t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		revert => 'UPDATE t SET n = n - 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 250, rate => 10, max_parallel => 2,
		lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false)});
my $holder = $node->background_psql('postgres');
$holder->set_query_timer_restart();
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
$holder->query_safe(q{BEGIN; SELECT 1 FROM t WHERE id IN (SELECT 4000 + 5000 * k FROM generate_series(0, 7) k)
	FOR UPDATE;});
my $rev = sq($node, q{SELECT backfill_revert('rv')});
like($rev, qr/^\d+$/, 'backfill_revert returned a run id');
is(ledger($node, $rev, 'direction, previous_run_id'), "revert|$fwd",
	'the ledger row of the revert pass: direction revert, after the forward pass');

ok( poll_until($node,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND $holder_pid = ANY (pg_blocking_pids(pid))", '2', 300),
	'both lanes of the revert wait inside a batch on a held row');
ok(poll_until($node, qq{SELECT sum(rows) > 4000 AND count(*) FILTER (WHERE holder_alive) = 2
		FROM backfill_partitions('rv')}, 't', 60),
	'the revert is under way with two live lanes')
  or BAIL_OUT("the revert never got under way:\n" . slurp_file($node->logfile));

($rc, $out, $err) = $node->psql('postgres', q{SELECT backfill_run('rv', force => true)});
like($err, qr/cannot run forward while its revert pass runs/, 'a forward run during the revert is refused');
is(sq($node, q{SELECT state FROM backfill_pending() WHERE name = 'rv'}), 'reverting',
	'backfill_pending: reverting');

my $victim = sq($node, q{SELECT min(holder_pid) FROM backfill_partitions('rv') WHERE holder_alive});
my $rows_before = sq($node, qq{SELECT sum(rows) FROM backfill.partition WHERE run_id = $rev});
cmp_ok($rows_before, '<', $ROWS, "the lane is killed mid-way ($rows_before rows undone)");
is(kill('KILL', $victim), 1, 'SIGKILL delivered to a lane of the revert');
# (the crash restart ended the holder's session: the revert goes on)
eval { $holder->quit; };
ok(wait_for_server($node, 120), 'the server accepts connections again after the crash');

is(wait_pass_end($node, $rev, 600), 'completed', 'the revert pass completed after the kill');
is(sq($node, q{SELECT count(*) FILTER (WHERE n = 0), count(*) FILTER (WHERE n < 0),
		count(*) FILTER (WHERE n > 0) FROM t}),
	"$ROWS|0|0", 'every row undone exactly once: n = 0 everywhere, none undone twice or missed');
is(ledger($node, $rev, 'rows, direction'), "$ROWS|revert",
	"the ledger counts exactly $ROWS rows undone, direction revert");
cmp_ok(sq($node, qq{SELECT sum(reclaims) FROM backfill.partition WHERE run_id = $rev}), '>=', 1,
	'a dead lease of the revert was reclaimed');
like(slurp_file($node->logfile),
	qr/backfill "rv" run $rev: resuming partition \d+ from its checkpoint after lane \d+ died/,
	'the revert resumed a partition from its checkpoint');
is(sq($node, q{SELECT status, direction FROM backfill_status('rv')}), 'completed|revert',
	'backfill_status: completed, direction revert');
is(sq($node, q{SELECT state FROM backfill_pending() WHERE name = 'rv'}), 'reverted',
	'backfill_pending: reverted');

# the CLI's revert command answers the completed revert, starting nothing
{
	my $cli = "$FindBin::RealBin/../../cli/pg_backfill";
	SKIP:
	{
		skip 'cli/pg_backfill is not built', 2 unless -x $cli;
		my ($o, $e) = ('', '');
		IPC::Run::run([ $cli, '-d', $node->connstr('postgres'), 'revert', 'rv' ],
			'<', \undef, '>', \$o, '2>', \$e);
		is($? >> 8, 0, 'pg_backfill revert exits 0');
		is($o, "$rev\n", 'and prints the completed revert\'s run id');
	}
}
is(sq($node, q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'rv'}), '2',
	'no third pass was started');

is(sq($node, q{SELECT backfill_drop('rv')}), 't', 'drop once the newest pass is a completed revert');

$node->stop;
done_testing();
