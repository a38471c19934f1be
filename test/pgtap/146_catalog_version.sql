-- 146_catalog_version: a library newer than its catalogs (the package was
-- updated, ALTER EXTENSION ... UPDATE not yet run) declares and reports,
-- but refuses to start or steer a pass with BF027 and the way out, instead
-- of failing on a column the old catalogs lack; after the update it runs.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
\ir include/quiet_lanes.psql
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill VERSION '0.2';
CREATE EXTENSION IF NOT EXISTS pgtap;
RESET backfill.environment;

DROP TABLE IF EXISTS bf146_t CASCADE;
CREATE TABLE bf146_t (id int PRIMARY KEY, c int);
INSERT INTO bf146_t SELECT g, NULL FROM generate_series(1, 20) g;

\ir include/bf_error.psql

SELECT * FROM no_plan();

SELECT lives_ok($$SELECT backfill_declare('bf146_f', 'bf146_t', 'c IS NULL',
                 'UPDATE bf146_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'under the 0.2 catalogs the library still declares');
SELECT results_eq(
    $$SELECT state, message LIKE '%bf146_f%version 0.2%', hint LIKE '%ALTER EXTENSION pg_backfill UPDATE%'
        FROM pg_temp.bf_error('SELECT backfill_run(''bf146_f'')')$$,
    $$VALUES ('BF027', true, true)$$,
    'a run under the 0.2 catalogs is refused (BF027), naming the version, hint: ALTER EXTENSION ... UPDATE');
SELECT results_eq(
    $$SELECT state FROM pg_temp.bf_error('SELECT backfill_pause(''bf146_f'')')$$,
    $$VALUES ('BF027')$$,
    'a control under the 0.2 catalogs is refused (BF027) too');
SELECT is((SELECT count(*) FROM backfill.ledger), 0::bigint, 'nothing was written to the ledger');

ALTER EXTENSION pg_backfill UPDATE;
SELECT backfill_run('bf146_f', wait => false) AS r146 \gset
SELECT is(backfill_wait(:r146, '300 s'), 'completed',
          'after ALTER EXTENSION ... UPDATE the same backfill runs to completion');
SELECT is((SELECT count(*) FROM bf146_t WHERE c = 1), 20::bigint, 'and every row was done');

SELECT * FROM finish();
