-- 030_run_ledger: a pass runs, rewrites the rows and leaves one append-only
-- ledger row; re-runs are skipped unless forced; environments; waiting.
-- Autocommit on purpose: a pass starts only when backfill_run's transaction commits.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf030_t, bf030_env, bf030_w CASCADE;
CREATE TABLE bf030_t (id int PRIMARY KEY, a int NOT NULL, c int);
INSERT INTO bf030_t SELECT g, g, NULL FROM generate_series(1, 5000) g;
CREATE TABLE bf030_env (id int PRIMARY KEY, a int NOT NULL, c int);
INSERT INTO bf030_env SELECT g, g, NULL FROM generate_series(1, 100) g;
CREATE TABLE bf030_w (id int PRIMARY KEY, a int NOT NULL, c int);
INSERT INTO bf030_w SELECT g, g, NULL FROM generate_series(1, 100) g;
ANALYZE bf030_t, bf030_env, bf030_w;

SELECT * FROM no_plan();

SELECT backfill_declare('bf030', 'bf030_t', 'c IS NULL',
    'UPDATE bf030_t SET c = a * 2 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 500, rate => 1000) AS checksum \gset

-- the first pass
SELECT backfill_run('bf030') AS run1 \gset
SELECT is((SELECT status FROM backfill.ledger WHERE run_id = :run1), 'running',
          'backfill_run writes a running ledger row');
SELECT is(backfill_wait(:run1, '300 s'), 'completed', 'the pass completes');
SELECT is((SELECT count(*) FROM bf030_t WHERE c IS NULL), 0::bigint,
          'no row still matches the predicate');
SELECT is((SELECT count(*) FROM bf030_t WHERE c = a * 2), 5000::bigint,
          'every row was really rewritten by the action');
SELECT results_eq(
    $$SELECT ledger_name, declaration, status, rows, batches, finished_at IS NOT NULL,
             finished_at >= started_at, forced, previous_run_id, error_code, error_message
        FROM backfill.ledger WHERE run_id = $$ || :run1,
    $$VALUES ('bf030', 'bf030', 'completed', 5000::bigint, 10::bigint, true, true, false,
              NULL::bigint, NULL::text, NULL::text)$$,
    'the ledger row: completed, 5000 rows in 10 batches, finished, not forced');
SELECT is((SELECT checksum FROM backfill.ledger WHERE run_id = :run1), :'checksum'::text,
          'the ledger row carries the declaration''s checksum');
SELECT is((SELECT owner::text FROM backfill_ledger WHERE run_id = :run1), current_user::text,
          'the backfill_ledger view shows the owning role');
SELECT row_to_json(l)::text AS row1 FROM backfill.ledger l WHERE run_id = :run1 \gset

-- running again is skipped
SELECT count(*) AS ledger_before FROM backfill.ledger \gset
SELECT is(backfill_run('bf030'), :run1::bigint,
          'running a completed backfill again returns the completed run id');
SELECT is((SELECT count(*) FROM backfill.ledger), :ledger_before::bigint,
          'a skipped run writes no ledger row');
SELECT is(backfill_run('bf030', force => false), :run1::bigint,
          'force => false is skipped too');

-- forced
UPDATE bf030_t SET c = NULL WHERE id <= 1234;
SELECT backfill_run('bf030', force => true) AS run2 \gset
SELECT isnt(:run2::bigint, :run1::bigint, 'a forced run returns a new run id');
SELECT is(backfill_wait(:run2, '300 s'), 'completed', 'the forced pass completes');
SELECT results_eq(
    $$SELECT status, forced, previous_run_id, rows, checksum
        FROM backfill.ledger WHERE run_id = $$ || :run2,
    format($$VALUES ('completed', true, %s::bigint, 1234::bigint, %L)$$, :run1, :'checksum'),
    'the forced pass is a new ledger row: forced, previous_run_id = the first run');
SELECT is((SELECT count(*) FROM backfill.ledger), :ledger_before::bigint + 1,
          'the forced run added exactly one ledger row');
SELECT is((SELECT row_to_json(l)::text FROM backfill.ledger l WHERE run_id = :run1), :'row1'::text,
          'the first ledger row is unchanged');
SELECT is((SELECT count(*) FROM bf030_t WHERE c IS DISTINCT FROM a * 2), 0::bigint,
          'the forced pass rewrote the reset rows');
SELECT is(backfill_run('bf030'), :run2::bigint,
          'after the forced pass, a plain run is skipped with the newest completed run id');

-- the ledger is append-only
SELECT throws_ok(format('UPDATE backfill.ledger SET rows = 1 WHERE run_id = %s', :run1),
                 'BF017', NULL, 'UPDATE of an ended ledger row fails with BF017');
SELECT throws_ok(format($$UPDATE backfill.ledger SET status = 'failed' WHERE run_id = %s$$, :run2),
                 'BF017', NULL, 'changing the status of an ended ledger row fails with BF017');
SELECT throws_ok(format('DELETE FROM backfill.ledger WHERE run_id = %s', :run1),
                 'BF017', NULL, 'DELETE of a ledger row fails with BF017');
SELECT is((SELECT row_to_json(l)::text FROM backfill.ledger l WHERE run_id = :run1), :'row1'::text,
          'the first ledger row is still unchanged');

-- unknown names and runs
SELECT throws_ok($$SELECT backfill_run('bf030_no_such')$$, 'BF002',
                 'backfill "bf030_no_such" is not declared', 'backfill_run of an unknown name: BF002');
SELECT throws_ok($$SELECT backfill_wait(987654321, '1 s')$$, 'BF002', NULL,
                 'backfill_wait of an unknown run id: BF002');

-- environments
SELECT backfill_declare('bf030_env', 'bf030_env', 'c IS NULL',
    'UPDATE bf030_env SET c = a WHERE id BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 50, rate => 1000, environments => '{staging}') AS env_checksum \gset
RESET backfill.environment;
SELECT is(current_setting('backfill.environment'), '', 'backfill.environment defaults to empty');
SELECT throws_ok($$SELECT backfill_run('bf030_env')$$, 'BF004', NULL,
                 'a backfill declared for staging is refused elsewhere: BF004');
SELECT throws_ok($$SELECT backfill_run('bf030_env', force => true)$$, 'BF004', NULL,
                 'force does not override the environment');
SELECT is((SELECT count(*) FROM backfill.ledger WHERE declaration = 'bf030_env'), 0::bigint,
          'the refused run wrote no ledger row');
SET backfill.environment = 'staging';
SELECT backfill_run('bf030_env') AS run_env \gset
SELECT is(backfill_wait(:run_env, '300 s'), 'completed', 'in staging it runs and completes');
SELECT is((SELECT count(*) FROM bf030_env WHERE c IS NULL), 0::bigint, 'and rewrote its rows');
RESET backfill.environment;

-- waiting
SELECT backfill_declare('bf030_w', 'bf030_w', 'c IS NULL',
    'UPDATE bf030_w SET c = a WHERE id BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 50, rate => 1000) AS w_checksum \gset
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT throws_ok(format($$SELECT backfill_wait(%s, '1 s')$$, :run1), 'BF015', NULL,
                 'backfill_wait inside a REPEATABLE READ transaction: BF015');
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT throws_ok(format($$SELECT backfill_wait(%s, '1 s')$$, :run1), 'BF015', NULL,
                 'backfill_wait inside a SERIALIZABLE transaction: BF015');
COMMIT;
BEGIN;
SELECT backfill_run('bf030_w') AS run_uncommitted \gset
SELECT throws_ok(format($$SELECT backfill_wait(%s, '1 s')$$, :run_uncommitted), 'BF015', NULL,
                 'backfill_wait of a run enqueued in the same uncommitted transaction: BF015');
ROLLBACK;
SELECT is((SELECT count(*) FROM backfill.ledger WHERE declaration = 'bf030_w'), 0::bigint,
          'a run enqueued in a transaction that rolled back left no ledger row');
SELECT pg_sleep(3);
SELECT is((SELECT count(*) FROM bf030_w WHERE c IS NOT NULL), 0::bigint,
          'and never started: no row was rewritten');
SELECT throws_ok(format($$SELECT backfill_wait(%s, '1 s')$$, :run_uncommitted), 'BF002', NULL,
                 'the rolled-back run id is unknown afterwards: BF002');
SELECT throws_ok(format($$SELECT backfill_wait(%s, '-1 s')$$, :run1), 'BF011', NULL,
                 'a negative timeout: BF011');
SELECT is(backfill_wait(:run1, '0 s'), 'completed',
          'backfill_wait of an ended run returns its status at once');

SELECT * FROM finish();

DROP EXTENSION pg_backfill CASCADE;
DROP TABLE bf030_t, bf030_env, bf030_w;
