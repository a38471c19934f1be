-- 020_declare_ok: valid declarations, their checksum, defaults and privileges.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf020_t CASCADE;
DROP ROLE IF EXISTS bf020_reader;
DROP ROLE IF EXISTS bf020_nologin;
DROP ROLE IF EXISTS bf020_writer;
-- the primary key is deliberately not called "id"
CREATE TABLE bf020_t (ident int PRIMARY KEY, code int NOT NULL UNIQUE, a int, c int);
INSERT INTO bf020_t SELECT g, 1000 + g, g, NULL FROM generate_series(1, 10) g;
CREATE ROLE bf020_reader LOGIN;
GRANT SELECT ON bf020_t TO bf020_reader;
CREATE ROLE bf020_nologin NOLOGIN;
GRANT SELECT, UPDATE ON bf020_t TO bf020_nologin;
CREATE ROLE bf020_writer LOGIN;
GRANT SELECT, UPDATE ON bf020_t TO bf020_writer;

SELECT * FROM no_plan();

-- checksum
SELECT backfill_declare('bf020', 'bf020_t', 'c IS NULL',
    'UPDATE bf020_t SET c = a * 2 WHERE ident BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 100, rate => 20) AS sum1 \gset
SELECT matches(:'sum1'::text, '^[0-9a-f]{64}$', 'a valid declaration returns a 64-hex checksum');
SELECT is((SELECT checksum FROM backfill.declaration WHERE name = 'bf020'), :'sum1'::text,
          'the catalog stores the returned checksum');
SELECT is(backfill_declare('bf020', 'bf020_t', 'c IS NULL',
    'UPDATE bf020_t SET c = a * 2 WHERE ident BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 100, rate => 20), :'sum1'::text,
    're-declaring the identical definition returns the same checksum');
SELECT is((SELECT count(*) FROM backfill.declaration WHERE name = 'bf020'), 1::bigint,
          're-declaring keeps one catalog row');
SELECT is(backfill_declare('bf020', 'bf020_t', E'c   IS\n NULL',
    E'UPDATE bf020_t\n       SET c = a * 2\n     WHERE ident BETWEEN $1 AND $2\n       AND c IS NULL',
    batch_size => 100, rate => 20), :'sum1'::text,
    're-indenting the action and predicate keeps the checksum');
SELECT is((SELECT action FROM backfill.declaration WHERE name = 'bf020'),
          E'UPDATE bf020_t\n       SET c = a * 2\n     WHERE ident BETWEEN $1 AND $2\n       AND c IS NULL',
          'the catalog keeps the action as written');
-- (leading white space is white space too)
SELECT is(backfill_declare('bf020', 'bf020_t', E'  c IS NULL\n',
    E'\n    UPDATE bf020_t SET c = a * 2 WHERE ident BETWEEN $1 AND $2 AND c IS NULL\n',
    batch_size => 100, rate => 20), :'sum1'::text,
    'leading and trailing white space keeps the checksum');
SELECT is(backfill_declare('bf020', 'bf020_t', 'c IS NULL',
    'UPDATE bf020_t SET c = a * 2 WHERE ident BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 7, rate => 3.5, max_parallel => 2, max_attempts => 9,
    batch_timeout => '5 s', backoff_base => '2 s', backoff_cap => '20 s'), :'sum1'::text,
    'tuning-only changes (batch size, rate, lanes, retries) keep the checksum');
SELECT results_eq(
    $$SELECT batch_size, rate, max_parallel, max_attempts, batch_timeout_ms, backoff_base_ms, backoff_cap_ms
        FROM backfill.declaration WHERE name = 'bf020'$$,
    $$VALUES (7, 3.5::float8, 2, 9, 5000, 2000, 20000)$$,
    'the tuning change was applied to the catalog');
SELECT backfill_declare('bf020', 'bf020_t', 'c IS NULL',
    'UPDATE bf020_t SET c = a * 3 WHERE ident BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 100, rate => 20) AS sum2 \gset
SELECT matches(:'sum2'::text, '^[0-9a-f]{64}$', 'the changed declaration returns a checksum');
SELECT isnt(:'sum2'::text, :'sum1'::text, 'a different action changes the checksum');
SELECT isnt(backfill_declare('bf020', 'bf020_t', 'c IS NULL OR c < 0',
    'UPDATE bf020_t SET c = a * 3 WHERE ident BETWEEN $1 AND $2 AND c IS NULL',
    batch_size => 100, rate => 20, guard => false), :'sum2'::text,
    'a different predicate changes the checksum');
SELECT isnt(backfill_declare('bf020_lit', 'bf020_t', 'c IS NULL',
              $$UPDATE bf020_t SET c = length('a  b') WHERE ident BETWEEN $1 AND $2 AND c IS NULL$$),
            backfill_declare('bf020_lit', 'bf020_t', 'c IS NULL',
              $$UPDATE bf020_t SET c = length('a b') WHERE ident BETWEEN $1 AND $2 AND c IS NULL$$),
            'white space inside a string literal is part of the checksum');

-- the key
SELECT is((SELECT key_column::text FROM backfill.declaration WHERE name = 'bf020'), 'ident',
          'the default key is the primary key');
SELECT is((SELECT key_type FROM backfill.declaration WHERE name = 'bf020'), 'integer'::regtype,
          'the key type is recorded');
SELECT backfill_declare('bf020_code', 'bf020_t', 'c IS NULL',
    'UPDATE bf020_t SET c = a WHERE code BETWEEN $1 AND $2 AND (c IS NULL)', key => 'code') AS sum_code \gset
SELECT matches(:'sum_code'::text, '^[0-9a-f]{64}$', 'an explicit unique NOT NULL key is accepted');
SELECT is((SELECT key_column::text FROM backfill.declaration WHERE name = 'bf020_code'), 'code',
          'the explicit key is recorded');
SELECT isnt(backfill_declare('bf020_code2', 'bf020_t', 'c IS NULL',
    'UPDATE bf020_t SET c = a WHERE code BETWEEN $1 AND $2 AND (c IS NULL)', key => 'ident'), :'sum_code'::text,
    'the key is part of the checksum');
SELECT is((SELECT relation FROM backfill.declaration WHERE name = 'bf020'), 'public.bf020_t',
          'the relation is stored schema-qualified');

-- the default rate
SET backfill.default_rate = 2.5;
SELECT lives_ok($$SELECT backfill_declare('bf020_rate', 'bf020_t', 'c IS NULL',
    'UPDATE bf020_t SET c = a WHERE ident BETWEEN $1 AND $2 AND (c IS NULL)')$$, 'declared without a rate');
SELECT is((SELECT rate FROM backfill.declaration WHERE name = 'bf020_rate'),
          current_setting('backfill.default_rate')::float8,
          'the rate defaults to backfill.default_rate');
SELECT is((SELECT rate FROM backfill.declaration WHERE name = 'bf020_rate'), 2.5::float8,
          'the default rate follows the session''s setting');
RESET backfill.default_rate;
SELECT results_eq(
    $$SELECT batch_size, max_parallel, max_attempts, batch_timeout_ms, backoff_base_ms,
             backoff_cap_ms, environments, owner
        FROM backfill.declaration WHERE name = 'bf020_rate'$$,
    $$VALUES (1000, 1, 5, 60000, 1000, 60000, NULL::text[], 'postgres'::regrole)$$,
    'the other options take their documented defaults and the owner is the caller');

-- privileges
SELECT count(*) AS decl_before FROM backfill.declaration \gset
SET ROLE bf020_reader;
SELECT throws_ok($$SELECT backfill_declare('bf020_ro', 'bf020_t', 'c IS NULL',
                    'UPDATE bf020_t SET c = a WHERE ident BETWEEN $1 AND $2 AND (c IS NULL)')$$,
                 'BF016', NULL, 'a role without UPDATE on the table is refused with BF016');
SELECT throws_ok($$INSERT INTO backfill.declaration (name, relid, relation, key_column, key_type,
                      predicate, action, batch_size, rate, max_attempts, backoff_base_ms,
                      backoff_cap_ms, batch_timeout_ms, owner, checksum)
                    VALUES ('bf020_forged', 'bf020_t'::regclass, 'bf020_t', 'ident', 'int'::regtype,
                      'true', 'SELECT 1', 1, 1, 1, 1, 1, 1, current_user::regrole, 'x')$$,
                 '42501', NULL, 'PUBLIC cannot INSERT INTO backfill.declaration');
SELECT throws_ok($$UPDATE backfill.ledger SET rows = 0$$,
                 '42501', NULL, 'PUBLIC cannot UPDATE backfill.ledger');
SELECT throws_ok($$DELETE FROM backfill.declaration$$,
                 '42501', NULL, 'PUBLIC cannot DELETE FROM backfill.declaration');
SELECT throws_ok($$UPDATE backfill.declaration SET action = 'SELECT 1'$$,
                 '42501', NULL, 'PUBLIC cannot UPDATE backfill.declaration');
RESET ROLE;
SET ROLE bf020_nologin;
SELECT throws_ok($$SELECT backfill_declare('bf020_nl', 'bf020_t', 'c IS NULL',
                    'UPDATE bf020_t SET c = a WHERE ident BETWEEN $1 AND $2 AND (c IS NULL)')$$,
                 'BF016', NULL, 'a NOLOGIN role is refused with BF016 (lanes log in as it)');
RESET ROLE;
SELECT is((SELECT count(*) FROM backfill.declaration), :decl_before::bigint,
          'the refused roles left no declaration');
SET ROLE bf020_writer;
SELECT matches(backfill_declare('bf020_w', 'bf020_t', 'c IS NULL',
                 'UPDATE bf020_t SET c = a WHERE ident BETWEEN $1 AND $2 AND (c IS NULL)'),
               '^[0-9a-f]{64}$', 'a LOGIN role with SELECT and UPDATE may declare');
RESET ROLE;
SELECT is((SELECT owner FROM backfill.declaration WHERE name = 'bf020_w'),
          'bf020_writer'::regrole, 'its declaration is owned by that role');

SELECT * FROM finish();

DROP EXTENSION pg_backfill CASCADE;
DROP TABLE bf020_t;
DROP ROLE bf020_reader;
DROP ROLE bf020_nologin;
DROP ROLE bf020_writer;
