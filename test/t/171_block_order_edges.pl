# 171_block_order_edges.pl
#
# key => 'ctid' (issue 29 point 6), what a tester found:
#  (a) the heap rewritten (CLUSTER) during the walk and again during a
#      sweep: another row, never given to the action, lies at the probe
#      row's TID with its xmin (one bulk load, one xmin); the pass sweeps
#      again instead of ending STALLED, every row done once;
#  (b) a stream of application inserts (a trigger: each row of 1 in 40
#      the action fixes, and each row it inserts, inserts one more) keeps
#      the count from falling: the pass completes, the rows left recorded
#      as drift (beyond_bound), never BF006;
#  (c) the key scan reads a window of BLOCKS_WINDOW (4096) blocks at most:
#      a heap done but for its last blocks is walked in empty steps (0
#      rows) whose checkpoints move the cursor a window on;
#  (d) pg_class saying 1 row per page where there are about 45: the
#      batches still take batch_size rows, not batch_size pages;
#  (e) a table with inheritance children is refused (BF001); set =>
#      writes UPDATE ONLY, so a child added after the declaration is left
#      alone;
#  (f) a temporary table is refused at declaration (BF001), for any key.
# The walk's position when the test acts is made, not hoped for: a
# prepared transaction holds a row lock, the lane's batch waits there, the
# pass is paused there and the test acts once its lane has left.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('blocks_edges',
	extra_conf => "max_prepared_transactions = 10\n");
sq($node, 'CREATE EXTENSION pg_backfill');

my $wait_long = q{lock_timeout => '1 hour', batch_timeout => '1 hour'};

sub lane_waits
{
	return poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND wait_event_type = 'Lock'}, '1', 180);
}

sub lanes_left
{
	return poll_until($node, q{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'pg_backfill lane'}, '0', 120);
}

# hold the walk at row $tid, pause it there, let it go: its lane leaves at that batch's checkpoint
sub pause_at
{
	my ($name, $gid, $tid, $what) = @_;
	ok(lane_waits(), "$what: the walk waits at $tid");
	sq($node, qq{SELECT backfill_pause('$name')});
	gate_open($node, $gid);
	ok(lanes_left(), "$what: paused there, its lane left");
	return sq($node,
		qq{SELECT (cursor::tid::text::point)[0]::int FROM backfill_partitions('$name')});
}

# ------------------------------------------------------------------
# (a) CLUSTER during the walk and during the sweep: not a false STALLED
# ------------------------------------------------------------------
# 6,000 rows in one INSERT (one xmin), about 80 blocks.  CLUSTER over an
# index that puts the rows not done first moves them behind the walk: the
# walk misses them, a sweep takes them up, its probe is (0,1).  The sweep
# is held in the middle of those rows and the table clustered again: (0,1)
# then holds another row not done, of the same xmin.
sq($node, q{
	CREATE TABLE va (id int NOT NULL, c int, n int NOT NULL DEFAULT 0,
	                 pad text NOT NULL DEFAULT repeat('x', 60)) WITH (autovacuum_enabled = off);
	CREATE INDEX va_undone ON va ((c IS NOT NULL), id);
	INSERT INTO va (id) SELECT g FROM generate_series(1, 6000) g;
	ANALYZE va;});
my $xmin = sq($node, q{SELECT min(xmin::text) || '/' || max(xmin::text) FROM va});
my ($xmin_lo, $xmin_hi) = split m{/}, $xmin;
is($xmin_lo, $xmin_hi, '(a) every row has one xmin');
my $blocks_a = sq($node, q{SELECT pg_relation_size('va') / current_setting('block_size')::int});
my $mid = int($blocks_a / 2);
gate_close($node, 'ga1', 'va', "ctid = '($mid,1)'");
sq($node, qq{SELECT backfill_declare(name => 'va', relation => 'va', key => 'ctid',
	predicate => 'c IS NULL',
	action => 'UPDATE va SET c = 1, n = n + 1 WHERE ctid >= \$1 AND ctid < \$2 AND c IS NULL',
	batch_size => 300, max_parallel => 1, rate => 2000, $wait_long)});
my $run_a = sq($node, q{SELECT backfill_run('va')});
my $cursor = pause_at('va', 'ga1', "($mid,1)", '(a) the walk');
sq($node, q{CLUSTER va USING va_undone});
my $undone_blocks = sq($node, q{SELECT max((ctid::text::point)[0])::int + 1 FROM va WHERE c IS NULL});
ok($undone_blocks < $cursor,
	"(a) clustered: the $undone_blocks blocks of rows not done lie behind the walk (block $cursor)");
my $gate_b = int($undone_blocks / 2);
gate_close($node, 'ga2', 'va', "ctid = '($gate_b,1)' AND c IS NULL");
sq($node, q{SELECT backfill_resume('va')});
my $cursor2 = pause_at('va', 'ga2', "($gate_b,1)", '(a) the sweep');
is(sq($node, q{SELECT sweep FROM backfill_status('va')}), '1', '(a) it is sweep 1');
like(sq($node, qq{SELECT probe_key FROM backfill.run WHERE run_id = $run_a}),
	qr/^\(0,1\) xmin $xmin_lo /, "(a) its probe is row (0,1), xmin $xmin_lo");
sq($node, q{CLUSTER va USING va_undone});
is(sq($node, q{SELECT xmin || '|' || (c IS NULL) FROM va WHERE ctid = '(0,1)'}), "$xmin_lo|true",
	'(a) clustered again: (0,1) holds another row not done, of the same xmin');
ok(sq($node, q{SELECT max((ctid::text::point)[0])::int + 1 FROM va WHERE c IS NULL}) < $cursor2,
	'(a) and the rows not done lie behind the sweep');
sq($node, q{SELECT backfill_resume('va')});
is(wait_pass_end($node, $run_a, 180), 'completed', '(a) the pass completed, not stalled');
is(sq($node, q{SELECT sweep FROM backfill_status('va')}), '2', '(a) after a second sweep');
each_row_done_once($node, 'va', 6000, $run_a);

# ------------------------------------------------------------------
# (b) a stream of inserts while the pass sweeps: drift, not BF006
# ------------------------------------------------------------------
sq($node, q{
	CREATE TABLE vb (id int NOT NULL, c int, pad text NOT NULL DEFAULT repeat('x', 60));
	INSERT INTO vb (id) SELECT g FROM generate_series(1, 3000) g;
	CREATE FUNCTION vb_stream() RETURNS trigger LANGUAGE plpgsql
	  AS $$BEGIN INSERT INTO public.vb (id) VALUES (-1); RETURN NULL; END$$;
	CREATE TRIGGER vb_stream AFTER UPDATE ON vb FOR EACH ROW
	  WHEN (OLD.c IS NULL AND NEW.c IS NOT NULL AND (NEW.id % 40 = 0 OR NEW.id < 0))
	  EXECUTE FUNCTION vb_stream();
	ANALYZE vb;});
sq($node, q{SELECT backfill_declare(name => 'vb', relation => 'vb', key => 'ctid',
	predicate => 'c IS NULL', set => 'c = 1', batch_size => 500, rate => 5000)});
my $run_b = sq($node, q{SELECT backfill_run('vb')});
is(wait_pass_end($node, $run_b, 180), 'completed', '(b) the pass completed');
is(sq($node, q{SELECT sweep || '|' || beyond_bound FROM backfill_status('vb')}), '1|75',
	'(b) after one sweep that did not lower the count, the 75 rows left are drift');
is(sq($node, q{SELECT count(*) FROM vb WHERE c IS NULL AND id = -1}), '75',
	'(b) the rows left are the stream\'s');
like(slurp_file($node->logfile),
	qr/backfill "vb" run $run_b: 75 rows were written within its bound while it swept 1 times; they are left as drift/,
	'(b) the server log says so');

# ------------------------------------------------------------------
# (c) the key scan reads a window of blocks at most
# ------------------------------------------------------------------
# one row per page (8,300 pages), all done but the last 10
sq($node, q{
	CREATE UNLOGGED TABLE vc (id int NOT NULL, c int, pad text NOT NULL);
	ALTER TABLE vc ALTER pad SET STORAGE PLAIN;
	INSERT INTO vc SELECT g, CASE WHEN g > 8290 THEN NULL ELSE 1 END, repeat('x', 5000)
	  FROM generate_series(1, 8300) g;
	ANALYZE vc;});
is(sq($node, q{SELECT pg_relation_size('vc') / current_setting('block_size')::int}), '8300',
	'(c) 8,300 blocks, a row each');
sq($node, q{SELECT backfill_declare(name => 'vc', relation => 'vc', key => 'ctid',
	predicate => 'c IS NULL', set => 'c = 1', batch_size => 100, max_parallel => 1,
	rate => 1000)});
my $run_c = sq($node, q{SELECT backfill_run('vc')});
is(wait_pass_end($node, $run_c, 180), 'completed', '(c) the pass completed');
is(sq($node, qq{SELECT string_agg(coalesce(first_key, '-') || '..' || last_key || ':' || rows, ' '
	ORDER BY seq) FROM backfill.batch WHERE run_id = $run_c}),
	'-..(4096,0):0 -..(8192,0):0 (8290,0)..(8300,0):10',
	'(c) two empty steps of a window each, then the batch of the last rows');
is(ledger($node, $run_c, 'rows'), '10', '(c) the ledger counts 10 rows');

# ------------------------------------------------------------------
# (d) stale pg_class: 1 row per page said, about 45 there
# ------------------------------------------------------------------
sq($node, q{
	CREATE TABLE vd (id int NOT NULL, c int, pad text NOT NULL) WITH (autovacuum_enabled = off);
	ALTER TABLE vd ALTER pad SET STORAGE PLAIN;
	INSERT INTO vd SELECT g, 1, repeat('x', 5000) FROM generate_series(1, 300) g;
	ANALYZE vd;
	DELETE FROM vd;
	INSERT INTO vd SELECT g, NULL, repeat('x', 60) FROM generate_series(1, 20000) g;});
is(sq($node, q{SELECT round(reltuples / relpages) FROM pg_class WHERE relname = 'vd'}), '1',
	'(d) pg_class says 1 row per page');
my $per_page = sq($node,
	q{SELECT count(*) / count(DISTINCT (ctid::text::point)[0]) FROM vd});
ok($per_page > 40, "(d) there are more than 40 ($per_page)");
sq($node, q{SELECT backfill_declare(name => 'vd', relation => 'vd', key => 'ctid',
	predicate => 'c IS NULL', set => 'c = 1', batch_size => 1000, max_parallel => 1,
	rate => 100000)});
my $run_d = sq($node, q{SELECT backfill_run('vd')});
is(wait_pass_end($node, $run_d, 180), 'completed', '(d) the pass completed');
my $rows_d = sq($node, qq{SELECT max(rows) || '|' || count(*) FILTER (WHERE rows > 0)
	FROM backfill.batch WHERE run_id = $run_d});
my ($max_d, $batches_d) = split m{/|\|}, $rows_d;
ok($max_d <= 1100, "(d) a batch changed at most a page's rows beyond 1,000 ($max_d)");
ok($batches_d >= 19, "(d) the 20,000 rows took $batches_d batches");
is(ledger($node, $run_d, 'rows'), '20000', '(d) the ledger counts 20,000 rows');

# ------------------------------------------------------------------
# (e) inheritance: a parent with children refused; ONLY the table written
# ------------------------------------------------------------------
sub refused
{
	my ($sql, $code, $pattern, $what) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	like($err, qr/$code/, "$what: $code");
	like($err, $pattern, "$what: its message and hint");
	return;
}
sq($node, q{CREATE TABLE ve (id int, c int);
	CREATE TABLE ve_child () INHERITS (ve);});
refused(q{SELECT backfill_declare(name => 've', relation => 've', key => 'ctid',
	predicate => 'c IS NULL', set => 'c = 1')}, 'BF001',
	qr/cannot walk table public\.ve in block order: it has inheritance children.*HINT:  Declare each table/s,
	'(e) a parent with inheritance children');
sq($node, q{CREATE TABLE vf (id int, c int);
	INSERT INTO vf SELECT g, NULL FROM generate_series(1, 100) g;
	SELECT backfill_declare(name => 'vf', relation => 'vf', key => 'ctid',
	  predicate => 'c IS NULL', set => 'c = 1', batch_size => 50, rate => 1000);
	CREATE TABLE vf_child () INHERITS (vf);
	INSERT INTO vf_child SELECT g, NULL FROM generate_series(1, 100) g;});
like(sq($node, q{SELECT action FROM backfill.declaration WHERE name = 'vf'}), qr/^UPDATE ONLY /,
	'(e) set => writes UPDATE ONLY the table');
my $run_f = sq($node, q{SELECT backfill_run('vf')});
is(wait_pass_end($node, $run_f, 180), 'completed', '(e) the pass completed');
is(sq($node, q{SELECT count(*) FILTER (WHERE c = 1) || '/' || count(*) FROM ONLY vf}), '100/100',
	'(e) every row of the table done');
is(sq($node, q{SELECT count(*) FROM vf_child WHERE c IS NULL}), '100',
	'(e) no row of the child added later written');
is(sq($node, q{SELECT sweep || '|' || coalesce(beyond_bound, 0) FROM backfill_status('vf')}), '0|0',
	'(e) nor counted: no sweep, no drift');

# ------------------------------------------------------------------
# (f) a temporary table
# ------------------------------------------------------------------
for my $key (q{key => 'ctid'}, q{key => 'id'})
{
	refused(qq{CREATE TEMP TABLE vt (id int PRIMARY KEY, c int);
		SELECT backfill_declare(name => 'vt', relation => 'vt', $key,
		  predicate => 'c IS NULL', set => 'c = 1')}, 'BF001',
		qr/relation "vt" of backfill "vt" is a temporary table.*HINT:  Backfill a permanent/s,
		"(f) a temporary table, $key");
}

done_testing();
