-- 162_finalize_null: CALL backfill_finalize with a NULL argument (attacker's F3).
-- A procedure cannot be STRICT: a NULL name or timeout reached the C code and
-- crashed the backend (and with it the cluster); as any role, since EXECUTE
-- is PUBLIC.  Now each is refused with its code, before anything else (so
-- even inside a transaction block), and the other non-STRICT C functions
-- refuse their NULLs too.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;
DROP ROLE IF EXISTS bf162_nobody;
CREATE ROLE bf162_nobody LOGIN;

SELECT * FROM no_plan();

SET ROLE bf162_nobody;
SELECT throws_ok($$CALL backfill_finalize('bf162', NULL)$$, 'BF011',
    'timeout to finalize backfill "bf162" must not be null',
    'a NULL timeout: BF011, as an unprivileged role');
SELECT throws_ok($$CALL backfill_finalize(NULL)$$, 'BF012',
    'backfill name must not be empty', 'a NULL name: BF012');
SELECT throws_ok($$CALL backfill_finalize(NULL, NULL)$$, 'BF012',
    'backfill name must not be empty', 'a NULL name and timeout: BF012');
SELECT throws_ok($$SELECT backfill_run(NULL)$$, 'BF012',
    'backfill name must not be empty', 'backfill_run of NULL: BF012');
SELECT throws_ok($$SELECT backfill_outbox_emit(NULL, 'k', '{}')$$, 'BF011',
    'outbox message needs a topic', 'backfill_outbox_emit with a NULL topic: BF011');
SELECT throws_ok($$SELECT backfill_declare(name => NULL, relation => 'pg_class',
        action => 'SELECT 1', batch_size => 10)$$, 'BF012',
    NULL, 'backfill_declare with a NULL name: BF012');
SELECT throws_ok($$SELECT backfill_wait(NULL, '1 s')$$, 'BF002',
    'run to wait for must not be null', 'backfill_wait of a NULL run: BF002 (0.6, issue 23)');
SELECT is(backfill_pause(NULL), NULL, 'backfill_pause is STRICT: NULL');
RESET ROLE;
SELECT is((SELECT count(*) FROM pg_stat_activity WHERE pid = pg_backend_pid()), 1::bigint,
    'the session is alive: no crash');

DROP ROLE bf162_nobody;
SELECT * FROM finish();
