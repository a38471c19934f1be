-- 080_security: bad declarations and calls by a non-superuser (bf_mallory),
-- each refused with its SQLSTATE and a hint, the catalogs unchanged by
-- them; another role's backfills invisible; injection through names,
-- keys, relations, predicates, actions, scopes and inputs; lanes of a
-- non-superuser's backfill never run as a superuser.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf080_t, bf080_m, bf080_none, bf080_a, bf080_slow CASCADE;
DROP FUNCTION IF EXISTS bf080_as(text, text), bf080_refused(text, text, text, text),
    bf080_denied(text, text, text), bf_test_poll(text, float8), bf080_secret_page(text, jsonb);
DROP ROLE IF EXISTS bf_mallory;
DROP ROLE IF EXISTS bf080_alice;
CREATE ROLE bf_mallory LOGIN;
CREATE ROLE bf080_alice LOGIN;
RESET backfill.environment;

-- bf080_t: mallory may read it, not update it
CREATE TABLE bf080_t (id int PRIMARY KEY, c int, tenant int NOT NULL DEFAULT 1);
INSERT INTO bf080_t (id) SELECT g FROM generate_series(1, 10) g;
GRANT SELECT ON bf080_t TO bf_mallory;
-- bf080_none: mallory has no privilege at all
CREATE TABLE bf080_none (id int PRIMARY KEY, c int);
-- bf080_m: mallory's playground (SELECT, UPDATE); the injections aim at it
CREATE TABLE bf080_m (id int PRIMARY KEY, c int);
INSERT INTO bf080_m (id) SELECT g FROM generate_series(1, 10) g;
GRANT SELECT, UPDATE ON bf080_m TO bf_mallory;
-- bf080_a: alice's table
CREATE TABLE bf080_a (id int PRIMARY KEY, c int);
INSERT INTO bf080_a (id) SELECT g FROM generate_series(1, 10) g;
GRANT SELECT, UPDATE ON bf080_a TO bf080_alice;
-- bf080_slow: mallory's slow pass
CREATE TABLE bf080_slow (id int PRIMARY KEY, c int);
INSERT INTO bf080_slow (id) SELECT g FROM generate_series(1, 40) g;
GRANT SELECT, UPDATE ON bf080_slow TO bf_mallory;
-- a pages function mallory may not execute
CREATE FUNCTION bf080_secret_page(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT '{"rows": [], "next": null}'::jsonb $$;
REVOKE ALL ON FUNCTION bf080_secret_page(text, jsonb) FROM PUBLIC;
ANALYZE bf080_t, bf080_m, bf080_a, bf080_slow;

-- Run stmt as role; answer 'no error', or SQLSTATE|(hint is non-empty).
-- The SET ROLE is undone with the failed subtransaction.
CREATE FUNCTION bf080_as(role text, stmt text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    st text;
    h text;
BEGIN
    EXECUTE format('SET ROLE %I', role);
    EXECUTE stmt;
    RESET ROLE;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, h = PG_EXCEPTION_HINT;
    RETURN st || '|' || (coalesce(h, '') <> '')::text;
END
$$;
-- Two tests: the statement, run as role, throws code; and its error has a hint.
CREATE FUNCTION bf080_refused(role text, stmt text, code text, descr text) RETURNS SETOF text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN NEXT throws_ok(format('SET ROLE %I; %s; RESET ROLE', role, stmt), code, NULL,
                          descr || ': ' || code);
    RETURN NEXT is(bf080_as(role, stmt), code || '|true', descr || ': ' || code || ' with a hint');
END
$$;
-- Privilege errors of the server itself (42501) carry no hint of ours: code only.
CREATE FUNCTION bf080_denied(role text, stmt text, descr text) RETURNS SETOF text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN NEXT throws_ok(format('SET ROLE %I; %s; RESET ROLE', role, stmt), '42501', NULL,
                          descr || ': 42501');
END
$$;
\ir include/poll.psql

SELECT * FROM no_plan();

-- ------------------------------------------------------------------
-- alice's backfill (completed, with a requirement) and mallory's own
-- ------------------------------------------------------------------
SET ROLE bf080_alice;
SELECT backfill_declare(name => 'bf080_alice', relation => 'bf080_a', predicate => 'c IS NULL',
    action => 'UPDATE bf080_a SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000);
SELECT backfill_declare(name => 'bf080_alice_req', relation => 'bf080_a', predicate => 'c IS NULL',
    action => 'UPDATE bf080_a SET c = 2 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000,
    requires => 'alice_secret_migration_42');
SELECT backfill_run('bf080_alice') AS alice_run \gset
SELECT is(backfill_wait(:alice_run, '300 s'), 'completed', 'alice''s pass completes');
RESET ROLE;
SET ROLE bf_mallory;
SELECT lives_ok($$SELECT backfill_declare(name => 'bf080_mine', relation => 'bf080_m', predicate => 'c IS NULL',
    action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000,
    input => '{"tenant": "integer"}', scope => 'input->>''tenant''')$$,
    'mallory may declare a scoped backfill over a table she may update');
RESET ROLE;

-- what the catalogs hold before the bad calls (as the superuser)
SELECT md5(string_agg(d::text, '|' ORDER BY d.name)) AS decl_before FROM backfill.declaration d \gset
SELECT (SELECT count(*) FROM backfill.ledger) AS ledger_before,
       (SELECT count(*) FROM backfill.run) AS run_before,
       (SELECT count(*) FROM backfill.partition) AS part_before,
       (SELECT md5(string_agg(l::text, '|' ORDER BY run_id)) FROM backfill.ledger l) AS ledger_md5_before \gset

-- ------------------------------------------------------------------
-- privileges over tables and roles
-- ------------------------------------------------------------------
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_t',
    predicate => 'c IS NULL', action => 'UPDATE bf080_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'BF016', 'declaring over a table mallory may read but not UPDATE');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_none',
    predicate => 'c IS NULL', action => 'UPDATE bf080_none SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'BF016', 'declaring over a table mallory has no privilege on');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_alice', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'BF003', 'redeclaring alice''s backfill under its name');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    run_as => 'postgres')$$,
    'BF016', 'run_as the superuser');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    run_as => 'bf080_alice')$$,
    'BF016', 'run_as a role mallory is not a member of');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    run_as => 'bf080_no_such_role')$$,
    'BF011', 'run_as a role that does not exist');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => NULL,
    predicate => NULL, action => 'SELECT 1', pages => 'bf080_secret_page')$$,
    'BF016', 'a pages function mallory may not execute');

-- another role's backfill
SELECT bf080_refused('bf_mallory', $$SELECT backfill_run('bf080_alice', force => true)$$,
    'BF016', 'run of alice''s backfill');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_pause('bf080_alice')$$,
    'BF016', 'pause of alice''s backfill');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_resume('bf080_alice')$$,
    'BF016', 'resume of alice''s backfill');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_cancel('bf080_alice')$$,
    'BF016', 'cancel of alice''s backfill');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_retry('bf080_alice')$$,
    'BF016', 'retry of alice''s backfill');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_drop('bf080_alice')$$,
    'BF016', 'drop of alice''s backfill');
SELECT bf080_refused('bf_mallory', format($$SELECT backfill_wait(%s, '1 s')$$, :alice_run),
    'BF002', 'waiting for alice''s run (invisible: unknown)');

-- settings that would change who or where a batch runs
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    settings => '{"role": "postgres"}')$$,
    'BF011', 'settings => {"role": ...}');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    settings => '{"search_path": "evil, public"}')$$,
    'BF011', 'settings => {"search_path": ...}');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    settings => '{"session_authorization": "postgres"}')$$,
    'BF011', 'settings => {"session_authorization": ...}');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    settings => '{"backfill.input": "{\"tenant\": 1}"}')$$,
    'BF011', 'settings => {"backfill.input": ...}');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    settings => '{"backfill.environment": "production"}')$$,
    'BF011', 'settings => {"backfill.environment": ...}');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    settings => '{"app.tenant_id": {"nested": 1}}')$$,
    'BF011', 'a setting whose value is not a string');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    tenant => 'everyone')$$,
    'BF011', 'tenant => ''everyone''');
SELECT bf080_denied('bf_mallory', $$SET backfill.input = '{"tenant": 1}'$$,
    'mallory setting backfill.input herself');
SELECT bf080_denied('bf_mallory', $$SET backfill.migrations_table = 'bf080_t(c)'$$,
    'mallory pointing backfill.migrations_table at another table');

-- injection through names, keys, relations, predicates, actions, scopes
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    key => 'id; DROP TABLE bf080_m', predicate => 'c IS NULL',
    action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'BF001', 'key => ''id; DROP TABLE bf080_m''');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m; DROP TABLE bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'BF001', 'relation => ''bf080_m; DROP TABLE bf080_m''');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'true) ; DROP TABLE bf080_m; SELECT (1',
    action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2', guard => false)$$,
    'BF001', 'predicate smuggling a DROP TABLE');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'true) UNION SELECT 1 FROM bf080_m WHERE (true',
    action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2', guard => false)$$,
    'BF001', 'predicate smuggling a UNION');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'true) --', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (true) --)')$$,
    'BF001', 'predicate closing its parenthesis and commenting out the rest');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'true) ORDER BY 1 LIMIT 1 --', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (true) ORDER BY 1 LIMIT 1 --)')$$,
    'BF001', 'predicate smuggling an ORDER BY / LIMIT');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2; DROP TABLE bf080_m')$$,
    'BF001', 'action of two statements');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'COMMIT')$$,
    'BF001', 'action COMMIT');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'VACUUM bf080_m')$$,
    'BF001', 'action VACUUM');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'DROP TABLE bf080_m')$$,
    'BF001', 'action DROP TABLE');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'SET ROLE postgres')$$,
    'BF001', 'action SET ROLE');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    input => '{"tenant": "integer"}',
    scope => 'input->>''tenant'') IS NOT NULL); DROP TABLE bf080_m; SELECT ((1')$$,
    'BF001', 'scope smuggling a DROP TABLE');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    input => '{"tenant": "integer"}',
    scope => 'input->>''tenant'') IS NOT NULL) UNION SELECT 1 FROM bf080_m WHERE ((true')$$,
    'BF001', 'scope smuggling a UNION');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    input => '{"tenant": "integer; DROP TABLE bf080_m"}', scope => 'input->>''tenant''')$$,
    'BF001', 'BUG (scope.c shape_type: parseTypeString raises 42601 with no hint): input shape whose type name smuggles SQL');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080_x', relation => NULL,
    predicate => NULL, action => 'SELECT 1', pages => 'bf080_secret_page; DROP TABLE bf080_m')$$,
    'BF001', 'pages => ''fn; DROP TABLE bf080_m''');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_run('bf080_mine', input => '{"tenant": "1; DROP TABLE bf080_m"}')$$,
    'BF011', 'input value carrying SQL for an integer key');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_run('bf080_mine', input => '{"tenant": "1) OR (true"}')$$,
    'BF011', 'input value carrying a boolean smuggle for an integer key');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => 'bf080:x', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'BF012', 'a name with '':'' (would forge a scope''s ledger name)');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => E'bf080_x\n; DROP TABLE bf080_m', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'BF012', 'a name with a newline');
SELECT bf080_refused('bf_mallory', $$SELECT backfill_declare(name => '', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'BF012', 'an empty name');

-- the catalogs themselves
SELECT bf080_denied('bf_mallory', $$INSERT INTO backfill.declaration (name, action, batch_size, rate,
    max_attempts, backoff_base_ms, backoff_cap_ms, batch_timeout_ms, run_as, owner, checksum, pages_fn)
    VALUES ('bf080_forged', 'SELECT 1', 1, 1, 1, 1, 1, 1, 10, 10, 'x', 'now()'::regprocedure)$$,
    'INSERT INTO backfill.declaration');
SELECT bf080_denied('bf_mallory', $$UPDATE backfill.declaration SET owner = 'bf_mallory'::regrole$$,
    'UPDATE backfill.declaration (taking alice''s backfill over)');
SELECT bf080_denied('bf_mallory', $$UPDATE backfill.declaration SET run_as = 10 WHERE name = 'bf080_mine'$$,
    'UPDATE backfill.declaration of her own backfill (run_as the bootstrap superuser)');
SELECT bf080_denied('bf_mallory', $$DELETE FROM backfill.declaration$$, 'DELETE FROM backfill.declaration');
SELECT bf080_denied('bf_mallory', $$INSERT INTO backfill.ledger (ledger_name, declaration, checksum, status,
    owner, finished_at) VALUES ('bf080_mine:1', 'bf080_mine', 'x', 'completed', 10, now())$$,
    'INSERT INTO backfill.ledger (forging a completed pass)');
SELECT bf080_denied('bf_mallory', $$UPDATE backfill.ledger SET status = 'failed'$$, 'UPDATE backfill.ledger');
SELECT bf080_denied('bf_mallory', $$DELETE FROM backfill.ledger$$, 'DELETE FROM backfill.ledger');
SELECT bf080_denied('bf_mallory', $$UPDATE backfill.run SET paused = true$$, 'UPDATE backfill.run');
SELECT bf080_denied('bf_mallory', $$DELETE FROM backfill.partition$$, 'DELETE FROM backfill.partition');
SELECT bf080_denied('bf_mallory', $$TRUNCATE backfill.ledger CASCADE$$, 'TRUNCATE backfill.ledger');
SELECT bf080_denied('bf_mallory', format($$SELECT * FROM backfill.claim_partition(%s, pg_backend_pid(), now())$$, :alice_run),
    'calling backfill.claim_partition');
SELECT bf080_denied('bf_mallory', $$CREATE TABLE backfill.bf080_evil (x int)$$,
    'creating a table in schema backfill');

-- ------------------------------------------------------------------
-- the catalogs are unchanged by all of that
-- ------------------------------------------------------------------
SELECT is((SELECT md5(string_agg(d::text, '|' ORDER BY d.name)) FROM backfill.declaration d), :'decl_before',
          'backfill.declaration is unchanged (md5 of its rows)');
SELECT results_eq($$SELECT (SELECT count(*) FROM backfill.ledger), (SELECT count(*) FROM backfill.run),
                           (SELECT count(*) FROM backfill.partition),
                           (SELECT md5(string_agg(l::text, '|' ORDER BY run_id)) FROM backfill.ledger l)$$,
                  format($$VALUES (%s::bigint, %s::bigint, %s::bigint, %L)$$,
                         :ledger_before, :run_before, :part_before, :'ledger_md5_before'),
                  'ledger, run and partition counts (and the ledger''s rows) are unchanged');
SELECT results_eq($$SELECT count(*)::int, count(*) FILTER (WHERE c IS NULL)::int FROM bf080_m$$,
                  $$VALUES (10, 10)$$, 'bf080_m survived every injection, untouched');
SELECT has_table('bf080_t', 'bf080_t survived');
SELECT is((SELECT count(*)::int FROM bf080_a WHERE c = 1), 10, 'alice''s rows are as her pass left them');

-- ------------------------------------------------------------------
-- another role's backfill is invisible to mallory
-- ------------------------------------------------------------------
SELECT ok((SELECT count(*) FROM backfill.declaration WHERE name LIKE 'bf080_alice%') = 2
          AND (SELECT count(*) FROM backfill.ledger WHERE run_id = :alice_run) = 1
          AND (SELECT count(*) FROM backfill.partition WHERE run_id = :alice_run) = 1,
          '(the superuser sees alice''s declarations, ledger row and partition)');
SET ROLE bf_mallory;
SELECT is((SELECT count(*)::int FROM backfill.declaration WHERE name LIKE 'bf080_alice%'), 0,
          'mallory sees none of alice''s rows in backfill.declaration');
SELECT is((SELECT count(*)::int FROM backfill.ledger WHERE run_id = :alice_run), 0,
          'mallory sees none of alice''s rows in backfill.ledger');
SELECT is((SELECT count(*)::int FROM backfill.run WHERE run_id = :alice_run), 0,
          'mallory sees none of alice''s rows in backfill.run');
SELECT is((SELECT count(*)::int FROM backfill.partition WHERE run_id = :alice_run), 0,
          'mallory sees none of alice''s rows in backfill.partition');
SELECT is((SELECT count(*)::int FROM backfill_status('bf080_alice')), 0,
          'backfill_status(''bf080_alice'') answers no row to mallory');
SELECT is((SELECT count(*)::int FROM backfill_partitions('bf080_alice')), 0,
          'backfill_partitions(''bf080_alice'') answers no row to mallory');
SELECT is((SELECT count(*)::int FROM backfill_pending() WHERE name LIKE 'bf080_alice%'), 0,
          'backfill_pending() lists none of alice''s backfills to mallory');
-- BUG: the view runs as its owner (the superuser who created the
-- extension), which row-level security does not filter: it needs
-- WITH (security_invoker = true).
SELECT is((SELECT count(*)::int FROM backfill_ledger WHERE declaration LIKE 'bf080_alice%'), 0,
          'BUG (view without security_invoker): the backfill_ledger view shows none of alice''s passes to mallory');
-- BUG: SECURITY DEFINER, executable by PUBLIC, reads any declaration:
-- it tells anyone the requirement (migration id) of another role's backfill.
SELECT is(backfill.unmet_requirement('bf080_alice_req'), NULL,
          'BUG (SECURITY DEFINER, no membership check): backfill.unmet_requirement() tells mallory nothing about alice''s requirement');
SELECT is((SELECT count(*)::int FROM backfill_pending() WHERE name = 'bf080_mine'), 0,
          '(mallory''s own scoped declaration has not run: no pending row either)');
RESET ROLE;
SET ROLE bf080_alice;
SELECT is((SELECT count(*)::int FROM backfill.declaration WHERE name = 'bf080_mine'), 0,
          'alice in turn sees nothing of mallory''s declaration');
RESET ROLE;

-- ------------------------------------------------------------------
-- a name with a quote and a semicolon is an ordinary name
-- ------------------------------------------------------------------
SET ROLE bf_mallory;
SELECT lives_ok($$SELECT backfill_declare(name => 'x''; DROP TABLE bf080_m; --', relation => 'bf080_m',
    predicate => 'c IS NULL', action => 'UPDATE bf080_m SET c = 7 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000)$$,
    'a name with a quote and a semicolon is accepted as an ordinary name');
SELECT backfill_run('x''; DROP TABLE bf080_m; --') AS quote_run \gset
SELECT is(backfill_wait(:quote_run, '300 s'), 'completed', 'its pass completes');
SELECT is((SELECT ledger_name FROM backfill.ledger WHERE run_id = :quote_run), 'x''; DROP TABLE bf080_m; --',
          'its ledger name is the name, verbatim');
SELECT is((SELECT state FROM backfill_pending() WHERE name = 'x''; DROP TABLE bf080_m; --'), 'completed',
          'backfill_pending() lists it by that name, completed');
RESET ROLE;
SELECT results_eq($$SELECT count(*)::int, count(*) FILTER (WHERE c = 7)::int FROM bf080_m$$,
                  $$VALUES (10, 10)$$, 'bf080_m is intact: its 10 rows, rewritten by the action only');

-- ------------------------------------------------------------------
-- the lanes of mallory's backfill run as mallory, never as a superuser
-- (40 batches at 0.1 a second a lane: the pass is still running when it
-- is cancelled, however slow the machine)
-- ------------------------------------------------------------------
SET ROLE bf_mallory;
SELECT backfill_declare(name => 'bf080_slow', relation => 'bf080_slow', predicate => 'c IS NULL',
    action => 'UPDATE bf080_slow SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    batch_size => 1, rate => 0.1, max_parallel => 2);
SELECT backfill_run('bf080_slow') AS slow_run \gset
RESET ROLE;
SELECT ok(bf_test_poll($$SELECT count(*) >= 1 FROM pg_stat_activity
                       WHERE backend_type = 'pg_backfill lane' AND datname = current_database()
                         AND query LIKE '%bf080_slow%'$$, 300),
          'the slow pass has a lane at work');
SELECT ok(bf_test_poll(format($$SELECT coalesce(sum(rows), 0) >= 1 FROM backfill.partition WHERE run_id = %s$$,
                            :slow_run), 300),
          'it has committed a batch');
SELECT is((SELECT string_agg(DISTINCT usename::text, ',') FROM pg_stat_activity
             WHERE backend_type = 'pg_backfill lane' AND datname = current_database()
               AND query LIKE '%bf080_slow%'),
          'bf_mallory', 'its lanes are logged in as bf_mallory');
SELECT is_empty($$SELECT a.pid FROM pg_stat_activity a JOIN pg_roles r ON r.oid = a.usesysid
                   WHERE a.backend_type = 'pg_backfill lane' AND (r.rolsuper OR r.rolbypassrls)$$,
                'no lane runs as a superuser (or a role that bypasses row-level security)');
SELECT is_empty(format($$SELECT 1 FROM bf080_slow WHERE c IS NOT NULL AND c <> 1$$),
                'the lanes wrote only what the action says');
SET ROLE bf_mallory;
SELECT is(backfill_cancel('bf080_slow'), true, 'mallory cancels her slow pass');
RESET ROLE;
SELECT is(backfill_wait(:slow_run, '300 s'), 'cancelled', 'the slow pass ends as cancelled');

SELECT * FROM finish();

-- clean up: the catalogs hold rows of the roles about to be dropped
DROP EXTENSION pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
DROP TABLE bf080_t, bf080_m, bf080_none, bf080_a, bf080_slow CASCADE;
DROP FUNCTION bf080_as(text, text), bf080_refused(text, text, text, text),
    bf080_denied(text, text, text), bf_test_poll(text, float8), bf080_secret_page(text, jsonb);
DROP ROLE bf_mallory;
DROP ROLE bf080_alice;
