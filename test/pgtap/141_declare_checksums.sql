-- 141_declare_checksums: the checksum of a declaration is byte for byte
-- what 0.3 computed for it.  Stored checksums of existing declarations and
-- ledger rows are compared with the checksum of a re-declaration (the
-- state turns "changed" when they differ), so the values below, computed
-- by the 0.3 library for these exact declarations, must not move.  Each
-- summed column is covered: relation (quoted, schema-qualified), key,
-- predicate and action (white space outside quotes normalized, inside kept),
-- pages and count functions, input and scope, settings, run_as.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;
\ir include/poll.psql

DROP SCHEMA IF EXISTS "Bf141 S" CASCADE;
DROP TABLE IF EXISTS bf141_t CASCADE;
DROP FUNCTION IF EXISTS bf141_page(text, jsonb), bf141_count(jsonb);
DROP ROLE IF EXISTS bf141_runner;
CREATE ROLE bf141_runner LOGIN;
CREATE TABLE bf141_t (id int PRIMARY KEY, code text NOT NULL UNIQUE, note text NOT NULL, c int);
INSERT INTO bf141_t SELECT g, 'k' || g, 'a  b', NULL FROM generate_series(1, 20) g;
GRANT SELECT, UPDATE ON bf141_t TO bf141_runner;
CREATE SCHEMA "Bf141 S";
CREATE TABLE "Bf141 S".items (id bigint PRIMARY KEY, c int);
CREATE FUNCTION bf141_page(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$ SELECT '{"rows": [], "next": null}'::jsonb $$;
CREATE FUNCTION bf141_count(input jsonb) RETURNS bigint
LANGUAGE sql STABLE AS $$ SELECT 0::bigint $$;
RESET backfill.environment;

SELECT * FROM no_plan();

SELECT is(backfill_declare(name => 'bf141_table', relation => 'bf141_t',
    predicate => E'c IS  NULL\n   AND note = ''a  b''',
    action => E'UPDATE bf141_t\n   SET c = id\n WHERE id BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 5, rate => 1000, guard => false),
    '985d8b991aa4ac37fa8d89acbb8e65750873d0679ab54b55f95a814ce717a8ef', 'a table source: the checksum of 0.3');
SELECT is(backfill_declare(name => 'bf141_key', relation => 'bf141_t', key => 'code',
    predicate => 'c IS NULL', action => 'UPDATE bf141_t SET c = 0 WHERE code BETWEEN $1 AND $2', guard => false),
    '38c77ae12aff5381e0e37b3fd65521cab17437752388e8bfe9065c600bf25742', 'a key column named: the checksum of 0.3');
SELECT is(backfill_declare(name => 'bf141_quoted', relation => '"Bf141 S".items',
    predicate => 'c IS NULL', action => 'UPDATE "Bf141 S".items SET c = 1 WHERE id BETWEEN $1 AND $2', guard => false),
    '24677f007fefc5e17b280a7b53533a2121ce816824d5c00f0de34cb7eae30bd2', 'a quoted, schema-qualified relation: the checksum of 0.3');
SELECT is(backfill_declare('bf141_pages', NULL, NULL, 'SELECT pg_catalog.jsonb_array_length($1)',
    pages => 'bf141_page', count_function => 'bf141_count'),
    '581c7a508264a33a2235de0f09c79a220e8ec1d1e96be8fed693bcf81411549c', 'a pages source with a count function: the checksum of 0.3');
SELECT is(backfill_declare(name => 'bf141_scoped', relation => 'bf141_t',
    predicate => 'c IS NULL', action => 'UPDATE bf141_t SET c = 2 WHERE id BETWEEN $1 AND $2',
    input => '{"tenant": "integer"}', scope => $$input->>'tenant'$$,
    settings => '{"app.bf141_tenant": ":tenant"}', guard => false),
    '412e318b2d4a46f00ab91cc11bc78d459f1c601ed72161c8f0516e0ef799e819', 'input, scope and settings: the checksum of 0.3');
SELECT is(backfill_declare(name => 'bf141_runas', relation => 'bf141_t',
    predicate => 'c IS NULL', action => 'UPDATE bf141_t SET c = 3 WHERE id BETWEEN $1 AND $2',
    run_as => 'bf141_runner', guard => false),
    '8e458db0c65180c828e8ffd00b99763066b0cc258691582b4d4d020cd3619003', 'run_as: the checksum of 0.3');

-- a pass completes under the checksum; declaring the same again keeps it completed
SELECT backfill_run('bf141_table') AS run1 \gset
SELECT is(backfill_wait(:run1, '300 s'), 'completed', 'the pass completes');
SELECT is((SELECT checksum FROM backfill.ledger WHERE run_id = :run1), '985d8b991aa4ac37fa8d89acbb8e65750873d0679ab54b55f95a814ce717a8ef',
          'the ledger row carries the checksum of 0.3');
SELECT is(backfill_declare(name => 'bf141_table', relation => 'bf141_t',
    predicate => E'c IS NULL AND note = ''a  b''',
    action => 'UPDATE bf141_t SET c = id WHERE id BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 50, rate => 500, guard => false),
    '985d8b991aa4ac37fa8d89acbb8e65750873d0679ab54b55f95a814ce717a8ef', 're-indented, with other tuning: the same checksum');
SELECT results_eq(
    $$SELECT state, changed FROM backfill_pending() WHERE name = 'bf141_table'$$,
    $$VALUES ('completed', false)$$,
    'the completed pass is still the current definition: completed, not changed');
SELECT isnt(backfill_declare(name => 'bf141_table', relation => 'bf141_t',
    predicate => E'c IS NULL AND note = ''a b''',
    action => 'UPDATE bf141_t SET c = id WHERE id BETWEEN $1 AND $2 AND c IS NULL', guard => false),
    '985d8b991aa4ac37fa8d89acbb8e65750873d0679ab54b55f95a814ce717a8ef', 'white space inside a string literal counts');
SELECT results_eq(
    $$SELECT state, changed FROM backfill_pending() WHERE name = 'bf141_table'$$,
    $$VALUES ('changed', true)$$,
    'and a different definition turns the state changed');

-- no settings, however written: '{}' is the declaration without them
SELECT is(backfill_declare(name => 'bf141_nosettings', relation => 'bf141_t',
    predicate => 'c IS NULL', action => 'UPDATE bf141_t SET c = id WHERE id BETWEEN $1 AND $2',
    settings => '{}', guard => false),
    backfill_declare(name => 'bf141_nosettings', relation => 'bf141_t',
    predicate => 'c IS NULL', action => 'UPDATE bf141_t SET c = id WHERE id BETWEEN $1 AND $2', guard => false),
    'settings => ''{}'' has the checksum of no settings');
SELECT is((SELECT settings FROM backfill.declaration WHERE name = 'bf141_nosettings'), NULL,
    'and is stored as no settings');

SELECT * FROM finish();
