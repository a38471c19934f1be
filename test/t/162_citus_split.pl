# 162_citus_split.pl -- a pass shard by shard follows a shard split, and lets
# moves and splits in.
#
# Runs only where Citus is installed for the server under test (citus.so in
# pg_config --pkglibdir); prints one SKIP line otherwise.  A coordinator and
# two workers on loopback, output_plugin_libraries naming citus (a split with
# logical replication needs it); the action is not idempotent (n = n + 1).
#
# - A shard split mid-pass (citus_split_shard_by_split_points), with
#   block_writes and with force_logical: the split shard's partition ends,
#   each new shard gets a partition that goes on from its checkpoint (the
#   log says so), and the pass completes: every row exactly once, the ledger
#   counting each once, no forced rerun.
# - A lane is killed with SIGKILL during each split: the split is started
#   while the pass runs (no pause), waits for the batches that hold the
#   colocation group's rebalance lock, then holds it while a session holding
#   the table in SHARE UPDATE EXCLUSIVE mode keeps it from going on; a lane then waits on
#   it (backfill_status: "a shard move of group N"), and that lane is killed.
#   The coordinator's crash takes the split with it; the split started again
#   (still without a pause) gets in at its first try and the pass follows it.
# - A move is not starved by a busy pass: slow batches (0.3 s) on 3 lanes,
#   a force_logical move started without pausing gets in within 3 tries
#   (one, since the move waits for the batches in flight), and the lanes say
#   why they held back.
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

my $ROWS = 100_000;
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

# declare fill_t (n from $from to $from + 1); $sleep: seconds each batch sleeps
sub declare_fill
{
	my ($from, $rate, $batch, $sleep, $lanes) = @_;
	my $slow = $sleep ? " AND (SELECT pg_sleep($sleep)) IS NOT NULL" : '';
	$coord->safe_psql('postgres', qq{
		SELECT backfill_declare('fill_t', 't', 'n = $from',
			'UPDATE t SET n = n + 1 WHERE id BETWEEN \$1 AND \$2 AND n = $from$slow',
			batch_size => $batch, rate => $rate, max_parallel => ${\($lanes // 2)},
			max_attempts => 100, backoff_base => '100 ms', backoff_cap => '3 s',
			lock_timeout => '1 hour', batch_timeout => '1 hour')});
	return;
}

sub lanes_waiting_on
{
	my ($pid) = @_;
	return poll_until($coord,
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane' "
		  . "AND $pid = ANY (pg_blocking_pids(pid))", 't', $LONG);
}

sub holds_rebalance_lock
{
	my ($pid) = @_;
	return poll_until($coord,
		"SELECT count(*) FROM pg_locks WHERE pid = $pid AND locktype = 'advisory' "
		  . "AND objsubid = 13 AND mode = 'ExclusiveLock' AND granted", '1', $LONG);
}

sub placed_on
{
	my ($shard) = @_;
	my $group = sq($coord, "SELECT groupid FROM pg_dist_placement WHERE shardid = $shard");
	for my $w (@workers)
	{
		return $w if sq($w, 'SELECT groupid FROM pg_dist_local_group') eq $group;
	}
	die "shard $shard is on no worker";
}

sub done_once
{
	my ($label, $run_id, $n) = @_;
	is(wait_pass_end($coord, $run_id, $LONG), 'completed', "$label: the pass completed");
	is( sq($coord, "SELECT count(*), count(*) FILTER (WHERE n = $n) FROM t"),
		"$ROWS|$ROWS", "$label: every row was done exactly once (n = $n)");
	is(ledger($coord, $run_id, 'rows'), $ROWS, "$label: the ledger counts each row once");
	is(sq($coord, "SELECT count(*) FROM backfill.partition WHERE run_id = $run_id AND state <> 'done'"),
		'0', "$label: every partition is done");
	return;
}

# (a), (b) a split mid-pass, a lane killed during it
my $n = 0;
for my $mode ('block_writes', 'force_logical')
{
	my $label = "$mode split";
	declare_fill($n, 4, 250);
	my $run_id = sq($coord, q{SELECT backfill_run('fill_t', force => true)});
	# a partition under way, not done: its shard is split
	ok( poll_until($coord, "SELECT count(*) > 0 FROM backfill.partition WHERE run_id = $run_id "
			  . "AND state = 'running' AND rows > 0", 't', $LONG),
		"$label: a shard's partition is under way");
	my $shard = sq($coord, "SELECT min(shard) FROM backfill.partition WHERE run_id = $run_id "
		  . "AND state = 'running' AND rows > 0");
	my $src = placed_on($shard);
	my ($lo, $hi) = split /\|/,
	  sq($coord, "SELECT shardminvalue, shardmaxvalue FROM pg_dist_shard WHERE shardid = $shard");
	my $point = int(($lo + $hi) / 2);
	my $nodes = sq($coord, "SELECT string_agg(nodeid::text, ',' ORDER BY nodeid) FROM pg_dist_node "
		  . "WHERE groupid > 0");
	my $split_sql = "SELECT citus_split_shard_by_split_points($shard, ARRAY['$point'], "
	  . "ARRAY[$nodes], shard_transfer_mode => '$mode')";

	# a session holding the table in SHARE UPDATE EXCLUSIVE mode on the coordinator (which
	# batches never ask for) keeps the split, once it has the rebalance lock, from going on
	my $hold = $coord->background_psql('postgres', timeout => 900, on_error_stop => 0);
	$hold->query_safe("BEGIN; LOCK TABLE t IN SHARE UPDATE EXCLUSIVE MODE;");
	my $splitter = $coord->background_psql('postgres', timeout => 900, on_error_stop => 0);
	my $splitter_pid = $splitter->query_safe('SELECT pg_backend_pid()');
	$splitter->query_until(qr/splitting/, "\\echo splitting\n$split_sql;\n");
	ok(holds_rebalance_lock($splitter_pid),
		"$label: the split, started while the pass runs, holds the rebalance lock");
	ok(lanes_waiting_on($splitter_pid), "$label: a lane waits on the split");
	my $group = sq($coord, "SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 't'::regclass");
	ok( poll_until($coord, q{SELECT throttle FROM backfill_status('fill_t')},
			"a shard move of group $group", $LONG),
		"$label: backfill_status says the lanes hold back for the split (a shard move of group $group)");
	my $lane = sq($coord, "SELECT min(pid) FROM pg_stat_activity WHERE backend_type = "
		  . "'pg_backfill lane' AND $splitter_pid = ANY (pg_blocking_pids(pid))");
	is(kill('KILL', $lane), 1, "$label: SIGKILL to lane $lane, waiting on the split");
	ok(wait_for_server($coord, $LONG), "$label: the coordinator accepts connections again");
	# (their sessions died with the coordinator)
	eval { $hold->quit };
	eval { $splitter->quit };
	is(sq($coord, "SELECT count(*) FROM pg_dist_shard WHERE shardid = $shard"), '1',
		"$label: the crash took the split with it");
	my $log_offset = -s $coord->logfile;
	# again, still without a pause: it waits for the batches in flight, not fails
	my $t0 = time();
	my ($rc, $out, $err) = $coord->psql('postgres', $split_sql);
	diag(sprintf("the %s split took %.1f s", $mode, time() - $t0));
	is($rc, 0, "$label: the split started again succeeded at its first try ($err)");
	is(sq($coord, "SELECT count(*) FROM pg_dist_shard WHERE shardid = $shard"), '0',
		"$label: shard $shard is split");
	declare_fill($n, 200, 2000);
	done_once($label, $run_id, $n + 1);
	like(substr(slurp_file($coord->logfile), $log_offset),
		qr/shard $shard was split; partition \d+ goes on in partitions \d+ and after/,
		"$label: the split shard's partition went on in the new shards' partitions");
	is( sq($coord, "SELECT count(*) FROM backfill.partition p WHERE run_id = $run_id AND "
			  . "split_from = (SELECT part_no FROM backfill.partition q WHERE q.run_id = $run_id "
			  . "AND q.shard = $shard)"), '2',
		"$label: a partition for each of the 2 new shards");
	$n++;
}

# (c) a move is not starved: slow batches (0.3 s) on 3 lanes
declare_fill($n, 100, 200, 0.3, 3);
my $run_id = sq($coord, q{SELECT backfill_run('fill_t', force => true)});
ok( poll_until($coord, "SELECT count(*) >= 3 FROM backfill.partition WHERE run_id = $run_id "
		  . "AND state = 'running' AND rows > 0", 't', $LONG),
	'busy pass: 3 lanes at work');
my $shard = sq($coord, "SELECT min(shard) FROM backfill.partition WHERE run_id = $run_id "
	  . "AND state = 'running' AND rows > 0");
my $src = placed_on($shard);
my ($dst) = grep { $_ != $src } @workers;
my $log_offset = -s $coord->logfile;
my ($tries, $t0, $rc, $err) = (0, time(), 1, '');
while ($tries < 3 && $rc != 0)
{
	$tries++;
	($rc, undef, $err) = $coord->psql('postgres',
		"SELECT citus_move_shard_placement($shard, 'localhost', " . $src->port
		  . ", 'localhost', " . $dst->port . ", shard_transfer_mode => 'force_logical')");
}
my $took = time() - $t0;
diag(sprintf("the force_logical move took %d tr%s, %.1f s", $tries, $tries == 1 ? 'y' : 'ies', $took));
is($rc, 0, "busy pass: the move got in within 3 tries ($tries; $err)");
is(placed_on($shard)->name, $dst->name, 'busy pass: the shard is on ' . $dst->name);
declare_fill($n, 100, 2000, 0.3, 3);
done_once('busy pass', $run_id, $n + 1);
like(substr(slurp_file($coord->logfile), $log_offset),
	qr/held back \d+ ms for a shard move or split of colocation group \d+/,
	'busy pass: a lane held back for the move, and said so');

done_testing();
