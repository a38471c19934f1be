-- 147_function_owner: a pages or count function is stored by name, and a
-- name is anyone's once the function is dropped or renamed.  The
-- declaration records the function's owner; a function of that name owned
-- by another role never runs (BF016 at the run), and a declaration naming
-- another role's function is refused (its owner could replace it).  The
-- attack: a superuser's pages function renamed in a refactor, an ordinary
-- role creating one under the old name that would make it superuser.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
\ir include/quiet_lanes.psql
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;
RESET backfill.environment;

DROP TABLE IF EXISTS bf147_log CASCADE;
DROP FUNCTION IF EXISTS public.bf147_su(text, jsonb), public.bf147_su_v1(text, jsonb), public.bf147_super(text, jsonb),
    public.bf147_alice(text, jsonb), public.bf147_bobs(text, jsonb), public.bf147_count(jsonb);
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'bf147_alice') THEN
        EXECUTE 'DROP OWNED BY bf147_alice, bf147_bob';
    END IF;
END $$;
DROP ROLE IF EXISTS bf147_alice;
DROP ROLE IF EXISTS bf147_bob;
CREATE ROLE bf147_alice LOGIN;
CREATE ROLE bf147_bob LOGIN;
GRANT CREATE ON SCHEMA public TO bf147_alice, bf147_bob;
-- who ran what, as whom: anyone may write it
CREATE TABLE bf147_log (who text, what text);
GRANT INSERT, SELECT ON bf147_log TO PUBLIC;

\ir include/bf_error.psql

SELECT * FROM no_plan();

-- a superuser's pages source, run once
CREATE FUNCTION public.bf147_su(cursor text, input jsonb) RETURNS jsonb LANGUAGE sql AS $$
    INSERT INTO bf147_log VALUES (current_user, 'superuser pages');
    SELECT '{"rows": [], "next": null}'::jsonb $$;
SELECT lives_ok($$SELECT backfill_declare(name => 'bf147_su', pages => 'bf147_su',
                  action => 'SELECT pg_catalog.jsonb_array_length($1)')$$,
                'a superuser declares a pages source with its own function');
SELECT is((SELECT pages_owner::text FROM backfill.declaration WHERE name = 'bf147_su'),
          current_user::text, 'the declaration records the function''s owner');
SELECT backfill_run('bf147_su', wait => false) AS r1 \gset
SELECT is(backfill_wait(:r1, '300 s'), 'completed', 'its pass completes');

-- renamed in a refactor; bob creates a function under the old name
ALTER FUNCTION public.bf147_su(text, jsonb) RENAME TO bf147_su_v1;
SET ROLE bf147_bob;
CREATE FUNCTION public.bf147_su(cur text, input jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bf147_log VALUES (current_user, 'bob''s pages');
    EXECUTE 'ALTER ROLE bf147_bob SUPERUSER';
    RETURN '{"rows": [], "next": null}'::jsonb;
END $$;
RESET ROLE;
SELECT results_eq(
    $$SELECT state, message LIKE '%pages function of backfill "bf147_su" is not the one%',
             hint IS NOT NULL
        FROM pg_temp.bf_error('SELECT backfill_run(''bf147_su'', force => true)')$$,
    $$VALUES ('BF016', true, true)$$,
    'a run after the swap is refused (BF016): the function of that name is another role''s');
SELECT is((SELECT rolsuper FROM pg_roles WHERE rolname = 'bf147_bob'), false,
          'bob did not become a superuser');
SELECT is((SELECT count(*) FROM bf147_log WHERE what = 'bob''s pages'), 0::bigint,
          'bob''s function never ran');
SELECT is((SELECT pages_fn FROM (SELECT * FROM backfill.declaration WHERE name = 'bf147_su') d),
          'public.bf147_su(text,jsonb)', 'the stored name is the old one (what the swap aimed at)');

-- alice's own function dropped; bob takes its name
SET ROLE bf147_alice;
CREATE FUNCTION public.bf147_alice(cursor text, input jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT '{"rows": [], "next": null}'::jsonb $$;
SELECT lives_ok($$SELECT backfill_declare(name => 'bf147_a', pages => 'bf147_alice',
                  action => 'SELECT pg_catalog.jsonb_array_length($1)')$$,
                'alice declares a pages source with her own function');
DROP FUNCTION public.bf147_alice(text, jsonb);
RESET ROLE;
SET ROLE bf147_bob;
CREATE FUNCTION public.bf147_alice(cursor text, input jsonb) RETURNS jsonb LANGUAGE sql AS $$
    INSERT INTO bf147_log VALUES (current_user, 'bob''s function as alice');
    SELECT '{"rows": [], "next": null}'::jsonb $$;
RESET ROLE;
SET ROLE bf147_alice;
SELECT results_eq(
    $$SELECT state FROM pg_temp.bf_error('SELECT backfill_run(''bf147_a'')')$$,
    $$VALUES ('BF016')$$,
    'alice''s run after bob took the name is refused (BF016)');
RESET ROLE;
SELECT is((SELECT count(*) FROM bf147_log WHERE what = 'bob''s function as alice'), 0::bigint,
          'bob''s function never ran as alice');

-- declaring with another role's function is refused
SET ROLE bf147_bob;
CREATE FUNCTION public.bf147_bobs(cursor text, input jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT '{"rows": [], "next": null}'::jsonb $$;
CREATE FUNCTION public.bf147_count(input jsonb) RETURNS bigint LANGUAGE sql AS $$ SELECT 0::bigint $$;
GRANT EXECUTE ON FUNCTION public.bf147_bobs(text, jsonb), public.bf147_count(jsonb) TO bf147_alice;
RESET ROLE;
SET ROLE bf147_alice;
SELECT results_eq(
    $$SELECT state, message LIKE '%belongs to role "bf147_bob"%', hint LIKE '%member of role bf147_bob%'
        FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf147_b', pages => 'bf147_bobs',
                 action => 'SELECT pg_catalog.jsonb_array_length($1)')$q$)$$,
    $$VALUES ('BF016', true, true)$$,
    'a pages function of another role is refused at declaration (BF016)');
CREATE FUNCTION public.bf147_alice2(cursor text, input jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT '{"rows": [], "next": null}'::jsonb $$;
SELECT results_eq(
    $$SELECT state FROM pg_temp.bf_error($q$SELECT backfill_declare(name => 'bf147_c', pages => 'bf147_alice2',
                 count_function => 'bf147_count', action => 'SELECT pg_catalog.jsonb_array_length($1)')$q$)$$,
    $$VALUES ('BF016')$$,
    'a count function of another role is refused at declaration too');
RESET ROLE;
SELECT is((SELECT count(*) FROM backfill.declaration WHERE name IN ('bf147_b', 'bf147_c')), 0::bigint,
          'neither refused declaration was stored');
-- a superuser's function may serve another declarer: its owner holds every privilege already
CREATE FUNCTION public.bf147_super(cursor text, input jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT '{"rows": [], "next": null}'::jsonb $$;
GRANT EXECUTE ON FUNCTION public.bf147_super(text, jsonb) TO bf147_alice;
SET ROLE bf147_alice;
SELECT lives_ok($$SELECT backfill_declare(name => 'bf147_d', pages => 'bf147_super',
                  action => 'SELECT pg_catalog.jsonb_array_length($1)')$$,
                'a superuser''s pages function is accepted for another declarer');
RESET ROLE;

SELECT * FROM finish();

-- clean up
SET client_min_messages = warning;
DROP EXTENSION pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
DROP TABLE bf147_log;
DROP FUNCTION public.bf147_su_v1(text, jsonb), public.bf147_super(text, jsonb);
DROP OWNED BY bf147_alice, bf147_bob;
DROP ROLE bf147_alice;
DROP ROLE bf147_bob;
