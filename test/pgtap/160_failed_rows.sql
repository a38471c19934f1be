-- 160_failed_rows: the SQL surface of poison rows (issue 14, part 1).
--  * backfill_failed_rows and backfill_status.failed_rows; the ledger's
--    completed_with_failures; backfill_pending says it;
--  * a text key: the failed row's key is the cursor's text, and the
--    convergence count leaves it out (no false STALLED);
--  * the recorded rows are visible only to members of the backfill's owner;
--  * backfill_retry of a completed_with_failures pass retries exactly the
--    recorded row, as a new pass;
--  * a pages source is never bisected: a page that fails fails as before.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf160_items CASCADE;
DROP FUNCTION IF EXISTS bf160_pages(text, jsonb);
DROP FUNCTION IF EXISTS bf_test_poll(text, float8);
DROP ROLE IF EXISTS bf160_decl;
DROP ROLE IF EXISTS bf160_other;
CREATE ROLE bf160_decl LOGIN;
CREATE ROLE bf160_other LOGIN;
RESET backfill.environment;

-- a text key; the row 'k0150' has a value the action's cast refuses
CREATE TABLE bf160_items (k text PRIMARY KEY, src text NOT NULL, n int NOT NULL DEFAULT 0, v int);
INSERT INTO bf160_items (k, src)
    SELECT 'k' || lpad(g::text, 4, '0'), g::text FROM generate_series(1, 300) g;
UPDATE bf160_items SET src = 'not a number' WHERE k = 'k0150';
ANALYZE bf160_items;
GRANT SELECT, UPDATE ON bf160_items TO bf160_decl;

\ir include/poll.psql

SELECT * FROM no_plan();

SELECT has_function('backfill_failed_rows', ARRAY['text'], 'backfill_failed_rows(name) exists');
SELECT has_table('backfill', 'failed_row', 'the catalog backfill.failed_row exists');
SELECT columns_are('backfill', 'failed_row',
    ARRAY['run_id', 'part_no', 'key', 'after_key', 'sqlstate', 'message', 'attempts', 'at'],
    'failed_row: run, partition, key, the cursor before it, SQLSTATE, message, attempts, at');
SELECT throws_ok($$INSERT INTO backfill.ledger (ledger_name, declaration, checksum, status, owner)
                   VALUES ('x', 'x', 'x', 'completed_without_anything', 10)$$,
                 '23514', NULL, 'the ledger still refuses an unknown status');

SET ROLE bf160_decl;
SELECT length(backfill_declare(name => 'bf160_text', relation => 'bf160_items',
    predicate => 'v IS NULL',
    action => 'UPDATE bf160_items SET v = src::int, n = n + 1 WHERE k BETWEEN $1 AND $2',
    batch_size => 40, rate => 1000, max_failed_rows => 1, guard => false)) AS checksum_length;
SELECT backfill_run('bf160_text') AS run1 \gset
RESET ROLE;

SELECT ok(bf_test_poll(format('SELECT status <> %L FROM backfill.ledger WHERE run_id = %s',
                              'running', :run1), 300), 'the pass ends');
SELECT is((SELECT status FROM backfill.ledger WHERE run_id = :run1), 'completed_with_failures',
          'a pass with a tolerated failed row ends completed_with_failures');
SELECT is((SELECT error_code FROM backfill.ledger WHERE run_id = :run1), NULL,
          'it is not STALLED: the count left the recorded row out');
SELECT results_eq($$SELECT key, sqlstate, attempts > 0 FROM backfill_failed_rows('bf160_text')$$,
                  $$VALUES ('k0150'::text, '22P02'::text, true)$$,
                  'backfill_failed_rows lists the row by its text key, with its SQLSTATE');
SELECT is((SELECT after_key FROM backfill.failed_row WHERE run_id = :run1), 'k0149',
          'the cursor before it is recorded (a retry starts there)');
SELECT is((SELECT count(*)::int FROM bf160_items WHERE n = 1), 299,
          'every other row is done');
SELECT is((SELECT count(*)::int FROM bf160_items WHERE n > 1), 0, 'none twice');
SELECT results_eq($$SELECT status, failed_rows FROM backfill_status('bf160_text')$$,
                  $$VALUES ('completed_with_failures'::text, 1::bigint)$$,
                  'backfill_status: the status and failed_rows');
SELECT is((SELECT progress FROM backfill_status('bf160_text')), 1.0::float8,
          'backfill_status: a pass that ended with tolerated failed rows is at 100% (attacker F8)');
SELECT is((SELECT state FROM backfill_pending() WHERE name = 'bf160_text'),
          'completed_with_failures', 'backfill_pending: completed_with_failures');

-- only members of the owner see the recorded rows
SET ROLE bf160_other;
SELECT is((SELECT count(*)::int FROM backfill.failed_row), 0,
          'another role sees no failed row (row-level security)');
SELECT is((SELECT count(*)::int FROM backfill_failed_rows('bf160_text')), 0,
          'nor through backfill_failed_rows');
SELECT throws_ok($$INSERT INTO backfill.failed_row (run_id, part_no, key, sqlstate, message,
                   attempts) VALUES (1, 0, 'x', '22000', 'x', 1)$$,
                 '42501', NULL, 'nobody but the extension writes failed rows');
RESET ROLE;

-- fixed, retried: exactly the one row, in a new pass
UPDATE bf160_items SET src = '150' WHERE k = 'k0150';
SET ROLE bf160_decl;
SELECT is(backfill_retry('bf160_text'), true, 'backfill_retry starts a new pass');
RESET ROLE;
SELECT max(run_id) AS run2 FROM backfill.ledger \gset
SELECT isnt(:run2, :run1, 'the retry is a new ledger row');
SELECT ok(bf_test_poll(format('SELECT status <> %L FROM backfill.ledger WHERE run_id = %s',
                              'running', :run2), 300), 'the retry ends');
SELECT results_eq(format('SELECT status, rows FROM backfill.ledger WHERE run_id = %s', :run2),
                  $$VALUES ('completed'::text, 1::bigint)$$,
                  'the retry completes, doing exactly the recorded row');
SELECT is((SELECT count(*)::int FROM bf160_items WHERE n = 1), 300, 'every row is done once');

-- a pages source: a failing page is not bisected (a page cannot be halved)
CREATE FUNCTION bf160_pages(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql AS $$
    SELECT CASE WHEN cursor IS NULL
                THEN '{"rows": [{"v": "x"}], "next": "1"}'::jsonb
                ELSE '{"rows": [], "next": null}'::jsonb END
$$;
GRANT EXECUTE ON FUNCTION bf160_pages(text, jsonb) TO bf160_decl;
SET ROLE bf160_decl;
SELECT length(backfill_declare(name => 'bf160_pages', pages => 'bf160_pages',
    action => $$SELECT (r ->> 'v')::int FROM pg_catalog.jsonb_array_elements($1) r$$,
    rate => 1000, max_attempts => 1, max_failed_rows => 5)) AS checksum_length;
SELECT backfill_run('bf160_pages') AS run3 \gset
RESET ROLE;
SELECT ok(bf_test_poll(format('SELECT status <> %L FROM backfill.ledger WHERE run_id = %s',
                              'running', :run3), 300), 'the pages pass ends');
SELECT results_eq(format('SELECT status, error_code FROM backfill.ledger WHERE run_id = %s', :run3),
                  $$VALUES ('failed'::text, 'BF014'::text)$$,
                  'a failing page fails its partition as before (BF014)');
SELECT is((SELECT count(*)::int FROM backfill_failed_rows('bf160_pages')), 0,
          'and records no failed row');

SELECT * FROM finish();

SET client_min_messages = warning;
SELECT backfill_cancel(name) FROM backfill.declaration;
DROP EXTENSION pg_backfill CASCADE;
DROP TABLE bf160_items;
DROP FUNCTION bf160_pages(text, jsonb);
DROP FUNCTION bf_test_poll(text, float8);
DROP ROLE bf160_decl;
DROP ROLE bf160_other;
