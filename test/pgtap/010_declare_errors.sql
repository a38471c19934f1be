-- 010_declare_errors: every bad declaration is refused with its SQLSTATE
-- (class BF), a message naming the backfill, a hint, and leaves nothing behind.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf010_t, bf010_nopk, bf010_comp, bf010_keys, bf010_victim CASCADE;
CREATE TABLE bf010_t (id int PRIMARY KEY, a int, c int);
INSERT INTO bf010_t SELECT g, g, NULL FROM generate_series(1, 10) g;
CREATE VIEW bf010_v AS SELECT * FROM bf010_t;
CREATE TABLE bf010_nopk (id int, c int);
CREATE TABLE bf010_comp (a int, b int, c int, PRIMARY KEY (a, b));
CREATE TABLE bf010_keys (id int PRIMARY KEY, plain int NOT NULL, nullable int UNIQUE, c int);
CREATE TABLE bf010_victim (id int);

\ir include/bf_error.psql

SELECT * FROM no_plan();

-- one valid declaration, so "nothing left behind" compares against a non-empty catalog
SELECT ok(backfill_declare('bf010_ok', 'bf010_t', 'c IS NULL',
          'UPDATE bf010_t SET c = a WHERE id BETWEEN $1 AND $2 AND (c IS NULL)') ~ '^[0-9a-f]{64}$',
          'a valid declaration is accepted');
SELECT count(*) AS decl_before FROM backfill.declaration \gset
SELECT isnt(:decl_before::bigint, 0::bigint, 'the catalog holds the valid declaration');

-- names (BF012)
SELECT throws_ok($$SELECT backfill_declare('', 'bf010_t', 'c IS NULL', 'SELECT 1')$$,
                 'BF012', 'backfill name must not be empty', 'empty name: BF012');
SELECT throws_ok($$SELECT backfill_declare(NULL, 'bf010_t', 'c IS NULL', 'SELECT 1')$$,
                 'BF012', 'backfill name must not be empty', 'NULL name: BF012');
SELECT throws_ok($$SELECT backfill_declare('bad:scope', 'bf010_t', 'c IS NULL', 'SELECT 1')$$,
                 'BF012', NULL, 'name with '':'': BF012');
SELECT throws_ok($$SELECT backfill_declare(E'bad\tname', 'bf010_t', 'c IS NULL', 'SELECT 1')$$,
                 'BF012', NULL, 'name with a control character: BF012');
SELECT throws_ok($$SELECT backfill_declare(repeat('b', 201), 'bf010_t', 'c IS NULL', 'SELECT 1')$$,
                 'BF012', NULL, 'name of 201 bytes: BF012');
SELECT lives_ok($$SELECT backfill_declare(repeat('b', 200), 'bf010_t', 'c IS NULL', 'SELECT $1, $2')$$,
                'name of 200 bytes is accepted (the limit is inclusive)');
SELECT lives_ok($$DELETE FROM backfill.declaration WHERE name = repeat('b', 200)$$,
                'remove the 200-byte declaration again');

-- relation (BF001)
SELECT throws_ok($$SELECT backfill_declare('bad_rel_null', NULL, 'c IS NULL', 'SELECT 1')$$,
                 'BF001', NULL, 'NULL relation: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_rel_empty', '', 'c IS NULL', 'SELECT 1')$$,
                 'BF001', NULL, 'empty relation: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_rel_unknown', 'bf010_no_such_table', 'c IS NULL', 'SELECT 1')$$,
                 'BF001', 'relation "bf010_no_such_table" of backfill "bad_rel_unknown" does not exist',
                 'unknown relation: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_rel_syntax', 'a.b.c.d', 'c IS NULL', 'SELECT 1')$$,
                 'BF001', NULL, 'relation name that does not parse: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_rel_view', 'bf010_v', 'c IS NULL', 'SELECT 1')$$,
                 'BF001', 'relation "bf010_v" of backfill "bad_rel_view" is not a table',
                 'a view instead of a table: BF001');

-- key (BF001)
SELECT throws_ok($$SELECT backfill_declare('bad_key_nopk', 'bf010_nopk', 'c IS NULL', 'SELECT 1')$$,
                 'BF001', NULL, 'table without primary key and no key: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_key_comp', 'bf010_comp', 'c IS NULL', 'SELECT 1')$$,
                 'BF001', NULL, 'composite primary key: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_key_unknown', 'bf010_keys', 'c IS NULL', 'SELECT 1', key => 'nope')$$,
                 'BF001', NULL, 'unknown key column: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_key_sys', 'bf010_keys', 'c IS NULL', 'SELECT 1', key => 'ctid')$$,
                 'BF001', NULL, 'system column as key: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_key_nouniq', 'bf010_keys', 'c IS NULL', 'SELECT 1', key => 'plain')$$,
                 'BF001', NULL, 'key column without unique index: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_key_nullable', 'bf010_keys', 'c IS NULL', 'SELECT 1', key => 'nullable')$$,
                 'BF001', NULL, 'nullable key column with a unique index: BF001');

-- predicate (BF001)
SELECT throws_ok($$SELECT backfill_declare('bad_pred_null', 'bf010_t', NULL, 'SELECT 1')$$,
                 'BF001', NULL, 'NULL predicate: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_pred_empty', 'bf010_t', '', 'SELECT 1')$$,
                 'BF001', NULL, 'empty predicate: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_pred_parse', 'bf010_t', 'c IS', 'SELECT 1')$$,
                 'BF001', 'the predicate of backfill "bad_pred_parse" is not valid',
                 'predicate that does not parse: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_pred_col', 'bf010_t', 'no_such_col IS NULL', 'SELECT 1')$$,
                 'BF001', NULL, 'predicate referencing a missing column: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_pred_int', 'bf010_t', 'c + 1', 'SELECT 1')$$,
                 'BF001', NULL, 'non-boolean predicate: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_pred_smuggle', 'bf010_t',
                    'true) ; DROP TABLE bf010_victim; SELECT (1', 'SELECT 1')$$,
                 'BF001', NULL, 'predicate smuggling a second statement: BF001');
SELECT has_table('bf010_victim', 'the table the smuggled statement would drop still exists');

-- action (BF001)
SELECT throws_ok($$SELECT backfill_declare('bad_act_null', 'bf010_t', 'c IS NULL', NULL)$$,
                 'BF001', NULL, 'NULL action: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_act_empty', 'bf010_t', 'c IS NULL', '')$$,
                 'BF001', NULL, 'empty action: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_act_parse', 'bf010_t', 'c IS NULL', 'UPDATE bf010_t SE WHERE (c IS NULL)')$$,
                 'BF001', 'the action of backfill "bad_act_parse" is not valid',
                 'action that does not parse: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_act_two', 'bf010_t', 'c IS NULL',
                    'UPDATE bf010_t SET c = 1 WHERE id BETWEEN $1 AND $2; SELECT 2')$$,
                 'BF001', NULL, 'two statements in the action: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_act_col', 'bf010_t', 'c IS NULL',
                    'UPDATE bf010_t SET nope = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')$$,
                 'BF001', NULL, 'action referencing a missing column: BF001');
SELECT throws_ok($$SELECT backfill_declare('bad_act_param', 'bf010_t', 'c IS NULL', 'SELECT $3')$$,
                 'BF001', NULL, 'action using a parameter beyond $2: BF001');

-- options (BF011)
SELECT throws_ok($$SELECT backfill_declare('bad_bs_0', 'bf010_t', 'c IS NULL', 'SELECT 1', batch_size => 0)$$,
                 'BF011', NULL, 'batch_size 0: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_bs_neg', 'bf010_t', 'c IS NULL', 'SELECT 1', batch_size => -1)$$,
                 'BF011', NULL, 'batch_size -1: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_bs_null', 'bf010_t', 'c IS NULL', 'SELECT 1', batch_size => NULL)$$,
                 'BF011', NULL, 'batch_size NULL: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_bs_big', 'bf010_t', 'c IS NULL', 'SELECT 1', batch_size => 2000000)$$,
                 'BF011', NULL, 'batch_size 2000000: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_rate_0', 'bf010_t', 'c IS NULL', 'SELECT 1', rate => 0)$$,
                 'BF011', NULL, 'rate 0: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_rate_neg', 'bf010_t', 'c IS NULL', 'SELECT 1', rate => -1)$$,
                 'BF011', NULL, 'rate -1: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_rate_nan', 'bf010_t', 'c IS NULL', 'SELECT 1', rate => 'NaN')$$,
                 'BF011', NULL, 'rate NaN: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_rate_inf', 'bf010_t', 'c IS NULL', 'SELECT 1', rate => 'Infinity')$$,
                 'BF011', NULL, 'rate Infinity: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_par_0', 'bf010_t', 'c IS NULL', 'SELECT 1', max_parallel => 0)$$,
                 'BF011', NULL, 'max_parallel 0: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_att_0', 'bf010_t', 'c IS NULL', 'SELECT 1', max_attempts => 0)$$,
                 'BF011', NULL, 'max_attempts 0: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_to_0', 'bf010_t', 'c IS NULL', 'SELECT 1', batch_timeout => '0 s')$$,
                 'BF011', NULL, 'batch_timeout 0 s: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_to_neg', 'bf010_t', 'c IS NULL', 'SELECT 1', batch_timeout => '-5 s')$$,
                 'BF011', NULL, 'negative batch_timeout: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_backoff', 'bf010_t', 'c IS NULL', 'SELECT 1',
                    backoff_base => '10 s', backoff_cap => '1 s')$$,
                 'BF011', NULL, 'backoff_cap below backoff_base: BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_env_empty', 'bf010_t', 'c IS NULL', 'SELECT 1', environments => '{}')$$,
                 'BF011', NULL, 'environments ''{}'': BF011');
SELECT throws_ok($$SELECT backfill_declare('bad_env_blank', 'bf010_t', 'c IS NULL', 'SELECT 1', environments => '{""}')$$,
                 'BF011', NULL, 'environments with an empty name: BF011');

-- hints, and messages that name the backfill
SELECT results_eq(
    $$SELECT state, message LIKE '%"bad_hint_view"%', coalesce(hint, '') <> ''
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bad_hint_view', 'bf010_v', 'c IS NULL', 'SELECT 1')$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'view: BF001, the message names the backfill, a hint is given');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bad_hint_nouniq"%', hint LIKE '%CREATE UNIQUE INDEX%', coalesce(detail, '') <> ''
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bad_hint_nouniq', 'bf010_keys', 'c IS NULL', 'SELECT 1', key => 'plain')$q$)$$,
    $$VALUES ('BF001', true, true, true)$$,
    'key without unique index: the hint says which index to create, with a detail');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bad_hint_pred"%', coalesce(hint, '') <> '', detail LIKE '%no_such_col%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bad_hint_pred', 'bf010_t', 'no_such_col IS NULL', 'SELECT 1')$q$)$$,
    $$VALUES ('BF001', true, true, true)$$,
    'bad predicate: the detail carries the underlying error, a hint is given');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bad_hint_bs"%', coalesce(hint, '') <> '', detail LIKE '%0%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bad_hint_bs', 'bf010_t', 'c IS NULL', 'SELECT 1', batch_size => 0)$q$)$$,
    $$VALUES ('BF011', true, true, true)$$,
    'batch_size 0: message names the backfill, detail gives the value, hint given');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bad_hint_rate"%', coalesce(hint, '') <> ''
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bad_hint_rate', 'bf010_t', 'c IS NULL', 'SELECT 1', rate => 0)$q$)$$,
    $$VALUES ('BF011', true, true)$$,
    'rate 0: message names the backfill, hint given');
SELECT results_eq(
    $$SELECT state, coalesce(hint, '') <> ''
        FROM pg_temp.bf_error($q$SELECT backfill_declare('', 'bf010_t', 'c IS NULL', 'SELECT 1')$q$)$$,
    $$VALUES ('BF012', true)$$,
    'empty name: a hint is given');
SELECT results_eq(
    $$SELECT state, message LIKE '%"bad_hint_env"%', coalesce(hint, '') <> ''
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bad_hint_env', 'bf010_t', 'c IS NULL', 'SELECT 1', environments => '{}')$q$)$$,
    $$VALUES ('BF011', true, true)$$,
    'empty environments: message names the backfill, hint given');

-- nothing left behind
SELECT is((SELECT count(*) FROM backfill.declaration), :decl_before::bigint,
          'no refused declaration left a catalog row');
SELECT is((SELECT count(*) FROM backfill.declaration WHERE name LIKE 'bad%'), 0::bigint,
          'no declaration named bad* exists');
SELECT is((SELECT count(*) FROM backfill.ledger), 0::bigint, 'no ledger row was written');
SELECT is((SELECT predicate FROM backfill.declaration WHERE name = 'bf010_ok'), 'c IS NULL',
          'the valid declaration is untouched');

-- statements that parse but could never work as a batch: refused too
-- (kept after the leftover checks above; they clean up after themselves)
-- a predicate that closes the parenthesis and comments the rest out would
-- also comment out the batch query's ORDER BY ... LIMIT (batch_size ignored)
SELECT throws_ok($$SELECT backfill_declare('bad_pred_comment', 'bf010_t', 'true) --', 'SELECT 1')$$,
                 'BF001', NULL, 'predicate escaping its parentheses with a comment: BF001');
-- a batch runs its action and checkpoint in one transaction: transaction
-- control can never run there (it fails every attempt of every batch)
SELECT throws_ok($$SELECT backfill_declare('bad_act_commit', 'bf010_t', 'c IS NULL', 'COMMIT')$$,
                 'BF001', NULL, 'transaction control as the action: BF001');
SELECT is((SELECT count(*) FROM backfill.declaration WHERE name IN ('bad_pred_comment', 'bad_act_commit')),
          0::bigint, 'neither was stored');

-- an action that does not bound itself by the batch's range ($1 and $2) is
-- refused: it would do rows outside its batch, which the ledger would not
-- count (a new user's UPDATE ... WHERE (c IS NULL) did every row in one batch)
SELECT results_eq(
    $$SELECT state, message LIKE '%does not use $1%', hint LIKE '%BETWEEN $1 AND $2%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bad_norange', 'bf010_t', 'c IS NULL',
                                    'UPDATE bf010_t SET c = 1 WHERE (c IS NULL)')$q$)$$,
    $$VALUES ('BF001', true, true)$$,
    'an action with no key range: BF001, the hint writes the range');
SELECT results_eq(
    $$SELECT state, message LIKE '%does not use $2%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bad_halfrange', 'bf010_t', 'c IS NULL',
                                    'UPDATE bf010_t SET c = 1 WHERE id >= $1 AND (c IS NULL)')$q$)$$,
    $$VALUES ('BF001', true)$$,
    'an action with only $1: BF001 names $2');
SELECT results_eq(
    $$SELECT state, message LIKE '%does not use $1%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare('bad_revert_range', 'bf010_t', 'c IS NULL',
                                    'UPDATE bf010_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
                                    revert => 'UPDATE bf010_t SET c = NULL')$q$)$$,
    $$VALUES ('BF001', true)$$,
    'a revert with no key range: BF001');
SELECT is((SELECT count(*) FROM backfill.declaration WHERE name LIKE 'bad_%range%'), 0::bigint,
          'none of them stored');

SELECT * FROM finish();

DROP VIEW bf010_v;
DROP TABLE bf010_t, bf010_nopk, bf010_comp, bf010_keys, bf010_victim;
DROP EXTENSION pg_backfill CASCADE;
