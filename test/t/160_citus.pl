# 160_citus.pl -- pg_backfill on Citus: a coordinator and two workers.
#
# Runs only where Citus is installed for the server under test (citus.so
# in pg_config --pkglibdir); prints one SKIP line otherwise.  Three nodes
# on loopback, Citus preloaded first; a hash-distributed table of 8 shards.
#
# - A shard table on a worker is refused at declaration (BF030, naming the
#   shard and its distributed table, hint: the coordinator); the
#   distributed table itself on a worker is refused too (BF031).
# - With backfill.citus_per_shard off (161_citus_per_shard.pl: on, the
#   default), a pass over the distributed table on the coordinator: its estimate is
#   the shards' own (the coordinator's planner says 100,000), and the plan
#   method says so.
# - The same pass, with a non-idempotent action (n = n + 1), survives a
#   lane killed with SIGKILL, the coordinator stopped with -m immediate,
#   a worker stopped with -m immediate, and a shard moved to the other
#   worker mid-pass: every row exactly once, the ledger counting each row
#   once, and nothing written to the moved shard's old placement (kept
#   for the look) after the move.  Without the synchronous commit of
#   citus_fence_batch the lane kill and the coordinator crash each left
#   rows done that the ledger never counted (39,800 and 39,400 of 40,000);
#   without the lanes' call for Citus's recovery the worker crash ended
#   the pass STALLED with 107 rows that a prepared batch held locked.
# - A reference table: every row done once in the copy on each node.
# - A table of one shard: each batch is prepared on its worker and
#   committed after the checkpoint (without the coordinated transaction
#   citus_fence_batch asks for, Citus ran each UPDATE there in autocommit).
#
# "Mid-pass" is made, not hoped for: before each of those passes starts, a
# prepared transaction on worker 2 (the gate) holds the row lock of the
# first id past nine tenths of the table that worker holds.  The batch of
# the last partition that covers it waits there (the declaration's
# lock_timeout and batch_timeout are an hour), and the other lane's batches
# wait behind it (Citus serializes multi-shard UPDATEs on its shard locks),
# so the pass cannot end, however fast the machine; the ids past the gate
# stay to do.  A prepared transaction outlives a crash of the coordinator
# and of the worker alike, and only ROLLBACK PREPARED opens it.  Each fault
# comes once a batch waits on the gate and the pass has done a fifth of the
# rows, and the gate is opened after the fault.  The worker crash hits the
# waiting batch itself, so a batch fails while the worker is down.  For the
# shard move the pass is paused there, the gate opened (the waiting batches
# commit and the lanes stop), and the shard moved while no batch runs, the
# ids past the gate not done yet; the pass is resumed after the move.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $libdir = `pg_config --pkglibdir`;
chomp $libdir;
plan skip_all => "Citus is not installed for this server (no citus.so in $libdir)"
  unless -f "$libdir/citus.so";

my $ROWS = 40_000;
# deadline (seconds) of a wait for a pass to get somewhere, or to end
my $LONG = 600;

# a node with Citus (first) and pg_backfill preloaded, listening on loopback
sub citus_node
{
	my ($name, $conf) = @_;
	return BackfillTest::node(
		$name,
		crash_restart => 1,
		extra_conf => "shared_preload_libraries = 'citus,pg_backfill'\n"
		  . "listen_addresses = '127.0.0.1'\n"
		  . "max_prepared_transactions = 100\n"
		  . "max_connections = 100\n"
		  . ($conf // ''));
}

# the old placement of a moved shard stays, to be looked at (Citus drops it later);
# every pass here is coordinator-side (161_citus_per_shard.pl: shard by shard)
my $coord = citus_node('coord',
	"citus.defer_shard_delete_interval = -1\nbackfill.citus_per_shard = off\n");
my @workers = (citus_node('worker1'), citus_node('worker2'));
$_->safe_psql('postgres', 'CREATE EXTENSION citus') for ($coord, @workers);
$coord->safe_psql('postgres',
	"SELECT citus_set_coordinator_host('localhost', " . $coord->port . ')');
$coord->safe_psql('postgres', "SELECT citus_add_node('localhost', " . $_->port . ')')
  for @workers;
$coord->safe_psql('postgres', 'CREATE EXTENSION pg_backfill');
note('Citus ' . sq($coord, q{SELECT extversion FROM pg_extension WHERE extname = 'citus'}));
my ($port1, $port2) = ($workers[0]->port, $workers[1]->port);
is( sq($workers[0], q{SELECT count(*) FROM pg_extension WHERE extname = 'pg_backfill'}),
	'1', 'CREATE EXTENSION pg_backfill on the coordinator reached the workers');

$coord->safe_psql('postgres', qq{
	SET citus.shard_count = 8;
	CREATE TABLE t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	SELECT create_distributed_table('t', 'id');
	INSERT INTO t (id) SELECT g FROM generate_series(1, $ROWS) g;
	ANALYZE t;
});

# ---- refusals on a worker
my $shard = sq($workers[0], qq{
	SELECT s.shardid FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
	  JOIN pg_dist_node n ON n.groupid = p.groupid
	 WHERE s.logicalrelid = 't'::regclass AND n.nodeport = $port1
	 ORDER BY s.shardid LIMIT 1});
my ($rc, $out, $err) = $workers[0]->psql('postgres', qq{\\set VERBOSITY verbose
	SELECT backfill_declare('fill_shard', 't_$shard', 'n = 0',
		'UPDATE t_$shard SET n = n + 1 WHERE id BETWEEN \$1 AND \$2', guard => false)});
like($err, qr/ERROR:\s+BF030: backfill "fill_shard" may not rewrite shard "t_$shard"/,
	'a shard table on a worker is refused with BF030, naming the backfill and the shard');
like($err, qr/DETAIL:\s+"t_$shard" is shard $shard of Citus distributed table public.t\b/,
	'the detail says which distributed table it is a shard of');
like($err, qr/HINT:\s+Declare the backfill on the Citus coordinator, against public.t\./,
	'the hint says to declare it on the coordinator against the distributed table');
($rc, $out, $err) = $workers[0]->psql('postgres', q{\set VERBOSITY verbose
	SELECT backfill_declare('fill_w', 't', 'n = 0',
		'UPDATE t SET n = n + 1 WHERE id BETWEEN $1 AND $2', guard => false)});
like($err, qr/ERROR:\s+BF031: .*"fill_w".*coordinator only/,
	'the distributed table itself is refused on a worker with BF031');
like($err, qr/HINT:\s+Connect to the Citus coordinator/, 'its hint names the coordinator');
is(sq($workers[0], 'SELECT count(*) FROM backfill.declaration'), '0',
	'nothing was declared on the worker');
# a table whose name only looks like a shard's is no shard: another
# table's name with the shard id, or the shard's name in another schema
$coord->safe_psql('postgres', 'CREATE SCHEMA elsewhere');	# Citus creates it on the workers
$workers[0]->safe_psql('postgres', qq{
	CREATE TABLE other_$shard (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	CREATE TABLE elsewhere.t_$shard (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	SELECT backfill_declare('fill_other', 'other_$shard', 'n = 0',
		'UPDATE other_$shard SET n = n + 1 WHERE id BETWEEN \$1 AND \$2', guard => false);
	SELECT backfill_declare('fill_elsewhere', 'elsewhere.t_$shard', 'n = 0',
		'UPDATE elsewhere.t_$shard SET n = n + 1 WHERE id BETWEEN \$1 AND \$2', guard => false);
});
is(sq($workers[0], 'SELECT string_agg(name, \',\' ORDER BY name) FROM backfill.declaration'),
	'fill_elsewhere,fill_other',
	'a local table named like a shard (another prefix, another schema) may be declared');

# a shard of a table with a long name: Citus truncates it and adds a hash
my $long = 'a_table_whose_name_is_long_enough_that_citus_truncates_it';
$coord->safe_psql('postgres', qq{
	CREATE TABLE $long (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	SELECT create_distributed_table('$long', 'id', shard_count => 2);
});
my $long_shard = sq($workers[0], qq{
	SELECT shard_name(s.logicalrelid, s.shardid) FROM pg_dist_shard s
	  JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n ON n.groupid = p.groupid
	 WHERE s.logicalrelid = '$long'::regclass AND n.nodeport = $port1 LIMIT 1});
($rc, $out, $err) = $workers[0]->psql('postgres', qq{\\set VERBOSITY verbose
	SELECT backfill_declare('fill_long', '$long_shard', 'n = 0',
		'UPDATE $long_shard SET n = n + 1 WHERE id BETWEEN \$1 AND \$2', guard => false)});
like($err, qr/ERROR:\s+BF030: .*DETAIL:\s+"\Q$long_shard\E" is shard \d+ of Citus distributed table public\.$long\b/s,
	"the shard $long_shard of a table whose name Citus truncated is refused too");

# ---- the coordinator-side pass
is(sq($coord, q{SELECT backfill.estimate_rows('t', 'n = 0')}), '100000',
	"the coordinator's own planner estimates Citus's fixed 100,000 rows");

# start a pass of fill_t (n from $from to $from + 1); returns its run id.
# A batch waits on a held row lock for as long as the test holds it (an
# hour), and a batch is tried up to 100 times, backing off up to 3 s: a
# worker down for minutes while it restarts fails no partition.
sub start_pass
{
	my ($from) = @_;
	$coord->safe_psql('postgres', qq{
		SELECT backfill_declare('fill_t', 't', 'n = $from',
			'UPDATE t SET n = n + 1 WHERE id BETWEEN \$1 AND \$2',
			batch_size => 200, rate => 25, max_parallel => 2, max_attempts => 100,
			backoff_base => '100 ms', backoff_cap => '3 s',
			lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false)});
	return sq($coord, q{SELECT backfill_run('fill_t', force => true)});
}

# the gate: the first id past nine tenths of the table on worker 2 (in the
# last partition's key range, not at its end), locked by a prepared
# transaction there
my $gate_id = sq($coord, qq{
	SELECT min(id) FROM t
	 WHERE id > $ROWS * 9 / 10 AND get_shard_id_for_distribution_column('t', id) IN
	       (SELECT p.shardid FROM pg_dist_placement p JOIN pg_dist_node d ON d.groupid = p.groupid
	         WHERE d.nodeport = $port2)});
my $gate_shard = sq($coord, "SELECT get_shard_id_for_distribution_column('t', $gate_id)");
sub close_gate
{
	gate_close($workers[1], 'gate', "t_$gate_shard", "id = $gate_id");
	return;
}
sub open_gate
{
	gate_open($workers[1], 'gate');
	return;
}

# wait until the pass has done at least $rows rows (and is still running)
sub midway
{
	my ($run_id, $rows) = @_;
	return poll_until($coord,
		"SELECT coalesce(sum(rows), 0) >= $rows FROM backfill.partition WHERE run_id = $run_id",
		't', $LONG);
}

# The state a fault acts on: a batch of pass $run_id waits on the gate on
# worker 2 and a fifth of the rows are done; the pass runs, not done.
sub held_midway
{
	my ($label, $run_id) = @_;
	ok(gate_holds($workers[1], $LONG), "$label: a batch waits on the gate on worker 2");
	ok(midway($run_id, $ROWS / 5), "$label: the pass is under way");
	my ($status, $done) = split /\|/, sq($coord, qq{
		SELECT l.status, (SELECT sum(p.rows) FROM backfill.partition p WHERE p.run_id = l.run_id)
		  FROM backfill.ledger l WHERE l.run_id = $run_id});
	is($status, 'running', "$label: the pass is running");
	cmp_ok($done, '<', $ROWS, "$label: the fault comes mid-pass ($done of $ROWS rows done)");
	return;
}

# every row done once by pass $run_id: n = $n everywhere, the ledger counts $ROWS
sub done_once
{
	my ($label, $run_id, $n) = @_;
	is(wait_pass_end($coord, $run_id, $LONG), 'completed', "$label: the pass completed");
	is( sq($coord, "SELECT count(*), count(*) FILTER (WHERE n = $n) FROM t"),
		"$ROWS|$ROWS", "$label: every row was done exactly once (n = $n)");
	is(ledger($coord, $run_id, 'rows'), $ROWS, "$label: the ledger counts each row once");
	return;
}

# (a) a plain pass: the estimate and the plan
close_gate();
my $run_id = start_pass(0);
ok(poll_until($coord, "SELECT phase FROM backfill.run WHERE run_id = $run_id", 'running', $LONG),
	'the pass was planned');
my ($method, $estimate) = split /\|/,
  sq($coord, "SELECT plan_method, estimate FROM backfill.run WHERE run_id = $run_id");
like($method, qr/rows from 8 Citus shards/, "the plan method says where the estimate is from ($method)");
like($method, qr/^coordinator-side \(backfill\.citus_per_shard is off\); /,
	'the plan method says the pass is coordinator-side, and why');
ok($estimate >= $ROWS / 2 && $estimate <= $ROWS * 2,
	"the estimate ($estimate) is within a factor 2 of the $ROWS rows, not 100,000");

# (b) a lane killed with SIGKILL mid-pass: the lane whose batch waits on the gate
held_midway('lane kill', $run_id);
my ($progress, $rows_done, $eta) = split /\|/,
  sq($coord, q{SELECT progress, rows, eta IS NOT NULL FROM backfill_status('fill_t')});
ok(abs($progress - $rows_done / $ROWS) < 0.05 && $progress < 1,
	"backfill_status's progress ($progress at $rows_done rows) is the share of the table done");
is($eta, 't', 'backfill_status has an ETA while the pass runs');
my $lane = sq($coord, "SELECT holder_pid FROM backfill.partition WHERE run_id = $run_id "
	  . "AND state = 'running' AND holder_pid IS NOT NULL "
	  . "AND (lo IS NULL OR lo::bigint < $gate_id) AND (hi IS NULL OR hi::bigint >= $gate_id)");
ok($lane, "lane kill: a lane holds the gate's partition (pid $lane)");
is(kill('KILL', $lane), 1, "lane kill: SIGKILL to lane $lane, its batch waiting on the gate");
ok(wait_for_server($coord, $LONG), 'lane kill: the coordinator accepts connections again');
open_gate();
done_once('lane kill', $run_id, 1);
cmp_ok(sq($coord, "SELECT sum(reclaims) FROM backfill.partition WHERE run_id = $run_id"),
	'>=', 1, 'lane kill: a new lane reclaimed the dead lane\'s lease');

# (c) the coordinator stopped with -m immediate mid-pass
close_gate();
$run_id = start_pass(1);
held_midway('coordinator crash', $run_id);
$coord->stop('immediate');
$coord->start;
open_gate();
done_once('coordinator crash', $run_id, 2);
cmp_ok(sq($coord, "SELECT sum(reclaims) FROM backfill.partition WHERE run_id = $run_id"),
	'>=', 1, 'coordinator crash: the restarted lanes reclaimed the leases of the crash');

# (d) a worker stopped with -m immediate mid-pass, a batch waiting on it
close_gate();
$run_id = start_pass(2);
held_midway('worker crash', $run_id);
my $log_offset = -s $coord->logfile;
$workers[1]->stop('immediate');
$workers[1]->start;
is(sq($workers[1], q{SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'gate'}), '1',
	'worker crash: the gate outlived the crash of its worker');
open_gate();
done_once('worker crash', $run_id, 3);
like(substr(slurp_file($coord->logfile), $log_offset),
	qr/backfill "fill_t" run $run_id: batch failed/,
	'worker crash: batches failed while the worker was down, and were retried');

# (e) a shard moved to the other worker mid-pass: the pass is paused with a
# batch at the gate, the gate opened, and the shard (on worker 1; the gate's
# is on worker 2) moved once no lane is left, its rows past the gate not
# done; then the pass is resumed
my $shard_rows = sq($workers[0], "SELECT count(*) FROM t_$shard");
close_gate();
$run_id = start_pass(3);
held_midway('shard move', $run_id);
sq($coord, q{SELECT backfill_pause('fill_t')});
open_gate();
ok( poll_until($coord, qq{
		SELECT (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane')
		     + (SELECT count(*) FROM backfill.partition WHERE run_id = $run_id AND state = 'running')},
		'0', $LONG),
	'shard move: the paused pass has no lane at work');
my $done_at_move = sq($coord, "SELECT sum(rows) FROM backfill.partition WHERE run_id = $run_id");
my $t0 = time();
$coord->safe_psql('postgres', qq{
	SELECT citus_move_shard_placement($shard, 'localhost', $port1, 'localhost', $port2,
		shard_transfer_mode => 'block_writes')});
note(sprintf('the move took %.1f s', time() - $t0));
is(ledger($coord, $run_id, 'status'), 'running', 'shard move: the shard moved while the pass ran');
cmp_ok($done_at_move, '<', $ROWS, "shard move: $done_at_move of $ROWS rows done at the move");
is(sq($coord, "SELECT sum(rows) FROM backfill.partition WHERE run_id = $run_id"), $done_at_move,
	'shard move: no batch ran during the move');
my $old_at_move = sq($workers[0], qq{SET citus.override_table_visibility = off;
	SELECT count(*) FILTER (WHERE n = 4) FROM t_$shard});
sq($coord, q{SELECT backfill_resume('fill_t')});
done_once('shard move', $run_id, 4);
is( sq($workers[1], "SELECT count(*), count(*) FILTER (WHERE n = 4) FROM t_$shard"),
	"$shard_rows|$shard_rows",
	'shard move: on its new placement, every row of the moved shard was done (n = 4)');
# the old placement (kept: defer_shard_delete_interval) was left as it was at the move
is( sq($workers[0],
		"SET citus.override_table_visibility = off; SELECT to_regclass('t_$shard') IS NOT NULL"),
	't', 'shard move: the old placement is still there, orphaned');
my $old = sq($workers[0], qq{SET citus.override_table_visibility = off;
	SELECT count(*) FILTER (WHERE n = 4) FROM t_$shard});
is($old, $old_at_move,
	"shard move: the old placement got none of the later writes ($old rows done there)");
cmp_ok($old, '<', $shard_rows,
	"shard move: the shard moved before its rows were done ($old of $shard_rows done on the old placement)");

# (f) a table of one shard: Citus would commit a batch that writes to one
# worker there, before the checkpoint commits here (one-phase); the lane
# asks for two-phase commit, which the workers' statement logs show
$coord->safe_psql('postgres', q{
	CREATE TABLE one (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	SELECT create_distributed_table('one', 'id', shard_count => 1);
	INSERT INTO one (id) SELECT g FROM generate_series(1, 2000) g;
	SELECT backfill_declare('fill_one', 'one', 'n = 0',
		'UPDATE one SET n = n + 1 WHERE id BETWEEN $1 AND $2', batch_size => 500,
		rate => 100, guard => false);
});
my @offsets;
for my $w (@workers)
{
	$w->safe_psql('postgres', q{ALTER SYSTEM SET log_statement = 'all'; SELECT pg_reload_conf()});
	push @offsets, -s $w->logfile;
}
$run_id = sq($coord, q{SELECT backfill_run('fill_one')});
is(wait_pass_end($coord, $run_id, $LONG), 'completed', 'one shard: the pass completed');
is(sq($coord, 'SELECT count(*) FILTER (WHERE n = 1) FROM one'), '2000',
	'one shard: every row done once');
my ($prepared, $committed) = (0, 0);
for my $i (0, 1)
{
	my $log = substr(slurp_file($workers[$i]->logfile), $offsets[$i]);
	$prepared += () = $log =~ /statement: PREPARE TRANSACTION 'citus_/g;
	$committed += () = $log =~ /statement: COMMIT PREPARED 'citus_/g;
}
cmp_ok($prepared, '>=', 4, "one shard: each batch was prepared on its worker ($prepared)");
cmp_ok($committed, '>=', 4, "one shard: and committed after the checkpoint ($committed)");

# (g) a reference table: a copy on every node, each batch written to all
$coord->safe_psql('postgres', q{
	CREATE TABLE ref (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	SELECT create_reference_table('ref');
	INSERT INTO ref (id) SELECT g FROM generate_series(1, 2000) g;
	SELECT backfill_declare('fill_ref', 'ref', 'n = 0',
		'UPDATE ref SET n = n + 1 WHERE id BETWEEN $1 AND $2', batch_size => 500,
		rate => 100, guard => false);
});
$run_id = sq($coord, q{SELECT backfill_run('fill_ref')});
is(wait_pass_end($coord, $run_id, $LONG), 'completed', 'reference table: the pass completed');
my $ref_shard = sq($coord, q{SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'ref'::regclass});
for my $node ($coord, @workers)
{
	is( sq($node, qq{SET citus.override_table_visibility = off;
			SELECT count(*), count(*) FILTER (WHERE n = 1) FROM ref_$ref_shard}),
		'2000|2000', 'reference table: every row done once in the copy on ' . $node->name);
}
is(ledger($coord, $run_id, 'rows'), '2000', 'reference table: the ledger counts each row once');

$_->stop for ($coord, @workers);
done_testing();
