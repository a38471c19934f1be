# 161_citus_per_shard.pl -- a Citus distributed table's pass shard by shard.
#
# Runs only where Citus is installed for the server under test (citus.so in
# pg_config --pkglibdir); prints one SKIP line otherwise.  A coordinator and
# two workers on loopback; a hash-distributed table of 1,000,000 rows in 8
# shards; the action is not idempotent (n = n + 1).
#
# - The plan has one partition per shard ("per shard: 8 Citus shards"),
#   backfill_partitions names each partition's shard and the Citus group
#   whose backfill.shard_cursor row is its checkpoint; the workers' rows and
#   the coordinator's agree at the end, and count every row once.
# - Every row is done exactly once, the ledger counting each once, through
#   a lane killed with SIGKILL, the coordinator stopped with -m immediate, a
#   worker stopped with -m immediate, and a shard moved mid-pass by
#   citus_move_shard_placement with logical replication (the default) and
#   with block_writes: the partition goes on from its checkpoint on the new
#   node (the log says so), every row of the moved shard is done on the new
#   placement, and the old placement (kept for the look) got no write after
#   the move.
# - An action that reads another distributed table runs coordinator-side,
#   and the plan says why.
# - An action that calls a user's function or reads a coordinator-only
#   table runs coordinator-side too.
# - A role's search_path on a worker (a schema an attacker writes to first)
#   decides nothing: a planted table named like the shard, with a trigger,
#   is never touched.  Checkpoint rows another role planted for the next
#   run ids neither block nor steer a pass; a role reads only its own; one
#   that may not read the table keeps none, and its own shard_batch runs as
#   itself.
# - backfill_retry of a pass that failed shard by shard goes on from the
#   nodes' checkpoint rows: every row once across both passes.
#
# The states the faults act on are made, not hoped for:
# - The lane kill, the coordinator crash and the worker crash come while a
#   prepared transaction on worker 2 (the gate) holds the row lock of the
#   middle key of that worker's first shard: that shard's partition waits
#   there in a batch (lock_timeout and batch_timeout are an hour), so the
#   pass cannot end however fast the other lane does the rest.  The gate
#   outlives a crash of the coordinator and of the worker itself, and only
#   ROLLBACK PREPARED, after the fault, opens it.  Each fault comes once a
#   batch waits on the gate and a fifth of the rows are done; the lane killed
#   is the one whose batch waits, and the worker crash hits that batch.
# - The moves: Citus takes the colocation group's rebalance lock without
#   waiting, and every batch holds it shared, so a move started while a
#   batch runs fails at once.  The pass is paused first, and each move
#   starts once no lane is left: it takes the lock at its first try.  A
#   session holding the shard table on its node keeps the move from ending
#   until the move holds the lock and the pass, resumed, has a lane waiting
#   on it: batches overlap every move.  The shard's partition goes on from
#   its checkpoint on the new node between the moves.  That pass runs at 2
#   batches of 500 rows a second until the moves are over (the shard's
#   125,000 rows take at least two minutes of the lanes' time; they run for
#   seconds between the moves), then fast.
# - The retry pass is held by a gate on worker 2 once 300 rows are done,
#   and the worker stopped with a batch waiting there.
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

my $ROWS = 1_000_000;
# deadline (seconds) of a wait for a pass to get somewhere, or to end
my $LONG = 600;

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
		  . "wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n"
		  . ($conf // ''));
}

# the old placement of a moved shard stays, to be looked at
my $coord = citus_node('coord', "citus.defer_shard_delete_interval = -1\n");
my @workers = (citus_node('worker1'), citus_node('worker2'));
$_->safe_psql('postgres', 'CREATE EXTENSION citus') for ($coord, @workers);
$coord->safe_psql('postgres',
	"SELECT citus_set_coordinator_host('localhost', " . $coord->port . ')');
$coord->safe_psql('postgres', "SELECT citus_add_node('localhost', " . $_->port . ')')
  for @workers;
$coord->safe_psql('postgres', 'CREATE EXTENSION pg_backfill');
note('Citus ' . sq($coord, q{SELECT extversion FROM pg_extension WHERE extname = 'citus'}));

$coord->safe_psql('postgres', qq{
	SET citus.shard_count = 8;
	CREATE TABLE t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0, pad text);
	SELECT create_distributed_table('t', 'id');
	INSERT INTO t (id, pad) SELECT g, md5(g::text) FROM generate_series(1, $ROWS) g;
	ANALYZE t;
});

# declare fill_t (n from $from to $from + 1) at $rate batches/s for the pass
# (all lanes).  A batch waits on a held row lock for as long as the test
# holds it (an hour), and a batch is tried up to 100 times, backing off up
# to 3 s: a worker down for minutes while it restarts fails no partition.
sub declare_fill
{
	my ($from, $rate, $batch) = @_;
	$coord->safe_psql('postgres', qq{
		SELECT backfill_declare('fill_t', 't', 'n = $from',
			'UPDATE t SET n = n + 1 WHERE id BETWEEN \$1 AND \$2 AND n = $from',
			batch_size => $batch, rate => $rate, max_parallel => 2, max_attempts => 100,
			backoff_base => '100 ms', backoff_cap => '3 s',
			lock_timeout => '1 hour', batch_timeout => '1 hour')});
	return;
}

# start a pass of fill_t; returns its run id
sub start_pass
{
	my ($from, $rate, $batch) = @_;
	declare_fill($from, $rate // 200, $batch // 2000);
	return sq($coord, q{SELECT backfill_run('fill_t', force => true)});
}

sub midway
{
	my ($run_id, $rows) = @_;
	return poll_until($coord,
		"SELECT coalesce(sum(rows), 0) >= $rows FROM backfill.partition WHERE run_id = $run_id",
		't', $LONG);
}

# The gate on $node: a prepared transaction holding the row lock of the middle
# key of the node's first shard of t.  Returns that shard.
sub close_gate
{
	my ($node) = @_;
	my $port = $node->port;
	my $gate_shard = sq($coord, qq{
		SELECT min(s.shardid) FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
		  JOIN pg_dist_node d ON d.groupid = p.groupid
		 WHERE s.logicalrelid = 't'::regclass AND d.nodeport = $port});
	my $key = sq($node, "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY id) FROM t_$gate_shard");
	gate_close($node, 'gate', "t_$gate_shard", "id = $key");
	return $gate_shard;
}

# The state a fault acts on: a batch of pass $run_id waits on the gate on
# $node and a fifth of the rows are done; the pass runs, not done.
sub held_midway
{
	my ($label, $run_id, $node) = @_;
	ok(gate_holds($node, $LONG), "$label: a batch waits on the gate on " . $node->name);
	ok(midway($run_id, $ROWS / 5), "$label: the pass is under way");
	my ($status, $done) = split /\|/, sq($coord, qq{
		SELECT l.status, (SELECT sum(p.rows) FROM backfill.partition p WHERE p.run_id = l.run_id)
		  FROM backfill.ledger l WHERE l.run_id = $run_id});
	is($status, 'running', "$label: the pass is running");
	cmp_ok($done, '<', $ROWS, "$label: the fault comes mid-pass ($done of $ROWS rows done)");
	return;
}

# the paused pass $run_id has no lane left, and no partition held
sub lanes_gone
{
	my ($run_id) = @_;
	return poll_until($coord, qq{
		SELECT (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane')
		     + (SELECT count(*) FROM backfill.partition WHERE run_id = $run_id AND state = 'running')},
		'0', $LONG);
}

# Move $shard from $src to $dst while the pass's lanes are at work, without
# racing them.  The pass is paused, and the move started once no lane is
# left, so that it takes the rebalance lock at its first try; a session
# holding the shard table on $src keeps the move from ending until the
# resumed pass has a lane waiting on that lock.  Then the hold ends, the
# move finishes, and the shard's partition goes on on $dst.
sub move_under_batches
{
	my ($run_id, $shard, $src, $dst, $mode, $shard_rows) = @_;
	my $hop = "$mode move " . $src->name . ' -> ' . $dst->name;
	my $part = "FROM backfill.partition WHERE run_id = $run_id AND shard = $shard";
	sq($coord, q{SELECT backfill_pause('fill_t')});
	ok(lanes_gone($run_id), "$hop: the paused pass has no lane at work");
	my $before = sq($coord, "SELECT rows $part");
	cmp_ok($before, '<', $shard_rows,
		"$hop: the shard's partition is not done ($before of $shard_rows rows)");
	# (Citus lets a session lock a shard table itself only with this setting)
	my $hold = $src->background_psql('postgres', timeout => 900, on_error_stop => 0);
	$hold->query_safe("SET citus.enable_manual_changes_to_shards = on; BEGIN;
		LOCK TABLE t_$shard IN ACCESS EXCLUSIVE MODE;");
	my $hold_pid = $hold->query_safe('SELECT pg_backend_pid()');
	my $mover = $coord->background_psql('postgres', timeout => 900, on_error_stop => 0);
	my $mover_pid = $mover->query_safe('SELECT pg_backend_pid()');
	$mover->query_until(qr/moving/,
		    "\\echo moving\nSELECT citus_move_shard_placement($shard, 'localhost', "
		  . $src->port . ", 'localhost', " . $dst->port
		  . ", shard_transfer_mode => '$mode');\n");
	ok( poll_until($coord,
			"SELECT count(*) FROM pg_locks WHERE pid = $mover_pid AND locktype = 'advisory' "
			  . "AND objsubid = 13 AND mode = 'ExclusiveLock' AND granted", '1', $LONG),
		"$hop: the move holds the colocation group's rebalance lock");
	ok( poll_until($src,
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE $hold_pid = ANY (pg_blocking_pids(pid))",
			't', $LONG),
		"$hop: the move waits on the held shard table");
	sq($coord, q{SELECT backfill_resume('fill_t')});
	ok( poll_until($coord,
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane' "
			  . "AND $mover_pid = ANY (pg_blocking_pids(pid))", 't', $LONG),
		"$hop: a lane's batch waits on the move");
	$hold->query_safe('COMMIT');
	$hold->quit;
	$mover->query(q{SELECT 'moved'});	# returns once the move has ended
	my $err = $mover->{stderr};
	$mover->quit;
	unlike($err, qr/ERROR/, "$hop: the move succeeded at its first try");
	my $dst_group = sq($dst, 'SELECT groupid FROM pg_dist_local_group');
	is(sq($coord, "SELECT groupid FROM pg_dist_placement WHERE shardid = $shard"), $dst_group,
		"$hop: the shard is placed on " . $dst->name);
	ok(poll_until($coord, "SELECT rows > $before AND shard_group = $dst_group $part", 't', $LONG),
		"$hop: the partition went on from its checkpoint on " . $dst->name);
	return;
}

# the checkpoint rows of a run on the nodes the coordinator says hold them
# (a partition's shard_group): how many, and the rows they count
sub worker_rows
{
	my ($run_id) = @_;
	my ($n, $sum) = (0, 0);
	for my $w (@workers)
	{
		my $group = sq($w, 'SELECT groupid FROM pg_dist_local_group');
		my $parts = sq($coord, "SELECT coalesce(string_agg(part_no::text, ','), '-1') "
			  . "FROM backfill.partition WHERE run_id = $run_id AND shard_group = $group");
		my ($c, $s) = split /\|/, sq($w, qq{
			SELECT count(*), coalesce(sum(rows), 0) FROM backfill.shard_cursor
			 WHERE run_id = $run_id AND part_no IN ($parts)});
		$n += $c;
		$sum += $s;
	}
	return "$n|$sum";
}

sub done_once
{
	my ($label, $run_id, $n) = @_;
	is(wait_pass_end($coord, $run_id, $LONG), 'completed', "$label: the pass completed");
	is( sq($coord, "SELECT count(*), count(*) FILTER (WHERE n = $n) FROM t"),
		"$ROWS|$ROWS", "$label: every row was done exactly once (n = $n)");
	is(ledger($coord, $run_id, 'rows'), $ROWS, "$label: the ledger counts each row once");
	is(worker_rows($run_id), "8|$ROWS",
		"$label: the 8 shards' checkpoint rows on their nodes count each row once");
	is( sq($coord, "SELECT count(*) FROM backfill.partition p WHERE run_id = $run_id AND "
			  . "state = 'done' AND shard IS NOT NULL AND shard_group IS NOT NULL"),
		'8', "$label: 8 partitions done, each with its shard and checkpoint node");
	return;
}

# (a) the plan: a partition per shard, each on the node that holds it
my $gate_shard = close_gate($workers[1]);
my $run_id = start_pass(0);
ok(midway($run_id, 1), 'the pass started');
my $method = sq($coord, "SELECT plan_method FROM backfill.run WHERE run_id = $run_id");
like($method, qr/^per shard: 8 Citus shards, rows from 8 Citus shards$/,
	"the plan is per shard ($method)");
like(slurp_file($coord->logfile), qr/run $run_id started: 8 partitions by per shard/,
	"the server log counts the plan's partitions, one per shard (8)");
is( sq($coord, q{SELECT count(*), count(DISTINCT shard) FROM backfill_partitions('fill_t')
	              WHERE shard IN (SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 't'::regclass)}),
	'8|8', 'backfill_partitions shows one partition per shard of the table');

# (b) a lane killed with SIGKILL mid-pass: the lane whose batch waits on the gate
held_midway('lane kill', $run_id, $workers[1]);
my $lane = sq($coord, "SELECT holder_pid FROM backfill.partition WHERE run_id = $run_id "
	  . "AND state = 'running' AND holder_pid IS NOT NULL AND shard = $gate_shard");
ok($lane, "lane kill: a lane holds the gate's partition (pid $lane)");
is(kill('KILL', $lane), 1, "lane kill: SIGKILL to lane $lane, its batch waiting on the gate");
ok(wait_for_server($coord, $LONG), 'lane kill: the coordinator accepts connections again');
gate_open($workers[1], 'gate');
done_once('lane kill', $run_id, 1);
cmp_ok(sq($coord, "SELECT sum(reclaims) FROM backfill.partition WHERE run_id = $run_id"),
	'>=', 1, 'lane kill: a new lane reclaimed the dead lane\'s lease');
is( sq($coord, q{SELECT count(*) FROM backfill_partitions('fill_t') b
	  JOIN pg_dist_placement p ON p.shardid = b.shard AND p.groupid = b.shard_group}),
	'8', "each partition's checkpoint is on the node that holds its shard");

# (c) the coordinator stopped with -m immediate mid-pass
close_gate($workers[1]);
$run_id = start_pass(1);
held_midway('coordinator crash', $run_id, $workers[1]);
$coord->stop('immediate');
$coord->start;
gate_open($workers[1], 'gate');
done_once('coordinator crash', $run_id, 2);

# (d) a worker stopped with -m immediate mid-pass, a batch waiting on it
close_gate($workers[1]);
$run_id = start_pass(2);
held_midway('worker crash', $run_id, $workers[1]);
my $log_offset = -s $coord->logfile;
$workers[1]->stop('immediate');
$workers[1]->start;
is(sq($workers[1], q{SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'gate'}), '1',
	'worker crash: the gate outlived the crash of its worker');
gate_open($workers[1], 'gate');
done_once('worker crash', $run_id, 3);
like(substr(slurp_file($coord->logfile), $log_offset),
	qr/backfill "fill_t" run $run_id: batch failed/,
	'worker crash: batches failed while the worker was down, and were retried');

# (e) shards moved mid-pass, with logical replication and with block_writes:
# the shard of the first partition, which the lanes claim first
my $shard = sq($coord, q{SELECT min(shardid) FROM pg_dist_shard WHERE logicalrelid = 't'::regclass});
my $n = 3;
for my $mode ('force_logical', 'block_writes')
{
	my $src_group = sq($coord, "SELECT groupid FROM pg_dist_placement WHERE shardid = $shard");
	my ($src, $dst) =
	  sq($workers[0], 'SELECT groupid FROM pg_dist_local_group') eq $src_group
	  ? @workers : reverse @workers;
	my $shard_rows = sq($src, "SELECT count(*) FROM t_$shard");
	# slow (1,000 rows/s) until the moves are over, then fast again
	$run_id = start_pass($n, 2, 500);
	# the shard's partition is under way, not done
	ok( poll_until($coord, "SELECT rows > 0 AND state = 'running' FROM backfill.partition "
			  . "WHERE run_id = $run_id AND shard = $shard", 't', $LONG),
		"$mode move: the shard's partition is under way");
	$log_offset = -s $coord->logfile;
	my $t0 = time();
	# logical replication: there, back and there again while the partition runs (a batch
	# that committed on the old placement during such a move was lost on the new one)
	my @hops = $mode eq 'force_logical' ? ([$src, $dst], [$dst, $src], [$src, $dst])
	  : ([$src, $dst]);
	move_under_batches($run_id, $shard, @$_, $mode, $shard_rows) for @hops;
	note(sprintf("the %d %s move(s) took %.1f s", scalar @hops, $mode, time() - $t0));
	declare_fill($n, 200, 2000);
	my $old_at_move = sq($src, qq{SET citus.override_table_visibility = off;
		SELECT count(*) FILTER (WHERE n = $n + 1) FROM t_$shard});
	done_once("$mode move", $run_id, $n + 1);
	is( sq($dst, "SELECT count(*), count(*) FILTER (WHERE n = $n + 1) FROM t_$shard"),
		"$shard_rows|$shard_rows",
		"$mode move: on its new placement, every row of the moved shard was done");
	my $old = sq($src, qq{SET citus.override_table_visibility = off;
		SELECT count(*) FILTER (WHERE n = $n + 1) FROM t_$shard});
	is($old, $old_at_move, "$mode move: the old placement got no write after the move ($old rows done there)");
	cmp_ok($old, '<', $shard_rows, "$mode move: the shard moved before its partition was done");
	like(substr(slurp_file($coord->logfile), $log_offset),
		qr/shard $shard moved from Citus group \d+ to \d+; partition \d+ goes on from its checkpoint there/,
		"$mode move: the lane took the partition's checkpoint to the shard's new node");
	$n++;
}

# (f) an action that reads another distributed table: coordinator-side
$coord->safe_psql('postgres', q{
	CREATE TABLE other (id bigint PRIMARY KEY, k int NOT NULL DEFAULT 1);
	SELECT create_distributed_table('other', 'id');
	INSERT INTO other (id) SELECT g FROM generate_series(1, 50) g;
	CREATE TABLE small (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	SELECT create_distributed_table('small', 'id');
	INSERT INTO small (id) SELECT g FROM generate_series(1, 3000) g;
	SELECT backfill_declare('fill_small', 'small', 'n = 0',
		'UPDATE small SET n = n + (SELECT min(k) FROM other) WHERE id BETWEEN $1 AND $2 AND n = 0',
		batch_size => 500, rate => 100);
});
$run_id = sq($coord, q{SELECT backfill_run('fill_small')});
is(wait_pass_end($coord, $run_id, $LONG), 'completed', 'another table read: the pass completed');
like(sq($coord, "SELECT plan_method FROM backfill.run WHERE run_id = $run_id"),
	qr/^coordinator-side \(the action or predicate reads public\.other, another Citus table\)/,
	'another table read: the plan says the pass is coordinator-side, and why');
is(sq($coord, 'SELECT count(*) FILTER (WHERE n = 1) FROM small'), '3000',
	'another table read: every row done once');

# (g) an action calling a user's function, or reading a coordinator-only table:
# coordinator-side (on a worker the function's UPDATE of "small" would be a
# distributed query over every shard: each row done once per shard)
$coord->safe_psql('postgres', q{
	UPDATE small SET n = 0;
	CREATE FUNCTION bump(lo bigint, hi bigint) RETURNS void LANGUAGE sql
		AS 'UPDATE small SET n = n + 1 WHERE id BETWEEN lo AND hi';
	SELECT backfill_declare('fill_fn', 'small', 'n = 0', 'SELECT bump($1, $2)',
		batch_size => 500, rate => 100);
	CREATE TABLE coord_only (k int);
	INSERT INTO coord_only VALUES (1);
	SELECT backfill_declare('fill_local', 'small', 'n = 1',
		'UPDATE small SET n = n + (SELECT k FROM coord_only) WHERE id BETWEEN $1 AND $2 AND n = 1',
		batch_size => 500, rate => 100);
});
$run_id = sq($coord, q{SELECT backfill_run('fill_fn')});
is(wait_pass_end($coord, $run_id, $LONG), 'completed', 'a function in the action: the pass completed');
like(sq($coord, "SELECT plan_method FROM backfill.run WHERE run_id = $run_id"),
	qr/^coordinator-side \(the action or predicate calls public\.bump\(\), which would run on the workers\)/,
	'a function in the action: coordinator-side, and the plan says why');
is(sq($coord, 'SELECT count(*) FILTER (WHERE n = 1) FROM small'), '3000',
	'a function in the action: every row done once');
$run_id = sq($coord, q{SELECT backfill_run('fill_local')});
is(wait_pass_end($coord, $run_id, $LONG), 'completed', 'a coordinator-only table read: the pass completed');
like(sq($coord, "SELECT plan_method FROM backfill.run WHERE run_id = $run_id"),
	qr/^coordinator-side \(the action or predicate reads public\.coord_only, a table of the coordinator only\)/,
	'a coordinator-only table read: coordinator-side, and why');

# (h) a role's search_path on a worker names nothing for a batch: alice's
# path puts a schema mallory writes to first, where mallory planted a table
# named like alice's shard with a trigger (it ran as alice, and copied her
# rows, when the worker looked the shard up by the session's search_path)
$coord->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE ROLE mallory LOGIN;
	CREATE SCHEMA shared;
	GRANT USAGE, CREATE ON SCHEMA shared TO PUBLIC;
	SET citus.shard_count = 4;
	CREATE TABLE al (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	SELECT create_distributed_table('al', 'id');
	INSERT INTO al (id) SELECT g FROM generate_series(1, 4000) g;
	ALTER TABLE al OWNER TO alice;
	ALTER ROLE alice SET search_path = shared, public;
});
is( sq($workers[0], q{SELECT setconfig FROM pg_db_role_setting WHERE setrole = 'alice'::regrole}),
	'{"search_path=shared, public"}', "alice's search_path reached the workers");
my $al_shard = sq($coord, q{SELECT min(shardid) FROM pg_dist_shard WHERE logicalrelid = 'al'::regclass});
my ($al_worker) = grep {
	sq($_, "SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_local_group g USING (groupid) "
		  . "WHERE p.shardid = $al_shard") eq '1'
} @workers;
# (a function is created on the coordinator, which creates it on the workers)
$coord->safe_psql('postgres', q{SET ROLE mallory;
	CREATE FUNCTION shared.trap() RETURNS trigger LANGUAGE plpgsql AS
		'BEGIN INSERT INTO shared.loot VALUES (current_user, NEW.id); RETURN NEW; END'});
$al_worker->safe_psql('postgres', qq{
	SET ROLE mallory;
	CREATE TABLE shared.loot (who name, id bigint);
	CREATE TABLE shared.al_$al_shard (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO shared.al_$al_shard SELECT g FROM generate_series(1, 4000) g;
	CREATE TRIGGER trap BEFORE UPDATE ON shared.al_$al_shard FOR EACH ROW EXECUTE FUNCTION shared.trap();
	GRANT ALL ON shared.al_$al_shard, shared.loot TO PUBLIC;
});
$coord->safe_psql('postgres', q{SET ROLE alice;
	SELECT backfill_declare('fill_al', 'public.al', 'n = 0',
		'UPDATE public.al SET n = n + 1 WHERE id BETWEEN $1 AND $2 AND n = 0',
		batch_size => 500, rate => 100)});
my $al_run = sq($coord, q{SET ROLE alice; SELECT backfill_run('fill_al')});
is(wait_pass_end($coord, $al_run, $LONG), 'completed', "a planted shard-named table: alice's pass completed");
is(sq($coord, 'SELECT count(*) FILTER (WHERE n = 1) FROM al'), '4000',
	"a planted shard-named table: every row of alice's table done once");
is(sq($al_worker, 'SELECT count(*) FROM shared.loot'), '0',
	"a planted shard-named table: mallory's trigger never ran");

# (i) checkpoint rows of another role: mallory plants rows for the next run
# ids under the coordinator's origin; they neither block nor steer alice's pass
my $sysid = sq($coord, 'SELECT system_identifier FROM pg_control_system()');
my $dboid = sq($coord, q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
my $next = sq($coord, 'SELECT max(run_id) + 1 FROM backfill.ledger');
$coord->safe_psql('postgres', 'GRANT SELECT ON al TO mallory');
for my $w (@workers)
{
	$w->safe_psql('postgres', qq{SET ROLE mallory;
		SELECT count(*) FROM generate_series($next, $next + 3) r, generate_series(0, 3) p,
			LATERAL backfill.shard_checkpoint('$sysid:$dboid', r, p, $al_shard, '999999', 0, 'open') c});
}
$coord->safe_psql('postgres', 'UPDATE al SET n = 0');
$al_run = sq($coord, q{SET ROLE alice; SELECT backfill_run('fill_al', force => true)});
is($al_run, $next, 'mallory planted rows for the run id the pass then took');
is(wait_pass_end($coord, $al_run, $LONG), 'completed', "planted checkpoint rows: alice's pass completed");
is(sq($coord, 'SELECT count(*) FILTER (WHERE n = 1) FROM al'), '4000',
	'planted checkpoint rows: every row done once, none skipped');
my ($rc, $out, $err) = $al_worker->psql('postgres', qq{SET ROLE mallory;
	SELECT cursor, rows, found FROM backfill.shard_checkpoint('$sysid:$dboid', $al_run, 0, $al_shard, NULL, 0, 'read')});
is($out, '999999|0|t', "mallory reads only the row she planted, not alice's");
$coord->safe_psql('postgres', 'CREATE ROLE nobody LOGIN');
($rc, $out, $err) = $al_worker->psql('postgres', qq{SET ROLE nobody;
	SELECT * FROM backfill.shard_checkpoint('x', 1, 0, $al_shard, NULL, 0, 'open')});
like($err, qr/permission denied for table al/,
	'a role that may not read the table keeps no checkpoint rows for its shards');
($rc, $out, $err) = $al_worker->psql('postgres', qq{SET ROLE nobody;
	SELECT * FROM backfill.shard_batch('x', 1, 0, $al_shard, 'public.al', 'id', NULL, 0, NULL, 10,
		'true', 'UPDATE al SET n = 7 WHERE id BETWEEN \$1 AND \$2', 'public', true, 1000)});
like($err, qr/permission denied for table al/,
	"a role's own shard_batch runs as itself: no batch without the privilege");
is(sq($coord, 'SELECT count(*) FROM al WHERE n = 7'), '0', 'and nothing was written');

# (k) what a batch reaches on a worker beside its shard is refused there (BF037):
# a domain's CHECK function that updates the table (no function in the action's
# text: planned per shard), and a "$user" schema another role created on a worker
$coord->safe_psql('postgres', q{
	UPDATE small SET n = 0;
	CREATE FUNCTION bumpr(r int8range) RETURNS boolean LANGUAGE sql
		AS 'UPDATE small SET n = n + 1 WHERE id <@ r RETURNING true';
	CREATE DOMAIN rdom AS int8range CHECK (bumpr(VALUE));
	SELECT backfill_declare('fill_dom', 'small', 'n = 0',
		'SELECT pg_catalog.int8range($1, $2, ''[]'')::rdom', batch_size => 500, rate => 100,
		max_attempts => 2, backoff_base => '10 ms', backoff_cap => '20 ms');
});
$run_id = sq($coord, q{SELECT backfill_run('fill_dom')});
is(wait_pass_end($coord, $run_id, $LONG), 'failed', 'a domain CHECK reaching the table: the pass failed');
like(sq($coord, "SELECT error_message FROM backfill.ledger WHERE run_id = $run_id"),
	qr/BF037.*reaches public\.small on this node/s, 'a domain CHECK reaching the table: BF037 says what it reached');
is(sq($coord, 'SELECT count(*) FROM small WHERE n <> 0'), '0',
	'a domain CHECK reaching the table: nothing was done (no row once per shard)');
$coord->safe_psql('postgres', q{
	CREATE ROLE carol LOGIN;
	CREATE TABLE cl (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	SELECT create_distributed_table('cl', 'id');
	INSERT INTO cl (id) SELECT g FROM generate_series(1, 2000) g;
	ALTER TABLE cl OWNER TO carol;
});
$coord->safe_psql('postgres', 'GRANT CREATE ON DATABASE postgres TO mallory');
for my $w (@workers)
{
	$w->safe_psql('postgres', q{SET citus.enable_ddl_propagation = off;
		SET ROLE mallory;
		CREATE SCHEMA carol;
		CREATE TABLE carol.cl (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO carol.cl SELECT g FROM generate_series(1, 2000) g;
		CREATE TRIGGER trap BEFORE UPDATE ON carol.cl FOR EACH ROW EXECUTE FUNCTION shared.trap();
		GRANT ALL ON SCHEMA carol TO PUBLIC;
		GRANT ALL ON carol.cl TO PUBLIC;});
}
$coord->safe_psql('postgres', q{SET ROLE carol;
	SELECT backfill_declare('fill_cl', 'cl', 'n = 0',
		'UPDATE cl SET n = n + 1 WHERE id BETWEEN $1 AND $2 AND n = 0', batch_size => 500,
		rate => 100, max_attempts => 2, backoff_base => '10 ms', backoff_cap => '20 ms')});
$run_id = sq($coord, q{SET ROLE carol; SELECT backfill_run('fill_cl')});
is(wait_pass_end($coord, $run_id, $LONG), 'failed', 'a "$user" schema squatted on the workers: the pass failed');
like(sq($coord, "SELECT error_message FROM backfill.ledger WHERE run_id = $run_id"),
	qr/BF037.*reaches carol\.cl on this node/s, 'a "$user" schema squatted: BF037 names the squatted table');
is(sq($al_worker, 'SELECT count(*) FROM shared.loot'), '0',
	"a \"\$user\" schema squatted: mallory's trigger never ran");

# (j) backfill_retry of a pass that failed shard by shard goes on from the
# nodes' checkpoint rows, shard by shard (it made whole-table partitions).
# The gate: a prepared transaction on worker 2 locks the first key of the first
# shard there that more than 300 rows come before (in the partitions' order,
# by shard id); the pass's one lane waits there until the worker is stopped.
$coord->safe_psql('postgres', 'UPDATE small SET n = 0');
$coord->safe_psql('postgres', q{
	SELECT backfill_declare('fill_retry', 'small', 'n = 0',
		'UPDATE small SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 20, max_attempts => 2, backoff_base => '10 ms',
		backoff_cap => '20 ms', lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false)});
my ($retry_gate, $before_gate) = (undef, 0);
for my $row (split /\n/, sq($coord, qq{
	SELECT s.shardid, d.nodeport, coalesce(c.n, 0)
	  FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
	  JOIN pg_dist_node d ON d.groupid = p.groupid
	  LEFT JOIN (SELECT get_shard_id_for_distribution_column('small', id) AS shardid, count(*) AS n
	               FROM small GROUP BY 1) c USING (shardid)
	 WHERE s.logicalrelid = 'small'::regclass ORDER BY s.shardid}))
{
	my ($sid, $port, $count) = split /\|/, $row;
	if ($port == $workers[1]->port && $before_gate > 300)
	{
		$retry_gate = $sid;
		last;
	}
	$before_gate += $count;
}
ok(defined $retry_gate, "retry: the gate's shard on worker 2 comes after $before_gate rows");
my $retry_key = sq($coord,
	"SELECT min(id) FROM small WHERE get_shard_id_for_distribution_column('small', id) = $retry_gate");
gate_close($workers[1], 'gate', "small_$retry_gate", "id = $retry_key");
$run_id = sq($coord, q{SELECT backfill_run('fill_retry')});
ok(gate_holds($workers[1], $LONG), 'retry: a batch waits on the gate on worker 2');
ok(poll_until($coord, "SELECT sum(rows) > 300 FROM backfill.partition WHERE run_id = $run_id", 't', $LONG),
	'retry: the pass is under way');
is(ledger($coord, $run_id, 'status'), 'running', 'retry: the pass runs when the worker is stopped');
$workers[1]->stop('immediate');
is(wait_pass_end($coord, $run_id, $LONG), 'failed', 'retry: the pass failed while a worker was down');
$workers[1]->start;
gate_open($workers[1], 'gate');
$coord->safe_psql('postgres', q{SELECT backfill_retry('fill_retry')});
my $retry = sq($coord, q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'fill_retry'});
isnt($retry, $run_id, 'retry: a new pass resumes the failed one');
is(wait_pass_end($coord, $retry, $LONG), 'completed', 'retry: the resumed pass completed');
is(sq($coord, 'SELECT count(*) FILTER (WHERE n = 1), count(*) FROM small'), '3000|3000',
	'retry: every row done exactly once across the two passes (the action does not repeat the predicate)');
is( sq($coord, "SELECT count(*) FROM backfill.partition WHERE run_id = $retry "
		  . "AND shard IS NOT NULL AND shard_run = $run_id"),
	sq($coord, "SELECT count(*) FROM backfill.partition WHERE run_id = $run_id"),
	"retry: each partition is the old one's shard, on the old run's checkpoint row");

$_->stop for ($coord, @workers);
done_testing();
