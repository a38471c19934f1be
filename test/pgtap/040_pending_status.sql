-- 040_pending_status: backfill_pending() states and backfill_status(name).
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf040_done, bf040_stall, bf040_orphan, bf040_never CASCADE;
CREATE TABLE bf040_done (id int PRIMARY KEY, a int NOT NULL, c int);
INSERT INTO bf040_done SELECT g, g, NULL FROM generate_series(1, 1000) g;
CREATE TABLE bf040_stall (id int PRIMARY KEY, a int NOT NULL, c int);
INSERT INTO bf040_stall SELECT g, g, NULL FROM generate_series(1, 1000) g;
CREATE TABLE bf040_orphan (id int PRIMARY KEY, a int NOT NULL, c int);
INSERT INTO bf040_orphan SELECT g, g, NULL FROM generate_series(1, 100) g;
CREATE TABLE bf040_never (id int PRIMARY KEY, a int NOT NULL, c int);
ANALYZE bf040_done, bf040_stall, bf040_orphan, bf040_never;
RESET backfill.environment;

SELECT * FROM no_plan();

-- never run: pending
SELECT backfill_declare('bf040_never', 'bf040_never', 'c IS NULL',
    'UPDATE bf040_never SET c = a WHERE id BETWEEN $1 AND $2 AND (c IS NULL)') AS never_checksum \gset
SELECT results_eq(
    $$SELECT state, checksum, completed_checksum, changed, last_run_id, last_completed_run_id
        FROM backfill_pending() WHERE name = 'bf040_never'$$,
    format($$VALUES ('pending', %L, NULL::text, false, NULL::bigint, NULL::bigint)$$, :'never_checksum'),
    'a never-run declaration is pending');
SELECT results_eq(
    $$SELECT name, run_id, status, rows, batches FROM backfill_status('bf040_never')$$,
    $$VALUES ('bf040_never', NULL::bigint, 'never run', 0::bigint, 0::bigint)$$,
    'backfill_status of a never-run declaration says never run');
SELECT is_empty($$SELECT * FROM backfill_status('bf040_no_such')$$,
                'backfill_status of an unknown name returns no row');

-- completed
SELECT backfill_declare('bf040_done', 'bf040_done', 'c IS NULL',
    'UPDATE bf040_done SET c = a * 2 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 100, rate => 1000) AS done_checksum \gset
SELECT backfill_run('bf040_done') AS done_run \gset
SELECT is(backfill_wait(:done_run, '300 s'), 'completed', 'the pass completes');
SELECT results_eq(
    $$SELECT state, checksum, completed_checksum, changed, last_run_id, last_completed_run_id, rows
        FROM backfill_pending() WHERE name = 'bf040_done'$$,
    format($$VALUES ('completed', %1$L, %1$L, false, %2$s::bigint, %2$s::bigint, 1000::bigint)$$,
           :'done_checksum', :done_run),
    'after a completed pass: completed, not changed, completed_checksum = checksum');
SELECT results_eq(
    $$SELECT name, run_id, status, rows, batches, rows_per_sec > 0, progress,
             started_at IS NOT NULL, finished_at IS NOT NULL, finished_at >= started_at,
             last_error
        FROM backfill_status('bf040_done')$$,
    format($$VALUES ('bf040_done', %s::bigint, 'completed', 1000::bigint, 10::bigint, true,
                     1::float8, true, true, true, NULL::text)$$, :done_run),
    'backfill_status after completion: rows, batches, rows/s, progress 1, timestamps');
SELECT is((SELECT rows FROM backfill_status('bf040_done')),
          (SELECT count(*) FROM bf040_done WHERE c = a * 2),
          'backfill_status rows equals the rows rewritten');

-- changed: re-declared with another action while idle
SELECT backfill_declare('bf040_done', 'bf040_done', 'c IS NULL',
    'UPDATE bf040_done SET c = a * 3 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 100, rate => 1000) AS done_checksum2 \gset
SELECT isnt(:'done_checksum2'::text, :'done_checksum'::text, 'the new action has a new checksum');
SELECT results_eq(
    $$SELECT state, checksum, completed_checksum, changed
        FROM backfill_pending() WHERE name = 'bf040_done'$$,
    format($$VALUES ('changed', %L, %L, true)$$, :'done_checksum2', :'done_checksum'),
    're-declared with a different action: changed, with both checksums');
SELECT backfill_declare('bf040_done', 'bf040_done', 'c IS NULL',
    'UPDATE bf040_done SET c = a * 2 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 100, rate => 1000) AS done_checksum3 \gset
SELECT results_eq(
    $$SELECT state, changed FROM backfill_pending() WHERE name = 'bf040_done'$$,
    $$VALUES ('completed', false)$$,
    'declared back to the completed definition: completed again');

-- not in this environment
SELECT backfill_declare('bf040_env', 'bf040_never', 'c IS NULL',
    'UPDATE bf040_never SET c = a WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    environments => '{bf040_nowhere}') AS env_checksum \gset
SELECT results_eq(
    $$SELECT state, environments FROM backfill_pending() WHERE name = 'bf040_env'$$,
    $$VALUES ('not-in-this-environment', '{bf040_nowhere}'::text[])$$,
    'environments not including backfill.environment: not-in-this-environment');
SET backfill.environment = 'bf040_nowhere';
SELECT is((SELECT state FROM backfill_pending() WHERE name = 'bf040_env'), 'pending',
          'in a listed environment the same declaration is pending');
RESET backfill.environment;

-- stalled: the action only fills even ids
SELECT backfill_declare('bf040_stall', 'bf040_stall', 'c IS NULL',
    'UPDATE bf040_stall SET c = a WHERE id BETWEEN $1 AND $2 AND id % 2 = 0 AND (c IS NULL)',
    batch_size => 100, rate => 1000) AS stall_checksum \gset
SELECT backfill_run('bf040_stall') AS stall_run \gset
SELECT is(backfill_wait(:stall_run, '300 s'), 'failed', 'a pass that leaves matching rows fails');
SELECT count(*) AS stall_left FROM bf040_stall WHERE c IS NULL \gset
SELECT isnt(:stall_left::bigint, 0::bigint, 'rows still match the predicate');
SELECT is((SELECT error_code FROM backfill.ledger WHERE run_id = :stall_run), 'BF006',
          'the ledger records STALLED (BF006)');
SELECT matches((SELECT error_message FROM backfill.ledger WHERE run_id = :stall_run),
               '\m' || :stall_left || '\M',
               'the error message gives the number of rows still matching');
SELECT matches((SELECT error_message FROM backfill.ledger WHERE run_id = :stall_run),
               '"bf040_stall"', 'the error message names the backfill');
SELECT is((SELECT count(*) FROM backfill.ledger WHERE declaration = 'bf040_stall' AND status = 'completed'),
          0::bigint, 'no completed ledger row was written for the stalled pass');
SELECT results_eq(
    $$SELECT state, completed_checksum, last_run_id, last_completed_run_id
        FROM backfill_pending() WHERE name = 'bf040_stall'$$,
    format($$VALUES ('stalled', NULL::text, %s::bigint, NULL::bigint)$$, :stall_run),
    'backfill_pending says stalled');
SELECT results_eq(
    $$SELECT status, last_error LIKE '%BF006%' FROM backfill_status('bf040_stall')$$,
    $$VALUES ('failed', true)$$,
    'backfill_status shows the failure and its code');

-- orphaned: a ledger name whose declaration is gone
SELECT backfill_declare('bf040_orphan', 'bf040_orphan', 'c IS NULL',
    'UPDATE bf040_orphan SET c = a WHERE id BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 50, rate => 1000) AS orphan_checksum \gset
SELECT backfill_run('bf040_orphan') AS orphan_run \gset
SELECT is(backfill_wait(:orphan_run, '300 s'), 'completed', 'the soon-orphaned pass completes');
SELECT is((SELECT state FROM backfill_pending() WHERE name = 'bf040_orphan'), 'completed',
          'while declared it is completed');
DELETE FROM backfill.declaration WHERE name = 'bf040_orphan';
SELECT results_eq(
    $$SELECT state, completed_checksum, last_run_id, last_completed_run_id, rows
        FROM backfill_pending() WHERE name = 'bf040_orphan'$$,
    format($$VALUES ('orphaned', %L, %s::bigint, %s::bigint, 100::bigint)$$,
           :'orphan_checksum', :orphan_run, :orphan_run),
    'a ledger name no declaration owns is listed as orphaned');

-- one row per name
SELECT results_eq(
    $$SELECT name, state FROM backfill_pending() ORDER BY name$$,
    $$VALUES ('bf040_done', 'completed'), ('bf040_env', 'not-in-this-environment'),
             ('bf040_never', 'pending'), ('bf040_orphan', 'orphaned'), ('bf040_stall', 'stalled')$$,
    'backfill_pending lists each declaration and orphan once');

SELECT * FROM finish();

DROP EXTENSION pg_backfill CASCADE;
DROP TABLE bf040_done, bf040_stall, bf040_orphan, bf040_never;
