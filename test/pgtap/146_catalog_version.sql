-- 146_catalog_version: the library works with its own catalog version only
-- (issue 25).  In a database whose catalogs are older than the library (the
-- package was updated, ALTER EXTENSION ... UPDATE not yet run) every C SQL
-- function refuses with BF027 and the way out, instead of failing on a
-- column the old catalogs lack or choosing another statement; nothing is
-- written.  After the update the same calls work.  (The scheduler's one
-- WARNING there, and CALL backfill_finalize, which a function cannot call:
-- test/t/146_catalog_version.pl.)
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
\ir include/quiet_lanes.psql
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill VERSION '0.5';
CREATE EXTENSION IF NOT EXISTS pgtap;
RESET backfill.environment;

DROP TABLE IF EXISTS bf146_t CASCADE;
CREATE TABLE bf146_t (id int PRIMARY KEY, c int);
INSERT INTO bf146_t SELECT g, NULL FROM generate_series(1, 20) g;

\ir include/bf_error.psql

SELECT * FROM no_plan();

SELECT results_eq(
    $$SELECT state, message LIKE '%bf146_f%version 0.5%', detail LIKE '%library is version 0.6%',
             hint LIKE '%ALTER EXTENSION pg_backfill UPDATE%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf146_f', 'bf146_t', 'c IS NULL',
                 'UPDATE bf146_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$q$)$$,
    $$VALUES ('BF027', true, true, true)$$,
    'under the 0.5 catalogs a declaration is refused (BF027), naming the versions, hint: ALTER EXTENSION ... UPDATE');
SELECT is((SELECT count(*) FROM backfill.declaration), 0::bigint, 'nothing was declared');

-- as the 0.5 library stored it, so that the run and the controls find it
INSERT INTO backfill.declaration (name, relid, relation, key_column, key_type, predicate, action,
       batch_size, rate, max_attempts, backoff_base_ms, backoff_cap_ms, batch_timeout_ms,
       min_batch_size, max_batch_size, run_as, search_path, owner, checksum)
VALUES ('bf146_f', 'bf146_t'::regclass, 'public.bf146_t', 'id', 'integer', 'c IS NULL',
       'UPDATE bf146_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
       1000, 5, 5, 1000, 60000, 60000, 100, 100000, current_user::regrole, '"$user", public',
       current_user::regrole, 'x');

SELECT results_eq(
    $$SELECT state, message LIKE '%bf146_f%version 0.5%', hint LIKE '%ALTER EXTENSION pg_backfill UPDATE%'
        FROM pg_temp.bf_error('SELECT backfill_run(''bf146_f'')')$$,
    $$VALUES ('BF027', true, true)$$,
    'a run under the 0.5 catalogs is refused (BF027), naming the version, hint: ALTER EXTENSION ... UPDATE');
SELECT results_eq(
    $$SELECT s.sql, e.state, e.hint LIKE '%ALTER EXTENSION pg_backfill UPDATE%'
        FROM (VALUES ('SELECT backfill_pause(''bf146_f'')'),
                     ('SELECT backfill_resume(''bf146_f'')'),
                     ('SELECT backfill_cancel(''bf146_f'')'),
                     ('SELECT backfill_retry(''bf146_f'')'),
                     ('SELECT backfill_revert(''bf146_f'')'),
                     ('SELECT backfill_drop(''bf146_f'')'),
                     ('SELECT backfill_wait(1, ''1 s'')'),
                     ('SELECT backfill_outbox_emit(''bf146.topic'', ''k'', ''{}'')'),
                     ('SELECT backfill.migration_unapplied(''m1'')')) s(sql),
             LATERAL pg_temp.bf_error(s.sql) e ORDER BY 1$$,
    $$SELECT s.sql, 'BF027', true
        FROM (VALUES ('SELECT backfill_pause(''bf146_f'')'),
                     ('SELECT backfill_resume(''bf146_f'')'),
                     ('SELECT backfill_cancel(''bf146_f'')'),
                     ('SELECT backfill_retry(''bf146_f'')'),
                     ('SELECT backfill_revert(''bf146_f'')'),
                     ('SELECT backfill_drop(''bf146_f'')'),
                     ('SELECT backfill_wait(1, ''1 s'')'),
                     ('SELECT backfill_outbox_emit(''bf146.topic'', ''k'', ''{}'')'),
                     ('SELECT backfill.migration_unapplied(''m1'')')) s(sql) ORDER BY 1$$,
    'the controls, wait, the outbox and the migrations check are refused (BF027) too');
SELECT is((SELECT count(*) FROM backfill.ledger), 0::bigint, 'nothing was written to the ledger');
SELECT is((SELECT count(*) FROM backfill.outbox), 0::bigint, 'nor to the outbox');
SELECT is((SELECT count(*) FROM backfill.declaration WHERE name = 'bf146_f'), 1::bigint,
    'and the declaration is still there (no drop)');

ALTER EXTENSION pg_backfill UPDATE;
SELECT lives_ok($$SELECT backfill_declare('bf146_f', 'bf146_t', 'c IS NULL',
                 'UPDATE bf146_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'after ALTER EXTENSION ... UPDATE the library declares');
SELECT backfill_run('bf146_f', wait => false) AS r146 \gset
SELECT is(backfill_wait(:r146, '300 s'), 'completed',
          'and the same backfill runs to completion');
SELECT is((SELECT count(*) FROM bf146_t WHERE c = 1), 20::bigint, 'and every row was done');

SELECT * FROM finish();
