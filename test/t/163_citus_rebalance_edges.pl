# 163_citus_rebalance_edges.pl -- what a pass shard by shard does at the
# edges of a rebalance: a pause or a switch for all while its lanes wait out
# a move, a table replaced under it, a split of a table that had a column
# dropped, and the plan of a retried pass.
#
# Runs only where Citus is installed for the server under test (citus.so in
# pg_config --pkglibdir); prints one SKIP line otherwise.  A coordinator and
# two workers on loopback; the action is not idempotent (n = n + 1).
#
# - (a) backfill_pause while every lane waits out a shard move: once the
#   move is over the lanes leave at their checkpoints without another batch
#   (they did one more each before), and the resumed pass does every row
#   once.
# - (b) backfill.pause_all turned on while every lane waits out a move: the
#   lanes hold once it is over (throttle "paused for all"), no batch.
# - (c) alter_distributed_table replaces the table mid-pass: the pass fails
#   (BF001) and its lanes stop at once; they retried BF040 for about 25 s,
#   and here (100 attempts, backing off from 1 s up to 15 s) for about
#   twenty minutes.
# - (d) a shard split of a table that had a column dropped: the new shards
#   have no dropped column (the others sit one to the left); the pass
#   follows the split and writes each column where it is (it failed with
#   BF035 before).
# - (e) shards whose statistics are stale (ANALYZEd before every row
#   changed, autovacuum off): the pass's estimate comes from a bounded
#   sample of each shard, within a factor 2 of the rows (about 1 row a shard
#   before), and the log says so.
# - (f) backfill_retry of that pass, which failed on a row a constraint
#   refused, after its failed partition's shard was split: the retried pass
#   is described as the table is now (5 shards, resumed from the failed
#   run) with the rows left now, and does every row once.
#
# The states are made, not hoped for.  The lanes waiting out a move: the
# pass is paused, the move started once no lane is left, a session holding
# the shard table on its node (ACCESS EXCLUSIVE) keeps the move from ending
# once it holds the colocation group's rebalance lock, and the resumed
# pass's two lanes each say they wait for it (backfill_status' throttle:
# "a shard move of group N"); no batch can run then, so the rows done are
# fixed before the pause.  The replaced table: the pass runs at 4 batches of
# 100 rows a second, and is seen running with rows left before the change.
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

my $ROWS = 20_000;
my $LONG = 600;

sub citus_node
{
	my ($name) = @_;
	return BackfillTest::node(
		$name,
		crash_restart => 1,
		extra_conf => "shared_preload_libraries = 'citus,pg_backfill'\n"
		  . "listen_addresses = '127.0.0.1'\n"
		  . "max_prepared_transactions = 100\n"
		  . "max_connections = 100\n"
		  . "output_plugin_libraries = 'pgoutput, test_decoding, citus'\n"
		  . "wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n");
}

my $coord = citus_node('coord');
my @workers = (citus_node('worker1'), citus_node('worker2'));
$_->safe_psql('postgres', 'CREATE EXTENSION citus') for ($coord, @workers);
$coord->safe_psql('postgres',
	"SELECT citus_set_coordinator_host('localhost', " . $coord->port . ')');
$coord->safe_psql('postgres', "SELECT citus_add_node('localhost', " . $_->port . ')')
  for @workers;
$coord->safe_psql('postgres', 'CREATE EXTENSION pg_backfill');

$coord->safe_psql('postgres', qq{
	SET citus.shard_count = 4;
	CREATE TABLE t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0, pad text);
	SELECT create_distributed_table('t', 'id', colocate_with => 'none');
	INSERT INTO t (id, pad) SELECT g, md5(g::text) FROM generate_series(1, $ROWS) g;
	ANALYZE t;
});
my $group = sq($coord, "SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 't'::regclass");

# declare fill_t (n from $from to $from + 1)
sub declare_fill
{
	my ($from, $rate, $batch, %opt) = @_;
	$coord->safe_psql('postgres', qq{
		SELECT backfill_declare('fill_t', 't', 'n = $from',
			'UPDATE t SET n = n + 1 WHERE id BETWEEN \$1 AND \$2 AND n = $from',
			batch_size => $batch, rate => $rate, max_parallel => 2,
			max_attempts => 100, backoff_base => '${\($opt{backoff} // '100 ms')}',
			backoff_cap => '${\($opt{cap} // '3 s')}', lock_timeout => '1 hour',
			batch_timeout => '1 hour')});
	return;
}

sub placed_on
{
	my ($shard) = @_;
	my $g = sq($coord, "SELECT groupid FROM pg_dist_placement WHERE shardid = $shard");
	for my $w (@workers)
	{
		return $w if sq($w, 'SELECT groupid FROM pg_dist_local_group') eq $g;
	}
	die "shard $shard is on no worker";
}

sub lanes_gone
{
	my ($run_id) = @_;
	return poll_until($coord, qq{
		SELECT (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane')
		     + (SELECT count(*) FROM backfill.partition WHERE run_id = $run_id AND state = 'running')},
		'0', $LONG);
}

# the rows the pass's partitions count (while a lane waits out a move every
# batch before has committed on both sides; t's shard is held then)
sub rows_counted
{
	my ($run_id) = @_;
	return sq($coord, "SELECT sum(rows) FROM backfill.partition WHERE run_id = $run_id");
}

# those, and the rows of t the pass did (n = $n + 1)
sub rows_done
{
	my ($run_id, $n) = @_;
	return sq($coord, "SELECT (SELECT sum(rows) FROM backfill.partition WHERE run_id = $run_id), "
		  . "(SELECT count(*) FROM t WHERE n = $n + 1)");
}

sub done_once
{
	my ($label, $run_id, $n) = @_;
	is(wait_pass_end($coord, $run_id, $LONG), 'completed', "$label: the pass completed");
	is( sq($coord, "SELECT count(*), count(*) FILTER (WHERE n = $n) FROM t"),
		"$ROWS|$ROWS", "$label: every row was done exactly once (n = $n)");
	is(ledger($coord, $run_id, 'rows'), $ROWS, "$label: the ledger counts each row once");
	return;
}

# Every lane of the paused pass $run_id waits out a move of $shard: the move
# started with the pass paused and no lane left, held on its node once it
# holds the rebalance lock, then the pass resumed until its 2 lanes say they
# wait for the move.  Returns the session holding the move and the mover.
sub lanes_wait_out_move
{
	my ($label, $run_id, $shard) = @_;
	my $src = placed_on($shard);
	my ($dst) = grep { $_ != $src } @workers;
	sq($coord, q{SELECT backfill_pause('fill_t')});
	ok(lanes_gone($run_id), "$label: the paused pass has no lane at work");
	my $hold = $src->background_psql('postgres', timeout => 900, on_error_stop => 0);
	$hold->query_safe("SET citus.enable_manual_changes_to_shards = on; BEGIN;
		LOCK TABLE t_$shard IN ACCESS EXCLUSIVE MODE;");
	my $hold_pid = $hold->query_safe('SELECT pg_backend_pid()');
	my $mover = $coord->background_psql('postgres', timeout => 900, on_error_stop => 0);
	my $mover_pid = $mover->query_safe('SELECT pg_backend_pid()');
	$mover->query_until(qr/moving/,
		    "\\echo moving\nSELECT citus_move_shard_placement($shard, 'localhost', "
		  . $src->port . ", 'localhost', " . $dst->port
		  . ", shard_transfer_mode => 'block_writes');\n");
	ok( poll_until($coord,
			"SELECT count(*) FROM pg_locks WHERE pid = $mover_pid AND locktype = 'advisory' "
			  . "AND objsubid = 13 AND mode = 'ExclusiveLock' AND granted", '1', $LONG),
		"$label: the move holds the colocation group's rebalance lock");
	ok( poll_until($src,
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE $hold_pid = ANY (pg_blocking_pids(pid))",
			't', $LONG),
		"$label: the move waits on the held shard table");
	sq($coord, q{SELECT backfill_resume('fill_t')});
	ok( poll_until($coord, "SELECT count(*) FROM backfill.partition WHERE run_id = $run_id "
			  . "AND state = 'running' AND throttle = 'a shard move of group $group'", '2', $LONG),
		"$label: both lanes wait out the move (a shard move of group $group)");
	return ($hold, $mover, $dst);
}

# let the held move end; it succeeded, the shard is on $dst
sub move_ends
{
	my ($label, $hold, $mover, $shard, $dst) = @_;
	$hold->query_safe('COMMIT');
	$hold->quit;
	$mover->query(q{SELECT 'moved'});	# returns once the move has ended
	my $err = $mover->{stderr};
	$mover->quit;
	unlike($err, qr/ERROR/, "$label: the move succeeded");
	is(placed_on($shard)->name, $dst->name, "$label: the shard is on " . $dst->name);
	return;
}

# (a) backfill_pause while every lane waits out a move
my $n = 0;
declare_fill($n, 10, 100);
my $run_id = sq($coord, q{SELECT backfill_run('fill_t')});
ok( poll_until($coord, "SELECT count(*) >= 2 FROM backfill.partition WHERE run_id = $run_id "
		  . "AND state = 'running' AND rows > 0", 't', $LONG),
	'pause: two partitions under way');
my $shard = sq($coord, "SELECT min(shard) FROM backfill.partition WHERE run_id = $run_id "
	  . "AND state = 'running' AND rows > 0");
my ($hold, $mover, $dst) = lanes_wait_out_move('pause', $run_id, $shard);
my $before = rows_counted($run_id);
sq($coord, q{SELECT backfill_pause('fill_t')});
move_ends('pause', $hold, $mover, $shard, $dst);
ok(lanes_gone($run_id), 'pause: the lanes left the paused pass after the move');
is(rows_done($run_id, $n), "$before|$before",
	"pause: no batch after the move (rows counted and done stay $before)");
is(sq($coord, "SELECT paused FROM backfill.run WHERE run_id = $run_id"), 't',
	'pause: the pass is still paused');
like(slurp_file($coord->logfile), qr/run $run_id paused: lane leaves partition \d+ at its checkpoint/,
	'pause: a lane left its partition at its checkpoint');

# (b) backfill.pause_all while every lane waits out a move (the shard moves back)
($hold, $mover, $dst) = lanes_wait_out_move('pause_all', $run_id, $shard);
$before = rows_counted($run_id);
sq($coord, 'ALTER SYSTEM SET backfill.pause_all = on');
sq($coord, 'SELECT pg_reload_conf()');
# (a session started after the reload sees it: the postmaster has signalled the lanes)
ok(poll_until($coord, 'SHOW backfill.pause_all', 'on', $LONG), 'pause_all: the setting is on');
move_ends('pause_all', $hold, $mover, $shard, $dst);
ok( poll_until($coord, "SELECT count(*) FROM backfill.partition WHERE run_id = $run_id "
		  . "AND state = 'running' AND throttle LIKE 'paused for all%'", '2', $LONG),
	'pause_all: both lanes hold for the switch once the move is over');
is(rows_done($run_id, $n), "$before|$before", "pause_all: no batch after the move ($before)");
sq($coord, 'ALTER SYSTEM SET backfill.pause_all = off');
sq($coord, 'SELECT pg_reload_conf()');
declare_fill($n, 200, 2000);
done_once('pause and pause_all', $run_id, $n + 1);
$n++;

# (c) the table replaced mid-pass (alter_distributed_table): the pass fails,
# its lanes stop at once
declare_fill($n, 4, 100, backoff => '1 s', cap => '15 s');
$run_id = sq($coord, q{SELECT backfill_run('fill_t', force => true)});
ok( poll_until($coord, "SELECT count(*) >= 2 FROM backfill.partition WHERE run_id = $run_id "
		  . "AND state = 'running' AND rows > 0", 't', $LONG),
	'replaced: two partitions under way');
my ($status, $done) = split /\|/, sq($coord, "SELECT l.status, (SELECT sum(rows) "
	  . "FROM backfill.partition p WHERE p.run_id = l.run_id) FROM backfill.ledger l WHERE run_id = $run_id");
is($status, 'running', 'replaced: the pass runs');
cmp_ok($done, '<', $ROWS, "replaced: rows are left ($done of $ROWS done)");
my $log_offset = -s $coord->logfile;
sq($coord, q{SELECT alter_distributed_table('t', shard_count => 6)});
is(wait_pass_end($coord, $run_id, $LONG), 'failed', 'replaced: the pass failed');
is(ledger($coord, $run_id, 'error_code'), 'BF001', 'replaced: BF001 (the table is not the one declared)');
ok(lanes_gone($run_id), 'replaced: no lane is left');
my $log = substr(slurp_file($coord->logfile), $log_offset);
# (failed by a lane, or by the scheduler: "failed passes whose declaration ...")
my $after_fail = $log =~ /(?:run $run_id failed:|failed passes whose declaration)(.*)\z/s ? $1 : $log;
my $retries = () = $after_fail =~ /run $run_id: batch failed \(attempt/g;
cmp_ok($retries, '<=', 2,
	"replaced: after the pass failed no lane tried a batch again ($retries in flight then)");

# (d) a split of a table that had a column dropped: the split's new shards
# have no hole where the column was (n and note sit one to the left), and
# the pass follows the split, every row once, each column written where it is
$coord->safe_psql('postgres', qq{
	SET citus.shard_count = 4;
	CREATE TABLE d (id bigint PRIMARY KEY, junk text, n int NOT NULL DEFAULT 0, note text);
	SELECT create_distributed_table('d', 'id', colocate_with => 'none');
	INSERT INTO d (id, junk) SELECT g, 'j' FROM generate_series(1, $ROWS) g;
	ALTER TABLE d DROP COLUMN junk;
	SELECT backfill_declare('fill_d', 'd', 'n = 0',
		'UPDATE d SET n = n + 1, note = ''done '' || id WHERE id BETWEEN \$1 AND \$2 AND n = 0',
		batch_size => 100, rate => 4, max_parallel => 2, max_attempts => 5,
		backoff_base => '100 ms', backoff_cap => '1 s');
});
$run_id = sq($coord, q{SELECT backfill_run('fill_d')});
ok( poll_until($coord, "SELECT count(*) > 0 FROM backfill.partition WHERE run_id = $run_id "
		  . "AND state = 'running' AND rows > 0", 't', $LONG),
	'dropped column: a shard\'s partition is under way');
$shard = sq($coord, "SELECT min(shard) FROM backfill.partition WHERE run_id = $run_id "
	  . "AND state = 'running' AND rows > 0");
my ($lo, $hi) = split /\|/,
  sq($coord, "SELECT shardminvalue, shardmaxvalue FROM pg_dist_shard WHERE shardid = $shard");
my $nodes = sq($coord, "SELECT string_agg(nodeid::text, ',' ORDER BY nodeid) FROM pg_dist_node "
	  . "WHERE groupid > 0");
$log_offset = -s $coord->logfile;
sq($coord, "SELECT citus_split_shard_by_split_points($shard, ARRAY['" . int(($lo + $hi) / 2)
	  . "'], ARRAY[$nodes], shard_transfer_mode => 'block_writes')");
# (the split's new shards have the highest ids)
my $child = sq($coord, "SELECT max(shardid) FROM pg_dist_shard WHERE logicalrelid = 'd'::regclass");
is( sq(placed_on($child), "SET citus.override_table_visibility = off;
		SELECT count(*) FROM pg_attribute WHERE attrelid = 'd_$child'::regclass AND attnum > 0"),
	'3', 'dropped column: a new shard has no dropped column (3 attributes, the table 4)');
$coord->safe_psql('postgres', q{SELECT backfill_declare('fill_d', 'd', 'n = 0',
	'UPDATE d SET n = n + 1, note = ''done '' || id WHERE id BETWEEN $1 AND $2 AND n = 0',
	batch_size => 2000, rate => 100, max_parallel => 2, max_attempts => 5,
	backoff_base => '100 ms', backoff_cap => '1 s')});
is(wait_pass_end($coord, $run_id, $LONG), 'completed', 'dropped column: the pass completed');
is( sq($coord, "SELECT count(*), count(*) FILTER (WHERE n = 1 AND note = 'done ' || id) FROM d"),
	"$ROWS|$ROWS", 'dropped column: every row done once, n and note written where they are');
is(ledger($coord, $run_id, 'rows'), $ROWS, 'dropped column: the ledger counts each row once');
like(substr(slurp_file($coord->logfile), $log_offset),
	qr/shard $shard was split; partition \d+ goes on in partitions \d+ and after/,
	'dropped column: the split shard\'s partition went on in the new shards\' partitions');

# (e) the estimate of a pass over shards whose statistics are stale: ANALYZE
# while every n was 0, then every row set to 1 (autovacuum off: nothing
# analyzes them again); the planner of each shard thinks 'n = 1' matches
# about 1 row.  Once the workers' statistics count the changes, a pass's
# estimate comes from a sample of each shard.
$coord->safe_psql('postgres', qq{
	SET citus.shard_count = 4;
	CREATE TABLE e (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0, pad text)
		WITH (autovacuum_enabled = off);
	SELECT create_distributed_table('e', 'id', colocate_with => 'none');
	INSERT INTO e (id, pad) SELECT g, md5(g::text) FROM generate_series(1, $ROWS) g;
	ANALYZE e;
	UPDATE e SET n = 1;
});
for my $w (@workers)
{
	ok( poll_until($w, q{SET citus.override_table_visibility = off;
		SELECT coalesce(sum(n_mod_since_analyze), 0) >= sum(n_live_tup)
		  FROM pg_stat_all_tables WHERE relname LIKE 'e\_%' AND n_live_tup > 0}, 't', $LONG),
		'stale statistics: ' . $w->name . "'s statistics count the rows changed since ANALYZE");
}
my $planner = sq($coord, q{SELECT sum(result::bigint) FROM run_command_on_shards('e',
	$$SELECT backfill.estimate_rows(%L, 'n = 1')$$)});
cmp_ok($planner, '<', $ROWS / 10, "stale statistics: the shards' planners say $planner rows");
$coord->safe_psql('postgres', q{
	SELECT backfill_declare('fill_e', 'e', 'n = 1',
		'UPDATE e SET n = n + 1 WHERE id BETWEEN $1 AND $2 AND n = 1',
		batch_size => 500, rate => 50, max_parallel => 2, max_attempts => 2,
		backoff_base => '10 ms', backoff_cap => '20 ms');
	-- a row that fails its batch until the constraint goes: the pass fails
	ALTER TABLE e ADD CONSTRAINT not_777 CHECK (n < 2 OR id <> 777);
});
$log_offset = -s $coord->logfile;
$run_id = sq($coord, q{SELECT backfill_run('fill_e')});
ok(poll_until($coord, "SELECT estimate IS NOT NULL FROM backfill.run WHERE run_id = $run_id", 't', $LONG),
	'stale statistics: the pass is planned');
my ($estimate, $method) = split /\|/,
  sq($coord, "SELECT estimate, plan_method FROM backfill.run WHERE run_id = $run_id");
ok($estimate >= $ROWS / 2 && $estimate <= $ROWS * 2,
	"stale statistics: the estimate ($estimate) is within a factor 2 of the $ROWS rows to do");
like(substr(slurp_file($coord->logfile), $log_offset),
	qr/backfill "fill_e": the rows to do in 4 of the 4 Citus shards counted in a sample of their pages/,
	'stale statistics: the log says the 4 shards were sampled');

# (f) a retry of that pass, after the shard of its failed partition was split:
# described as the table is now (5 shards), estimated from the rows left now
is(wait_pass_end($coord, $run_id, $LONG), 'failed', 'retry: the pass failed on the row it could not write');
my $failed_shard = sq($coord, "SELECT shard FROM backfill.partition WHERE run_id = $run_id AND state = 'failed'");
($lo, $hi) = split /\|/,
  sq($coord, "SELECT shardminvalue, shardmaxvalue FROM pg_dist_shard WHERE shardid = $failed_shard");
sq($coord, "SELECT citus_split_shard_by_split_points($failed_shard, ARRAY['" . int(($lo + $hi) / 2)
	  . "'], ARRAY[$nodes], shard_transfer_mode => 'block_writes')");
$coord->safe_psql('postgres', 'ALTER TABLE e DROP CONSTRAINT not_777');
my $left = sq($coord, 'SELECT count(*) FROM e WHERE n = 1');
sq($coord, q{SELECT backfill_retry('fill_e')});
my $retry = sq($coord, q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'fill_e'});
isnt($retry, $run_id, 'retry: a new pass resumes the failed one');
is(wait_pass_end($coord, $retry, $LONG), 'completed', 'retry: the resumed pass completed');
is(sq($coord, 'SELECT count(*) FILTER (WHERE n = 2), count(*) FROM e'), "$ROWS|$ROWS",
	'retry: every row done exactly once across the two passes');
($estimate, $method) = split /\|/,
  sq($coord, "SELECT estimate, plan_method FROM backfill.run WHERE run_id = $retry");
like($method, qr/^per shard: 5 Citus shards, rows from 5 Citus shards.*; resumed from run $run_id \(4 partitions\)$/,
	"retry: the plan is the table's now, 5 shards, resumed from the failed pass ($method)");
ok($estimate >= $left / 2 && $estimate <= $left * 2,
	"retry: the estimate ($estimate) is within a factor 2 of the $left rows left, not the first pass's");

done_testing();
