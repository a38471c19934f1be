-- 148_declare_edges: declarations an attacker found accepted that could
-- only misbehave later, and keys refused that a relation's name would
-- fold (attacker findings t11, t25).
--   * a setting ":key" on an unscoped backfill (the lane set the literal
--     text ":tenant"), or naming a key its input shape does not declare
--   * a watch a microsecond over the maximum of 1 day (the bound compared
--     whole milliseconds), and one too big for the arithmetic
--   * environments of two dimensions (accepted, then "not in this
--     environment" for ever), a NULL element
--   * a watch on a scoped backfill (scoped backfills are never watched)
--   * key => 'ID' / ' id ' refused while relation => 'PUBLIC.R1' folds: a
--     key is a list of SQL identifiers, the stored key is the column's name,
--     so the checksum does not depend on how the key was written
--   * a scoped run's input with a null value said the key was missing
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf148_t, bf148_c, bf148_m CASCADE;
CREATE TABLE bf148_t (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
CREATE TABLE bf148_c (a int NOT NULL, b int NOT NULL, n int NOT NULL DEFAULT 0, PRIMARY KEY (a, b));
CREATE TABLE bf148_m ("Mixed" int PRIMARY KEY, n int NOT NULL DEFAULT 0);
RESET backfill.environment;

SELECT * FROM no_plan();

-- settings: ":key" needs a scoped backfill whose input declares the key
SELECT throws_ok($$SELECT backfill_declare('bf148_s1', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', settings => '{"app.x": ":tenant"}')$$,
    'BF011', 'setting "app.x" of backfill "bf148_s1" takes input key "tenant", but the backfill is not scoped',
    '(was accepted: the lane set app.x to '':tenant'') a ":key" setting of an unscoped backfill is refused');
SELECT throws_ok($$SELECT backfill_declare('bf148_s2', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', input => '{"x": "integer"}',
    scope => $s$input->>'x'$s$, settings => '{"app.x": ":tenant"}')$$,
    'BF011', 'setting "app.x" of backfill "bf148_s2" takes input key "tenant", which its input does not declare',
    'a ":key" setting naming a key the input shape lacks is refused');
SELECT lives_ok($$SELECT backfill_declare('bf148_s3', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', input => '{"tenant": "integer"}',
    scope => $s$input->>'tenant'$s$, settings => '{"app.x": ":tenant"}')$$,
    'a ":key" setting naming a key of the input shape is declared');
SELECT lives_ok($$SELECT backfill_declare('bf148_s4', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', settings => '{"app.x": "tenant:1"}')$$,
    'a plain value with a colon inside is still a value');

-- watch: the whole interval against the bound of 1 day
SELECT throws_ok($$SELECT backfill_declare('bf148_w1', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', watch => '1 day 00:00:00.000001')$$,
    'BF011', 'watch of backfill "bf148_w1" is out of range',
    '(was accepted) a watch a microsecond over 1 day is refused');
SELECT throws_ok($$SELECT backfill_declare('bf148_w2', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', watch => '178000000 years')$$,
    'BF011', 'watch of backfill "bf148_w2" is out of range',
    'a watch too big to count in microseconds is refused, not wrapped around');
SELECT throws_ok($$SELECT backfill_declare('bf148_w3', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', batch_timeout => '1 day 00:00:00.5')$$,
    'BF011', 'batch_timeout of backfill "bf148_w3" is out of range',
    'the same bound for the other intervals (batch_timeout half a second over 1 day)');
SELECT lives_ok($$SELECT backfill_declare('bf148_w4', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', watch => '1 day')$$,
    'a watch of exactly 1 day is declared');
SELECT lives_ok($$SELECT backfill_declare('bf148_w5', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', watch => '1 mon -29 days')$$,
    'a watch of 1 month less 29 days (1 day) is declared');

-- environments: a list of names, one dimension
SELECT throws_ok($$SELECT backfill_declare('bf148_e1', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', environments => '{{a},{b}}')$$,
    'BF011', 'environments of backfill "bf148_e1" is an array of 2 dimensions',
    '(was accepted, then not-in-this-environment) a 2-D environments array is refused');
SELECT throws_ok($$SELECT backfill_declare('bf148_e2', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', environments => ARRAY['prod', NULL])$$,
    'BF011', 'environments of backfill "bf148_e2" contains a NULL',
    'a NULL environment is refused, and said to be NULL');
SELECT throws_ok($$SELECT backfill_declare('bf148_e3', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', environments => ARRAY[''])$$,
    'BF011', 'environments of backfill "bf148_e3" contains an empty name',
    'an empty environment name is refused');
SELECT is((SELECT count(*) FROM backfill.declaration WHERE name LIKE 'bf148_e%'), 0::bigint,
    'none of them was stored');

-- a scoped backfill is never watched: refused, not ignored
SELECT throws_ok($$SELECT backfill_declare('bf148_sw', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', input => '{"x": "integer"}',
    scope => $s$input->>'x'$s$, watch => '1 min')$$,
    'BF001', 'scoped backfill "bf148_sw" cannot be watched',
    '(was accepted and silently never watched) a watch on a scoped backfill is refused');

-- keys are SQL identifiers, like the relation's name
SELECT is(backfill_declare('bf148_k', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', key => 'ID'),
    backfill_declare('bf148_k', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', key => 'id'),
    '(was refused) key => ''ID'' folds to id: the re-declaration with key => ''id'' keeps the checksum');
SELECT is(backfill_declare('bf148_k', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', key => ' id '),
    (SELECT checksum FROM backfill.declaration WHERE name = 'bf148_k'),
    '(was refused) key => '' id '' is trimmed: the same checksum');
SELECT is(backfill_declare('bf148_k', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', key => '"id"'),
    (SELECT checksum FROM backfill.declaration WHERE name = 'bf148_k'),
    'key => ''"id"'' is the same column: the same checksum');
SELECT is((SELECT key_column::text FROM backfill.declaration WHERE name = 'bf148_k'), 'id',
    'the stored key is the column''s name');
SELECT throws_ok($$SELECT backfill_declare('bf148_kq', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', key => '"ID"')$$,
    'BF001', 'key column "ID" of backfill "bf148_kq" does not exist in "public.bf148_t"',
    'a quoted key keeps its case: "ID" is not id');
SELECT lives_ok($$SELECT backfill_declare('bf148_km', 'bf148_m', 'n = 0',
    'UPDATE bf148_m SET n = 1 WHERE "Mixed" BETWEEN $1 AND $2 AND (n = 0)', key => '"Mixed"')$$,
    'a quoted mixed-case key column is declared');
SELECT throws_ok($$SELECT backfill_declare('bf148_ke', 'bf148_t', 'n = 0',
    'UPDATE bf148_t SET n = 1 WHERE id BETWEEN $1 AND $2 AND (n = 0)', key => '  ')$$,
    'BF001', 'key of backfill "bf148_ke" is not a list of columns',
    'a key of only spaces is refused as naming no column');
SELECT is(backfill_declare('bf148_kc', 'bf148_c', 'n = 0',
    'UPDATE bf148_c SET n = 1 WHERE (a, b) BETWEEN ($1, $2) AND ($3, $4) AND (n = 0)', key => ' A,B '),
    backfill_declare('bf148_kc', 'bf148_c', 'n = 0',
    'UPDATE bf148_c SET n = 1 WHERE (a, b) BETWEEN ($1, $2) AND ($3, $4) AND (n = 0)', key => 'a, b'),
    'a composite key written '' A,B '' is (a, b): the same checksum');
SELECT is((SELECT key_columns::text FROM backfill.declaration WHERE name = 'bf148_kc'), '{a,b}',
    'the stored composite key is the columns'' names');

-- a scoped run's input: a null value is said to be null
SELECT throws_ok($$SELECT backfill_run('bf148_s3', input => '{"tenant": null}')$$,
    'BF011', 'key "tenant" of the input of backfill "bf148_s3" is null',
    '(said "lacks key") an input key given as null is said to be null');
SELECT throws_ok($$SELECT backfill_run('bf148_s3', input => '{}')$$,
    'BF011', 'input of backfill "bf148_s3" lacks key "tenant"',
    'an input without the key still lacks it');

SELECT * FROM finish();
