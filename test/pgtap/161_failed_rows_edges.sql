-- 161_failed_rows_edges: what an attacker found around poison rows (issue 14, F7, F8).
--  * F7: a completed pass, then a forced pass that is cancelled: backfill_pending
--    says failed, and backfill_run agrees (it starts a new pass instead of
--    skipping as if the completed pass still answered);
--  * F8: max_failed_rows lowered while a pass runs applies at its next row
--    that fails alone (the pass ends BF018, not completed_with_failures);
--    a volatile revert_predicate is named as such; a revert that is not DML
--    is named as the revert.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf161_sk, bf161_mf CASCADE;
DROP FUNCTION IF EXISTS bf_test_poll(text, float8);
DROP ROLE IF EXISTS bf161_decl;
CREATE ROLE bf161_decl LOGIN;
RESET backfill.environment;

CREATE TABLE bf161_sk (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
INSERT INTO bf161_sk SELECT generate_series(1, 2000);
CREATE TABLE bf161_mf (id int PRIMARY KEY, n int NOT NULL DEFAULT 0,
                       c int NOT NULL DEFAULT 0 CHECK (c < 100));
INSERT INTO bf161_mf (id) SELECT generate_series(1, 400);
UPDATE bf161_mf SET c = 99 WHERE id IN (300, 350);
ANALYZE bf161_sk;
ANALYZE bf161_mf;
ALTER TABLE bf161_sk OWNER TO bf161_decl;
ALTER TABLE bf161_mf OWNER TO bf161_decl;

\ir include/poll.psql

SELECT * FROM no_plan();

-- ------------------------------------------------------------------
-- F7: completed, then a forced pass cancelled
-- ------------------------------------------------------------------
SET ROLE bf161_decl;
SELECT length(backfill_declare(name => 'bf161_sk', relation => 'bf161_sk', predicate => 'n = 0',
    action => 'UPDATE bf161_sk SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    batch_size => 1000, rate => 1000, guard => false)) AS checksum_length;
SELECT backfill_run('bf161_sk') AS run1 \gset
RESET ROLE;
SELECT ok(bf_test_poll(format('SELECT status = %L FROM backfill.ledger WHERE run_id = %s',
                              'completed', :run1), 300), 'the first pass completes');
UPDATE bf161_sk SET n = 0 WHERE id > 1000;
SET ROLE bf161_decl;
-- (100 batches at 0.1 a second: still running when it is cancelled)
SELECT length(backfill_declare(name => 'bf161_sk', relation => 'bf161_sk', predicate => 'n = 0',
    action => 'UPDATE bf161_sk SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    batch_size => 10, rate => 0.1, guard => false)) AS checksum_length;
SELECT backfill_run('bf161_sk', force => true) AS run2 \gset
SELECT ok(bf_test_poll(format('SELECT batches > 0 FROM backfill_status(%L)', 'bf161_sk'), 300),
          'the forced pass is at work');
SELECT is(backfill_cancel('bf161_sk'), true, 'the forced pass is cancelled');
SELECT is((SELECT state FROM backfill_pending() WHERE name = 'bf161_sk'), 'failed',
          'backfill_pending says failed after the cancelled forced pass');
SELECT backfill_run('bf161_sk') AS run3 \gset
SELECT isnt(:run3::bigint, :run1::bigint,
            'backfill_run agrees: it does not skip as if the first pass still completed it');
SELECT cmp_ok(:run3::bigint, '>', :run2::bigint, 'it starts a new pass');
SELECT length(backfill_declare(name => 'bf161_sk', relation => 'bf161_sk', predicate => 'n = 0',
    action => 'UPDATE bf161_sk SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    batch_size => 1000, rate => 1000, guard => false)) AS checksum_length;
RESET ROLE;
SELECT ok(bf_test_poll(format('SELECT status = %L FROM backfill.ledger WHERE run_id = %s',
                              'completed', :run3), 300), 'the new pass completes');
SELECT is((SELECT state FROM backfill_pending() WHERE name = 'bf161_sk'), 'completed',
          'backfill_pending says completed');
SELECT is((SELECT count(*) FROM bf161_sk WHERE n <> 1), 0::bigint, 'every row done once');
SET ROLE bf161_decl;
SELECT is(backfill_run('bf161_sk'), :run3::bigint, 'a plain run now skips, answered by it');
RESET ROLE;

-- ------------------------------------------------------------------
-- F8: max_failed_rows lowered while the pass runs
-- ------------------------------------------------------------------
SET ROLE bf161_decl;
-- (the first failing row, 300, is in the 30th batch: at 0.1 batches a
-- second it is 290 s away when the bound is lowered, however slow the
-- machine; the new declaration's rate wakes the lane)
SELECT length(backfill_declare(name => 'bf161_mf', relation => 'bf161_mf', predicate => 'n = 0',
    action => 'UPDATE bf161_mf SET n = n + 1, c = c + 1 WHERE id BETWEEN $1 AND $2',
    batch_size => 10, rate => 0.1, max_failed_rows => 5, guard => false)) AS checksum_length;
SELECT backfill_run('bf161_mf') AS run4 \gset
RESET ROLE;
SELECT ok(bf_test_poll(format('SELECT batches > 0 FROM backfill_status(%L)', 'bf161_mf'), 300),
          'the pass is at work with max_failed_rows => 5');
SET ROLE bf161_decl;
SELECT length(backfill_declare(name => 'bf161_mf', relation => 'bf161_mf', predicate => 'n = 0',
    action => 'UPDATE bf161_mf SET n = n + 1, c = c + 1 WHERE id BETWEEN $1 AND $2',
    batch_size => 10, rate => 1000, max_failed_rows => 0, guard => false)) AS checksum_length;
RESET ROLE;
SELECT ok(bf_test_poll(format('SELECT status <> %L FROM backfill.ledger WHERE run_id = %s',
                              'running', :run4), 300), 'the pass ends');
SELECT is((SELECT status || ' ' || error_code FROM backfill.ledger WHERE run_id = :run4),
          'failed BF018', 'the lowered bound applied: its first row that failed alone fails it');

-- ------------------------------------------------------------------
-- F8: messages name the revert
-- ------------------------------------------------------------------
SET ROLE bf161_decl;
SELECT throws_ok($$SELECT backfill_declare(name => 'bf161_vol', relation => 'bf161_mf',
        predicate => 'n = 0', action => 'UPDATE bf161_mf SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)',
        revert => 'UPDATE bf161_mf SET n = 0 WHERE id BETWEEN $1 AND $2',
        revert_predicate => 'random() > 0.5')$$,
    'BF001', 'revert_predicate of backfill "bf161_vol" is volatile',
    'a volatile revert_predicate is named revert_predicate');
CREATE FUNCTION pg_temp.detail_of(q text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE d text;
BEGIN
    EXECUTE q;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
    RETURN d;
END $f$;
SELECT is(pg_temp.detail_of($$SELECT backfill_declare(name => 'bf161_ddl', relation => 'bf161_mf',
        predicate => 'n = 0', action => 'UPDATE bf161_mf SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)',
        revert => 'TRUNCATE bf161_mf')$$),
    'the revert must be SELECT, INSERT, UPDATE, DELETE or MERGE',
    'a revert that is not DML: the detail names the revert');
RESET ROLE;

SELECT * FROM finish();
