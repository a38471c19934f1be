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
# appears: after the fourth quick death the partition cools 8 s, and no
# lane is started before that; then one is, and the pass completes with
# every row done exactly once.
#
# Nothing rests on the machine's speed: a prepared transaction (it
# survives every crash restart) holds the row lock of the first row, so
# each lane is seen waiting inside its first batch before it is killed
# (the pass cannot end meanwhile, and no renewal makes the death look
# slow); "not while it cools" is checked against the end of the cooling
# the partition row itself gives (its dead holder's last renewal plus
# 2^reclaims s), not against a sleep, and the lane that finally takes the
# partition must have started after that end.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('crash_cooling', crash_restart => 1,
	extra_conf => 'max_prepared_transactions = 5');
sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO t (id) SELECT g FROM generate_series(1, 60) g;
	SELECT backfill_declare('cool', 't', 'n = 0', 'UPDATE t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
	                        batch_size => 1, rate => 20, max_parallel => 1, async_commit => false,
	                        lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
	-- the gate: the first batch (id 1) waits on it, across crash restarts
	BEGIN;
	SELECT id FROM t WHERE id = 1 FOR UPDATE;
	PREPARE TRANSACTION 'gate';
});
my $run = sq($node, q{SELECT backfill_run('cool', wait => false)});

# the lane that waits on the gate inside its first batch
my $gated = q{SELECT pid, backend_start FROM pg_stat_activity
	WHERE backend_type = 'pg_backfill lane' AND 0 = ANY (pg_blocking_pids(pid))};
sub lane_pid
{
	poll_until($node, "SELECT count(*) FROM ($gated) g", '1', 180) or return undef;
	my ($pid) = split /\|/, sq($node, $gated);
	return $pid;
}

# four quick deaths: each lane killed once it is seen inside its first batch
for my $kill (1 .. 4)
{
	my $pid = lane_pid();
	ok(defined $pid, "kill $kill: a lane works the pass (inside its first batch)");
	last unless defined $pid;
	is(kill('KILL', $pid), 1, "kill $kill: SIGKILL to lane $pid");
	ok(wait_for_server($node, 120), "kill $kill: the server is back after the crash restart");
}
is(sq($node, "SELECT state, reclaims >= 3 FROM backfill.partition WHERE run_id = $run"), 'running|t',
	'the partition was reclaimed after each quick death');
# after the fourth quick death it cools 8 s from its last renewal: the end
# of the cooling, by the rule the scheduler and backfill.claim_partition
# apply (a holder that held it 5 s or more, which only a box too slow to
# start a lane in 5 s would make, is no quick death: no cooling)
my $cooled = sq($node, qq{SELECT CASE WHEN renewed_at - holder_start < interval '5 s'
	THEN renewed_at + least(60, power(2, least(reclaims, 6))) * interval '1 s' ELSE renewed_at END
	FROM backfill.partition WHERE run_id = $run});
note('the partition cools until ' . $cooled . ', now ' . sq($node, 'SELECT clock_timestamp()'));
my $moved = holds_for($node,
	qq{SELECT count(*) = 0 OR clock_timestamp() >= '$cooled' FROM pg_stat_activity
	   WHERE backend_type = 'pg_backfill lane'}, 't', 3);
ok(!defined $moved, 'no lane is started while the partition cools down');
my $pid = lane_pid();
ok(defined $pid, 'then a lane takes the partition');
is(sq($node, qq{SELECT backend_start >= '$cooled' FROM pg_stat_activity WHERE pid = } . ($pid // 0)),
	't', 'the lane that took it started only once the partition had cooled down');
sq($node, q{ROLLBACK PREPARED 'gate'});
is(wait_pass_end($node, $run, 300), 'completed', 'and the pass completes');
each_row_done_once($node, 't', 60, $run);

$node->stop;
done_testing();
