-- 120_states: what the catalog and the ledger say stays true (issue 10).
--  * at most one running pass per ledger name, in the catalog itself;
--  * a pass that failed before it was planned (no partitions) is planned by
--    the pass backfill_retry starts, which then runs every row once, instead
--    of ending STALLED without running a batch.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf120_items CASCADE;
DROP FUNCTION IF EXISTS bf_test_poll(text, float8);
DROP ROLE IF EXISTS bf120_decl;
CREATE ROLE bf120_decl LOGIN;
RESET backfill.environment;

CREATE TABLE bf120_items (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
INSERT INTO bf120_items (id) SELECT g FROM generate_series(1, 200) g;
ANALYZE bf120_items;
GRANT SELECT, UPDATE ON bf120_items TO bf120_decl;

\ir include/poll.psql

SELECT * FROM no_plan();

-- ------------------------------------------------------------------
-- one running pass per ledger name
-- ------------------------------------------------------------------
SELECT is((SELECT indisunique AND pg_get_expr(indpred, indrelid) = '(status = ''running''::text)'
             FROM pg_index WHERE indexrelid = to_regclass('backfill.ledger_one_running_idx')),
          true, 'the ledger has a unique index on the running ledger name');

-- ------------------------------------------------------------------
-- a pass that failed before its plan: retry plans it
-- ------------------------------------------------------------------
SET ROLE bf120_decl;
SELECT length(backfill_declare(name => 'bf120_unplanned', relation => 'bf120_items',
    predicate => 'n = 0',
    action => 'UPDATE bf120_items SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    batch_size => 50, rate => 1000, max_parallel => 2, guard => false)) AS checksum_length;
RESET ROLE;

-- the lane plans after the commit, as bf120_decl, which by then may not read
-- the table: the pass fails in its planning (42501), before any partition
BEGIN;
SET LOCAL ROLE bf120_decl;
SELECT backfill_run('bf120_unplanned') AS run1 \gset
RESET ROLE;
REVOKE SELECT ON bf120_items FROM bf120_decl;
COMMIT;

SELECT ok(bf_test_poll(format('SELECT status <> %L FROM backfill.ledger WHERE run_id = %s',
                              'running', :run1), 300),
          'the first pass ended');
SELECT is((SELECT status || ' ' || error_code FROM backfill.ledger WHERE run_id = :run1),
          'failed 42501', 'it failed with insufficient privilege, while planning');
SELECT is((SELECT count(*)::int FROM backfill.partition WHERE run_id = :run1), 0,
          'it failed before it was planned: no partitions');
SELECT is((SELECT count(*)::int FROM bf120_items WHERE n <> 0), 0, 'no row was touched');

GRANT SELECT ON bf120_items TO bf120_decl;
SET ROLE bf120_decl;
SELECT is(backfill_retry('bf120_unplanned'), true, 'backfill_retry starts a new pass');
RESET ROLE;
SELECT max(run_id) AS run2 FROM backfill.ledger WHERE declaration = 'bf120_unplanned' \gset
SELECT isnt(:run2::bigint, :run1::bigint, 'the retry is a new ledger row');
SELECT is((SELECT previous_run_id FROM backfill.ledger WHERE run_id = :run2), :run1::bigint,
          'it resumes the failed pass');
SELECT is(backfill_wait(:run2, '300 s'), 'completed', 'the retried pass completes');
SELECT is((SELECT error_code FROM backfill.ledger WHERE run_id = :run2), NULL,
          'with no error (not BF006 with every row left)');
SELECT ok((SELECT count(*) > 0 FROM backfill.partition WHERE run_id = :run2),
          'the retried pass was planned into partitions');
SELECT ok((SELECT plan_method IS NOT NULL FROM backfill.run WHERE run_id = :run2),
          'and records its plan method');
SELECT results_eq($$SELECT count(*) FILTER (WHERE n = 1)::int, count(*) FILTER (WHERE n <> 1)::int
                      FROM bf120_items$$,
                  $$VALUES (200, 0)$$, 'every row done exactly once');
SELECT is((SELECT rows FROM backfill.ledger WHERE run_id = :run2), 200::bigint,
          'the ledger counts the 200 rows');

SELECT * FROM finish();

SET client_min_messages = warning;
DROP EXTENSION pg_backfill CASCADE;
DROP TABLE bf120_items;
DROP ROLE bf120_decl;
