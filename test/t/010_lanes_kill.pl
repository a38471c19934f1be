# 010_lanes_kill.pl
#
# Parallel lanes over partitions, with leases tied to the holder's liveness.
# A 2-lane pass over 200,000 rows is planned into 8 partitions from the
# key's histogram; both lanes hold a lease at once, on different partitions.
# One lane is killed with SIGKILL (the postmaster then restarts every
# backend): the new lanes reclaim the dead leases and resume from the
# checkpoints, and the action -- which is NOT idempotent (n = n + 1) -- has
# still run exactly once per row.
#
# The pass is declared at 2 batches of 1000 rows a second per lane, so it
# takes at least 50 s: the lane is certainly killed mid-pass, however slow
# the machine.  Once it is killed, the backfill is declared again at a high
# rate (a running pass picks that up at once) and the rest goes fast.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $ROWS = 200_000;

# a killed lane must make the postmaster restart the backends
my $node = BackfillTest::node('lanes_kill', crash_restart => 1);

$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO t (id) SELECT g FROM generate_series(1, $ROWS) g;
	ANALYZE t;
});
is( $node->safe_psql('postgres',
		q{SELECT histogram_bounds IS NOT NULL FROM pg_stats
		   WHERE schemaname = 'public' AND tablename = 't' AND attname = 'id'}),
	't', 'ANALYZE left a histogram of the key');

# Declare the backfill at $rate batches a second per lane: a running pass
# picks a new rate up at once (same checksum, same batch size)
sub declare_lk
{
	my ($rate) = @_;
	$node->safe_psql('postgres', qq{
		SELECT backfill_declare(name => 'lk', relation => 't', predicate => 'n = 0',
			action => 'UPDATE t SET n = n + 1 WHERE id BETWEEN \$1 AND \$2',
			batch_size => 1000, rate => $rate, max_parallel => 2, guard => false);
	});
}

# 2 lanes x 2 batches/s x 1000 rows: at least 50 s for the pass
declare_lk(2);
my $run = $node->safe_psql('postgres', q{SELECT backfill_run('lk')});
like($run, qr/^\d+$/, 'backfill_run returned a run id');

# ------------------------------------------------------------------
# Both lanes at work: two live leases, two distinct holders, and no lane
# holding two partitions or a partition held twice
# ------------------------------------------------------------------
my $sample_sql = q{
	SELECT count(*) FILTER (WHERE holder_alive),
	       count(DISTINCT holder_pid) FILTER (WHERE holder_alive),
	       coalesce(sum(rows), 0),
	       coalesce((SELECT max(c) FROM (SELECT count(*) AS c FROM backfill_partitions('lk')
	                                      WHERE holder_alive GROUP BY part_no) x), 0),
	       coalesce((SELECT max(c) FROM (SELECT count(*) AS c FROM backfill_partitions('lk')
	                                      WHERE holder_alive GROUP BY holder_pid) y), 0),
	       coalesce(string_agg(holder_pid::text, ',' ORDER BY part_no)
	                  FILTER (WHERE holder_alive), ''),
	       (SELECT count(*) FROM backfill_partitions('lk') p
	          JOIN pg_stat_activity a ON a.pid = p.holder_pid
	         WHERE p.holder_alive AND a.backend_type <> 'pg_backfill lane')
	  FROM backfill_partitions('lk')};

my $deadline = time() + 180;
my ($samples, $both_at_once, $max_per_part, $max_per_holder, $not_lane) = (0, 0, 0, 0, 0);
my ($victim, $live_pids, $rows_seen);
while (time() < $deadline)
{
	my ($live, $holders, $rows, $per_part, $per_holder, $pids, $foreign) = split /\|/,
	  $node->safe_psql('postgres', $sample_sql);
	$samples++;
	$max_per_part = $per_part if $per_part > $max_per_part;
	$max_per_holder = $per_holder if $per_holder > $max_per_holder;
	$not_lane += $foreign;
	if ($live == 2 && $holders == 2)
	{
		$both_at_once++;
		# 20 of the 200 batches: at least 45 s of the pass are left
		if ($rows > 20_000)
		{
			$live_pids = $pids;
			$rows_seen = $rows;
			($victim) = split /,/, $pids;
			last;
		}
	}
	usleep(200_000);
}
ok(defined $victim, 'two live leases held by two distinct lanes, with more than 20000 rows done')
  or BAIL_OUT("the pass never got to two lanes mid-way; server log:\n"
	  . slurp_file($node->logfile));
note("after $samples samples: live holders $live_pids, rows $rows_seen; killing lane $victim");
cmp_ok($both_at_once, '>=', 1, 'at least one sample saw two distinct live holders at once');
cmp_ok($max_per_part, '<=', 1, 'no partition ever had two live lease holders');
cmp_ok($max_per_holder, '<=', 1, 'no lane ever held two partitions at once');
is($not_lane, 0, 'every live lease holder is a pg_backfill lane');
cmp_ok($rows_seen, '<', $ROWS, 'the lane is killed before the pass ends');
is($node->safe_psql('postgres', q{SELECT plan_method, partitions FROM backfill_status('lk')}),
	'histogram|8', 'the pass was planned into max_parallel * 4 = 8 partitions from the histogram');

# ------------------------------------------------------------------
# kill -9 of one lane
# ------------------------------------------------------------------
is(kill('KILL', $victim), 1, 'SIGKILL delivered to one lane');

# the postmaster restarts every backend after a crashed worker: wait for it
ok(wait_for_server($node, 180), 'server accepts connections again after the crash');
# the rest of the pass at full speed
declare_lk(1000);

ok(pass_ended($node, $run, 300), 'the pass ended');
is($node->safe_psql('postgres', "SELECT status FROM backfill.ledger WHERE run_id = $run"),
	'completed', 'the pass completed after its lane was killed');
each_row_done_once($node, 't', $ROWS, $run);
is($node->safe_psql('postgres', "SELECT sum(rows) FROM backfill.partition WHERE run_id = $run"),
	$ROWS, "the partitions' checkpoints count exactly $ROWS rows");
cmp_ok($node->safe_psql('postgres', q{SELECT sum(reclaims) FROM backfill_partitions('lk')}),
	'>=', 1, 'at least one dead lease was reclaimed');
cmp_ok($node->safe_psql('postgres', "SELECT interruptions FROM backfill.run WHERE run_id = $run"),
	'>=', 1, 'the run counts the interruption');
is( $node->safe_psql('postgres',
		q{SELECT plan_method, partitions, partitions_done, live_leases FROM backfill_status('lk')}),
	'histogram|8|8|0', 'status after the end: histogram, 8 partitions all done, no live lease');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM backfill_partitions('lk')
		   WHERE state <> 'done' OR claims < 1 OR failures <> 0}),
	'0', 'every partition is done, was claimed, and has no failure recorded');

my $log = slurp_file($node->logfile);
like($log, qr/\(PID $victim\) was terminated by signal 9/,
	'the server log shows the lane killed by signal 9');
like($log, qr/backfill "lk" run $run: resuming partition \d+ from its checkpoint after lane \d+ died/,
	'the server log shows a partition resumed from its checkpoint');

$node->stop;
done_testing();
