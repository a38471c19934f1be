-- 171_ensure_retire: backfill_ensure_complete and backfill_retire refuse what
-- the catalogs alone say is not done (issue 24, points 4 and 5); the passes
-- themselves are in test/t/129_deploy_end.pl.
--  * ensure_complete: a NULL name is BF012 (never a NULL that passes), an
--    unknown one BF002, a never-run one BF044 with the hint to finalize,
--    another role's BF016; inside a transaction it assigns no transaction id
--  * retire: unknown BF002, never completed BF044 (hint: backfill_drop),
--    another role's BF016; nothing is written
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;
DROP TABLE IF EXISTS bf171_items;
DROP ROLE IF EXISTS bf171_owner;
DROP ROLE IF EXISTS bf171_other;
CREATE ROLE bf171_owner LOGIN;
CREATE ROLE bf171_other LOGIN;
CREATE TABLE bf171_items (id int PRIMARY KEY, c int);
GRANT SELECT, UPDATE ON bf171_items TO bf171_owner;
SET ROLE bf171_owner;
SELECT backfill_declare(name => 'bf171', relation => 'bf171_items', predicate => 'c IS NULL',
    set => 'c = id') IS NOT NULL AS declared;
RESET ROLE;

SELECT * FROM no_plan();

SELECT throws_ok($$SELECT backfill_ensure_complete(NULL)$$, 'BF012',
    'backfill name must not be empty', 'ensure_complete of NULL: BF012');
SELECT throws_ok($$SELECT backfill_ensure_complete('bf171_nothing')$$, 'BF002',
    'backfill "bf171_nothing" is not declared', 'ensure_complete of an unknown name: BF002');
SELECT throws_ok($$SELECT backfill_ensure_complete('bf171')$$, 'BF044',
    'backfill "bf171" is not complete: it has never run', 'never run: BF044');
SELECT is(txid_current_if_assigned(), NULL, 'the check assigned no transaction id');
SET ROLE bf171_other;
SELECT throws_ok($$SELECT backfill_ensure_complete('bf171')$$, 'BF016',
    'permission denied for backfill "bf171"', 'another role may not check it: BF016');
SELECT throws_ok($$SELECT backfill_retire('bf171')$$, 'BF016',
    'permission denied for backfill "bf171"', 'another role may not retire it: BF016');
RESET ROLE;

SELECT throws_ok($$SELECT backfill_retire('bf171_nothing')$$, 'BF002',
    'backfill "bf171_nothing" is not declared', 'retire of an unknown name: BF002');
SET ROLE bf171_owner;
SELECT throws_ok($$SELECT backfill_retire('bf171')$$, 'BF044',
    'backfill "bf171" cannot be retired: it never completed', 'never completed: BF044');
RESET ROLE;
SELECT is((SELECT count(*) FROM backfill.retired), 0::bigint, 'nothing was retired');
SELECT is((SELECT state FROM backfill_pending() WHERE name = 'bf171'), 'pending',
    'pending: still pending');
SELECT is(backfill_retire(NULL), NULL, 'backfill_retire is STRICT, as the controls: NULL');

SELECT backfill_drop('bf171');
DROP TABLE bf171_items;
DROP ROLE bf171_owner;
DROP ROLE bf171_other;
SELECT * FROM finish();
