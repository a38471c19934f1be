# 106_crash_cooling.pl -- a lane that dies at once is not started again at once
#
# A lane that crashes takes the whole server through a crash restart,
# which empties shared memory and with it the scheduler's doubling delay
# for lanes that stop too soon: a lane that segfaulted in its first batch
# was started again at once, and crashed again, 29 restarts in a few
# seconds (attacker finding s20 a2#6).  The delay now lives in the
# partition row: a partition whose dead holder held it less than 5 s is
# not reclaimed until 2^reclaims seconds after its last renewal (1, 2, 4,
# 8 ... at most 60).  Here the lane is killed with SIGKILL each time it
# appears: after the fourth quick death the partition cools 8 s, and for
# the first 3 of them no lane is started; then one is, and the pass
# completes with every row done exactly once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('crash_cooling', crash_restart => 1);
sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO t (id) SELECT g FROM generate_series(1, 60) g;
	SELECT backfill_declare('cool', 't', 'n = 0', 'UPDATE t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
	                        batch_size => 1, rate => 20, max_parallel => 1, async_commit => false);
});
my $run = sq($node, q{SELECT backfill_run('cool', wait => false)});

my $lanes = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'};
sub lane_pid
{
	my $pid = '';
	poll_until($node, "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'",
		't', 90) or return undef;
	$pid = sq($node, q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane' LIMIT 1});
	return $pid eq '' ? undef : $pid;
}

# four quick deaths: each lane killed as soon as it is seen
for my $kill (1 .. 4)
{
	my $pid = lane_pid();
	ok(defined $pid, "kill $kill: a lane works the pass");
	last unless defined $pid;
	is(kill('KILL', $pid), 1, "kill $kill: SIGKILL to lane $pid");
	ok(wait_for_server($node, 60), "kill $kill: the server is back after the crash restart");
}
is(sq($node, "SELECT state, reclaims >= 3 FROM backfill.partition WHERE run_id = $run"), 'running|t',
	'the partition was reclaimed after each quick death');
# after the fourth quick death it cools 8 s from its last renewal
my $moved = holds_for($node, $lanes, '0', 3);
ok(!defined $moved, 'no lane is started while the partition cools down');
is(wait_pass_end($node, $run, 120), 'completed', 'then a lane takes it and the pass completes');
each_row_done_once($node, 't', 60, $run);

$node->stop;
done_testing();
