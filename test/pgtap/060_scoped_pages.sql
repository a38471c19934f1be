-- 060_scoped_pages: scoped backfills (input shape + scope: one history per
-- scope, skip/force per scope, backfill_pending per scope, the input
-- errors) and pages sources (a function that answers pages of rows, the
-- cursor checkpoint, the end of the source, a count function's verdict).
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf060_orders, bf060_plain, bf060_src, bf060_dst, bf060_state CASCADE;
DROP FUNCTION IF EXISTS bf060_page(text, jsonb), bf060_count(jsonb), bf060_garbage(text, jsonb),
    bf060_stuck(text, jsonb), bf060_count_left(jsonb), bf060_count_null(jsonb),
    bf060_page_int(text, jsonb), bf060_page_text(text, jsonb), bf060_page_onearg(text),
    bf060_count_text(jsonb), bf060_count_neg(jsonb);
RESET backfill.environment;

-- a table of three tenants (0, 1, 2), ten rows each
CREATE TABLE bf060_orders (id int PRIMARY KEY, tenant int NOT NULL, amount int NOT NULL, total int);
INSERT INTO bf060_orders (id, tenant, amount) SELECT g, g % 3, g FROM generate_series(1, 30) g;
CREATE TABLE bf060_plain (id int PRIMARY KEY, c int);
INSERT INTO bf060_plain (id) SELECT g FROM generate_series(1, 5) g;

-- a pages source: 25 rows read 10 at a time, copied into bf060_dst
CREATE TABLE bf060_src (id int PRIMARY KEY, v text NOT NULL);
INSERT INTO bf060_src SELECT g, 'v' || g FROM generate_series(1, 25) g;
CREATE TABLE bf060_dst (id int PRIMARY KEY, v text NOT NULL);
-- how often the endless function was called (it must not be called forever)
CREATE TABLE bf060_state (calls int NOT NULL);
INSERT INTO bf060_state VALUES (0);

CREATE FUNCTION bf060_page(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
             'rows', coalesce(jsonb_agg(to_jsonb(s) ORDER BY s.id), '[]'::jsonb),
             'next', CASE WHEN count(*) = 0 THEN NULL ELSE max(s.id)::text END)
      FROM (SELECT id, v FROM bf060_src WHERE id > coalesce(cursor::int, 0)
             ORDER BY id LIMIT 10) s
$$;
CREATE FUNCTION bf060_count(input jsonb) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT count(*) FROM bf060_src s WHERE NOT EXISTS (SELECT 1 FROM bf060_dst d WHERE d.id = s.id)
$$;
-- answers a JSON object that is not a page
CREATE FUNCTION bf060_garbage(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$ SELECT '{"hello": "world", "rows": 42}'::jsonb $$;
-- an empty page that never moves: next is always 'same'
CREATE FUNCTION bf060_stuck(cursor text, input jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE bf060_state SET calls = calls + 1;
    RETURN jsonb_build_object('rows', '[]'::jsonb, 'next', 'same');
END
$$;
-- count functions that never converge / answer nothing sensible
CREATE FUNCTION bf060_count_left(input jsonb) RETURNS bigint
LANGUAGE sql STABLE AS $$ SELECT 7::bigint $$;
CREATE FUNCTION bf060_count_null(input jsonb) RETURNS bigint
LANGUAGE sql STABLE AS $$ SELECT NULL::bigint $$;
CREATE FUNCTION bf060_count_neg(input jsonb) RETURNS bigint
LANGUAGE sql STABLE AS $$ SELECT -3::bigint $$;
-- wrong signatures / return types
CREATE FUNCTION bf060_page_int(cursor text, input jsonb) RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 1 $$;
CREATE FUNCTION bf060_page_onearg(cursor text) RETURNS jsonb
LANGUAGE sql STABLE AS $$ SELECT '{}'::jsonb $$;
CREATE FUNCTION bf060_count_text(input jsonb) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT '0' $$;
ANALYZE bf060_orders, bf060_plain, bf060_src;

SELECT * FROM no_plan();

-- ==================================================================
-- scoped backfills
-- ==================================================================
SELECT lives_ok($$SELECT backfill_declare(name => 'bf060_x', relation => 'bf060_orders',
    predicate => 'total IS NULL AND tenant = (backfill_input()->>''tenant'')::int',
    action => 'UPDATE bf060_orders SET total = amount * 2 WHERE id BETWEEN $1 AND $2 AND (total IS NULL AND tenant = (backfill_input()->>''tenant'')::int)'
              ' AND tenant = (backfill_input()->>''tenant'')::int',
    batch_size => 4, rate => 1000,
    input => '{"tenant": "integer"}', scope => 'input->>''tenant''')$$,
    'a scoped backfill is declared (input shape + scope)');
SELECT results_eq($$SELECT input_shape, scope FROM backfill.declaration WHERE name = 'bf060_x'$$,
                  $$VALUES ('{"tenant": "integer"}'::jsonb, 'input->>''tenant''')$$,
                  'the declaration stores the input shape and the scope');
SELECT is_empty($$SELECT 1 FROM backfill_pending() WHERE name LIKE 'bf060_x%'$$,
                'a scoped declaration that never ran has no row in backfill_pending()');

-- scope 1
SELECT backfill_run('bf060_x', input => '{"tenant": 1}') AS x1 \gset
SELECT is(backfill_wait(:x1, '300 s'), 'completed', 'the pass of scope 1 completes');
SELECT results_eq($$SELECT ledger_name, rows, forced FROM backfill.ledger WHERE run_id = $$ || :x1,
                  $$VALUES ('bf060_x:1', 10::bigint, false)$$,
                  'its ledger name is bf060_x:1 and it rewrote the 10 rows of tenant 1');
SELECT is((SELECT input FROM backfill.run WHERE run_id = :x1), '{"tenant": 1}'::jsonb,
          'the run keeps its input');
SELECT results_eq($$SELECT tenant, count(*) FILTER (WHERE total IS NOT NULL)::int,
                           count(*) FILTER (WHERE total = amount * 2)::int
                      FROM bf060_orders GROUP BY tenant ORDER BY tenant$$,
                  $$VALUES (0, 0, 0), (1, 10, 10), (2, 0, 0)$$,
                  'only the rows of tenant 1 were rewritten');

-- scope 2
SELECT backfill_run('bf060_x', input => '{"tenant": 2}') AS x2 \gset
SELECT isnt(:x2, :x1, 'scope 2 is not skipped because scope 1 completed: a new pass');
SELECT is(backfill_wait(:x2, '300 s'), 'completed', 'the pass of scope 2 completes');
SELECT results_eq($$SELECT ledger_name, rows, previous_run_id FROM backfill.ledger WHERE run_id = $$ || :x2,
                  $$VALUES ('bf060_x:2', 10::bigint, NULL::bigint)$$,
                  'scope 2 has its own history (bf060_x:2, no previous run)');
SELECT results_eq($$SELECT tenant, count(*) FILTER (WHERE total IS NOT NULL)::int
                      FROM bf060_orders GROUP BY tenant ORDER BY tenant$$,
                  $$VALUES (0, 0), (1, 10), (2, 10)$$,
                  'tenant 2 rewritten now; tenant 0 still untouched');

-- skip and force, per scope
SELECT is(backfill_run('bf060_x', input => '{"tenant": 1}'), :x1::bigint,
          'running scope 1 again is skipped: it answers the completed run id');
SELECT is((SELECT count(*) FROM backfill.ledger WHERE ledger_name = 'bf060_x:1'), 1::bigint,
          'the skipped run wrote no ledger row');
SELECT backfill_run('bf060_x', force => true, input => '{"tenant": 1}') AS x1f \gset
SELECT is(backfill_wait(:x1f, '300 s'), 'completed', 'the forced pass of scope 1 completes');
SELECT results_eq($$SELECT ledger_name, forced, previous_run_id, rows FROM backfill.ledger WHERE run_id = $$ || :x1f,
                  format($$VALUES ('bf060_x:1', true, %s::bigint, 0::bigint)$$, :x1),
                  'the forced pass is a new row of scope 1, previous run = the first, no row left to do');
SELECT results_eq($$SELECT ledger_name, count(*)::int FROM backfill.ledger
                     WHERE declaration = 'bf060_x' GROUP BY 1 ORDER BY 1$$,
                  $$VALUES ('bf060_x:1', 2), ('bf060_x:2', 1)$$,
                  'two scopes, two histories: scope 1 has two passes, scope 2 one');
SELECT is(backfill_run('bf060_x', input => '{"tenant": 2}'), :x2::bigint,
          'forcing scope 1 did not make scope 2 run again: still skipped');
-- the input is checked by value, not text: a string that reads as the integer
SELECT is(backfill_run('bf060_x', input => '{"tenant": "2"}'), :x2::bigint,
          'input {"tenant": "2"} names the same scope bf060_x:2 (skipped)');

SELECT results_eq($$SELECT name, state, last_run_id FROM backfill_pending()
                     WHERE name LIKE 'bf060_x%' ORDER BY name$$,
                  format($$VALUES ('bf060_x:1', 'completed', %s::bigint),
                                  ('bf060_x:2', 'completed', %s::bigint)$$, :x1f, :x2),
                  'backfill_pending() lists bf060_x:1 and bf060_x:2, completed, and no bare bf060_x');
SELECT is_empty($$SELECT 1 FROM backfill_pending() WHERE name = 'bf060_x'$$,
                'no pending row for the bare scoped declaration');

-- the input errors
SELECT throws_ok($$SELECT backfill_run('bf060_x')$$, 'BF001', NULL,
                 'run of a scoped backfill without input: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_run('bf060_x', input => '{"tenantx": 1}')$$, 'BF011', NULL,
                 'input with a wrong key: OPTION_INVALID (BF011)');
SELECT throws_ok($$SELECT backfill_run('bf060_x', input => '{}')$$, 'BF011', NULL,
                 'input with no key: OPTION_INVALID (BF011)');
SELECT throws_ok($$SELECT backfill_run('bf060_x', input => '{"tenant": 1, "extra": 2}')$$, 'BF011', NULL,
                 'input with an extra key: OPTION_INVALID (BF011)');
SELECT throws_ok($$SELECT backfill_run('bf060_x', input => '{"tenant": "abc"}')$$, 'BF011', NULL,
                 'input value that is not an integer: OPTION_INVALID (BF011)');
SELECT throws_ok($$SELECT backfill_run('bf060_x', input => '{"tenant": 1.5}')$$, 'BF011', NULL,
                 'input value 1.5 for an integer: OPTION_INVALID (BF011)');
SELECT throws_ok($$SELECT backfill_run('bf060_x', input => '{"tenant": null}')$$, 'BF011', NULL,
                 'input value null: OPTION_INVALID (BF011)');
SELECT throws_ok($$SELECT backfill_run('bf060_x', input => '[1]')$$, 'BF011', NULL,
                 'input that is not a JSON object: OPTION_INVALID (BF011)');
SELECT throws_ok($$SELECT backfill_run('bf060_x', input => '{"tenant": "1; DROP TABLE bf060_orders"}')$$,
                 'BF011', NULL, 'input value carrying SQL: OPTION_INVALID (BF011)');
SELECT has_table('bf060_orders', 'bf060_orders survives the SQL-carrying input');
SELECT is((SELECT count(*) FROM backfill.ledger WHERE declaration = 'bf060_x'), 3::bigint,
          'the refused runs wrote no ledger row');

SELECT backfill_declare('bf060_plain', 'bf060_plain', 'c IS NULL',
    'UPDATE bf060_plain SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000);
SELECT throws_ok($$SELECT backfill_run('bf060_plain', input => '{"tenant": 1}')$$, 'BF001', NULL,
                 'input given to an unscoped backfill: SOURCE_INVALID (BF001)');
SELECT is_empty($$SELECT 1 FROM backfill.ledger WHERE declaration = 'bf060_plain'$$,
                'the refused run wrote no ledger row');

SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => 'bf060_orders',
    predicate => 'total IS NULL', action => 'UPDATE bf060_orders SET total = 0 WHERE id BETWEEN $1 AND $2 AND (total IS NULL)',
    input => '{"tenant": "integer"}')$$, 'BF001', NULL,
    'declaration with input but no scope: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => 'bf060_orders',
    predicate => 'total IS NULL', action => 'UPDATE bf060_orders SET total = 0 WHERE id BETWEEN $1 AND $2 AND (total IS NULL)',
    scope => 'input->>''tenant''')$$, 'BF001', NULL,
    'declaration with scope but no input: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => 'bf060_orders',
    predicate => 'total IS NULL', action => 'UPDATE bf060_orders SET total = 0 WHERE id BETWEEN $1 AND $2 AND (total IS NULL)',
    input => '{"tenant": "no_such_type"}', scope => 'input->>''tenant''')$$, 'BF001', NULL,
    'input shape naming an unknown type: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => 'bf060_orders',
    predicate => 'total IS NULL', action => 'UPDATE bf060_orders SET total = 0 WHERE id BETWEEN $1 AND $2 AND (total IS NULL)',
    input => '{}', scope => 'input->>''tenant''')$$, 'BF001', NULL,
    'input shape with no keys: SOURCE_INVALID (BF001)');
SELECT is_empty($$SELECT 1 FROM backfill.declaration WHERE name = 'bf060_bad'$$,
                'no refused declaration was stored');

-- ==================================================================
-- pages sources
-- ==================================================================
SELECT lives_ok($$SELECT backfill_declare(name => 'bf060_copy', relation => NULL, predicate => NULL,
    action => 'INSERT INTO bf060_dst SELECT * FROM jsonb_populate_recordset(NULL::bf060_dst, $1)'
              ' ON CONFLICT (id) DO NOTHING',
    pages => 'bf060_page', count_function => 'bf060_count', rate => 1000)$$,
    'a pages source with a count function is declared');
SELECT results_eq($$SELECT relid, pages_fn::regprocedure::text, count_fn::regprocedure::text FROM backfill.declaration
                     WHERE name = 'bf060_copy'$$,
                  $$VALUES (NULL::regclass, 'bf060_page(text,jsonb)', 'bf060_count(jsonb)')$$,
                  'it stores the pages and count functions and no relation');
SELECT backfill_run('bf060_copy') AS copy_run \gset
SELECT is(backfill_wait(:copy_run, '300 s'), 'completed', 'the pages pass completes');
SELECT results_eq($$SELECT count(*)::int, min(id), max(id) FROM bf060_dst$$,
                  $$VALUES (25, 1, 25)$$, 'all 25 rows were copied');
SELECT is_empty($$SELECT * FROM bf060_src EXCEPT SELECT * FROM bf060_dst$$,
                'every source row is in the destination, with its value');
SELECT results_eq($$SELECT count(*)::int, max(cursor), sum(rows)::int, sum(batches)::int,
                           bool_and(state = 'done')
                      FROM backfill.partition WHERE run_id = $$ || :copy_run,
                  $$VALUES (1, '25', 25, 3, true)$$,
                  'one partition; its checkpoint is the cursor 25; 25 rows in 3 batches (one per page of rows)');
SELECT results_eq($$SELECT rows, batches, error_code FROM backfill.ledger WHERE run_id = $$ || :copy_run,
                  $$VALUES (25::bigint, 3::bigint, NULL::text)$$,
                  'the ledger: 25 rows, 3 batches, no error');
SELECT is((SELECT plan_method FROM backfill.run WHERE run_id = :copy_run), 'pages',
          'the plan method is pages');

-- garbage: a function answering something that is not a page
SELECT backfill_declare(name => 'bf060_garbage', relation => NULL, predicate => NULL,
    action => 'INSERT INTO bf060_dst SELECT * FROM jsonb_populate_recordset(NULL::bf060_dst, $1)'
              ' ON CONFLICT (id) DO NOTHING',
    pages => 'bf060_garbage', rate => 1000);
SELECT backfill_run('bf060_garbage') AS garbage_run \gset
SELECT is(backfill_wait(:garbage_run, '300 s'), 'failed', 'the pass over a garbage answer fails');
SELECT results_eq($$SELECT error_code, error_message ~ 'not a page' FROM backfill.ledger WHERE run_id = $$ || :garbage_run,
                  $$VALUES ('BF001', true)$$,
                  'with SOURCE_INVALID (BF001): answered something that is not a page');

-- an endless empty page that does not move the cursor ends the pass
SELECT backfill_declare(name => 'bf060_stuck', relation => NULL, predicate => NULL,
    action => 'INSERT INTO bf060_dst SELECT * FROM jsonb_populate_recordset(NULL::bf060_dst, $1)'
              ' ON CONFLICT (id) DO NOTHING',
    pages => 'bf060_stuck', rate => 1000);
SELECT backfill_run('bf060_stuck') AS stuck_run \gset
SELECT is(backfill_wait(:stuck_run, '300 s'), 'completed',
          'an empty page that does not move the cursor ends the pass (completed, no hang)');
SELECT is((SELECT calls FROM bf060_state), 2,
          'the stuck function was called twice: from the start to ''same'', then ''same'' again (no loop)');
SELECT results_eq($$SELECT l.rows, l.batches, p.cursor FROM backfill.ledger l
                      JOIN backfill.partition p USING (run_id) WHERE run_id = $$ || :stuck_run,
                  $$VALUES (0::bigint, 1::bigint, 'same')$$,
                  'no rows; one (empty) batch that moved the cursor to ''same''; the repeat ended it');

-- count function > 0 after the pass: STALLED
TRUNCATE bf060_dst;
SELECT backfill_declare(name => 'bf060_left', relation => NULL, predicate => NULL,
    action => 'INSERT INTO bf060_dst SELECT * FROM jsonb_populate_recordset(NULL::bf060_dst, $1)'
              ' ON CONFLICT (id) DO NOTHING',
    pages => 'bf060_page', count_function => 'bf060_count_left', rate => 1000);
SELECT backfill_run('bf060_left') AS left_run \gset
SELECT is(backfill_wait(:left_run, '300 s'), 'failed', 'a count function that answers 7 fails the pass');
SELECT results_eq($$SELECT l.error_code, r.remaining, l.error_message ~ '7 rows'
                      FROM backfill.ledger l JOIN backfill.run r USING (run_id) WHERE run_id = $$ || :left_run,
                  $$VALUES ('BF006', 7::bigint, true)$$,
                  'as STALLED (BF006), with the 7 rows it counted');
SELECT is((SELECT count(*)::int FROM bf060_dst), 25, 'the pages were still copied');
SELECT is((SELECT state FROM backfill_pending() WHERE name = 'bf060_left'), 'stalled',
          'backfill_pending() says stalled');

-- count function NULL / negative: an error, never "converged"
SELECT backfill_declare(name => 'bf060_null', relation => NULL, predicate => NULL,
    action => 'INSERT INTO bf060_dst SELECT * FROM jsonb_populate_recordset(NULL::bf060_dst, $1)'
              ' ON CONFLICT (id) DO NOTHING',
    pages => 'bf060_page', count_function => 'bf060_count_null', rate => 1000);
SELECT backfill_run('bf060_null') AS null_run \gset
SELECT is(backfill_wait(:null_run, '300 s'), 'failed', 'a count function that answers NULL fails the pass');
SELECT is((SELECT error_code FROM backfill.ledger WHERE run_id = :null_run), 'BF001',
          'as SOURCE_INVALID (BF001)');
SELECT backfill_declare(name => 'bf060_neg', relation => NULL, predicate => NULL,
    action => 'INSERT INTO bf060_dst SELECT * FROM jsonb_populate_recordset(NULL::bf060_dst, $1)'
              ' ON CONFLICT (id) DO NOTHING',
    pages => 'bf060_page', count_function => 'bf060_count_neg', rate => 1000);
SELECT backfill_run('bf060_neg') AS neg_run \gset
SELECT is(backfill_wait(:neg_run, '300 s'), 'failed', 'a count function that answers -3 fails the pass');
SELECT is((SELECT error_code FROM backfill.ledger WHERE run_id = :neg_run), 'BF001',
          'as SOURCE_INVALID (BF001)');

-- declaration errors of pages sources
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => 'bf060_src', predicate => NULL,
    action => 'SELECT 1', pages => 'bf060_page')$$, 'BF001', NULL,
    'both a relation and pages: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => NULL, predicate => NULL,
    action => 'SELECT 1')$$, 'BF001', NULL,
    'neither a relation nor pages: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => NULL, predicate => NULL,
    action => 'SELECT 1', pages => 'bf060_no_such_fn')$$, 'BF001', NULL,
    'a pages function that does not exist: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => NULL, predicate => NULL,
    action => 'SELECT 1', pages => 'bf060_page_onearg')$$, 'BF001', NULL,
    'a pages function with the wrong arguments: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => NULL, predicate => NULL,
    action => 'SELECT 1', pages => 'bf060_page_int')$$, 'BF001', NULL,
    'a pages function returning integer: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => NULL, predicate => NULL,
    action => 'SELECT 1', pages => 'bf060_page(')$$, 'BF001', NULL,
    'a malformed pages function name: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => NULL, predicate => NULL,
    action => 'SELECT 1', pages => 'bf060_page', count_function => 'bf060_count_text')$$, 'BF001', NULL,
    'a count function returning text: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => NULL, predicate => NULL,
    action => 'SELECT 1', pages => 'bf060_page', count_function => 'bf060_no_such_count')$$, 'BF001', NULL,
    'a count function that does not exist: SOURCE_INVALID (BF001)');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf060_bad', relation => 'bf060_plain',
    predicate => 'c IS NULL', action => 'UPDATE bf060_plain SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
    count_function => 'bf060_count')$$, 'BF001', NULL,
    'a count function with a relation: SOURCE_INVALID (BF001)');
SELECT is_empty($$SELECT 1 FROM backfill.declaration WHERE name = 'bf060_bad'$$,
                'no refused pages declaration was stored');

SELECT * FROM finish();

-- clean up (the extension and its catalogs stay for the next file)
SELECT backfill_cancel(name) FROM backfill.declaration WHERE name LIKE 'bf060%';
DROP TABLE bf060_orders, bf060_plain, bf060_src, bf060_dst, bf060_state CASCADE;
DROP FUNCTION bf060_page(text, jsonb), bf060_count(jsonb), bf060_garbage(text, jsonb),
    bf060_stuck(text, jsonb), bf060_count_left(jsonb), bf060_count_null(jsonb),
    bf060_page_int(text, jsonb), bf060_page_onearg(text),
    bf060_count_text(jsonb), bf060_count_neg(jsonb);
