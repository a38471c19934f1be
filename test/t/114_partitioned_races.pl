# 114_partitioned_races.pl
#
# A partitioned table planned per leaf, and the races of its end (issue 12,
# the attacker's findings).  RANGE leaves [0, 1000) and [2000, 3000), a
# non-idempotent action (n = n + 1) on the parent.
#
# 1. A leaf attached while the final count runs: the predicate of a row
#    already done waits on an advisory lock, which the test holds, so the
#    count is known to be running (its snapshot taken) when the leaf
#    [1000, 1100) is attached in the gap.  Without the look after the
#    count (pass.c leaves_unchanged_since_count) the pass completed with
#    the 100 rows of that leaf undone.  Must hold: the pass does not end
#    on that count, the leaf gets a partition of its own, every row of the
#    three leaves is done exactly once, and the ledger's finished_at is
#    after the count ended (it was the count transaction's start).
# 2. An ATTACH whose transaction stays open when the count ends (it holds
#    the parent's lock): the lane does not wait on it without bound nor
#    end the pass under it; it says so and counts again, and once the
#    ATTACH commits the pass covers that leaf too.
# 3. A table sub-partitioned by HASH and a plain leaf, attached in two gaps
#    during the count: both covered (the subtree by one partition over its
#    interval, its key scan a Merge Append of its hash leaves, no sort).
#    Without leaves_attached the subtree's HASH made the whole tree "not
#    per leaf" at the look, and neither was covered.
# 4. 400 interleaved LIST values of 5 rows (max_parallel 1) and 60 daily
#    RANGE leaves of 3 rows (max_parallel 2): neighbours with few rows
#    together share a partition (leaves_coalesce), so the plan has no more
#    partitions than a walk of the parent would, and few batches; without,
#    one partition and one batch per value or leaf.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('partitioned_races');

# has the server's log a line matching $re, within $timeout seconds?
sub log_shows
{
	my ($re, $timeout) = @_;
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		return 1 if slurp_file($node->logfile) =~ $re;
		sleep 1;
	}
	return 0;
}

$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	-- a row already done waits for the advisory lock 114 (the count only
	-- evaluates it on rows done: a key scan reads the rows still to do)
	CREATE FUNCTION todo(n int) RETURNS bool STABLE LANGUAGE plpgsql AS $$
	BEGIN
	    IF n <> 0 THEN
	        PERFORM pg_advisory_xact_lock_shared(114);
	        RETURN false;
	    END IF;
	    RETURN true;
	END $$;
	CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL DEFAULT 0) PARTITION BY RANGE (id);
	CREATE TABLE t0 PARTITION OF t FOR VALUES FROM (0) TO (1000);
	CREATE TABLE t2 PARTITION OF t FOR VALUES FROM (2000) TO (3000);
	INSERT INTO t (id) SELECT i FROM generate_series(0, 299) i
	                   UNION ALL SELECT 2000 + i FROM generate_series(0, 299) i;
	ANALYZE t;
	CREATE TABLE t1 (LIKE t INCLUDING DEFAULTS);
	ALTER TABLE t1 ADD PRIMARY KEY (id);
	INSERT INTO t1 (id) SELECT 1000 + i FROM generate_series(0, 99) i;
	CREATE TABLE t15 (LIKE t INCLUDING DEFAULTS);
	ALTER TABLE t15 ADD PRIMARY KEY (id);
	INSERT INTO t15 (id) SELECT 1500 + i FROM generate_series(0, 49) i;
	SELECT backfill_declare(name => 'races', relation => 't', predicate => 'todo(n)',
		action => 'UPDATE t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 50, guard => false);
});

# 1. the count holds on the advisory lock; the leaf is attached meanwhile
# (the sessions' timers restart with each query: they live the whole test)
my $holder = $node->background_psql('postgres');
$holder->set_query_timer_restart();
$holder->query_safe('SELECT pg_advisory_lock(114)');
my $run = $node->safe_psql('postgres', q{SELECT backfill_run('races')});
ok(poll_until($node, q{
	SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	 WHERE l.locktype = 'advisory' AND l.objid = 114 AND NOT l.granted
	   AND a.backend_type = 'pg_backfill lane'}, '1', 180),
	'the lane counts, and its count waits on the predicate of a row done');
is($node->safe_psql('postgres', q{SELECT phase FROM backfill_status('races')}), 'counting',
	'the pass is counting');
is($node->safe_psql('postgres', q{SELECT count(*) FROM t WHERE n <> 1}), '0',
	'the two planned leaves are done');
$node->safe_psql('postgres', q{ALTER TABLE t ATTACH PARTITION t1 FOR VALUES FROM (1000) TO (1100)});
my $released = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$holder->query_safe('SELECT pg_advisory_unlock(114)');

is(wait_pass_end($node, $run, 300), 'completed', 'the pass completed');
is($node->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE n = 1) || '/' || count(*) FROM t1}),
	'100/100', 'the leaf attached during the count was covered: each of its rows done once');
each_row_done_once($node, 't', 700, $run);
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill_partitions('races')
                                   WHERE leaf = 't1'::regclass AND state = 'done'}),
	'1', 'the attached leaf got a partition of its own');
is($node->safe_psql('postgres', qq{SELECT finished_at > '$released' FROM backfill.ledger
                                    WHERE run_id = $run}),
	't', "the ledger's finished_at is after the count it ended on (not its transaction's start)");
my $log = slurp_file($node->logfile);
like($log, qr/run $run: a partition of public\.t was attached while the pass was counted; counting again/,
	'the look after the count found the leaf');
like($log, qr/run $run: leaf public\.t1 was attached since the plan; partition \d+ covers it/,
	'and the leaf got its partition');

# 2. an ATTACH whose transaction is open when the count ends
$node->safe_psql('postgres', q{ALTER TABLE t DETACH PARTITION t1; UPDATE t SET n = 0; UPDATE t1 SET n = 0});
$holder->query_safe('SELECT pg_advisory_lock(114)');
my $run2 = $node->safe_psql('postgres', q{SELECT backfill_run('races', force => true)});
ok(poll_until($node, q{
	SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	 WHERE l.locktype = 'advisory' AND l.objid = 114 AND NOT l.granted
	   AND a.backend_type = 'pg_backfill lane'}, '1', 180),
	'the second pass counts');
my $attacher = $node->background_psql('postgres');
$attacher->set_query_timer_restart();
$attacher->query_safe('BEGIN');
$attacher->query_safe(q{ALTER TABLE t ATTACH PARTITION t15 FOR VALUES FROM (1500) TO (1600)});
$holder->query_safe('SELECT pg_advisory_unlock(114)');
ok(log_shows(qr/run $run2: the count did not end the pass: the leaves of public\.t are being changed/, 180),
	'the lane does not wait on the open ATTACH: it says so and counts again');
is($node->safe_psql('postgres', qq{SELECT status FROM backfill.ledger WHERE run_id = $run2}),
	'running', 'the pass did not end under the open ATTACH');
$attacher->query_safe('COMMIT');
is(wait_pass_end($node, $run2, 300), 'completed', 'the second pass completed once the ATTACH committed');
is($node->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE n = 1) || '/' || count(*) FROM t15}),
	'50/50', 'the leaf of the open ATTACH was covered: each of its rows done once');
each_row_done_once($node, 't', 650, $run2);

# 3. a table sub-partitioned by HASH attached in a gap, and a plain leaf in
# another, while the pass counts: the subtree is one piece for its whole
# interval (its own tree is not plannable leaf by leaf), and it keeps the
# plain leaf from being covered no more than the plain leaf keeps it
$node->safe_psql('postgres', q{
	UPDATE t SET n = 0;
	CREATE TABLE h (id int NOT NULL, n int NOT NULL DEFAULT 0, PRIMARY KEY (id)) PARTITION BY HASH (id);
	CREATE TABLE h0 PARTITION OF h FOR VALUES WITH (MODULUS 2, REMAINDER 0);
	CREATE TABLE h1 PARTITION OF h FOR VALUES WITH (MODULUS 2, REMAINDER 1);
	INSERT INTO h (id) SELECT 1200 + i FROM generate_series(0, 99) i;
	CREATE TABLE t16 (LIKE t INCLUDING DEFAULTS);
	ALTER TABLE t16 ADD PRIMARY KEY (id);
	INSERT INTO t16 (id) SELECT 1600 + i FROM generate_series(0, 39) i;
});
$holder->query_safe('SELECT pg_advisory_lock(114)');
my $run3 = $node->safe_psql('postgres', q{SELECT backfill_run('races', force => true)});
ok(poll_until($node, q{
	SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	 WHERE l.locktype = 'advisory' AND l.objid = 114 AND NOT l.granted
	   AND a.backend_type = 'pg_backfill lane'}, '1', 180),
	'the third pass counts');
$node->safe_psql('postgres', q{
	ALTER TABLE t ATTACH PARTITION h FOR VALUES FROM (1200) TO (1300);
	ALTER TABLE t ATTACH PARTITION t16 FOR VALUES FROM (1600) TO (1700);
});
$holder->query_safe('SELECT pg_advisory_unlock(114)');
is(wait_pass_end($node, $run3, 300), 'completed', 'the third pass completed');
is($node->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE n = 1) || '/' || count(*) FROM h}),
	'100/100', 'the HASH-sub-partitioned table attached in a gap was covered, each row once');
is($node->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE n = 1) || '/' || count(*) FROM t16}),
	'40/40', 'and the plain leaf attached beside it too');
each_row_done_once($node, 't', 790, $run3);
is($node->safe_psql('postgres', q{SELECT leaf::text || ' ' || leaf_range FROM backfill_partitions('races')
                                   WHERE leaf_range LIKE '[1200,%' OR leaf_range LIKE '[1600,%' ORDER BY 1}),
	"h [1200,1300)
t16 [1600,1700)", 'one partition for the whole subtree, one for the leaf');
# a leaf dropped since: backfill_partitions shows NULL, not its bare oid
$node->safe_psql('postgres', 'DROP TABLE t16');
is($node->safe_psql('postgres', q{SELECT coalesce(leaf::text, 'NULL') FROM backfill_partitions('races')
                                   WHERE leaf_range = '[1600,1700)'}),
	'NULL', "a dropped leaf's partition shows leaf NULL (its leaf_range stays)");

# the key scan as a lane plans it for a partitioned table (batch.c: no
# sort, no bitmap, no sequential scan while it is planned)
my $plan = $node->safe_psql('postgres', q{
	SET enable_sort = off; SET enable_bitmapscan = off; SET enable_seqscan = off;
	EXPLAIN (COSTS OFF) SELECT id FROM t WHERE id >= 1200 AND id < 1300 AND id > 1210
	                     ORDER BY id LIMIT 100});
like($plan, qr/Merge Append.*Index Only Scan using h0_pkey on h0.*Index Only Scan using h1_pkey on h1/s,
	"the subtree's key scan merges its hash leaves' indexes in key order");
unlike($plan, qr/->  Sort|Seq Scan|Bitmap|on t0|on t2|on t16/,
	'... no sort node, pruned to the subtree');

# 4. many small leaves and values: neighbours with few rows together share
# a partition (without: one partition, and at least one batch, per LIST
# value or leaf: 400 and 400 here)
$node->safe_psql('postgres', q{
	CREATE TABLE lv (tenant int, id int, n int NOT NULL DEFAULT 0, PRIMARY KEY (tenant, id))
	    PARTITION BY LIST (tenant);
	DO $$ BEGIN FOR r IN 0..3 LOOP
	    EXECUTE format('CREATE TABLE lv%s PARTITION OF lv FOR VALUES IN (%s)', r,
	                   (SELECT string_agg(x::text, ',') FROM generate_series(1, 400) x WHERE x % 4 = r));
	END LOOP; END $$;
	INSERT INTO lv (tenant, id) SELECT v, i FROM generate_series(1, 400) v, generate_series(1, 5) i;
	CREATE TABLE dv (day date, id int, n int NOT NULL DEFAULT 0, PRIMARY KEY (day, id))
	    PARTITION BY RANGE (day);
	DO $$ DECLARE d date; BEGIN
	    FOR d IN SELECT generate_series('2024-01-01'::date, '2024-02-29', '1 day') LOOP
	        EXECUTE format('CREATE TABLE dv%s PARTITION OF dv FOR VALUES FROM (%L) TO (%L)',
	                       to_char(d, 'YYYYMMDD'), d, d + 1);
	    END LOOP;
	END $$;
	INSERT INTO dv (day, id) SELECT d, i FROM generate_series('2024-01-01'::date, '2024-02-29', '1 day') d,
	                                       generate_series(1, 3) i;
	ANALYZE lv, dv;
	SELECT backfill_declare(name => 'lv', relation => 'lv', predicate => 'n = 0',
		action => 'UPDATE lv SET n = n + 1 WHERE (tenant, id) BETWEEN ($1, $2) AND ($3, $4)',
		batch_size => 1000, rate => 100, max_parallel => 1, guard => false);
	SELECT backfill_declare(name => 'dv', relation => 'dv', predicate => 'n = 0',
		action => 'UPDATE dv SET n = n + 1 WHERE (day, id) BETWEEN ($1, $2) AND ($3, $4)',
		batch_size => 20, rate => 100, max_parallel => 2, guard => false);
});
my $lv = $node->safe_psql('postgres', q{SELECT backfill_run('lv')});
is(wait_pass_end($node, $lv, 300), 'completed', '400 interleaved LIST values: the pass completed');
each_row_done_once($node, 'lv', 2000, $lv);
is($node->safe_psql('postgres', qq{SELECT count(*) FROM backfill.partition WHERE run_id = $lv}),
	'1', 'max_parallel 1: one partition, as a walk of the parent plans (not 400)');
cmp_ok(ledger($node, $lv, 'batches'), '<=', 3, '2000 rows in batches of 1000: at most 3 batches');
like($node->safe_psql('postgres', qq{SELECT plan_method FROM backfill.run WHERE run_id = $lv}),
	qr/^per leaf \(4 leaves, 400 intervals; small neighbours merged: 1 partition\)$/,
	'the plan method says the neighbours were merged');
my $dv = $node->safe_psql('postgres', q{SELECT backfill_run('dv')});
is(wait_pass_end($node, $dv, 300), 'completed', '60 daily leaves of 3 rows: the pass completed');
each_row_done_once($node, 'dv', 180, $dv);
cmp_ok($node->safe_psql('postgres', qq{SELECT count(*) FROM backfill.partition WHERE run_id = $dv}),
	'<=', 8, 'max_parallel 2: no more partitions than a walk of the parent plans (8), not 60');
cmp_ok($node->safe_psql('postgres', qq{SELECT count(*) FROM backfill.partition WHERE run_id = $dv}),
	'>=', 2, '... and more than one, for the two lanes');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM backfill.partition WHERE run_id = $dv
                                    AND leaf IS NULL AND leaf_range IS NOT NULL}),
	$node->safe_psql('postgres', qq{SELECT count(*) FROM backfill.partition WHERE run_id = $dv}),
	'each partition spans several leaves: leaf NULL, leaf_range their union');
cmp_ok(ledger($node, $dv, 'batches'), '<=', 20, '180 rows in batches of 20: not one batch per leaf');
my $union = $node->safe_psql('postgres', q{
	SET enable_sort = off; SET enable_bitmapscan = off; SET enable_seqscan = off;
	EXPLAIN (COSTS OFF) SELECT tenant, id FROM lv WHERE tenant >= 1 AND tenant <= 400
	                     AND (tenant, id) > (7, 2) AND n = 0 ORDER BY tenant, id LIMIT 1000});
like($union, qr/Merge Append/, "a union of interleaved LIST leaves is read by a Merge Append");
unlike($union, qr/->  Sort|Seq Scan|Bitmap/, '... of their indexes, no sort node');
my $days = $node->safe_psql('postgres', q{
	SET enable_sort = off; SET enable_bitmapscan = off; SET enable_seqscan = off;
	EXPLAIN (COSTS OFF) SELECT day, id FROM dv WHERE day >= '2024-01-01' AND day < '2024-01-15'
	                     AND n = 0 ORDER BY day, id LIMIT 20});
like($days, qr/Append/, 'a union of RANGE leaves is an Append of them');
unlike($days, qr/->  Sort|Seq Scan|Bitmap|dv20240115/, '... in key order, no sort node, pruned to the union');

$holder->quit;
$attacher->quit;
$node->stop;
done_testing();
