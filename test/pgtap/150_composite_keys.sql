-- 150_composite_keys: keys of two to four columns (issue 12).  Declared by
-- name or found as the primary key, of mixed types (text under a
-- non-default collation, timestamptz, numeric, uuid); stored as key_columns
-- and key_types beside the first column; every refusal is BF001 with a hint
-- that shows the form for this key; a pass walks the key in index order,
-- its bounds and cursors readable row literals; a scoped pass over one
-- tenant does only that tenant.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
\ir include/quiet_lanes.psql
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;
\ir include/poll.psql

DROP TABLE IF EXISTS bf150_t, bf150_mixed, bf150_five, bf150_nullable, bf150_partial,
    bf150_expr, bf150_order, bf150_noidx, bf150_coll, bf150_coll1 CASCADE;
CREATE TABLE bf150_t (tenant_id int, id bigint, n int NOT NULL DEFAULT 0, done boolean,
                      PRIMARY KEY (tenant_id, id));
-- gaps in id, tenants of very different sizes
INSERT INTO bf150_t (tenant_id, id)
SELECT t, i * 3 FROM generate_series(1, 4) t, generate_series(1, 1500) i WHERE i % t = 0;
ANALYZE bf150_t;
CREATE TABLE bf150_mixed (region text COLLATE "C" NOT NULL, at timestamptz NOT NULL,
                          amount numeric NOT NULL, u uuid NOT NULL, n int NOT NULL DEFAULT 0,
                          done boolean, PRIMARY KEY (region, at, amount, u));
INSERT INTO bf150_mixed (region, at, amount, u)
SELECT r, timestamptz '2024-01-01' + (i % 5) * interval '1 day', i % 3 + 0.25,
       md5(r || i)::uuid
  FROM unnest(ARRAY['a b', 'A', 'z,"q"', 'b(', 'Zed']) r, generate_series(1, 60) i;
CREATE TABLE bf150_five (a int, b int, c int, d int, e int, done boolean,
                         PRIMARY KEY (a, b, c, d, e));
CREATE TABLE bf150_nullable (a int NOT NULL, b int, done boolean);
CREATE UNIQUE INDEX ON bf150_nullable (a, b);
CREATE TABLE bf150_partial (a int NOT NULL, b int NOT NULL, done boolean);
CREATE UNIQUE INDEX ON bf150_partial (a, b) WHERE a > 0;
CREATE TABLE bf150_expr (a int NOT NULL, email text NOT NULL, done boolean);
CREATE UNIQUE INDEX ON bf150_expr (a, lower(email));
CREATE TABLE bf150_order (a int NOT NULL, b int NOT NULL, done boolean);
CREATE UNIQUE INDEX ON bf150_order (b, a);
CREATE TABLE bf150_noidx (a int NOT NULL, b int NOT NULL, done boolean);
CREATE TABLE bf150_coll (a text NOT NULL, b int NOT NULL, done boolean);
CREATE UNIQUE INDEX ON bf150_coll (a COLLATE "C", b);
-- a key of one column whose only unique index orders it under another collation (attack s34 D3:
-- partitions bounded in the index's order, batches walking the column's, rows done twice)
CREATE TABLE bf150_coll1 (k text COLLATE "POSIX" NOT NULL, done boolean);
CREATE UNIQUE INDEX ON bf150_coll1 (k COLLATE "C");

\ir include/bf_error.psql

SELECT * FROM no_plan();

-- ---- declarations of 2, 3 and 4 columns
SELECT lives_ok($$SELECT backfill_declare('bf150_pk', 'bf150_t', 'done IS NULL',
    'UPDATE bf150_t SET n = n + 1, done = true
      WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $4) AND done IS NULL',
    batch_size => 200, rate => 200, max_parallel => 2)$$,
    'the primary key (tenant_id, id) is found by default');
SELECT results_eq(
    $$SELECT key_column::text COLLATE "default", key_type::text, key_columns::text, key_types::text
        FROM backfill.declaration WHERE name = 'bf150_pk'$$,
    $$VALUES ('tenant_id', 'integer', '{tenant_id,id}', '{integer,bigint}')$$,
    'a composite key is stored in index order with its types; key_column keeps the first');
SELECT lives_ok($$SELECT backfill_declare('bf150_named', 'bf150_t', 'done IS NULL',
    'UPDATE bf150_t SET n = n + 1 WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $4)',
    key => 'tenant_id, id', guard => false)$$,
    'key => ''tenant_id, id'' names the same key');
SELECT lives_ok($$SELECT backfill_declare('bf150_mixed', 'bf150_mixed', 'done IS NULL',
    'UPDATE bf150_mixed SET n = n + 1, done = true
      WHERE (region, at, amount, u) BETWEEN ($1, $2, $3, $4) AND ($5, $6, $7, $8) AND done IS NULL',
    batch_size => 40, rate => 200, max_parallel => 2)$$,
    'a key of 4 columns: text COLLATE "C", timestamptz, numeric, uuid');
SELECT results_eq(
    $$SELECT key_columns::text, key_types::text FROM backfill.declaration WHERE name = 'bf150_mixed'$$,
    $$VALUES ('{region,at,amount,u}', '{text,"timestamp with time zone",numeric,uuid}')$$,
    'the four columns and their types');
CREATE TABLE bf150_three (a int NOT NULL, b text NOT NULL, c date NOT NULL, done boolean,
                          UNIQUE (a, b, c));
SELECT lives_ok($$SELECT backfill_declare('bf150_three', 'bf150_three', 'done IS NULL',
    'UPDATE bf150_three SET done = true WHERE (a, b, c) BETWEEN ($1, $2, $3) AND ($4, $5, $6) AND (done IS NULL)',
    key => 'a, b, c')$$,
    'a key of 3 columns served by a UNIQUE constraint');

-- a single-column key still reads as it did: no arrays
CREATE TABLE bf150_single (id int PRIMARY KEY, done boolean);
SELECT backfill_declare('bf150_single', 'bf150_single', 'done IS NULL',
    'UPDATE bf150_single SET done = true WHERE id BETWEEN $1 AND $2 AND (done IS NULL)');
SELECT results_eq(
    $$SELECT key_column::text COLLATE "default", key_columns IS NULL, key_types IS NULL
        FROM backfill.declaration WHERE name = 'bf150_single'$$,
    $$VALUES ('id', true, true)$$,
    'a key of one column leaves key_columns and key_types NULL');

-- ---- refusals: BF001, a message naming the backfill, a detail, a hint with the form
SELECT results_eq(
    $$SELECT state, message LIKE '%"bf150_r5"%5 columns%at most 4%', hint LIKE '%key => ''a, b, c, d''%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_r5', 'bf150_five', 'done IS NULL',
             'UPDATE bf150_five SET done = true WHERE (done IS NULL)')$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'a primary key of 5 columns: BF001, the hint names at most four');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bf150_r5n"%5 columns%', coalesce(hint, '') <> ''
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_r5n', 'bf150_five', 'done IS NULL',
             'UPDATE bf150_five SET done = true WHERE (done IS NULL)', key => 'a, b, c, d, e')$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'a named key of 5 columns: BF001');
SELECT results_eq(
    $$SELECT state, message LIKE '%"b"%"bf150_rnull"%may be NULL%',
             hint LIKE '%ALTER TABLE%bf150_nullable ALTER COLUMN b SET NOT NULL%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_rnull', 'bf150_nullable', 'done IS NULL',
             'UPDATE bf150_nullable SET done = true WHERE (a, b) BETWEEN ($1, $2) AND ($3, $4) AND (done IS NULL)',
             key => 'a, b')$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'a nullable key column: BF001, the hint sets it NOT NULL');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bf150_rpart"%partial%', detail LIKE '%WHERE clause%',
             hint LIKE '%CREATE UNIQUE INDEX ON %bf150_partial (a, b)%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_rpart', 'bf150_partial', 'done IS NULL',
             'UPDATE bf150_partial SET done = true WHERE (a, b) BETWEEN ($1, $2) AND ($3, $4) AND (done IS NULL)',
             key => 'a, b')$q$)$$,
    $$VALUES ('BF001', true, true, true)$$,
    'a partial unique index: BF001, the hint creates a whole one');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bf150_rexpr"%expression index%',
             hint LIKE '%CREATE UNIQUE INDEX ON %bf150_expr (a, email)%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_rexpr', 'bf150_expr', 'done IS NULL',
             'UPDATE bf150_expr SET done = true WHERE (a, email) BETWEEN ($1, $2) AND ($3, $4) AND (done IS NULL)',
             key => 'a, email')$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'only an expression index: BF001, the hint creates one on the columns');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bf150_rexpr2"%not a list of columns%',
             hint LIKE '%key => ''tenant_id, id''%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_rexpr2', 'bf150_expr', 'done IS NULL',
             'UPDATE bf150_expr SET done = true WHERE (done IS NULL)', key => 'a, lower(email)')$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'a key that names an expression: BF001');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bf150_rorder"%order%', hint LIKE '%key => ''b, a''%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_rorder', 'bf150_order', 'done IS NULL',
             'UPDATE bf150_order SET done = true WHERE (a, b) BETWEEN ($1, $2) AND ($3, $4) AND (done IS NULL)',
             key => 'a, b')$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'columns named out of the index''s order: BF001, the hint gives the order');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bf150_rnoidx"%no unique index%',
             hint LIKE '%CREATE UNIQUE INDEX ON %bf150_noidx (a, b)%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_rnoidx', 'bf150_noidx', 'done IS NULL',
             'UPDATE bf150_noidx SET done = true WHERE (a, b) BETWEEN ($1, $2) AND ($3, $4) AND (done IS NULL)',
             key => 'a, b')$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'no unique index on the columns: BF001, the hint creates it');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bf150_rcoll"%collation%', coalesce(hint, '') <> ''
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_rcoll', 'bf150_coll', 'done IS NULL',
             'UPDATE bf150_coll SET done = true WHERE (a, b) BETWEEN ($1, $2) AND ($3, $4) AND (done IS NULL)',
             key => 'a, b')$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'an index under another collation than its column: BF001');
SELECT results_eq(
    $$SELECT message LIKE '%"bf150_rcoll1"%another collation%', hint LIKE '%CREATE UNIQUE INDEX ON %bf150_coll1 (k)%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf150_rcoll1', relation => 'bf150_coll1',
             key => 'k', predicate => 'done IS NULL', set => 'done = true')$q$)$$,
    $$VALUES (true, true)$$,
    'a key of one column whose unique index has another collation: refused, the hint creates the index');
CREATE UNIQUE INDEX ON bf150_coll1 (k);
SELECT lives_ok(
    $$SELECT backfill_declare(name => 'bf150_okcoll1', relation => 'bf150_coll1', key => 'k',
          predicate => 'done IS NULL', set => 'done = true')$$,
    'with a unique index under the column''s own collation beside it, the key is accepted');
-- parameters that do not fit the key
SELECT results_eq(
    $$SELECT state, message LIKE '%"bf150_rp12"%does not use $3%', detail LIKE '%$1, $2%$3, $4%',
             hint = 'Write the range as WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $4).'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_rp12', 'bf150_t', 'done IS NULL',
             'UPDATE bf150_t SET done = true WHERE id BETWEEN $1 AND $2 AND (done IS NULL)')$q$)$$,
    $$VALUES ('BF001', true, true, true)$$,
    'an action written for a key of one column ($1, $2): BF001, the hint shows the form');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bf150_rp5"%', detail LIKE '%no parameter $5%',
             hint LIKE '%WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $4)%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_rp5', 'bf150_t', 'done IS NULL',
             'UPDATE bf150_t SET done = true WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $5) AND (done IS NULL)')$q$)$$,
    $$VALUES ('BF001', true, true, true)$$,
    'an action that uses $5 with a key of 2 columns: BF001, the hint shows the form');
SELECT results_eq(
    $$SELECT state, hint LIKE '%WHERE (region, at, amount, u) BETWEEN ($1, $2, $3, $4) AND ($5, $6, $7, $8)%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_rp4', 'bf150_mixed', 'done IS NULL',
             'UPDATE bf150_mixed SET done = true WHERE (region, at) BETWEEN ($1, $2) AND ($5, $6) AND (done IS NULL)')$q$)$$,
    $$VALUES ('BF001', true)$$,
    'a key of 4 columns: the hint shows $1..$4 and $5..$8');
SELECT results_eq(
    $$SELECT state, detail LIKE '%is of type bigint%' OR detail LIKE '%operator does not exist%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_rtype', 'bf150_t', 'done IS NULL',
             'UPDATE bf150_t SET done = true WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $4) AND $2 = ''x''::text AND (done IS NULL)')$q$)$$,
    $$VALUES ('BF001', true)$$,
    'the parameters are typed as the key''s columns ($2 is bigint)');
SELECT is((SELECT count(*) FROM backfill.declaration WHERE name LIKE 'bf150_r%'), 0::bigint,
          'nothing refused was stored');

-- ---- a pass: every row once, bounds and cursors as row literals
SELECT ok(backfill_run('bf150_pk') > 0, 'the composite pass starts');
SELECT ok(bf_test_poll($$SELECT status = 'completed' FROM backfill.ledger
                          WHERE declaration = 'bf150_pk' ORDER BY run_id DESC LIMIT 1$$, 300),
          'the composite pass completes');
SELECT results_eq($$SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM bf150_t$$,
                  $$VALUES ((SELECT count(*) FROM bf150_t), 0::bigint)$$,
                  'every row was done exactly once');
SELECT is((SELECT rows FROM backfill.ledger WHERE declaration = 'bf150_pk'),
          (SELECT count(*) FROM bf150_t), 'the ledger counts the table''s rows');
SELECT ok((SELECT count(*) > 1 FROM backfill_partitions('bf150_pk')), 'the plan has several partitions');
SELECT is((SELECT plan_method FROM backfill.run r JOIN backfill.ledger l USING (run_id)
            WHERE l.declaration = 'bf150_pk'), 'few_values',
          'four tenants: the leading column has few values, the big tenant split by id');
-- each cursor is the row literal record_out writes for a row of the table
SELECT is((SELECT count(*) FROM backfill_partitions('bf150_pk') p
            WHERE p.cursor IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM bf150_t t WHERE ROW(t.tenant_id, t.id)::text = p.cursor)),
          0::bigint, 'every cursor is a key of the table as a row literal, "(tenant_id,id)"');
SELECT is((SELECT count(*) FROM backfill_partitions('bf150_pk') p
            WHERE p.hi IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM bf150_t t WHERE ROW(t.tenant_id, t.id)::text = p.hi)),
          0::bigint, 'every bound is a key of the table as a row literal');
SELECT is((SELECT cursor FROM backfill_partitions('bf150_pk') ORDER BY part_no DESC LIMIT 1),
          (SELECT ROW(tenant_id, id)::text FROM bf150_t ORDER BY tenant_id DESC, id DESC LIMIT 1),
          'the last partition''s cursor is the last key');

-- four columns, text in "C" order with characters record_out quotes
SELECT ok(backfill_run('bf150_mixed') > 0, 'the pass over the 4-column key starts');
SELECT ok(bf_test_poll($$SELECT status = 'completed' FROM backfill.ledger
                          WHERE declaration = 'bf150_mixed' ORDER BY run_id DESC LIMIT 1$$, 300),
          'the pass over the 4-column key completes');
SELECT results_eq($$SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM bf150_mixed$$,
                  $$VALUES ((SELECT count(*) FROM bf150_mixed), 0::bigint)$$,
                  'every row of the 4-column key done exactly once');
SELECT is((SELECT count(*) FROM backfill_partitions('bf150_mixed') p
            WHERE p.cursor IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM bf150_mixed t
                               WHERE ROW(t.region, t.at, t.amount, t.u)::text = p.cursor)),
          0::bigint, 'cursors of text with quotes, commas, blanks, parentheses read as record_out writes them');
SELECT is((SELECT cursor FROM backfill_partitions('bf150_mixed') ORDER BY part_no DESC LIMIT 1),
          (SELECT ROW(region, at, amount, u)::text FROM bf150_mixed
            ORDER BY region COLLATE "C" DESC, at DESC, amount DESC, u DESC LIMIT 1),
          'the walk ends at the last key in the index''s "C" order');

-- ---- a scoped pass over one tenant: only its rows
CREATE TABLE bf150_scoped (tenant_id int, id int, n int NOT NULL DEFAULT 0, done boolean,
                           PRIMARY KEY (tenant_id, id));
INSERT INTO bf150_scoped (tenant_id, id) SELECT t, i FROM generate_series(1, 3) t, generate_series(1, 400) i;
SELECT lives_ok($$SELECT backfill_declare('bf150_scope', 'bf150_scoped',
    'tenant_id = (backfill_input()->>''tenant'')::int AND done IS NULL',
    'UPDATE bf150_scoped SET n = n + 1, done = true
      WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $4) AND done IS NULL',
    input => '{"tenant": "integer"}', scope => 'input->>''tenant''', batch_size => 50, rate => 200, guard => false)$$,
    'a scoped backfill over a composite key declares');
SELECT ok(backfill_run('bf150_scope', input => '{"tenant": 2}') > 0, 'the pass for tenant 2 starts');
SELECT ok(bf_test_poll($$SELECT status = 'completed' FROM backfill.ledger
                          WHERE ledger_name = 'bf150_scope:2' ORDER BY run_id DESC LIMIT 1$$, 300),
          'the pass for tenant 2 completes');
SELECT results_eq($$SELECT tenant_id, sum(n)::int FROM bf150_scoped GROUP BY 1 ORDER BY 1$$,
                  $$VALUES (1, 0), (2, 400), (3, 0)$$,
                  'tenant 2''s rows once each, no other tenant''s');

-- keys whose text depends on search_path (object identifier types) are refused
CREATE TABLE bf150_regkey (r regclass PRIMARY KEY, n int NOT NULL DEFAULT 0);
CREATE TABLE bf150_regkey2 (a int, t regtype, n int NOT NULL DEFAULT 0, PRIMARY KEY (a, t));
SELECT results_eq(
    $$SELECT state, message LIKE '%"bf150_reg"%regclass%search_path%', hint LIKE '%another type%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_reg', 'bf150_regkey', 'n = 0',
             'UPDATE bf150_regkey SET n = n + 1 WHERE r BETWEEN $1 AND $2', guard => false)$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'a regclass key: BF001, its text depends on search_path');
SELECT results_eq(
    $$SELECT state, message LIKE '%"t"%"bf150_reg2"%regtype%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf150_reg2', 'bf150_regkey2', 'n = 0',
             'UPDATE bf150_regkey2 SET n = n + 1 WHERE (a, t) BETWEEN ($1, $2) AND ($3, $4)', guard => false)$q$)$$,
    $$VALUES ('BF001', true)$$,
    'a composite key with a regtype column: BF001 naming the column');

SELECT * FROM finish();
DROP TABLE bf150_t, bf150_mixed, bf150_five, bf150_nullable, bf150_partial, bf150_expr,
    bf150_order, bf150_noidx, bf150_coll, bf150_three, bf150_single, bf150_scoped CASCADE;
