-- 130_workers: inputs that made a pass loop, claim success or kill its
-- lanes (issue 10, findings 7, 8 and 9's settings):
--  * a page with rows whose next cursor does not move fails the pass with
--    BF001 after one repeat, instead of running the same page for ever;
--  * a volatile predicate is refused at declaration (BF001), a stable one
--    (now(), current_setting) is accepted;
--  * a setting whose module refuses the value is refused at declaration
--    (BF011), with the setting named.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;
RESET backfill.environment;

DROP TABLE IF EXISTS bf130_t, bf130_dst, bf130_calls CASCADE;
DROP FUNCTION IF EXISTS bf130_same(text, jsonb);

CREATE TABLE bf130_t (id int PRIMARY KEY, c int, at timestamptz);
INSERT INTO bf130_t (id) SELECT g FROM generate_series(1, 10) g;
CREATE TABLE bf130_dst (id int NOT NULL);
CREATE TABLE bf130_calls (n int NOT NULL);
INSERT INTO bf130_calls VALUES (0);

-- a page of two rows whose next is always 'same': the cursor never moves
CREATE FUNCTION bf130_same(cursor text, input jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE bf130_calls SET n = n + 1;
    RETURN jsonb_build_object('rows', '[{"id": 1}, {"id": 2}]'::jsonb, 'next', 'same');
END
$$;

SELECT * FROM no_plan();

-- ==================================================================
-- pages that never advance
-- ==================================================================
SELECT backfill_declare(name => 'bf130_same', relation => NULL, predicate => NULL,
    action => 'INSERT INTO bf130_dst SELECT * FROM jsonb_populate_recordset(NULL::bf130_dst, $1)',
    pages => 'bf130_same', rate => 1000);
SELECT backfill_run('bf130_same') AS same_run \gset
SELECT is(backfill_wait(:same_run, '300 s'), 'failed',
          'a page with rows that does not move the cursor fails the pass (no endless loop)');
SELECT results_eq($$SELECT error_code, error_message ~ 'does not advance'
                      FROM backfill.ledger WHERE run_id = $$ || :same_run,
                  $$VALUES ('BF001', true)$$,
                  'with SOURCE_INVALID (BF001): the pages function does not advance');
SELECT results_eq($$SELECT l.rows, l.batches, p.cursor FROM backfill.ledger l
                      JOIN backfill.partition p USING (run_id) WHERE run_id = $$ || :same_run,
                  $$VALUES (2::bigint, 1::bigint, 'same')$$,
                  'the first page committed (2 rows, cursor ''same''); its repeat did not');
SELECT is((SELECT count(*) FROM bf130_dst), 2::bigint,
          'the repeated page''s action rolled back: 2 rows copied, not 4 or more');
SELECT is((SELECT n FROM bf130_calls), 1,
          'only the first call of the pages function committed');

-- ==================================================================
-- volatile predicates
-- ==================================================================
SELECT throws_ok($$SELECT backfill_declare(name => 'bf130_random', relation => 'bf130_t',
    predicate => 'c IS NULL AND random() < 0.5',
    action => 'UPDATE bf130_t SET c = 1 WHERE id BETWEEN $1 AND $2', guard => false)$$,
    'BF001', 'predicate of backfill "bf130_random" is volatile',
    'a predicate calling random() is refused (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf130_clock', relation => 'bf130_t',
    predicate => 'at < clock_timestamp()',
    action => 'UPDATE bf130_t SET at = now() WHERE id BETWEEN $1 AND $2', guard => false)$$,
    'BF001', 'predicate of backfill "bf130_clock" is volatile',
    'a predicate calling clock_timestamp() is refused (BF001)');
CREATE SEQUENCE bf130_seq;
SELECT throws_ok($$SELECT backfill_declare(name => 'bf130_seq', relation => 'bf130_t',
    predicate => 'c IS NULL AND nextval(''bf130_seq'') > 0',
    action => 'UPDATE bf130_t SET c = 1 WHERE id BETWEEN $1 AND $2', guard => false)$$,
    'BF001', 'predicate of backfill "bf130_seq" is volatile',
    'a predicate calling nextval() is refused (BF001)');
CREATE FUNCTION bf130_vol(int) RETURNS boolean LANGUAGE sql VOLATILE AS $$ SELECT $1 > 0 $$;
SELECT throws_ok($$SELECT backfill_declare(name => 'bf130_fn', relation => 'bf130_t',
    predicate => 'c IS NULL AND bf130_vol(id)',
    action => 'UPDATE bf130_t SET c = 1 WHERE id BETWEEN $1 AND $2', guard => false)$$,
    'BF001', 'predicate of backfill "bf130_fn" is volatile',
    'a predicate calling a function declared VOLATILE is refused (BF001)');
DO $$
BEGIN
    PERFORM backfill_declare(name => 'bf130_fn2', relation => 'bf130_t',
        predicate => 'c IS NULL AND bf130_vol(id)',
        action => 'UPDATE bf130_t SET c = 1 WHERE id BETWEEN $1 AND $2', guard => false);
EXCEPTION WHEN OTHERS THEN
    DECLARE
        h text;
    BEGIN
        GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
        PERFORM set_config('bf130.hint', h, false);
    END;
END
$$;
SELECT matches(coalesce(current_setting('bf130.hint', true), ''), 'stable expression',
               'the hint says to use a stable expression');
SELECT is_empty($$SELECT 1 FROM backfill.declaration WHERE name LIKE 'bf130_%' AND name <> 'bf130_same'$$,
                'no volatile predicate was stored');
SELECT lives_ok($$SELECT backfill_declare(name => 'bf130_stable', relation => 'bf130_t',
    predicate => 'at IS NULL OR at < now() - interval ''1 day''',
    action => 'UPDATE bf130_t SET at = now() WHERE id BETWEEN $1 AND $2', guard => false)$$,
    'a stable predicate (now()) is accepted');
SELECT backfill_run('bf130_stable') AS stable_run \gset
SELECT is(backfill_wait(:stable_run, '300 s'), 'completed', 'and its pass completes');

-- ==================================================================
-- settings whose module refuses the value
-- ==================================================================
DO $$ BEGIN PERFORM 1; END $$;   -- plpgsql is loaded: its settings are defined
SELECT throws_ok($$SELECT backfill_declare(name => 'bf130_set', relation => 'bf130_t',
    predicate => 'c IS NULL', action => 'UPDATE bf130_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    settings => '{"plpgsql.print_strict_params": "maybe"}')$$,
    'BF011', 'setting "plpgsql.print_strict_params" of backfill "bf130_set" cannot be set to "maybe"',
    'a value the setting refuses is refused at declaration (BF011)');
SELECT lives_ok($$SELECT backfill_declare(name => 'bf130_set', relation => 'bf130_t',
    predicate => 'c IS NULL', action => 'UPDATE bf130_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    settings => '{"plpgsql.print_strict_params": "on", "app.tenant": "7"}')$$,
    'values the settings accept are declared');
SELECT is(current_setting('plpgsql.print_strict_params'), 'off',
          'checking the value did not change the declarer''s own session');

SELECT * FROM finish();

-- clean up (the extension and its catalogs stay for the next file)
SELECT backfill_cancel(name) FROM backfill.declaration WHERE name LIKE 'bf130%';
DROP TABLE bf130_t, bf130_dst, bf130_calls CASCADE;
DROP FUNCTION bf130_same(text, jsonb), bf130_vol(int);
DROP SEQUENCE bf130_seq;
