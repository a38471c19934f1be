-- 172_null_probe_wait: backfill_probe and backfill_wait refuse what means
-- nothing (issue 23, the fresh-context attacker's F6).  Before, both were
-- STRICT: backfill_probe(NULL), a NULL timeout and backfill_wait(1, NULL)
-- answered NULL silently, and a probe timeout of '0' started a worker only
-- to report BF039.  Now each NULL is an error with its code and a hint, and
-- a timeout that is not more than 0 is refused before any worker starts.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;
\ir include/bf_error.psql
DROP TABLE IF EXISTS bf171;
CREATE TABLE bf171 (id bigint PRIMARY KEY, c int);
INSERT INTO bf171 SELECT g FROM generate_series(1, 10) g;
SELECT backfill_declare(name => 'bf171', relation => 'bf171', predicate => 'c IS NULL',
    action => 'UPDATE bf171 SET c = 1 WHERE id BETWEEN $1 AND $2', guard => false);

SELECT * FROM no_plan();

SELECT throws_ok($$SELECT backfill_probe(NULL)$$, 'BF012',
    'backfill name must not be empty', 'backfill_probe(NULL): BF012, not NULL');
SELECT throws_ok($$SELECT backfill_probe(NULL, NULL)$$, 'BF012',
    'backfill name must not be empty', 'backfill_probe(NULL, NULL): BF012');
SELECT throws_ok($$SELECT backfill_probe('bf171', NULL)$$, 'BF011',
    'timeout to probe backfill "bf171" must not be null', 'a NULL probe timeout: BF011');
SELECT isnt((pg_temp.bf_error($$SELECT backfill_probe('bf171', NULL)$$)).hint, NULL,
    'with a hint');
SELECT throws_ok($$SELECT backfill_probe('bf171', '0')$$, 'BF011',
    'timeout to probe backfill "bf171" must be more than 0', 'a probe timeout of 0: BF011');
SELECT throws_ok($$SELECT backfill_probe('bf171', '-1 s')$$, 'BF011',
    'timeout to probe backfill "bf171" must be more than 0', 'a negative probe timeout: BF011');
SELECT is((SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill probe'),
    0::bigint, 'no probe worker was started by the refused calls');
SELECT is((SELECT count(*) FROM backfill.probe WHERE declaration = 'bf171'), 0::bigint,
    'and nothing was recorded for them');
SELECT is(backfill_probe('bf171', '30 s'), 10::bigint, 'a valid call still probes: 10 rows');

SELECT throws_ok($$SELECT backfill_wait(NULL)$$, 'BF002',
    'run to wait for must not be null', 'backfill_wait(NULL): BF002, not NULL');
SELECT throws_ok($$SELECT backfill_wait(1, NULL)$$, 'BF011',
    'timeout to wait for run 1 must not be null', 'backfill_wait(1, NULL): BF011, not NULL');
SELECT isnt((pg_temp.bf_error($$SELECT backfill_wait(1, NULL)$$)).hint, NULL, 'with a hint');
SELECT is((SELECT proisstrict FROM pg_proc WHERE oid = 'backfill_probe(text, interval)'::regprocedure),
    false, 'backfill_probe is CALLED ON NULL INPUT');
SELECT is((SELECT proisstrict FROM pg_proc WHERE oid = 'backfill_wait(bigint, interval)'::regprocedure),
    false, 'backfill_wait is CALLED ON NULL INPUT');

SELECT * FROM finish();
DROP EXTENSION pg_backfill CASCADE;
DROP TABLE bf171;
