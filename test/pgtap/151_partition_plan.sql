-- 151_partition_plan: a partitioned table planned per leaf (issue 12, item
-- 4).  RANGE on the leading key column: each leaf's partitions inside its
-- interval (leaf, leaf_range), the big leaf split into more of them; LIST
-- on the leading column: one interval per listed value; HASH and a DEFAULT
-- leaf: the walk of the parent, and the plan says why.  The declaring
-- role holds privileges on the parent only, never on a leaf, and a policy
-- of the parent's row-level security hides rows: the pass still plans
-- per leaf, does every row it may see once and no row the policy hides
-- (a leaf read directly would have failed, or shown those rows).  A retry
-- of a pass planned per leaf keeps each partition's leaf interval, the
-- partition of a row that failed alone too.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
\ir include/quiet_lanes.psql
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;
\ir include/poll.psql

DROP TABLE IF EXISTS bf151_range, bf151_list, bf151_hash, bf151_default, bf151_rls,
    bf151_retry CASCADE;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'bf151_parent') THEN
        CREATE ROLE bf151_parent LOGIN;
    END IF;
END $$;

-- four leaves with gaps between them; tenant 10 holds most of the rows
CREATE TABLE bf151_range (tenant_id int, id bigint, n int NOT NULL DEFAULT 0,
                          PRIMARY KEY (tenant_id, id)) PARTITION BY RANGE (tenant_id);
CREATE TABLE bf151_range_10 PARTITION OF bf151_range FOR VALUES FROM (10) TO (15);
CREATE TABLE bf151_range_20 PARTITION OF bf151_range FOR VALUES FROM (20) TO (25);
CREATE TABLE bf151_range_30 PARTITION OF bf151_range FOR VALUES FROM (30) TO (35);
CREATE TABLE bf151_range_40 PARTITION OF bf151_range FOR VALUES FROM (40) TO (45);
INSERT INTO bf151_range (tenant_id, id)
SELECT t, i * 3 FROM unnest(ARRAY[10, 20, 30, 40]) t,
       LATERAL generate_series(1, CASE WHEN t = 10 THEN 4000 ELSE 400 END) i;
-- a leaf of two values that are not neighbours, and one between them
CREATE TABLE bf151_list (tenant_id int, id int, n int NOT NULL DEFAULT 0,
                         PRIMARY KEY (tenant_id, id)) PARTITION BY LIST (tenant_id);
CREATE TABLE bf151_list_13 PARTITION OF bf151_list FOR VALUES IN (1, 3);
CREATE TABLE bf151_list_2 PARTITION OF bf151_list FOR VALUES IN (2);
CREATE TABLE bf151_list_45 PARTITION OF bf151_list FOR VALUES IN (4, 5);
INSERT INTO bf151_list (tenant_id, id) SELECT t, i FROM generate_series(1, 5) t, generate_series(1, 300) i;
CREATE TABLE bf151_hash (id int PRIMARY KEY, n int NOT NULL DEFAULT 0) PARTITION BY HASH (id);
CREATE TABLE bf151_hash_0 PARTITION OF bf151_hash FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE bf151_hash_1 PARTITION OF bf151_hash FOR VALUES WITH (MODULUS 2, REMAINDER 1);
INSERT INTO bf151_hash (id) SELECT generate_series(1, 600);
CREATE TABLE bf151_default (id int PRIMARY KEY, n int NOT NULL DEFAULT 0) PARTITION BY RANGE (id);
CREATE TABLE bf151_default_1 PARTITION OF bf151_default FOR VALUES FROM (0) TO (300);
CREATE TABLE bf151_default_d PARTITION OF bf151_default DEFAULT;
INSERT INTO bf151_default (id) SELECT generate_series(1, 600);
-- row-level security on the parent: the role sees tenant 20 only
CREATE TABLE bf151_rls (tenant_id int, id int, n int NOT NULL DEFAULT 0,
                        PRIMARY KEY (tenant_id, id)) PARTITION BY RANGE (tenant_id);
CREATE TABLE bf151_rls_10 PARTITION OF bf151_rls FOR VALUES FROM (10) TO (20);
CREATE TABLE bf151_rls_20 PARTITION OF bf151_rls FOR VALUES FROM (20) TO (30);
INSERT INTO bf151_rls (tenant_id, id) SELECT t, i FROM unnest(ARRAY[10, 20]) t, generate_series(1, 500) i;
ALTER TABLE bf151_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY bf151_tenant ON bf151_rls
    USING (tenant_id = pg_catalog.current_setting('app.tenant_id', true)::int);
-- the first row of the second leaf fails alone (its src is no integer)
CREATE TABLE bf151_retry (tenant_id int, id int, src text NOT NULL DEFAULT '1', v int,
                          n int NOT NULL DEFAULT 0, PRIMARY KEY (tenant_id, id))
    PARTITION BY RANGE (tenant_id);
CREATE TABLE bf151_retry_10 PARTITION OF bf151_retry FOR VALUES FROM (10) TO (15);
CREATE TABLE bf151_retry_20 PARTITION OF bf151_retry FOR VALUES FROM (20) TO (25);
CREATE TABLE bf151_retry_30 PARTITION OF bf151_retry FOR VALUES FROM (30) TO (35);
INSERT INTO bf151_retry (tenant_id, id) SELECT t, i FROM unnest(ARRAY[10, 20, 30]) t, generate_series(1, 200) i;
UPDATE bf151_retry SET src = 'x' WHERE (tenant_id, id) = (20, 1);
ANALYZE bf151_range, bf151_list, bf151_hash, bf151_default, bf151_rls, bf151_retry;
-- privileges on the parents only: no leaf is granted anything
GRANT SELECT, UPDATE ON bf151_range, bf151_list, bf151_hash, bf151_default, bf151_rls,
    bf151_retry TO bf151_parent;

SELECT * FROM no_plan();

SET ROLE bf151_parent;
SELECT lives_ok(format($$SELECT backfill_declare(name => %L, relation => %L, predicate => 'n = 0',
        action => %L, batch_size => 100, rate => 1000, max_parallel => 2 %s)$$,
        t, t, CASE WHEN t IN ('bf151_hash', 'bf151_default')
                   THEN format('UPDATE %I SET n = n + 1 WHERE id BETWEEN $1 AND $2 AND n = 0', t)
                   ELSE format('UPDATE %I SET n = n + 1 WHERE (tenant_id, id) BETWEEN ($1, $2) '
                               'AND ($3, $4) AND n = 0', t) END,
        CASE WHEN t = 'bf151_rls' THEN $$, settings => '{"app.tenant_id": "20"}'$$ ELSE '' END),
        t || ' declares as a role with privileges on the parent only')
  FROM unnest(ARRAY['bf151_range', 'bf151_list', 'bf151_hash', 'bf151_default', 'bf151_rls']) t;
SELECT ok(backfill_run(t) > 0, t || ' starts')
  FROM unnest(ARRAY['bf151_range', 'bf151_list', 'bf151_hash', 'bf151_default', 'bf151_rls']) t;
RESET ROLE;
SELECT ok(bf_test_poll(format($$SELECT status = 'completed' FROM backfill.ledger
                                 WHERE declaration = %L ORDER BY run_id DESC LIMIT 1$$, t), 300),
          t || ' completes')
  FROM unnest(ARRAY['bf151_range', 'bf151_list', 'bf151_hash', 'bf151_default', 'bf151_rls']) t;

CREATE FUNCTION pg_temp.method(name text) RETURNS text LANGUAGE sql AS $$
    SELECT r.plan_method FROM backfill.run r JOIN backfill.ledger l USING (run_id)
     WHERE l.declaration = name ORDER BY run_id DESC LIMIT 1 $$;

-- ---- RANGE on the leading key column
SELECT is(pg_temp.method('bf151_range'), 'per leaf (4 leaves)', 'range on tenant_id: planned per leaf');
SELECT results_eq($$SELECT leaf::text, leaf_range FROM backfill_partitions('bf151_range')
                     GROUP BY 1, 2 ORDER BY 1$$,
                  $$VALUES ('bf151_range_10', '[10,15)'), ('bf151_range_20', '[20,25)'),
                           ('bf151_range_30', '[30,35)'), ('bf151_range_40', '[40,45)')$$,
                  'every partition names its leaf and the leaf''s interval of tenant_id');
SELECT cmp_ok((SELECT count(*) FROM backfill_partitions('bf151_range') WHERE leaf = 'bf151_range_10'::regclass),
              '>=', 4::bigint, 'the leaf with most of the rows is split into several partitions');
SELECT is((SELECT count(*) FROM backfill_partitions('bf151_range') WHERE leaf <> 'bf151_range_10'::regclass),
          3::bigint, 'each small leaf is one partition');
SELECT is((SELECT count(*) FROM backfill_partitions('bf151_range') p
            WHERE (p.lo IS NOT NULL AND (p.lo::text LIKE '(' || substr(p.leaf::text, 13) || ',%') IS NOT TRUE)
               OR (p.hi IS NOT NULL AND (p.hi::text LIKE '(' || substr(p.leaf::text, 13) || ',%') IS NOT TRUE)),
          0::bigint, 'every bound lies inside its own leaf');
SELECT results_eq($$SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM bf151_range$$,
                  $$VALUES (5200::bigint, 0::bigint)$$,
                  'every row done exactly once, through the parent''s privileges alone');
SELECT is((SELECT rows FROM backfill.ledger WHERE declaration = 'bf151_range'), 5200::bigint,
          'the ledger counts the table''s rows');

-- ---- LIST on the leading key column: one interval per value
SELECT is(pg_temp.method('bf151_list'), 'per leaf (3 leaves, 4 intervals)',
          'list on tenant_id: planned per leaf and value, neighbouring values of a leaf one interval');
SELECT results_eq($$SELECT leaf::text, leaf_range FROM backfill_partitions('bf151_list')
                     GROUP BY 1, 2 ORDER BY 2$$,
                  $$VALUES ('bf151_list_13', '[1,1]'), ('bf151_list_2', '[2,2]'),
                           ('bf151_list_13', '[3,3]'), ('bf151_list_45', '[4,5]')$$,
                  'the leaf of 1 and 3 has an interval per value (the leaf of 2 lies between them), the leaf of 4 and 5 one');
SELECT is((SELECT count(*) FROM backfill_partitions('bf151_list') p
            WHERE p.leaf_range <> '[4,5]'
              AND ((p.lo IS NOT NULL AND p.lo NOT LIKE '(' || substr(p.leaf_range, 2, 1) || ',%')
                OR (p.hi IS NOT NULL AND p.hi NOT LIKE '(' || substr(p.leaf_range, 2, 1) || ',%'))),
          0::bigint, 'every bound of a value''s partitions is a key of that value');
SELECT is((SELECT count(*) FROM backfill_partitions('bf151_list') p
            WHERE p.leaf_range = '[4,5]'
              AND ((p.lo IS NOT NULL AND p.lo !~ '^\([45],') OR (p.hi IS NOT NULL AND p.hi !~ '^\([45],'))),
          0::bigint, 'the bounds of the leaf of 4 and 5 are its keys');
SELECT results_eq($$SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM bf151_list$$,
                  $$VALUES (1500::bigint, 0::bigint)$$, 'every row of the list leaves done exactly once');

-- ---- HASH and a DEFAULT leaf: the walk of the parent, and why
SELECT matches(pg_temp.method('bf151_hash'), '^parent walk: leaves interleave in key order \(hash\); ',
               'hash: the parent is walked, because its leaves interleave');
SELECT matches(pg_temp.method('bf151_default'), '^parent walk: a default partition ',
               'a default leaf: the parent is walked');
SELECT is((SELECT count(*) FROM backfill_partitions(t) WHERE leaf IS NOT NULL OR leaf_range IS NOT NULL),
          0::bigint, t || ': no partition keeps to a leaf')
  FROM unnest(ARRAY['bf151_hash', 'bf151_default']) t;
SELECT results_eq(format($$SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM %I$$, t),
                  $$VALUES (600::bigint, 0::bigint)$$, t || ': every row done exactly once')
  FROM unnest(ARRAY['bf151_hash', 'bf151_default']) t;

-- ---- the parent's row-level security holds for a plan per leaf
SELECT is(pg_temp.method('bf151_rls'), 'per leaf (2 leaves)', 'the table with a policy is planned per leaf');
SELECT results_eq($$SELECT tenant_id, count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n = 0)
                      FROM bf151_rls GROUP BY 1 ORDER BY 1$$,
                  $$VALUES (10, 0::bigint, 500::bigint), (20, 500::bigint, 0::bigint)$$,
                  'the rows the policy shows done once; the leaf of the hidden tenant untouched');

-- ---- a retry keeps the leaf intervals, the failed row's partition too
SET ROLE bf151_parent;
SELECT lives_ok($$SELECT backfill_declare(name => 'bf151_retry', relation => 'bf151_retry',
        predicate => 'v IS NULL',
        action => 'UPDATE bf151_retry SET v = src::int, n = n + 1
                    WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $4) AND v IS NULL',
        batch_size => 40, rate => 1000, max_parallel => 2, max_failed_rows => 1)$$,
        'bf151_retry declares, tolerating one row that fails alone');
SELECT backfill_run('bf151_retry') AS retry1 \gset
RESET ROLE;
SELECT ok(bf_test_poll(format('SELECT status <> %L FROM backfill.ledger WHERE run_id = %s',
                              'running', :retry1), 300), 'the pass with a failing row ends');
SELECT results_eq(format('SELECT l.status, r.plan_method FROM backfill.ledger l JOIN backfill.run r'
                         ' USING (run_id) WHERE run_id = %s', :retry1),
                  $$VALUES ('completed_with_failures'::text, 'per leaf (3 leaves)'::text)$$,
                  'planned per leaf, it ends completed_with_failures');
SELECT results_eq($$SELECT key, after_key FROM backfill.failed_row f JOIN backfill.ledger l USING (run_id)
                     WHERE l.declaration = 'bf151_retry'$$,
                  $$VALUES ('(20,1)'::text, NULL::text)$$,
                  'the first row of the second leaf failed alone: no cursor before it in its partition');
UPDATE bf151_retry SET src = '1' WHERE (tenant_id, id) = (20, 1);
SET ROLE bf151_parent;
SELECT is(backfill_retry('bf151_retry'), true, 'the retry starts a new pass');
RESET ROLE;
SELECT max(run_id) AS retry2 FROM backfill.ledger WHERE declaration = 'bf151_retry' \gset
SELECT is((SELECT count(*) FROM backfill.partition WHERE run_id = :retry2 AND leaf_range IS NULL),
          0::bigint, 'every partition of the retry keeps its leaf''s interval');
SELECT results_eq(format($$SELECT leaf::text, leaf_range, lo, hi FROM backfill.partition
                            WHERE run_id = %s AND hi = '(20,1)'$$, :retry2),
                  $$VALUES ('bf151_retry_20'::text, '[20,25)'::text, NULL::text, '(20,1)'::text)$$,
                  'the failed row''s partition (nothing before it, up to its key) keeps to its leaf');
SELECT ok(bf_test_poll(format('SELECT status <> %L FROM backfill.ledger WHERE run_id = %s',
                              'running', :retry2), 300), 'the retry ends');
SELECT results_eq(format('SELECT status, rows FROM backfill.ledger WHERE run_id = %s', :retry2),
                  $$VALUES ('completed'::text, 1::bigint)$$,
                  'the retry completes, doing exactly the recorded row');
SELECT results_eq($$SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM bf151_retry$$,
                  $$VALUES (600::bigint, 0::bigint)$$, 'every row of bf151_retry done exactly once');

SELECT * FROM finish();
DROP TABLE bf151_range, bf151_list, bf151_hash, bf151_default, bf151_rls, bf151_retry CASCADE;
