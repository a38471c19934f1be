-- 140_declare_defaults: backfill_declare's signature follows its column
-- table.  Every argument but the name has a default, so a pages source is
-- declared as the README says, without relation and predicate; what a
-- source kind requires and is left out is refused in C, with its SQLSTATE,
-- a message naming the backfill and a hint, and nothing is stored.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf140_t CASCADE;
DROP FUNCTION IF EXISTS bf140_page(text, jsonb), bf140_count(jsonb);
CREATE TABLE bf140_t (id int PRIMARY KEY, c int);
INSERT INTO bf140_t SELECT g, NULL FROM generate_series(1, 5) g;
CREATE FUNCTION bf140_page(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$ SELECT '{"rows": [], "next": null}'::jsonb $$;
CREATE FUNCTION bf140_count(input jsonb) RETURNS bigint
LANGUAGE sql STABLE AS $$ SELECT 0::bigint $$;

\ir include/bf_error.psql

SELECT * FROM no_plan();

-- a page's action gets one parameter, the page's rows: $2 is refused at declaration
SELECT results_eq(
    $$SELECT state, message LIKE '%bf140_pages_p2%', hint LIKE '%$1 is the page''s rows%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf140_pages_p2',
                 pages => 'bf140_page', action => 'SELECT $2::int + 1')$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'a pages action that uses $2 is refused (BF001) with the hint naming $1');
SELECT is((SELECT count(*)::int FROM backfill.declaration WHERE name = 'bf140_pages_p2'), 0,
          'and nothing is stored');
-- a batch's action gets two: $3 is refused
SELECT is((SELECT state FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf140_p3',
                 relation => 'bf140_t', predicate => 'c IS NULL',
                 action => 'UPDATE bf140_t SET c = $3 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$q$)),
          'BF001', 'a table action that uses $3 is refused (BF001)');

-- async_commit: on unless declared off; NULL takes the default
SELECT lives_ok(
    $$SELECT backfill_declare(name => 'bf140_sync', relation => 'bf140_t', predicate => 'c IS NULL',
                              action => 'UPDATE bf140_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
                              async_commit => false)$$,
    'a backfill is declared with async_commit => false');
SELECT is((SELECT async_commit FROM backfill.declaration WHERE name = 'bf140_sync'), false,
          'async_commit => false is stored');
SELECT lives_ok(
    $$SELECT backfill_declare(name => 'bf140_sync', relation => 'bf140_t', predicate => 'c IS NULL',
                              action => 'UPDATE bf140_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
                              async_commit => NULL)$$,
    're-declared with async_commit => NULL');
SELECT is((SELECT async_commit FROM backfill.declaration WHERE name = 'bf140_sync'), true,
          'async_commit => NULL takes the default, on');

-- the signature: the name is the only argument without a default
SELECT results_eq(
    $$SELECT pronargs::int, pronargdefaults::int FROM pg_proc WHERE proname = 'backfill_declare'$$,
    $$VALUES (39, 38)$$,
    'backfill_declare has 39 arguments, 38 of them with a default');

-- a pages source as the README declares it: no relation, no predicate
SELECT lives_ok(
    $$SELECT backfill_declare(name => 'bf140_pages', pages => 'bf140_page',
                              action => 'SELECT pg_catalog.jsonb_array_length($1)')$$,
    'a pages source is declared without relation and predicate');
SELECT results_eq(
    $$SELECT relid IS NULL, relation IS NULL, key_column IS NULL, key_type IS NULL,
             predicate IS NULL, pages_fn::regprocedure::text, count_fn IS NULL, batch_size, max_parallel,
             max_attempts, batch_timeout_ms, backoff_base_ms, backoff_cap_ms, lock_timeout_ms,
             target_batch_ms IS NULL, min_batch_size, max_batch_size, async_commit
        FROM backfill.declaration WHERE name = 'bf140_pages'$$,
    $$VALUES (true, true, true, true, true, 'bf140_page(text,jsonb)', true, 1000, 1, 5,
              60000, 1000, 60000, 2000, true, 100, 100000, true)$$,
    'it is stored as a pages source, with the options'' defaults');
SELECT lives_ok(
    $$SELECT backfill_declare(name => 'bf140_pages_count', pages => 'bf140_page',
                              count_function => 'bf140_count',
                              action => 'SELECT pg_catalog.jsonb_array_length($1)')$$,
    'a pages source with a count function, also without relation and predicate');
SELECT is((SELECT count_fn::regprocedure::text FROM backfill.declaration WHERE name = 'bf140_pages_count'),
          'bf140_count(jsonb)', 'its count function is stored');

-- a table source still takes its arguments by position and by name
SELECT lives_ok(
    $$SELECT backfill_declare('bf140_table', 'bf140_t', 'c IS NULL',
                              'UPDATE bf140_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'a table source declared by position');
SELECT lives_ok(
    $$SELECT backfill_declare(name => 'bf140_named', relation => 'bf140_t',
                              predicate => 'c IS NULL',
                              action => 'UPDATE bf140_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'a table source declared by name');

SELECT count(*) AS decl_before FROM backfill.declaration \gset

-- each required argument left out, for each kind of source
SELECT results_eq(
    $$SELECT state, message, hint FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf140_x',
        action => 'UPDATE bf140_t SET c = 1 WHERE id BETWEEN $1 AND $2')$q$)$$,
    $$VALUES ('BF001', 'backfill "bf140_x" names no source',
              'Pass relation => ''schema.table'' (with predicate), or pages => ''page_function'' for a remote source.')$$,
    'neither relation nor pages: BF001, no source, with the hint');
SELECT results_eq(
    $$SELECT state, message, hint FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf140_x',
        relation => 'bf140_t',
        action => 'UPDATE bf140_t SET c = 1 WHERE id BETWEEN $1 AND $2')$q$)$$,
    $$VALUES ('BF001', 'backfill "bf140_x" has no predicate',
              'Pass predicate => ''total IS NULL'', true for rows still to do.')$$,
    'a relation without a predicate: BF001, no predicate, with the hint');
SELECT results_eq(
    $$SELECT state, message, hint FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf140_x',
        relation => 'bf140_t', predicate => 'c IS NULL')$q$)$$,
    $$VALUES ('BF001', 'backfill "bf140_x" has no action',
              'Pass set => ''c = a * 2'' and the engine writes the UPDATE (the batch''s range AND the predicate), delete => true for a DELETE, or action => ''...'' for a statement of your own.')$$,
    'a table source without an action: BF001, no action, with the hint');
SELECT results_eq(
    $$SELECT state, message, hint FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf140_x',
        pages => 'bf140_page')$q$)$$,
    $$VALUES ('BF001', 'backfill "bf140_x" has no action',
              'Pass set => ''c = a * 2'' and the engine writes the UPDATE (the batch''s range AND the predicate), delete => true for a DELETE, or action => ''...'' for a statement of your own.')$$,
    'a pages source without an action: BF001, no action, with the hint');
SELECT results_eq(
    $$SELECT state, message, hint FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf140_x',
        count_function => 'bf140_count', action => 'SELECT 1')$q$)$$,
    $$VALUES ('BF001', 'backfill "bf140_x" has a count function but no pages source',
              'For a relation the predicate is the count; leave count_function out.')$$,
    'a count function without pages: BF001, with the hint');
SELECT results_eq(
    $$SELECT state, message, hint FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf140_x',
        pages => 'bf140_page', predicate => 'c IS NULL', action => 'SELECT 1')$q$)$$,
    $$VALUES ('BF001', 'backfill "bf140_x" names both a relation and a pages source',
              'Pass either relation (with predicate) or pages (with an optional count_function), not both.')$$,
    'pages with a predicate: BF001, both sources, with the hint');
SELECT results_eq(
    $$SELECT state, message, hint FROM pg_temp.bf_error($q$SELECT backfill_declare(name => NULL,
        pages => 'bf140_page', action => 'SELECT 1')$q$)$$,
    $$VALUES ('BF012', 'backfill name must not be empty',
              'Give the backfill a durable name such as ''orders_fill_total''.')$$,
    'no name: BF012, with the hint');
SELECT results_eq(
    $$SELECT state, message, hint FROM pg_temp.bf_error($q$SELECT backfill_declare(relation => 'bf140_t',
        predicate => 'c IS NULL', action => 'SELECT 1')$q$)$$,
    $$VALUES ('42883', 'function backfill_declare(relation => unknown, predicate => unknown, action => unknown) does not exist',
              'No function matches the given name and argument types. You might need to add explicit type casts.')$$,
    'the name has no default: leaving it out matches no function');
SELECT is((SELECT count(*) FROM backfill.declaration), :decl_before::bigint,
          'none of the refused declarations left a row');

SELECT * FROM finish();
