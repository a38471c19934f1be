-- 170_revert_drift: the way back (issue 14, part 2).  The revert and its
-- predicate are checked at declaration as the action and the predicate
-- are; backfill_revert runs a revert pass (direction revert in the ledger,
-- status and pending), refused without a revert (BF021) and while a
-- forward pass runs (BF022); a forward run is refused while a revert runs
-- (BF022); drop needs a completed revert as the newest pass (BF009, whose
-- hint says to run it).  And drift (part 3): backfill_probe counts
-- at most 1,000 matching rows in a probe worker as the declaring role (refused
-- to another role, for a pages source, an unknown name); a pass records its bound and
-- what lies beyond it; backfill_pending says drifted, "at least 1,000 rows".
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf170_t, bf170_slow, bf170_d CASCADE;
DROP FUNCTION IF EXISTS bf_test_poll(text, float8);
DROP FUNCTION IF EXISTS bf170_pages(text, jsonb);
CREATE TABLE bf170_t (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
INSERT INTO bf170_t (id) SELECT g FROM generate_series(1, 300) g;
CREATE TABLE bf170_slow (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
INSERT INTO bf170_slow (id) SELECT g FROM generate_series(1, 2000) g;
CREATE FUNCTION bf170_pages(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT '{"rows": [], "next": null}'::jsonb $$;
ANALYZE bf170_t, bf170_slow;
RESET backfill.environment;

\ir include/poll.psql

SELECT * FROM no_plan();

-- ------------------------------------------------------------------
-- the revert and its predicate, checked at declaration
-- ------------------------------------------------------------------
SELECT throws_like($$SELECT backfill_declare('bf170_bad', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    revert_predicate => 'n = 1', guard => false)$$,
    '%revert_predicate but no revert%', 'a revert_predicate without a revert is refused');
SELECT throws_ok($$SELECT backfill_declare('bf170_bad', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    revert_predicate => 'n = 1', guard => false)$$, 'BF001', NULL, '... with SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare('bf170_bad', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    revert => 'UPDATE bf170_t SET n = n - 1 WHERE id BETWEEN $1 AND $3', guard => false)$$, 'BF001', NULL,
    'a revert with a third parameter is refused (BF001): it gets the first and last key');
SELECT throws_ok($$SELECT backfill_declare('bf170_bad', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    revert => 'UPDATE bf170_t SET nope = 0 WHERE id BETWEEN $1 AND $2', guard => false)$$, 'BF001', NULL,
    'a revert that does not plan is refused (BF001)');
SELECT throws_ok($$SELECT backfill_declare('bf170_bad', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    revert => 'UPDATE bf170_t SET n = 0 WHERE id BETWEEN $1 AND $2; SELECT 1', guard => false)$$, 'BF001', NULL,
    'a revert of two statements is refused (BF001)');
SELECT throws_ok($$SELECT backfill_declare('bf170_bad', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    revert => 'VACUUM bf170_t', guard => false)$$, 'BF001', NULL, 'a revert that is not DML is refused (BF001)');
SELECT throws_ok($$SELECT backfill_declare('bf170_bad', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    revert => 'UPDATE bf170_t SET n = n - 1 WHERE id BETWEEN $1 AND $2',
    revert_predicate => 'n > random()', guard => false)$$, 'BF001', NULL,
    'a volatile revert_predicate is refused (BF001)');
SELECT throws_ok($$SELECT backfill_declare('bf170_bad', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    revert => 'UPDATE bf170_t SET n = n - 1 WHERE id BETWEEN $1 AND $2',
    revert_predicate => 'n > 0) OR (true', guard => false)$$, 'BF001', NULL,
    'a revert_predicate that closes a parenthesis it did not open is refused (BF001)');
SELECT throws_ok($$SELECT backfill_declare('bf170_bad', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    revert => 'UPDATE bf170_t SET n = n - 1 WHERE id BETWEEN $1 AND $2',
    revert_predicate => '$1 > 0', guard => false)$$, 'BF001', NULL,
    'a revert_predicate with a parameter is refused (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf170_bad', pages => 'bf170_pages',
    action => 'SELECT pg_catalog.jsonb_array_length($1)',
    revert => 'SELECT pg_catalog.jsonb_array_length($2)')$$, 'BF001', NULL,
    'a pages revert with $2 is refused (BF001): a page''s revert gets the rows only');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf170_bad', pages => 'bf170_pages',
    action => 'SELECT pg_catalog.jsonb_array_length($1)',
    revert => 'SELECT pg_catalog.jsonb_array_length($1)', revert_predicate => 'true')$$,
    'BF001', NULL, 'a revert_predicate of a pages source is refused (BF001)');
SELECT lives_ok($$SELECT backfill_declare(name => 'bf170_pg', pages => 'bf170_pages',
    action => 'SELECT pg_catalog.jsonb_array_length($1)',
    revert => 'SELECT pg_catalog.jsonb_array_length($1)')$$,
    'a pages source may declare a revert of one parameter');
SELECT is_empty($$SELECT 1 FROM backfill.declaration WHERE name = 'bf170_bad'$$,
                'no refused declaration was stored');

-- the revert is outside the checksum: declaring one keeps a completed pass current
SELECT backfill_declare('bf170_t', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    batch_size => 50, rate => 1000, guard => false) AS sum_without \gset
SELECT is(backfill_declare('bf170_t', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    batch_size => 50, rate => 1000,
    revert => 'UPDATE bf170_t SET n = n - 1 WHERE id BETWEEN $1 AND $2 AND n > 0',
    revert_predicate => 'n > 0', guard => false), :'sum_without',
    'adding a revert and its predicate keeps the checksum');

-- ------------------------------------------------------------------
-- without a revert: BF021; before any forward pass: nothing to revert
-- ------------------------------------------------------------------
SELECT backfill_declare('bf170_norevert', 'bf170_t', 'n < 0',
    'UPDATE bf170_t SET n = 0 WHERE id BETWEEN $1 AND $2 AND (n < 0)');
SELECT throws_ok($$SELECT backfill_revert('bf170_norevert')$$, 'BF021', NULL,
                 'revert of a backfill that declares none: BF021');
SELECT throws_ok($$SELECT backfill_revert('bf170_no_such')$$, 'BF002', NULL,
                 'revert of an unknown name: UNKNOWN (BF002)');
SELECT is(backfill_revert('bf170_t'), NULL,
          'revert before any forward pass wrote a row: NULL (nothing to revert)');
SELECT is_empty($$SELECT 1 FROM backfill.ledger WHERE declaration = 'bf170_t'$$,
                'and no ledger row was written');

-- ------------------------------------------------------------------
-- forward, revert, drop
-- ------------------------------------------------------------------
SELECT backfill_run('bf170_t') AS fwd \gset
SELECT is(backfill_wait(:fwd, '300 s'), 'completed', 'the forward pass completes');
SELECT results_eq($$SELECT count(*) FILTER (WHERE n = 1), count(*) FROM bf170_t$$,
                  $$VALUES (300::bigint, 300::bigint)$$, 'every row done once (n = 1)');
SELECT is((SELECT direction FROM backfill_ledger WHERE run_id = :fwd), 'forward',
          'the ledger says the pass went forward');
SELECT throws_ok($$SELECT backfill_drop('bf170_t')$$, 'BF009', NULL,
                 'drop after the forward pass: IRREVERSIBLE (BF009)');
DO $$
BEGIN
    PERFORM backfill_drop('bf170_t');
EXCEPTION WHEN OTHERS THEN
    DECLARE h text;
    BEGIN
        GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
        PERFORM set_config('bf170.hint', h, false);
    END;
END
$$;
SELECT matches(current_setting('bf170.hint'), 'backfill_revert\(''bf170_t''\)',
               'with a revert declared, the hint says to run backfill_revert');

SELECT backfill_revert('bf170_t') AS rev \gset
SELECT is(backfill_wait(:rev, '300 s'), 'completed', 'the revert pass completes');
SELECT results_eq($$SELECT count(*) FILTER (WHERE n = 0), count(*) FROM bf170_t$$,
                  $$VALUES (300::bigint, 300::bigint)$$, 'every row undone (n = 0)');
SELECT results_eq(
    format($$SELECT direction, status, rows, previous_run_id FROM backfill_ledger
              WHERE run_id = %s$$, :rev),
    format($$VALUES ('revert', 'completed', 300::bigint, %s::bigint)$$, :fwd),
    'the ledger: a revert pass, completed, 300 rows, after the forward pass');
SELECT results_eq($$SELECT status, direction FROM backfill_status('bf170_t')$$,
                  $$VALUES ('completed', 'revert')$$, 'backfill_status shows the direction');
SELECT results_eq($$SELECT state, direction, last_completed_run_id FROM backfill_pending()
                     WHERE name = 'bf170_t'$$,
                  $$VALUES ('reverted', 'revert', NULL::bigint)$$,
                  'backfill_pending: reverted; no forward pass completes it any more');
SELECT is(backfill_revert('bf170_t'), :rev::bigint,
          'a second revert answers the completed one (a revert twice would undo twice)');
SELECT is((SELECT count(*) FROM backfill.ledger WHERE declaration = 'bf170_t'), 2::bigint,
          'and starts no pass');

-- forward again after the revert: not skipped
SELECT backfill_run('bf170_t') AS fwd2 \gset
SELECT isnt(:fwd2::bigint, :fwd::bigint, 'a run after the revert starts a new forward pass');
SELECT is(backfill_wait(:fwd2, '300 s'), 'completed', 'which completes');
SELECT is((SELECT count(*) FROM bf170_t WHERE n = 1), 300::bigint, 'every row done again');
SELECT is((SELECT state FROM backfill_pending() WHERE name = 'bf170_t'), 'completed',
          'pending: completed again');
SELECT throws_ok($$SELECT backfill_drop('bf170_t')$$, 'BF009', NULL,
                 'drop with a forward pass newest again: BF009');
SELECT backfill_revert('bf170_t') AS rev2 \gset
SELECT is(backfill_wait(:rev2, '300 s'), 'completed', 'the second revert completes');
SELECT is(backfill_drop('bf170_t'), true, 'drop once the newest pass is a completed revert');
SELECT is_empty($$SELECT 1 FROM backfill.declaration WHERE name = 'bf170_t'$$,
                'the declaration is gone');
SELECT is((SELECT count(*) FROM backfill.ledger WHERE declaration = 'bf170_t'), 4::bigint,
          'its four passes stay in the ledger');

-- a backfill without a revert: the hint says to declare one
SELECT backfill_declare('bf170_plain', 'bf170_t', 'n = 0',
    'UPDATE bf170_t SET n = n + 1 WHERE id BETWEEN $1 AND $2', batch_size => 100, rate => 1000, guard => false);
SELECT backfill_run('bf170_plain') AS plain \gset
SELECT is(backfill_wait(:plain, '300 s'), 'completed', 'a backfill without revert completes');
DO $$
BEGIN
    PERFORM backfill_drop('bf170_plain');
EXCEPTION WHEN OTHERS THEN
    DECLARE h text;
    BEGIN
        GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
        PERFORM set_config('bf170.hint', h, false);
    END;
END
$$;
SELECT matches(current_setting('bf170.hint'), 'revert =>',
               'without a revert, the hint says to declare one');

-- ------------------------------------------------------------------
-- one direction at a time (200 batches at 0.1 a second: each pass is still
-- running when it is cancelled, however slow the machine)
-- ------------------------------------------------------------------
SELECT backfill_declare('bf170_slow', 'bf170_slow', 'n = 0',
    'UPDATE bf170_slow SET n = n + 1 WHERE id BETWEEN $1 AND $2',
    revert => 'UPDATE bf170_slow SET n = n - 1 WHERE id BETWEEN $1 AND $2',
    batch_size => 10, rate => 0.1, guard => false);
SELECT backfill_run('bf170_slow') AS slow \gset
SELECT ok(bf_test_poll(format($$SELECT rows > 0 FROM backfill_status('bf170_slow')
                                 WHERE run_id = %s$$, :slow), 300),
          'the slow forward pass is at work');
SELECT throws_ok($$SELECT backfill_revert('bf170_slow')$$, 'BF022', NULL,
                 'revert while a forward pass runs: BF022');
SELECT is(backfill_cancel('bf170_slow'), true, 'the forward pass is cancelled');
SELECT backfill_revert('bf170_slow') AS slowrev \gset
SELECT isnt(:slowrev::bigint, :slow::bigint, 'a revert of the cancelled pass starts');
SELECT ok(bf_test_poll(format($$SELECT coalesce(sum(rows), 0) > 0 FROM backfill.partition
                                 WHERE run_id = %s$$, :slowrev), 300),
          'the revert pass is at work');
SELECT throws_ok($$SELECT backfill_run('bf170_slow', force => true)$$, 'BF022', NULL,
                 'a forward run while the revert runs: BF022');
SELECT is(backfill_revert('bf170_slow'), :slowrev::bigint,
          'a revert while the revert runs answers the running one');
SELECT results_eq($$SELECT state, direction FROM backfill_pending() WHERE name = 'bf170_slow'$$,
                  $$VALUES ('reverting', 'revert')$$, 'backfill_pending: reverting');
SELECT is(backfill_cancel('bf170_slow'), true, 'the revert pass can be cancelled');
SELECT backfill_revert('bf170_slow') AS slowrev2 \gset
SELECT results_eq(
    format($$SELECT direction, previous_run_id FROM backfill_ledger WHERE run_id = %s$$,
           :slowrev2),
    format($$VALUES ('revert', %s::bigint)$$, :slowrev),
    'revert after a cancelled revert resumes it: a revert pass after it');
SELECT ok((SELECT count(*) FROM backfill.partition WHERE run_id = :slowrev2) > 0,
          'from its checkpoints (its partitions were copied)');
SELECT is(backfill_cancel('bf170_slow'), true, 'cancelled again');

-- ------------------------------------------------------------------
-- drift (part 3): a bounded probe as the declaring role
-- ------------------------------------------------------------------
DROP ROLE IF EXISTS bf170_other;
CREATE ROLE bf170_other LOGIN;
CREATE TABLE bf170_d (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
INSERT INTO bf170_d (id) SELECT g FROM generate_series(1, 50) g;
SELECT backfill_declare('bf170_d', 'bf170_d', 'n = 0',
    'UPDATE bf170_d SET n = n + 1 WHERE id BETWEEN $1 AND $2', batch_size => 100, rate => 1000, guard => false);
SELECT is(backfill_probe('bf170_d'), 50::bigint,
          'backfill_probe counts the rows the predicate matches (before any pass)');
SELECT backfill_run('bf170_d') AS drun \gset
SELECT is(backfill_wait(:drun, '300 s'), 'completed', 'the drift backfill completes');
SELECT results_eq($$SELECT bound, beyond_bound FROM backfill_status('bf170_d')$$,
                  $$VALUES ('50'::text, 0::bigint)$$,
                  'the pass was bounded to the largest key when planned, nothing beyond it');
SELECT is(backfill_probe('bf170_d'), 0::bigint, 'nothing matches after the pass');
INSERT INTO bf170_d (id) SELECT g FROM generate_series(51, 1200) g;
SELECT results_eq($$SELECT state, drift FROM backfill_pending() WHERE name = 'bf170_d'$$,
                  $$VALUES ('completed', NULL::text)$$,
                  'backfill_pending evaluates no predicate: no drift until a probe records it');
SELECT is(backfill_probe('bf170_d'), 1000::bigint,
          'the probe stops at 1,000 rows (LIMIT), whatever matches');
SELECT results_eq($$SELECT state, drift, drift_rows FROM backfill_pending() WHERE name = 'bf170_d'$$,
                  $$VALUES ('drifted', 'at least 1,000 rows', 1000::bigint)$$,
                  'backfill_pending: drifted, at least 1,000 rows');
SET ROLE bf170_other;
SELECT throws_ok($$SELECT backfill_probe('bf170_d')$$, 'BF016', NULL,
                 'another role may not probe it (BF016)');
RESET ROLE;
SELECT throws_ok($$SELECT backfill_probe('bf170_pg')$$, 'BF001', NULL,
                 'a pages source has no probe (BF001)');
SELECT throws_ok($$SELECT backfill_probe('bf170_no_such')$$, 'BF002', NULL,
                 'an unknown name (BF002)');
SELECT results_eq($$SELECT watch_probes, healed_rows, watch FROM backfill_status('bf170_d')$$,
                  $$VALUES (0::bigint, 0::bigint, false)$$,
                  'without watch: no probes by the scheduler, nothing healed');

SELECT * FROM finish();
