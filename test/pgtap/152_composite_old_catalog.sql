-- 152_composite_old_catalog: a composite-key declaration while the catalogs
-- are at 0.4 (the 0.5 library installed, ALTER EXTENSION ... UPDATE not yet
-- run).  The 0.4 declaration table has no key_columns: the library stored
-- the key's first column alone, and after the update every run failed
-- "42P02 there is no parameter $3", retried five times.  Now the library
-- works with its own catalog version only (issue 25): every declaration is
-- refused there (BF027, hint: ALTER EXTENSION pg_backfill UPDATE), a key of
-- one column too, and a declaration already stored that way (its
-- key_columns NULL, its key column not unique) fails its pass at once,
-- BF027, saying to declare it again, with no batch tried.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
\ir include/quiet_lanes.psql
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill VERSION '0.4';
CREATE EXTENSION IF NOT EXISTS pgtap;
RESET backfill.environment;

DROP TABLE IF EXISTS bf152_c, bf152_s CASCADE;
CREATE TABLE bf152_c (t int, id int, n int NOT NULL DEFAULT 0, PRIMARY KEY (t, id));
INSERT INTO bf152_c (t, id) SELECT t, i FROM generate_series(1, 3) t, generate_series(1, 10) i;
CREATE TABLE bf152_s (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
INSERT INTO bf152_s (id) SELECT generate_series(1, 10);

\ir include/bf_error.psql

SELECT * FROM no_plan();

SELECT results_eq(
    $$SELECT state, message LIKE '%bf152_c%version 0.4%',
             detail LIKE '%library is version 0.6%', hint LIKE '%ALTER EXTENSION pg_backfill UPDATE%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf152_c', relation => 'bf152_c',
               predicate => 'n = 0',
               action => 'UPDATE bf152_c SET n = n + 1 WHERE (t, id) BETWEEN ($1, $2) AND ($3, $4)')$q$)$$,
    $$VALUES ('BF027', true, true, true)$$,
    'under the 0.4 catalogs a composite-key declaration is refused (BF027), hint: ALTER EXTENSION ... UPDATE');
SELECT is((SELECT count(*) FROM backfill.declaration WHERE name = 'bf152_c'), 0::bigint,
    'nothing of it was stored');
SELECT results_eq(
    $$SELECT state FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf152_s', relation => 'bf152_s',
               predicate => 'n = 0',
               action => 'UPDATE bf152_s SET n = n + 1 WHERE id BETWEEN $1 AND $2 AND n = 0')$q$)$$,
    $$VALUES ('BF027')$$,
    'a key of one column is refused under the 0.4 catalogs too (BF027)');
SELECT is((SELECT count(*) FROM backfill.declaration), 0::bigint, 'nothing was declared');

ALTER EXTENSION pg_backfill UPDATE;
SELECT lives_ok($$SELECT backfill_declare(name => 'bf152_c', relation => 'bf152_c', predicate => 'n = 0',
                 action => 'UPDATE bf152_c SET n = n + 1 WHERE (t, id) BETWEEN ($1, $2) AND ($3, $4)', guard => false)$$,
    'after the update the composite-key declaration is accepted');

-- a declaration stored before the refusal existed: as the 0.4 catalogs kept it
UPDATE backfill.declaration SET key_columns = NULL, key_types = NULL WHERE name = 'bf152_c';
SELECT backfill_run('bf152_c', wait => false) AS r152 \gset
SELECT is(backfill_wait(:r152, '300 s'), 'failed', 'its pass fails');
SELECT results_eq(
    format($$SELECT error_code, error_message LIKE '%%bf152_c%%composite key%%(t, not unique)%%declare it again%%',
                    batches FROM backfill.ledger WHERE run_id = %s$$, :r152),
    $$VALUES ('BF027'::text, true, 0::bigint)$$,
    'at once, BF027, naming the fix (declare it again), no batch tried');
SELECT is((SELECT count(*) FROM bf152_c WHERE n <> 0), 0::bigint, 'no row was touched');
SELECT is((SELECT coalesce(sum(failures), 0) FROM backfill.partition WHERE run_id = :r152), 0::bigint,
    'no batch failed and was retried');

SELECT * FROM finish();
