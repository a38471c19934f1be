-- 162_scoped_revert: a scoped backfill with a revert can be reverted and dropped
-- (attacker F6 of issue 14).  Two scopes (tenants 1 and 2) run forward with a
-- non-idempotent action (n = n + 1); then:
--  * backfill_drop is refused (BF009) with a hint that fits a scoped backfill
--    (backfill_revert per scope with input =>);
--  * backfill_revert(name) without input is refused with BF028 and a hint;
--  * backfill_revert(name, input => ...) undoes exactly that scope (n = n - 1),
--    as a revert pass of its ledger name; the other scope is untouched;
--  * drop is still refused while one scope is not reverted, and allowed once
--    both are.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf162_t CASCADE;
DROP FUNCTION IF EXISTS bf_test_poll(text, float8);
DROP ROLE IF EXISTS bf162_decl;
CREATE ROLE bf162_decl LOGIN;
RESET backfill.environment;

CREATE TABLE bf162_t (id int PRIMARY KEY, tenant int NOT NULL, n int NOT NULL DEFAULT 0);
INSERT INTO bf162_t SELECT g, 1 + g % 2, 0 FROM generate_series(1, 400) g;
ANALYZE bf162_t;
ALTER TABLE bf162_t OWNER TO bf162_decl;

\ir include/poll.psql

CREATE FUNCTION pg_temp.error_of(q text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE c text; h text;
BEGIN
    EXECUTE q;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS c = RETURNED_SQLSTATE, h = PG_EXCEPTION_HINT;
    RETURN c || ': ' || h;
END $f$;

SELECT * FROM no_plan();

SET ROLE bf162_decl;
SELECT length(backfill_declare(name => 'bf162', relation => 'bf162_t',
    predicate => 'n = 0 AND tenant = (backfill_input()->>''tenant'')::int',
    action => 'UPDATE bf162_t SET n = n + 1 WHERE id BETWEEN $1 AND $2'
              ' AND tenant = (backfill_input()->>''tenant'')::int AND n = 0',
    revert => 'UPDATE bf162_t SET n = n - 1 WHERE id BETWEEN $1 AND $2'
              ' AND tenant = (backfill_input()->>''tenant'')::int AND n = 1',
    revert_predicate => 'n = 1 AND tenant = (backfill_input()->>''tenant'')::int',
    batch_size => 50, rate => 1000,
    input => '{"tenant": "integer"}', scope => 'input->>''tenant''', guard => false)) AS checksum_length;
SELECT backfill_run('bf162', input => '{"tenant": 1}') AS f1 \gset
SELECT backfill_run('bf162', input => '{"tenant": 2}') AS f2 \gset
RESET ROLE;
SELECT ok(bf_test_poll(format('SELECT bool_and(status = %L) FROM backfill.ledger WHERE run_id IN (%s, %s)',
                              'completed', :f1, :f2), 300), 'both scopes complete forward');
SELECT is((SELECT count(*) FROM bf162_t WHERE n <> 1), 0::bigint, 'every row done once');

SET ROLE bf162_decl;
SELECT matches(pg_temp.error_of($$SELECT backfill_drop('bf162')$$),
               '^BF009: .*backfill_revert\(''bf162'', input => ',
               'drop is refused (BF009), its hint says to revert each scope with input');
SELECT matches(pg_temp.error_of($$SELECT backfill_revert('bf162')$$),
               '^BF028: Call backfill_revert\(''bf162'', input => ',
               'revert without input is refused with BF028, and a hint');
SELECT backfill_revert('bf162', input => '{"tenant": 1}') AS r1 \gset
RESET ROLE;
SELECT ok(bf_test_poll(format('SELECT status = %L FROM backfill.ledger WHERE run_id = %s',
                              'completed', :r1), 300), 'the revert of tenant 1 completes');
SELECT is((SELECT ledger_name || ' ' || direction FROM backfill.ledger WHERE run_id = :r1),
          'bf162:1 revert', 'it is a revert pass of that scope''s ledger name');
SELECT is((SELECT string_agg(DISTINCT tenant || ':' || n, ',' ORDER BY tenant || ':' || n) FROM bf162_t),
          '1:0,2:1', 'tenant 1 is undone exactly once, tenant 2 untouched');
SELECT is((SELECT rows FROM backfill.ledger WHERE run_id = :r1), 200::bigint,
          'the revert counts exactly the 200 rows of its scope');

SET ROLE bf162_decl;
SELECT matches(pg_temp.error_of($$SELECT backfill_drop('bf162')$$), '^BF009: ',
               'drop is still refused while tenant 2 is not reverted');
SELECT backfill_revert('bf162', input => '{"tenant": 2}') AS r2 \gset
RESET ROLE;
SELECT ok(bf_test_poll(format('SELECT status = %L FROM backfill.ledger WHERE run_id = %s',
                              'completed', :r2), 300), 'the revert of tenant 2 completes');
SELECT is((SELECT count(*) FROM bf162_t WHERE n <> 0), 0::bigint, 'every row is undone once');
SET ROLE bf162_decl;
SELECT is(backfill_revert('bf162', input => '{"tenant": 2}'), :r2::bigint,
          'a second revert of a reverted scope is answered by it, nothing starts');
SELECT is(backfill_drop('bf162'), true, 'with every scope reverted, the backfill is dropped');
RESET ROLE;

SELECT * FROM finish();
