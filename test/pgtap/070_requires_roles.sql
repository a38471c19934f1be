-- 070_requires_roles: requires (a schema migration) and requires_backfill
-- (another backfill's completion) block a pass until they are met; run_as
-- makes lanes log in as another role; settings scope each batch to a
-- tenant under row-level security; tenant => 'none' and the RLS rule.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf070_a, bf070_first, bf070_second, bf070_who, bf070_rls, bf070_rls2 CASCADE;
DROP TABLE IF EXISTS public.schema_migrations;
DROP FUNCTION IF EXISTS bf070_stays(text, float8);
DROP ROLE IF EXISTS bf070_decl;
DROP ROLE IF EXISTS bf070_worker;
DROP ROLE IF EXISTS bf070_nologin;
DROP ROLE IF EXISTS bf070_stranger;
DROP ROLE IF EXISTS bf070_tenant;
CREATE ROLE bf070_decl LOGIN;
CREATE ROLE bf070_worker LOGIN;
CREATE ROLE bf070_nologin NOLOGIN;
CREATE ROLE bf070_stranger LOGIN;
CREATE ROLE bf070_tenant LOGIN;
GRANT bf070_worker TO bf070_decl;
GRANT bf070_nologin TO bf070_decl;
RESET backfill.environment;
RESET backfill.migrations_table;

CREATE TABLE bf070_a (id int PRIMARY KEY, c int);
INSERT INTO bf070_a (id) SELECT g FROM generate_series(1, 20) g;
CREATE TABLE bf070_first (id int PRIMARY KEY, c int);
INSERT INTO bf070_first (id) SELECT g FROM generate_series(1, 20) g;
CREATE TABLE bf070_second (id int PRIMARY KEY, c int);
INSERT INTO bf070_second (id) SELECT g FROM generate_series(1, 20) g;
CREATE TABLE bf070_who (id int PRIMARY KEY, who text);
INSERT INTO bf070_who (id) SELECT g FROM generate_series(1, 10) g;
GRANT SELECT, UPDATE ON bf070_who TO bf070_decl, bf070_worker;
-- owned by postgres: row-level security applies to every other role
CREATE TABLE bf070_rls (id int PRIMARY KEY, tenant int NOT NULL, v int);
INSERT INTO bf070_rls (id, tenant) SELECT g, g % 3 FROM generate_series(1, 30) g;
ALTER TABLE bf070_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY bf070_rls_tenant ON bf070_rls
    USING (tenant = current_setting('app.tenant_id')::int);
GRANT SELECT, UPDATE ON bf070_rls TO bf070_tenant;
-- the same with a lenient policy (a missing setting hides every row)
CREATE TABLE bf070_rls2 (id int PRIMARY KEY, tenant int NOT NULL, v int);
INSERT INTO bf070_rls2 (id, tenant) SELECT g, g % 3 FROM generate_series(1, 30) g;
ALTER TABLE bf070_rls2 ENABLE ROW LEVEL SECURITY;
CREATE POLICY bf070_rls2_tenant ON bf070_rls2
    USING (tenant = nullif(current_setting('app.tenant_id', true), '')::int);
GRANT SELECT, UPDATE ON bf070_rls2 TO bf070_tenant;
ANALYZE bf070_a, bf070_first, bf070_second, bf070_who, bf070_rls, bf070_rls2;

-- Is a boolean query true all along, checked every 0.2 s for secs seconds?
-- (a bounded observation of something that must NOT happen: several
-- launcher naptimes of 1 s pass without it)
CREATE FUNCTION bf070_stays(q text, secs float8) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => secs);
    ok boolean;
BEGIN
    LOOP
        PERFORM pg_stat_clear_snapshot();
        EXECUTE q INTO ok;
        IF NOT coalesce(ok, false) THEN
            RAISE WARNING 'bf070_stays: no longer true: %', q;
            RETURN false;
        END IF;
        IF clock_timestamp() > deadline THEN
            RETURN true;
        END IF;
        PERFORM pg_sleep(0.2);
    END LOOP;
END
$$;

SELECT * FROM no_plan();

-- ==================================================================
-- requires: a schema migration
-- ==================================================================
SELECT is(current_setting('backfill.migrations_table'), 'schema_migrations(version)',
          'backfill.migrations_table defaults to schema_migrations(version)');
SELECT backfill_declare(name => 'bf070_req', relation => 'bf070_a', predicate => 'c IS NULL',
    action => 'UPDATE bf070_a SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    requires => '20261201', rate => 1000);
SELECT is((SELECT requires FROM backfill.declaration WHERE name = 'bf070_req'), '20261201',
          'the declaration stores requires');
SELECT results_eq($$SELECT state, blocked_by FROM backfill_pending() WHERE name = 'bf070_req'$$,
                  $$VALUES ('pending', NULL::text)$$,
                  'backfill_pending reads no migrations table: before a probe the migration is not known');
SELECT lives_ok($$SELECT backfill_probe('bf070_req')$$,
                'backfill_probe reads it, in a probe worker as the declaring role');
SELECT results_eq($$SELECT state, blocked_by ~ '20261201' AND blocked_by ~ 'does not exist'
                      FROM backfill_pending() WHERE name = 'bf070_req'$$,
                  $$VALUES ('blocked', true)$$,
                  'no migrations table yet: pending says blocked, blocked_by names the migration and the missing table');

CREATE TABLE public.schema_migrations (version text PRIMARY KEY);
INSERT INTO public.schema_migrations VALUES ('20251231');
SELECT lives_ok($$SELECT backfill_probe('bf070_req')$$, 'probed again');
SELECT results_eq($$SELECT state, blocked_by FROM backfill_pending() WHERE name = 'bf070_req'$$,
                  $$VALUES ('blocked', 'migration 20261201 is not applied (no such version in public.schema_migrations)')$$,
                  'the table exists without the row: blocked, blocked_by says the migration is not applied');

SELECT throws_ok($$SELECT backfill_run('bf070_req', wait => false)$$, 'BF005', NULL,
                 'run with wait => false while the migration is missing: REQUIRES (BF005)');
SELECT is_empty($$SELECT 1 FROM backfill.ledger WHERE declaration = 'bf070_req'$$,
                'the refused run wrote no ledger row');

SELECT backfill_run('bf070_req') AS req_run \gset
SELECT results_eq($$SELECT l.status, r.phase FROM backfill.ledger l JOIN backfill.run r USING (run_id)
                     WHERE run_id = $$ || :req_run,
                  $$VALUES ('running', 'queued')$$,
                  'run with the default wait => true enqueues the pass (running, queued)');
SELECT results_eq($$SELECT state, blocked_by IS NOT NULL FROM backfill_pending() WHERE name = 'bf070_req'$$,
                  $$VALUES ('blocked', true)$$,
                  'the enqueued pass shows as blocked in backfill_pending()');
SELECT ok(bf070_stays(format($$SELECT r.phase = 'queued'
                                  AND NOT EXISTS (SELECT 1 FROM backfill.partition p WHERE p.run_id = %s)
                                  AND (SELECT count(*) FROM bf070_a WHERE c IS NOT NULL) = 0
                                 FROM backfill.run r WHERE r.run_id = %s$$, :req_run, :req_run), 3),
          'the launcher does not start it while the migration is missing (3 naptimes: still queued, nothing written)');

INSERT INTO public.schema_migrations VALUES ('20261201');
SELECT is(backfill_wait(:req_run, '300 s'), 'completed',
          'once the migration row exists, the launcher starts the enqueued pass and it completes');
SELECT is((SELECT count(*)::int FROM bf070_a WHERE c = 1), 20, 'it rewrote all 20 rows');
SELECT results_eq($$SELECT state, blocked_by FROM backfill_pending() WHERE name = 'bf070_req'$$,
                  $$VALUES ('completed', NULL::text)$$,
                  'pending: completed, blocked_by NULL');
SELECT lives_ok($$SELECT backfill_run('bf070_req', force => true, wait => false)$$,
                'with the migration applied, wait => false is accepted');
SELECT is(backfill_wait((SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'bf070_req'), '300 s'),
          'completed', 'and that forced pass completes');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf070_bad', relation => 'bf070_a', predicate => 'c IS NULL',
    action => 'UPDATE bf070_a SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', requires => '')$$,
    'BF011', NULL, 'requires => '''' (empty migration id): OPTION_INVALID (BF011)');

-- ==================================================================
-- requires_backfill: another backfill must be completed first
-- ==================================================================
SELECT backfill_declare(name => 'bf070_first', relation => 'bf070_first', predicate => 'c IS NULL',
    action => 'UPDATE bf070_first SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000);
SELECT backfill_declare(name => 'bf070_second', relation => 'bf070_second', predicate => 'c IS NULL',
    action => 'UPDATE bf070_second SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    requires_backfill => 'bf070_first', rate => 1000);
SELECT results_eq($$SELECT state, blocked_by FROM backfill_pending() WHERE name = 'bf070_second'$$,
                  $$VALUES ('blocked', 'backfill bf070_first has not completed (its last pass: none)')$$,
                  'the second is blocked: the first has not completed (no pass)');
SELECT throws_ok($$SELECT backfill_run('bf070_second', wait => false)$$, 'BF005', NULL,
                 'run of the second with wait => false: REQUIRES (BF005)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf070_self', relation => 'bf070_a', predicate => 'c IS NULL',
    action => 'UPDATE bf070_a SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', requires_backfill => 'bf070_self')$$,
    'BF011', NULL, 'a backfill that requires itself: OPTION_INVALID (BF011)');

SELECT backfill_run('bf070_second') AS second_run \gset
SELECT ok(bf070_stays(format($$SELECT r.phase = 'queued'
                                  AND (SELECT count(*) FROM bf070_second WHERE c IS NOT NULL) = 0
                                 FROM backfill.run r WHERE r.run_id = %s$$, :second_run), 3),
          'the second waits while the first has not run (3 naptimes: queued, nothing written)');
SELECT backfill_run('bf070_first') AS first_run \gset
SELECT is(backfill_wait(:first_run, '300 s'), 'completed', 'the first completes');
SELECT is(backfill_wait(:second_run, '300 s'), 'completed', 'then the second completes');
SELECT ok((SELECT min(p.started_at) FROM backfill.partition p WHERE p.run_id = :second_run)
          >= (SELECT finished_at FROM backfill.ledger WHERE run_id = :first_run),
          'the second''s work started only after the first had finished');
SELECT is((SELECT count(*)::int FROM bf070_second WHERE c = 1), 20, 'the second rewrote its 20 rows');

-- ==================================================================
-- run_as: the lanes log in as the named role
-- ==================================================================
SET ROLE bf070_decl;
SELECT lives_ok($$SELECT backfill_declare(name => 'bf070_runas', relation => 'bf070_who',
    predicate => 'who IS NULL', action => 'UPDATE bf070_who SET who = current_user WHERE id BETWEEN $1 AND $2 AND (who IS NULL)',
    run_as => 'bf070_worker', rate => 1000)$$,
    'bf070_decl declares a backfill with run_as => bf070_worker (a LOGIN role it is a member of)');
SELECT backfill_run('bf070_runas') AS runas_run \gset
SELECT is(backfill_wait(:runas_run, '300 s'), 'completed', 'the run_as pass completes');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf070_bad', relation => 'bf070_who',
    predicate => 'who IS NULL', action => 'UPDATE bf070_who SET who = current_user WHERE id BETWEEN $1 AND $2 AND (who IS NULL)',
    run_as => 'bf070_no_such_role')$$, 'BF011', NULL,
    'run_as a role that does not exist: OPTION_INVALID (BF011)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf070_bad', relation => 'bf070_who',
    predicate => 'who IS NULL', action => 'UPDATE bf070_who SET who = current_user WHERE id BETWEEN $1 AND $2 AND (who IS NULL)',
    run_as => 'bf070_stranger')$$, 'BF016', NULL,
    'run_as a role the declarer is not a member of: PRIVILEGE (BF016)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf070_bad', relation => 'bf070_who',
    predicate => 'who IS NULL', action => 'UPDATE bf070_who SET who = current_user WHERE id BETWEEN $1 AND $2 AND (who IS NULL)',
    run_as => 'bf070_nologin')$$, 'BF016', NULL,
    'run_as a role without LOGIN: PRIVILEGE (BF016)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf070_bad', relation => 'bf070_who',
    predicate => 'who IS NULL', action => 'UPDATE bf070_who SET who = current_user WHERE id BETWEEN $1 AND $2 AND (who IS NULL)',
    run_as => 'postgres')$$, 'BF016', NULL,
    'run_as the superuser: PRIVILEGE (BF016)');
RESET ROLE;
SELECT results_eq($$SELECT count(*)::int, min(who), max(who) FROM bf070_who$$,
                  $$VALUES (10, 'bf070_worker', 'bf070_worker')$$,
                  'every row was written by current_user = bf070_worker, the run_as role');
SELECT results_eq($$SELECT pg_get_userbyid(owner), pg_get_userbyid(run_as) FROM backfill.declaration
                     WHERE name = 'bf070_runas'$$,
                  $$VALUES ('bf070_decl'::name, 'bf070_worker'::name)$$,
                  'the declaration: owner bf070_decl, run_as bf070_worker');

-- without run_as the lanes log in as the declarer
UPDATE bf070_who SET who = NULL;
SET ROLE bf070_decl;
SELECT backfill_declare(name => 'bf070_self_role', relation => 'bf070_who',
    predicate => 'who IS NULL', action => 'UPDATE bf070_who SET who = current_user WHERE id BETWEEN $1 AND $2 AND (who IS NULL)',
    rate => 1000);
SELECT backfill_run('bf070_self_role') AS self_run \gset
SELECT is(backfill_wait(:self_run, '300 s'), 'completed', 'the pass without run_as completes');
RESET ROLE;
SELECT results_eq($$SELECT count(*)::int, min(who), max(who) FROM bf070_who$$,
                  $$VALUES (10, 'bf070_decl', 'bf070_decl')$$,
                  'without run_as every row was written as the declarer bf070_decl');

-- ==================================================================
-- settings and row-level security
--
-- Regression guard (bug found by this file, fixed in 07da33a): the
-- declaration's settings were once applied only
-- inside batches (batch.c begin_batch), not while the lane plans the pass
-- (backfill.estimate_rows' EXPLAIN folds current_setting() for its
-- estimate) nor while it counts the rows left (pass.c pass_finish).  With
-- the usual policy USING (tenant = current_setting('app.tenant_id')::int)
-- the pass failed at planning with 42704 'unrecognized configuration
-- parameter "app.tenant_id"', so the tests "the tenant-1 pass completes"
-- and the ":tenant" ones below failed; with a lenient policy the final
-- count saw no row and a pass that left rows was recorded as completed (see "Convergence under row-level security").
-- ==================================================================
SET ROLE bf070_tenant;
SELECT throws_ok($$SELECT backfill_declare(name => 'bf070_bad', relation => 'bf070_rls',
    predicate => 'v IS NULL', action => 'UPDATE bf070_rls SET v = 1 WHERE id BETWEEN $1 AND $2 AND (v IS NULL)')$$,
    'BF011', NULL, 'a table with row-level security, neither settings nor tenant: OPTION_INVALID (BF011)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf070_bad', relation => 'bf070_rls',
    predicate => 'v IS NULL', action => 'UPDATE bf070_rls SET v = 1 WHERE id BETWEEN $1 AND $2 AND (v IS NULL)',
    tenant => 'none')$$,
    'BF016', NULL, 'tenant => ''none'' for a role row-level security filters: PRIVILEGE (BF016)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf070_bad', relation => 'bf070_rls',
    predicate => 'v IS NULL', action => 'UPDATE bf070_rls SET v = 1 WHERE id BETWEEN $1 AND $2 AND (v IS NULL)',
    tenant => 'all')$$,
    'BF011', NULL, 'tenant => ''all'' (neither NULL nor none): OPTION_INVALID (BF011)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf070_bad', relation => 'bf070_rls',
    predicate => 'v IS NULL', action => 'UPDATE bf070_rls SET v = 1 WHERE id BETWEEN $1 AND $2 AND (v IS NULL)',
    settings => '{"app.tenant_id": 1}')$$,
    'BF011', NULL, 'a setting whose value is not a string: OPTION_INVALID (BF011)');
SELECT lives_ok($$SELECT backfill_declare(name => 'bf070_t1', relation => 'bf070_rls',
    predicate => 'v IS NULL', action => 'UPDATE bf070_rls SET v = 1 WHERE id BETWEEN $1 AND $2 AND (v IS NULL)',
    settings => '{"app.tenant_id": "1"}', rate => 1000)$$,
    'bf070_tenant declares over the RLS table with settings => {"app.tenant_id": "1"}');
SELECT backfill_run('bf070_t1') AS t1_run \gset
SELECT is(backfill_wait(:t1_run, '300 s'), 'completed', '(was a bug: settings outside batches) the tenant-1 pass completes');
RESET ROLE;
SELECT results_eq($$SELECT tenant, count(*) FILTER (WHERE v = 1)::int, count(*) FILTER (WHERE v IS NULL)::int
                      FROM bf070_rls GROUP BY tenant ORDER BY tenant$$,
                  $$VALUES (0, 0, 10), (1, 10, 0), (2, 0, 10)$$,
                  '(was a bug: settings outside batches) only the 10 rows of tenant 1 were rewritten (seen as the superuser)');
SELECT is((SELECT rows FROM backfill.ledger WHERE run_id = :t1_run), 10::bigint,
          '(was a bug: settings outside batches) the ledger counts the 10 rows of tenant 1');

-- a scoped backfill whose setting takes the input's key (":tenant")
SET ROLE bf070_tenant;
SELECT lives_ok($$SELECT backfill_declare(name => 'bf070_tn', relation => 'bf070_rls',
    predicate => 'v IS NULL', action => 'UPDATE bf070_rls SET v = 2 WHERE id BETWEEN $1 AND $2 AND (v IS NULL)',
    input => '{"tenant": "integer"}', scope => 'input->>''tenant''',
    settings => '{"app.tenant_id": ":tenant"}', rate => 1000)$$,
    'a scoped declaration with settings => {"app.tenant_id": ":tenant"}');
SELECT backfill_run('bf070_tn', input => '{"tenant": 2}') AS tn_run \gset
SELECT is(backfill_wait(:tn_run, '300 s'), 'completed', '(was a bug: settings outside batches) the scope-2 pass completes');
RESET ROLE;
SELECT results_eq($$SELECT tenant, count(*) FILTER (WHERE v = 2)::int, count(*) FILTER (WHERE v IS NULL)::int
                      FROM bf070_rls GROUP BY tenant ORDER BY tenant$$,
                  $$VALUES (0, 0, 10), (1, 0, 0), (2, 10, 0)$$,
                  '(was a bug: settings outside batches) the ":tenant" setting took the input: only tenant 2''s rows got v = 2');
SELECT is((SELECT ledger_name FROM backfill.ledger WHERE run_id = :tn_run), 'bf070_tn:2',
          'its ledger name is bf070_tn:2');

-- Convergence under row-level security (was a bug, fixed in 07da33a).  A lenient policy (no error
-- when the setting is missing) and an action that leaves 3 rows of tenant 1
-- undone: the pass must fail as STALLED with 3 rows, never 'completed'.
SET ROLE bf070_tenant;
SELECT lives_ok($$SELECT backfill_declare(name => 'bf070_t1_partial', relation => 'bf070_rls2',
    predicate => 'v IS NULL',
    action => 'UPDATE bf070_rls2 SET v = 1 WHERE id BETWEEN $1 AND $2 AND id < 20 AND (v IS NULL)',
    settings => '{"app.tenant_id": "1"}', rate => 1000)$$,
    'a tenant-1 backfill whose action leaves ids 22, 25, 28 undone');
SELECT backfill_run('bf070_t1_partial') AS partial_run \gset
SELECT is(backfill_wait(:partial_run, '300 s'), 'failed',
          '(was a bug) rows of the tenant still match after the pass: it must fail, not complete');
SELECT results_eq($$SELECT l.error_code, r.remaining FROM backfill.ledger l JOIN backfill.run r USING (run_id)
                     WHERE run_id = $$ || :partial_run,
                  $$VALUES ('BF006', 3::bigint)$$,
                  '(was a bug) as STALLED (BF006) with the 3 rows the tenant setting lets the count see');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM bf070_rls2 WHERE tenant = 1 AND v IS NULL), 3,
          '(fact) 3 rows of tenant 1 are indeed left undone');

-- the superuser bypasses row-level security: tenant => 'none' is accepted
SELECT lives_ok($$SELECT backfill_declare(name => 'bf070_all', relation => 'bf070_rls',
    predicate => 'v IS NULL', action => 'UPDATE bf070_rls SET v = 3 WHERE id BETWEEN $1 AND $2 AND (v IS NULL)',
    tenant => 'none', rate => 1000)$$,
    'tenant => ''none'' by a role that bypasses row-level security is accepted');

SELECT * FROM finish();

-- clean up
SELECT backfill_cancel(name) FROM backfill.declaration WHERE name LIKE 'bf070%';
DROP EXTENSION pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
DROP TABLE bf070_a, bf070_first, bf070_second, bf070_who, bf070_rls, bf070_rls2 CASCADE;
DROP TABLE public.schema_migrations;
DROP FUNCTION bf070_stays(text, float8);
DROP ROLE bf070_decl;
DROP ROLE bf070_worker;
DROP ROLE bf070_nologin;
DROP ROLE bf070_stranger;
DROP ROLE bf070_tenant;
