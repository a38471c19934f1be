-- 145_names_scopes: what names a history is checked where it is made.  A
-- scope's value (the ledger's "name:value") has no control character and
-- is bounded like a name; a new backfill's name has no white space at its
-- ends; a required backfill must be declared before the one that requires
-- it, so that no other role can take its name first.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
\ir include/quiet_lanes.psql
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;
RESET backfill.environment;

DROP TABLE IF EXISTS bf145_t CASCADE;
CREATE TABLE bf145_t (id int PRIMARY KEY, tenant text NOT NULL, c int);
INSERT INTO bf145_t SELECT g, 't' || (g % 2), NULL FROM generate_series(1, 10) g;

\ir include/bf_error.psql

SELECT * FROM no_plan();

SELECT lives_ok($$SELECT backfill_declare('bf145_s', 'bf145_t', 'c IS NULL',
    'UPDATE bf145_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND tenant = (backfill_input()->>''tenant'') AND (c IS NULL)',
    input => '{"tenant": "text"}', scope => 'input->>''tenant''')$$,
    'a backfill scoped by a text value is declared');

-- a newline, a tab, an escape in the scope's value: refused before anything is written
SELECT results_eq(
    $$SELECT state, message LIKE '%bf145_s%control character%', hint IS NOT NULL
        FROM pg_temp.bf_error($q$SELECT backfill_run('bf145_s',
                 input => pg_catalog.jsonb_build_object('tenant', E't0\nforged: completed'))$q$)$$,
    $$VALUES ('BF011', true, true)$$,
    'a scope value with a newline is refused (BF011), naming the backfill, with a hint');
SELECT results_eq(
    $$SELECT state FROM pg_temp.bf_error($q$SELECT backfill_run('bf145_s',
                 input => pg_catalog.jsonb_build_object('tenant', E't0\tx'))$q$)
      UNION ALL
      SELECT state FROM pg_temp.bf_error($q$SELECT backfill_run('bf145_s',
                 input => pg_catalog.jsonb_build_object('tenant', E'\u001b[2Jt0'))$q$)$$,
    $$VALUES ('BF011'), ('BF011')$$,
    'a tab or an escape sequence in a scope value is refused too');
-- C1 controls (CSI, NEL) and a bidirectional override, in a UTF-8 database
SELECT results_eq(
    $$SELECT state FROM pg_temp.bf_error($q$SELECT backfill_run('bf145_s',
                 input => pg_catalog.jsonb_build_object('tenant', E'a\u009b2Jb'))$q$)
      UNION ALL
      SELECT state FROM pg_temp.bf_error($q$SELECT backfill_run('bf145_s',
                 input => pg_catalog.jsonb_build_object('tenant', E't0\u202Edecnac'))$q$)$$,
    $$VALUES ('BF011'), ('BF011')$$,
    'a scope value with a C1 control (CSI) or a bidi override is refused (BF011)');
-- longer than a name may be
SELECT results_eq(
    $$SELECT state, message LIKE '%bf145_s%too long%'
        FROM pg_temp.bf_error($q$SELECT backfill_run('bf145_s',
                 input => pg_catalog.jsonb_build_object('tenant', pg_catalog.repeat('x', 201)))$q$)$$,
    $$VALUES ('BF011', true)$$,
    'a scope value of 201 bytes is refused (BF011)');
SELECT is((SELECT count(*) FROM backfill.ledger WHERE declaration = 'bf145_s'), 0::bigint,
          'none of the refused runs wrote a ledger row');
-- a plain value still works, and 200 bytes is allowed
SELECT ok(backfill_run('bf145_s', input => '{"tenant": "t0"}', wait => false) > 0,
          'a scope value without control characters runs');
SELECT ok(backfill_run('bf145_s', input => pg_catalog.jsonb_build_object('tenant', pg_catalog.repeat('y', 200)),
                       wait => false) > 0,
          'a scope value of 200 bytes runs');
SELECT is((SELECT count(*) FROM backfill.ledger WHERE declaration = 'bf145_s'), 2::bigint,
          'the two accepted runs each wrote their ledger row');
SELECT backfill_cancel('bf145_s');

-- names with white space at either end
SELECT results_eq(
    $$SELECT state, message LIKE '%white space%', hint IS NOT NULL
        FROM pg_temp.bf_error($q$SELECT backfill_declare(' ', 'bf145_t', 'c IS NULL',
                 'UPDATE bf145_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$q$)$$,
    $$VALUES ('BF012', true, true)$$,
    'a name of one space is refused (BF012) with a hint');
SELECT results_eq(
    $$SELECT state FROM pg_temp.bf_error($q$SELECT backfill_declare(' bf145_x', 'bf145_t', 'c IS NULL',
                 'UPDATE bf145_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$q$)
      UNION ALL
      SELECT state FROM pg_temp.bf_error($q$SELECT backfill_declare('bf145_x ', 'bf145_t', 'c IS NULL',
                 'UPDATE bf145_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$q$)$$,
    $$VALUES ('BF012'), ('BF012')$$,
    'a leading or a trailing space is refused');
SELECT results_eq(
    $$SELECT e.state
        FROM (VALUES (1, E'cs\u009b2Jx'), (2, E'sp\u0085'), (3, E'rl\u202Eo'), (4, E'nb\u00a0'),
                     (5, E'\u3000ideo'), (6, E'zw\u200b'), (7, E'\ufeffbom')) v(i, n),
             LATERAL pg_temp.bf_error(pg_catalog.format(
                 'SELECT backfill_declare(%L, ''bf145_t'', ''c IS NULL'', '
                 '''UPDATE bf145_t SET c = 1 WHERE id BETWEEN $1 AND $2'')', v.n)) e
       ORDER BY v.i$$,
    $$VALUES ('BF012'), ('BF012'), ('BF012'), ('BF012'), ('BF012'), ('BF012'), ('BF012')$$,
    'names with a C1 control, a bidi override or a Unicode space at an end are refused (BF012)');
SELECT lives_ok($$SELECT backfill_declare(E'caf\u00e9 \u00fcber', 'bf145_t', 'c IS NULL',
                 'UPDATE bf145_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'a name with accented letters is accepted');
SELECT lives_ok($$SELECT backfill_declare('bf145 x', 'bf145_t', 'c IS NULL',
                 'UPDATE bf145_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
    'a space inside a name is allowed');
SELECT is((SELECT count(*) FROM backfill.declaration WHERE name LIKE '% %'), 2::bigint,
          'only the names with an inner space were stored');

-- requires_backfill must name a declared backfill
SELECT results_eq(
    $$SELECT state, message LIKE '%bf145_dep%bf145_later%not declared%', hint LIKE '%bf145_later%first%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bf145_dep', 'bf145_t', 'c IS NULL',
                 'UPDATE bf145_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
                 requires_backfill => 'bf145_later')$q$)$$,
    $$VALUES ('BF002', true, true)$$,
    'requiring a backfill nobody has declared is refused (BF002): its name could be taken by anyone');
SELECT lives_ok($$SELECT backfill_declare('bf145_dep', 'bf145_t', 'c IS NULL',
                 'UPDATE bf145_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
                 requires_backfill => 'bf145 x')$$,
    'requiring a declared backfill of ones own is accepted');

SELECT * FROM finish();

-- no pass of this file outlives it
SELECT backfill_cancel(d.name) FROM backfill.declaration d
 WHERE EXISTS (SELECT 1 FROM backfill.ledger l WHERE l.declaration = d.name AND l.status = 'running');
