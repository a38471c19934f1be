--
-- windows: the time windows of a declaration, parsed in C (engine/windows.c)
-- and asked through backfill.window_at at fixed times, so that nothing here
-- depends on the clock; the refusals of backfill_declare (BF011)
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
SET client_min_messages = notice;
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
\set VERBOSITY default

-- 2026-12-04 is a Friday, 2026-12-05 a Saturday, 2026-12-07 a Monday
SELECT t, w.inside, w.next_start
  FROM unnest(ARRAY['2026-12-04 21:59:59+00', '2026-12-04 22:00+00', '2026-12-05 05:59:59+00',
                    '2026-12-05 06:00+00', '2026-12-07 12:00+00']::timestamptz[]) t,
       backfill.window_at('{"Mon-Fri 22:00-06:00"}', 'UTC', t) w;

-- a window crossing midnight belongs to the day it starts: Friday's runs
-- into Saturday, Sunday's is none (Sunday 23:00 is outside)
SELECT t, w.inside, w.next_start
  FROM unnest(ARRAY['2026-12-06 23:00+00', '2026-12-07 03:00+00', '2026-12-08 03:00+00']::timestamptz[]) t,
       backfill.window_at('{"Mon-Fri 22:00-06:00"}', 'UTC', t) w;

-- days alone are whole days; two windows: the nearest next start
SELECT t, w.inside, w.next_start
  FROM unnest(ARRAY['2026-12-04 12:00+00', '2026-12-05 00:00+00', '2026-12-06 23:59+00',
                    '2026-12-07 00:00+00']::timestamptz[]) t,
       backfill.window_at('{"Mon-Fri 22:00-06:00", "Sat-Sun"}', 'UTC', t) w;

-- a time range alone is every day; 24:00 may end one; lists and wrapping ranges of days
SELECT (backfill.window_at('{"09:00-17:00"}', 'UTC', '2026-12-06 16:59+00')).*;
SELECT (backfill.window_at('{"20:00-24:00"}', 'UTC', '2026-12-06 23:59+00')).*;
SELECT (backfill.window_at('{"mon,WED 01:00-03:00"}', 'UTC', '2026-12-08 02:00+00')).*;
SELECT (backfill.window_at('{"Fri-Mon"}', 'UTC', '2026-12-08 02:00+00')).*;

-- in the declaration's time zone: 22:00 in Berlin is 21:00 UTC in winter,
-- 20:00 UTC in summer (the window keeps its wall-clock hours)
SELECT (backfill.window_at('{"Mon-Fri 22:00-06:00"}', 'Europe/Berlin', '2026-12-04 21:30+00')).*;
SELECT (backfill.window_at('{"Mon-Fri 22:00-06:00"}', 'Europe/Berlin', '2026-07-03 20:30+00')).*;
SELECT (backfill.window_at('{"Sat-Sun"}', 'America/New_York', '2026-12-05 03:00+00')).*;

-- no windows: always inside
SELECT (backfill.window_at(NULL, 'UTC', '2026-12-05 03:00+00')).*;

-- refusals: BF011 with the accepted form in the hint
CREATE TABLE win_t (id int PRIMARY KEY, c int);
-- the SQLSTATEs first, then the messages with their hints
\set VERBOSITY sqlstate
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', windows => '{"Mon-Fri 22-6"}');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', windows => '{"Sat-Sun"}',
                        window_time_zone => 'Mars/Olympus_Mons');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', throttle_when => '1 + 1');
\set VERBOSITY default
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', windows => '{"Mon-Fri 22-6"}');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', windows => '{"Mon-Fry"}');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', windows => '{"Mon 10:00-10:00"}');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', windows => '{"25:00-26:00"}');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', windows => '{"Mon 10:00-11:00 x"}');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', windows => '{}');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', windows => '{NULL}');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', windows => '{"Sat-Sun"}',
                        window_time_zone => 'Mars/Olympus_Mons');
SELECT backfill.window_at('{"Mon-"}', 'UTC', now());

-- a good one is stored with its time zone; without one, the server's
SELECT length(backfill_declare('win_ok', 'win_t', 'c IS NULL', set => 'c = 1',
              windows => '{"Mon-Fri 22:00-06:00", "Sat-Sun"}', window_time_zone => 'Europe/Berlin'));
SELECT windows, window_time_zone FROM backfill.declaration WHERE name = 'win_ok';
SELECT length(backfill_declare('win_ok', 'win_t', 'c IS NULL', set => 'c = 1',
              windows => '{"Sat-Sun"}'));
SELECT windows, window_time_zone = (SELECT reset_val FROM pg_settings WHERE name = 'TimeZone')
       AS the_servers_zone
  FROM backfill.declaration WHERE name = 'win_ok';

-- throttle_when: one boolean expression, parsed and analyzed, never run here
CREATE TABLE win_flag (hold boolean);
CREATE FUNCTION win_noisy() RETURNS boolean LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'win_noisy ran in the caller''s session'; END $$;
SELECT length(backfill_declare('win_ok', 'win_t', 'c IS NULL', set => 'c = 1',
              throttle_when => 'win_noisy() OR EXISTS (SELECT 1 FROM win_flag WHERE hold)'));
SELECT throttle_when FROM backfill.declaration WHERE name = 'win_ok';
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', throttle_when => '1 + 1');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', throttle_when => 'no_such_column');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', throttle_when => 'true) OR (true');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', throttle_when => 'true FROM win_flag');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', throttle_when => '   ');
SELECT backfill_declare('win_bad', 'win_t', 'c IS NULL', set => 'c = 1', throttle_when => 'true; DROP TABLE win_flag');
SELECT count(*) AS bad_stored FROM backfill.declaration WHERE name = 'win_bad';

SELECT backfill_drop('win_ok');
DROP TABLE win_t, win_flag;
DROP FUNCTION win_noisy();
