# 170_block_order.pl
#
# key => 'ctid' (issue 29 point 6): a pass that walks the heap in block
# order, for a table whose physical order is far from its key order or that
# has no unique key at all.
#  (a) a shuffled table with no unique key (ids duplicated, inserted ORDER
#      BY random()), two lanes: every row done exactly once by a guarded
#      non-idempotent action (n = n + 1), the plan in block ranges, the
#      bound the heap's size in blocks; the statement set => writes is a
#      Tid Range Scan, also as a generic plan;
#  (b) kill -9 of the lane while its batch waits on a row lock in the
#      middle of the heap: the next lane resumes from the checkpoint, every
#      row still once;
#  (c) concurrent UPDATEs while the walk is held in the middle of the heap
#      move rows not yet done behind it (free space made in the first
#      blocks, the later pages full): the pass completes after a sweep, not
#      STALLED, every row done once;
#  (d) an action that does not fix its rows: STALLED, naming the probe row;
#      one that writes its rows anew, still matching (set => 'c = NULL'):
#      drift, as rows written while it sweeps are (171 (b));
#  (e) delete => true in block order;
#  (f) refusals: a partitioned table, a view, max_failed_rows, an
#      unguarded action, a revert, a pages source, a rehearsal.
# Where the walk stands when the test acts is made, not hoped for: a
# prepared transaction holds a row lock, the lane's batch waits there, and
# the test acts once it sees that wait.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('blocks', crash_restart => 1,
	extra_conf => "max_prepared_transactions = 10\n");
sq($node, 'CREATE EXTENSION pg_backfill');

my $wait_long = q{lock_timeout => '1 hour', batch_timeout => '1 hour'};

# $rows rows, no unique key (every id twice), in an order far from id's
sub make_shuffled
{
	my ($name, $rows) = @_;
	my $half = int($rows / 2);
	sq($node, qq{
		CREATE TABLE $name (id int NOT NULL, c int, n int NOT NULL DEFAULT 0,
		                    pad text NOT NULL DEFAULT repeat('x', 60));
		INSERT INTO $name (id) SELECT g % $half FROM generate_series(0, $rows - 1) g
		 ORDER BY random();
		ANALYZE $name;});
	return;
}

sub guarded_action
{
	my ($name) = @_;
	return "UPDATE $name SET c = 1, n = n + 1"
	  . " WHERE ctid >= \$1 AND ctid < \$2 AND c IS NULL";
}

sub lane_waits
{
	return poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND wait_event_type = 'Lock'}, '1', 180);
}

# ------------------------------------------------------------------
# (a) a shuffled table with no unique key, two lanes
# ------------------------------------------------------------------
make_shuffled('sa', 20000);
isnt(sq($node, q{SELECT corr(id, (ctid::text::point)[0]) > 0.5 FROM sa}), 't',
	'(a) the physical order is far from the key order');
sq($node, qq{SELECT backfill_declare(name => 'sa', relation => 'sa', key => 'ctid',
	predicate => 'c IS NULL', action => '${\ guarded_action('sa')}',
	batch_size => 500, max_parallel => 2, rate => 1000)});
my $pages = sq($node, q{SELECT pg_relation_size('sa') / current_setting('block_size')::int});
my $run_a = sq($node, q{SELECT backfill_run('sa')});
is(wait_pass_end($node, $run_a, 180), 'completed', '(a) the pass completed');
each_row_done_once($node, 'sa', 20000, $run_a);
like(sq($node, q{SELECT plan_method FROM backfill.run WHERE run_id = } . $run_a),
	qr/^blocks \($pages blocks in 8 ranges\)/, '(a) planned as 8 block ranges of the heap');
is(sq($node, q{SELECT bound FROM backfill_status('sa')}), "($pages,0)",
	'(a) bounded by the heap size in blocks when planned');
is(sq($node, q{SELECT count(*) FROM backfill_partitions('sa') WHERE state = 'done'}), '8',
	'(a) every block range done');

# set => writes the TID range; its plan is a Tid Range Scan, generic too
sq($node, q{SELECT backfill_declare(name => 'sa_set', relation => 'sa', key => 'ctid',
	predicate => 'c = 1', set => 'c = 2')});
my $action = sq($node, q{SELECT action FROM backfill.declaration WHERE name = 'sa_set'});
like($action, qr/WHERE ctid OPERATOR\(pg_catalog\.>=\) \$1 AND ctid OPERATOR\(pg_catalog\.<\) \$2\s+AND \(/,
	'(a) set => writes ctid >= $1 AND ctid < $2');
my $plan = sq($node, qq{SET plan_cache_mode = force_generic_plan;
	PREPARE a(tid, tid) AS $action;
	EXPLAIN (COSTS OFF) EXECUTE a('(0,0)', '(10,0)');});
like($plan, qr/Tid Range Scan on sa/, '(a) its generic plan is a Tid Range Scan');
sq($node, q{SELECT backfill_drop('sa_set')});

# ------------------------------------------------------------------
# (b) kill -9 of the lane mid-pass
# ------------------------------------------------------------------
make_shuffled('sb', 20000);
my $mid = int(sq($node, q{SELECT pg_relation_size('sb') / current_setting('block_size')::int}) / 2);
gate_close($node, 'gb', 'sb', "ctid = '($mid,1)'");
sq($node, qq{SELECT backfill_declare(name => 'sb', relation => 'sb', key => 'ctid',
	predicate => 'c IS NULL', action => '${\ guarded_action('sb')}',
	batch_size => 300, max_parallel => 1, rate => 1000, $wait_long)});
my $run_b = sq($node, q{SELECT backfill_run('sb')});
ok(lane_waits(), '(b) the lane waits at the middle of the heap');
ok(sq($node, q{SELECT sum(rows) FROM backfill_partitions('sb')}) > 0,
	'(b) batches before it are checkpointed');
my $lane = sq($node, q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'});
is(kill('KILL', $lane), 1, '(b) SIGKILL delivered to the lane');
ok(wait_for_server($node, 120), '(b) the server is back');
ok(lane_waits(), '(b) a new lane resumes and waits at the same row');
gate_open($node, 'gb');
is(wait_pass_end($node, $run_b, 180), 'completed', '(b) the pass completed');
ok(sq($node, qq{SELECT interruptions FROM backfill.run WHERE run_id = $run_b}) >= 1,
	'(b) the interruption is counted');
each_row_done_once($node, 'sb', 20000, $run_b);

# ------------------------------------------------------------------
# (c) concurrent updates move rows behind the walk: a sweep, not STALLED
# ------------------------------------------------------------------
# 3,000 rows done already at the head of the heap, then 20,000 shuffled; the
# walk is held in the middle (a row lock), paused there (it leaves at the
# checkpoint of that batch), then the head's rows are deleted and vacuumed
# into the free space map, and the application updates rows not yet done
# ahead of the walk: their pages are full, so the new versions go to the
# free space, behind the walk.  Nothing holds the xmin horizon meanwhile.
sq($node, q{
	CREATE TABLE sc (id int NOT NULL, c int, n int NOT NULL DEFAULT 0,
	                 pad text NOT NULL DEFAULT repeat('x', 60)) WITH (autovacuum_enabled = off);
	INSERT INTO sc (id, c) SELECT -g, 1 FROM generate_series(1, 3000) g;
	INSERT INTO sc (id) SELECT g % 10000 FROM generate_series(0, 19999) g ORDER BY random();
	ANALYZE sc;});
my $head = sq($node, q{SELECT max((ctid::text::point)[0])::int + 1 FROM sc WHERE id < 0});
my $blocks = sq($node, q{SELECT pg_relation_size('sc') / current_setting('block_size')::int});
my $gate_block = int(($head + $blocks) / 2);
gate_close($node, 'gc', 'sc', "ctid = '($gate_block,1)'");
sq($node, qq{SELECT backfill_declare(name => 'sc', relation => 'sc', key => 'ctid',
	predicate => 'c IS NULL', action => '${\ guarded_action('sc')}',
	batch_size => 300, max_parallel => 1, rate => 1000, $wait_long)});
my $run_c = sq($node, q{SELECT backfill_run('sc')});
ok(lane_waits(), '(c) the walk waits in the middle of the heap');
sq($node, q{SELECT backfill_pause('sc')});
gate_open($node, 'gc');
ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'pg_backfill lane'}, '0', 120), '(c) paused: its lane left');
my $cursor = sq($node, q{SELECT (cursor::tid::text::point)[0]::int FROM backfill_partitions('sc')});
ok($cursor > $gate_block, "(c) the walk's checkpoint is past the held row (block $cursor)");
sq($node, q{DELETE FROM sc WHERE id < 0});
sq($node, q{VACUUM sc});
my $moved = sq($node, qq{
	WITH u AS (UPDATE sc SET pad = pad || 'y'
	            WHERE ctid >= '($cursor,0)' AND c IS NULL AND id % 10 = 0 RETURNING ctid)
	SELECT count(*) FILTER (WHERE ctid < '($cursor,0)') || '/' || count(*) FROM u});
my ($behind, $updated) = split m{/}, $moved;
ok($updated > 0, "(c) the application updated $updated rows ahead of the walk");
ok($behind > 0, "(c) $behind of them now lie behind the walk");
sq($node, q{SELECT backfill_resume('sc')});
is(wait_pass_end($node, $run_c, 180), 'completed', '(c) the pass completed, not stalled');
ok(sq($node, q{SELECT sweep FROM backfill_status('sc')}) >= 1, '(c) after a sweep');
each_row_done_once($node, 'sc', 20000, $run_c);
like(slurp_file($node->logfile),
	qr/backfill "sc" run $run_c: \d+ rows match within its bound behind the lanes' cursors; sweep 1 from key \(\d+,\d+\) xmin \d+/,
	'(c) the server log names the sweep and its probe row');

# ------------------------------------------------------------------
# (d) an action that does not fix its rows: STALLED
# ------------------------------------------------------------------
make_shuffled('sd', 200);
sq($node, q{SELECT backfill_declare(name => 'sd', relation => 'sd', key => 'ctid',
	predicate => 'c IS NULL',
	action => 'UPDATE sd SET c = 1 WHERE ctid >= $1 AND ctid < $2 AND c IS NULL AND id < 0',
	batch_size => 50, rate => 1000)});
my $run_d = sq($node, q{SELECT backfill_run('sd')});
is(wait_pass_end($node, $run_d, 180), 'failed', '(d) the pass failed');
is(ledger($node, $run_d, 'error_code'), 'BF006', '(d) stalled: BF006');
like(ledger($node, $run_d, 'error_message'),
	qr/stalled: 200 rows still match the predicate/,
	'(d) the message says how many rows still match');
is(sq($node, q{SELECT sweep FROM backfill_status('sd')}), '1', '(d) after one sweep');

# an action that writes each row anew, still matching: every probe is a new
# version, so nothing tells it from rows written while the pass sweeps: the
# count does not fall, the pass completes with the rows as drift
make_shuffled('sd3', 200);
sq($node, q{SELECT backfill_declare(name => 'sd3', relation => 'sd3', key => 'ctid',
	predicate => 'c IS NULL', set => 'c = NULL', batch_size => 50, rate => 1000)});
my $run_d3 = sq($node, q{SELECT backfill_run('sd3')});
is(wait_pass_end($node, $run_d3, 180), 'completed', '(d) c = NULL: completed');
is(sq($node, q{SELECT sweep || '|' || beyond_bound FROM backfill_status('sd3')}), '1|200',
	'(d) c = NULL: after one sweep, its 200 rows recorded as drift');

# a hand-written action that leaves some rows alone: STALLED naming the probe row
make_shuffled('sd2', 200);
sq($node, q{SELECT backfill_declare(name => 'sd2', relation => 'sd2', key => 'ctid',
	predicate => 'c IS NULL',
	action => 'UPDATE sd2 SET c = 1 WHERE ctid >= $1 AND ctid < $2 AND c IS NULL AND id > 9',
	batch_size => 50, rate => 1000)});
my $run_d2 = sq($node, q{SELECT backfill_run('sd2')});
is(wait_pass_end($node, $run_d2, 180), 'failed', '(d) that pass failed');
like(ledger($node, $run_d2, 'error_code || error_message'),
	qr/^BF006.*stalled: 20 rows still match the predicate after sweep 1; the row of key \(\d+,\d+\) xmin \d+ was given to the action and still matches/,
	'(d) stalled, naming the probe row');

# ------------------------------------------------------------------
# (e) delete => true
# ------------------------------------------------------------------
make_shuffled('se', 4000);
sq($node, q{SELECT backfill_declare(name => 'se', relation => 'se', key => 'ctid',
	predicate => 'id % 4 = 0', delete => true, batch_size => 400, rate => 1000)});
my $run_e = sq($node, q{SELECT backfill_run('se')});
is(wait_pass_end($node, $run_e, 180), 'completed', '(e) the delete completed');
is(sq($node, q{SELECT count(*) FILTER (WHERE id % 4 = 0) || '/' || count(*) FROM se}), '0/3000',
	'(e) every matching row deleted, no other');
is(ledger($node, $run_e, 'rows'), '1000', '(e) the ledger counts 1,000 rows');

# ------------------------------------------------------------------
# (f) refusals
# ------------------------------------------------------------------
sub refused
{
	my ($sql, $code, $pattern, $what) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	like($err, qr/$code/, "(f) $what: $code");
	like($err, $pattern, "(f) $what: its message and hint");
	return;
}
sq($node, q{CREATE TABLE pt (id int, c int) PARTITION BY RANGE (id);
	CREATE TABLE pt1 PARTITION OF pt FOR VALUES FROM (0) TO (100);
	CREATE VIEW sv AS SELECT * FROM sa;});
refused(q{SELECT backfill_declare(name => 'f1', relation => 'pt', key => 'ctid',
	predicate => 'c IS NULL', set => 'c = 1')}, 'BF001',
	qr/cannot walk partitioned table .*HINT:  Declare one backfill with key => 'ctid' per leaf/s,
	'a partitioned table');
refused(q{SELECT backfill_declare(name => 'f2', relation => 'sv', key => 'ctid',
	predicate => 'c IS NULL', set => 'c = 1')}, 'BF001', qr/is not a table/, 'a view');
refused(q{SELECT backfill_declare(name => 'f7', relation => 'sa', key => 'ctid',
	predicate => 'c IS NULL', set => 'c = 1', revert => 'UPDATE sa SET c = NULL WHERE ctid >= $1 AND ctid < $2')},
	'BF011', qr/cannot have a revert.*HINT:  Declare the way back as a backfill of its own/s, 'a revert');
refused(q{SELECT backfill_declare(name => 'f3', relation => 'sa', key => 'ctid',
	predicate => 'c IS NULL', set => 'c = 1', max_failed_rows => 5)}, 'BF011',
	qr/cannot isolate rows that fail alone.*HINT:  Leave max_failed_rows out/s, 'max_failed_rows');
refused(q{SELECT backfill_declare(name => 'f4', relation => 'sa', key => 'ctid',
	predicate => 'c IS NULL', action => 'UPDATE sa SET c = 1 WHERE ctid >= $1 AND ctid < $2',
	guard => false)}, 'BF011', qr/its action is not guarded.*HINT:  Use set => or delete =>/s,
	'an unguarded action');
refused(q{SELECT backfill_declare(name => 'f5', pages => 'nope', key => 'ctid',
	action => 'SELECT 1')}, 'BF001', qr/names both a relation and a pages source/,
	'a pages source');
sq($node, q{SELECT backfill_declare(name => 'f6', relation => 'sa', key => 'ctid',
	predicate => 'c IS NULL', set => 'c = 1')});
refused(q{SELECT * FROM backfill_rehearse('f6')}, 'BF001',
	qr/walks its table in block order \(key => 'ctid'\), which is not rehearsed/, 'a rehearsal');

done_testing();
