-- 063_pages_cycle: a pages source whose cursors go round in a cycle
-- (issue 23, point 2).  Before, such a pass stayed running for ever,
-- asking for the same pages again and again.  Now a next cursor that the
-- pass asked for before fails it with BF001, naming the cursor and the
-- pages, before the page that leads back is done: no page is done twice.
--  ab:    the start -> A -> B -> A           (fails at page 3, back to page 2)
--  late:  the start -> p1 -> ... -> p7 -> p4 (fails at page 8, back to page 5)
--  wrap:  the start (cursor NULL, the same page as '0') -> 1 -> 2 -> '0':
--         the page of '0' is the first page again; its next, 1, was asked
--         for at page 2, so it is refused (page 4) before it is done twice
--  empty: the start -> A, then empty pages A -> B -> A (fails at page 3)
--  line:  a source that ends (null) after 6 pages: completed, every page once
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf063_map, bf063_done CASCADE;
DROP FUNCTION IF EXISTS bf063_walk(text, text), bf063_ab(text, jsonb), bf063_late(text, jsonb),
    bf063_wrap(text, jsonb), bf063_empty(text, jsonb), bf063_line(text, jsonb);

-- each walk's pages: the cursor asked for ('^' for none), the page it
-- answers (its rows say so), how many rows, and its next cursor
CREATE TABLE bf063_map (walk text, cursor text, page text, nrows int, next text,
                        PRIMARY KEY (walk, cursor));
INSERT INTO bf063_map VALUES
    ('ab', '^', 'start', 2, 'A'), ('ab', 'A', 'A', 2, 'B'), ('ab', 'B', 'B', 2, 'A'),
    ('late', '^', 'start', 3, 'p1'), ('late', 'p1', 'p1', 3, 'p2'), ('late', 'p2', 'p2', 3, 'p3'),
    ('late', 'p3', 'p3', 3, 'p4'), ('late', 'p4', 'p4', 3, 'p5'), ('late', 'p5', 'p5', 3, 'p6'),
    ('late', 'p6', 'p6', 3, 'p7'), ('late', 'p7', 'p7', 3, 'p4'),
    ('wrap', '^', '0', 2, '1'), ('wrap', '0', '0', 2, '1'), ('wrap', '1', '1', 2, '2'),
    ('wrap', '2', '2', 2, '0'),
    ('empty', '^', 'start', 2, 'A'), ('empty', 'A', 'A', 0, 'B'), ('empty', 'B', 'B', 0, 'A'),
    ('line', '^', 'start', 1, 'l1'), ('line', 'l1', 'l1', 1, 'l2'), ('line', 'l2', 'l2', 1, 'l3'),
    ('line', 'l3', 'l3', 1, 'l4'), ('line', 'l4', 'l4', 1, 'l5'), ('line', 'l5', 'l5', 1, NULL);
-- what the action did: one row per row of each page done
CREATE TABLE bf063_done (walk text, page text, i int);

CREATE FUNCTION bf063_walk(walk text, cursor text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
             'rows', coalesce((SELECT jsonb_agg(jsonb_build_object('walk', m.walk, 'page', m.page, 'i', g))
                                 FROM generate_series(1, m.nrows) g), '[]'::jsonb),
             'next', m.next)
      FROM bf063_map m WHERE m.walk = $1 AND m.cursor = coalesce($2, '^')
$$;
CREATE FUNCTION bf063_ab(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$ SELECT bf063_walk('ab', cursor) $$;
CREATE FUNCTION bf063_late(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$ SELECT bf063_walk('late', cursor) $$;
CREATE FUNCTION bf063_wrap(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$ SELECT bf063_walk('wrap', cursor) $$;
CREATE FUNCTION bf063_empty(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$ SELECT bf063_walk('empty', cursor) $$;
CREATE FUNCTION bf063_line(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$ SELECT bf063_walk('line', cursor) $$;

SELECT * FROM no_plan();

-- declare and run backfill bf063_<walk>; its run id in :<walk>_run
SELECT backfill_declare(name => 'bf063_' || w, relation => NULL, predicate => NULL,
    action => 'INSERT INTO bf063_done SELECT r->>''walk'', r->>''page'', (r->>''i'')::int'
              ' FROM jsonb_array_elements($1) r',
    pages => 'bf063_' || w, rate => 1000)
  FROM unnest(ARRAY['ab', 'late', 'wrap', 'empty', 'line']) w;
SELECT backfill_run('bf063_ab') AS ab_run \gset
SELECT backfill_run('bf063_late') AS late_run \gset
SELECT backfill_run('bf063_wrap') AS wrap_run \gset
SELECT backfill_run('bf063_empty') AS empty_run \gset
SELECT backfill_run('bf063_line') AS line_run \gset

-- ------------------------------------------------------------------
-- ab: A -> B -> A
-- ------------------------------------------------------------------
SELECT is(backfill_wait(:ab_run, '60 s'), 'failed', 'ab: the pass ends, failed (it ran for ever before)');
SELECT results_eq($$SELECT error_code, error_message FROM backfill.ledger WHERE run_id = $$ || :ab_run,
    $$VALUES ('BF001', 'pages function of backfill "bf063_ab" goes round in a cycle: page 3 leads '
                       'back to cursor "A" of page 2')$$,
    'ab: BF001 names the cursor that came again, the page that led back and the page it was asked at');
SELECT results_eq($$SELECT page, count(*)::int FROM bf063_done WHERE walk = 'ab' GROUP BY page ORDER BY page$$,
    $$VALUES ('A', 2), ('start', 2)$$,
    'ab: the start page and page A done once each; page B (which leads back) rolled back');
SELECT results_eq($$SELECT rows, batches FROM backfill.ledger WHERE run_id = $$ || :ab_run,
    $$VALUES (4::bigint, 2::bigint)$$, 'ab: the ledger counts the two pages done, 4 rows');

-- ------------------------------------------------------------------
-- late: a cycle after several pages
-- ------------------------------------------------------------------
SELECT is(backfill_wait(:late_run, '60 s'), 'failed', 'late: the pass ends, failed');
SELECT results_eq($$SELECT error_code, error_message FROM backfill.ledger WHERE run_id = $$ || :late_run,
    $$VALUES ('BF001', 'pages function of backfill "bf063_late" goes round in a cycle: page 8 leads '
                       'back to cursor "p4" of page 5')$$,
    'late: BF001 at page 8, back to cursor p4 of page 5');
SELECT results_eq($$SELECT count(DISTINCT page)::int, count(*)::int, max(n)::int
                      FROM (SELECT page, count(*) AS n FROM bf063_done WHERE walk = 'late'
                             GROUP BY page) p$$,
    $$VALUES (7, 7, 3)$$, 'late: seven pages done, each once (3 rows each); p7 rolled back');
SELECT is((SELECT count(*)::int FROM bf063_done WHERE walk = 'late' AND page = 'p7'), 0,
    'late: the page that leads back (p7) was not done');

-- ------------------------------------------------------------------
-- wrap: back to the start
-- ------------------------------------------------------------------
SELECT is(backfill_wait(:wrap_run, '60 s'), 'failed', 'wrap: the pass ends, failed');
SELECT results_eq($$SELECT error_code, error_message FROM backfill.ledger WHERE run_id = $$ || :wrap_run,
    $$VALUES ('BF001', 'pages function of backfill "bf063_wrap" goes round in a cycle: page 4 leads '
                       'back to cursor "1" of page 2')$$,
    'wrap: the start page asked again as ''0'' (page 4) leads back to cursor 1 of page 2');
SELECT results_eq($$SELECT page, count(*)::int FROM bf063_done WHERE walk = 'wrap' GROUP BY page ORDER BY page$$,
    $$VALUES ('0', 2), ('1', 2), ('2', 2)$$,
    'wrap: the start page (0), 1 and 2 done once each: the start page was not done twice');

-- ------------------------------------------------------------------
-- empty: a cycle of empty pages
-- ------------------------------------------------------------------
SELECT is(backfill_wait(:empty_run, '60 s'), 'failed', 'empty: the pass ends, failed');
SELECT results_eq($$SELECT error_code, error_message FROM backfill.ledger WHERE run_id = $$ || :empty_run,
    $$VALUES ('BF001', 'pages function of backfill "bf063_empty" goes round in a cycle: page 3 leads '
                       'back to cursor "A" of page 2')$$,
    'empty: empty pages going round fail it too');

-- ------------------------------------------------------------------
-- line: a source that ends
-- ------------------------------------------------------------------
SELECT is(backfill_wait(:line_run, '60 s'), 'completed', 'line: a source that ends completes');
SELECT results_eq($$SELECT count(DISTINCT page)::int, count(*)::int FROM bf063_done WHERE walk = 'line'$$,
    $$VALUES (6, 6)$$, 'line: its six pages, once each');

SELECT * FROM finish();

DROP TABLE bf063_map, bf063_done CASCADE;
DROP FUNCTION bf063_ab(text, jsonb), bf063_late(text, jsonb), bf063_wrap(text, jsonb),
    bf063_empty(text, jsonb), bf063_line(text, jsonb), bf063_walk(text, text);
