--
-- upgrade: 0.1 installs, keeps its declarations and history through
-- ALTER EXTENSION ... UPDATE, 0.2 adds the outbox, 0.4 the defaults of
-- backfill_declare, 0.6 the reading of every backfill by pg_monitor
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
DROP TABLE IF EXISTS upgrade_items;
CREATE EXTENSION pg_backfill VERSION '0.1';
RESET client_min_messages;
SELECT extversion FROM pg_extension WHERE extname = 'pg_backfill';
SELECT to_regclass('backfill.outbox') IS NULL AS no_outbox_in_0_1;

CREATE TABLE upgrade_items (id int PRIMARY KEY, c int);
-- the library works with its own catalog version only (BF027, issue 25):
-- under the 0.1 catalogs it refuses to declare, with the way out
SELECT length(backfill_declare('upgrade_fill', 'upgrade_items', 'c IS NULL',
       'UPDATE upgrade_items SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')) AS checksum_length;
-- the declaration as the 0.1 library stored it (its checksum: what every
-- library computes for this definition, compared again under 0.6 below)
INSERT INTO backfill.declaration (name, relid, relation, key_column, key_type, predicate, action,
       batch_size, rate, max_attempts, backoff_base_ms, backoff_cap_ms, batch_timeout_ms,
       min_batch_size, max_batch_size, run_as, search_path, owner, checksum)
VALUES ('upgrade_fill', 'upgrade_items'::regclass, 'public.upgrade_items', 'id', 'integer',
       'c IS NULL', 'UPDATE upgrade_items SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
       1000, 5, 5, 1000, 60000, 60000, 100, 100000, current_user::regrole, '"$user", public',
       current_user::regrole, '580445c0df77630b7c1ae6ba4428abf3e0f551cbd83f6dfc135af98b3ae885fc');
SELECT checksum AS checksum_before FROM backfill.declaration WHERE name = 'upgrade_fill' \gset

ALTER EXTENSION pg_backfill UPDATE TO '0.2';
SELECT extversion FROM pg_extension WHERE extname = 'pg_backfill';

-- the declaration survived, unchanged
SELECT name, checksum = :'checksum_before' AS same_checksum
  FROM backfill.declaration WHERE name = 'upgrade_fill';

-- what 0.2 adds: catalogs, functions, and their access
SELECT c.relname, c.relrowsecurity,
       has_table_privilege('public', c.oid, 'SELECT') AS public_can_read
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'backfill' AND c.relkind = 'r'
 ORDER BY 1;
SELECT p.oid::regprocedure AS function,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_can_execute
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_backfill'
 WHERE p.proname LIKE 'backfill_outbox%'
 ORDER BY p.oid::regprocedure::text;

-- the new functions check their arguments, then refuse under catalogs
-- older than the library (BF027): nothing is written
SELECT backfill_outbox_emit('', 'k', '{}');
SELECT backfill_outbox_emit('upgrade.topic', 'k1', '{"n": 1}') > 0 AS emitted;
SELECT topic, key, payload, state FROM backfill.outbox;

-- two running passes of one name, as 0.2 let two REPEATABLE READ callers
-- enqueue them (paused: no lane takes them)
WITH l AS (
  INSERT INTO backfill.ledger (ledger_name, declaration, checksum, owner)
  VALUES ('upgrade_dup', 'upgrade_dup', 'x', 10), ('upgrade_dup', 'upgrade_dup', 'x', 10)
  RETURNING run_id)
INSERT INTO backfill.run (run_id, paused) SELECT run_id, true FROM l;

-- and on to 0.3: the declaration still there, unchanged
ALTER EXTENSION pg_backfill UPDATE TO '0.3';
SELECT extversion FROM pg_extension WHERE extname = 'pg_backfill';
SELECT name, checksum = :'checksum_before' AS same_checksum
  FROM backfill.declaration WHERE name = 'upgrade_fill';
-- the oldest running pass of a name stays; the other is cancelled, with the reason
SELECT l.status, l.error_code,
       l.error_message LIKE 'cancelled by the upgrade to 0.3: run % of the same backfill was already running' AS why,
       r.phase, r.paused
  FROM backfill.ledger l JOIN backfill.run r USING (run_id)
 WHERE l.ledger_name = 'upgrade_dup' ORDER BY l.run_id;
-- and from now on the catalog refuses a second running pass
INSERT INTO backfill.ledger (ledger_name, declaration, checksum, owner)
VALUES ('upgrade_dup', 'upgrade_dup', 'x', 10);

-- and on to 0.4: backfill_declare's arguments but the name have defaults;
-- the declaration and its checksum unchanged; an operator's privileges on
-- backfill_declare carried over to its new signature
CREATE ROLE upgrade_declarer;
REVOKE EXECUTE ON FUNCTION backfill_declare(text, text, text, text, text, integer,
    double precision, integer, integer, interval, text[], interval, interval, interval,
    interval, integer, integer, jsonb, text, text, text, text, text, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION backfill_declare(text, text, text, text, text, integer,
    double precision, integer, integer, interval, text[], interval, interval, interval,
    interval, integer, integer, jsonb, text, text, text, text, text, text, jsonb, text)
    TO upgrade_declarer;
ALTER EXTENSION pg_backfill UPDATE TO '0.4';
SELECT has_function_privilege('public', p.oid, 'EXECUTE') AS public_can_execute,
       has_function_privilege('upgrade_declarer', p.oid, 'EXECUTE') AS granted_can_execute
  FROM pg_proc p WHERE p.proname = 'backfill_declare';
GRANT EXECUTE ON FUNCTION backfill_declare(text, text, text, text, text, integer,
    double precision, integer, integer, interval, text[], interval, interval, interval,
    interval, integer, integer, jsonb, text, text, text, text, text, text, jsonb, text, boolean)
    TO PUBLIC;
REVOKE ALL ON FUNCTION backfill_declare(text, text, text, text, text, integer,
    double precision, integer, integer, interval, text[], interval, interval, interval,
    interval, integer, integer, jsonb, text, text, text, text, text, text, jsonb, text, boolean)
    FROM upgrade_declarer;
-- the update's GRANT is an initial privilege of the extension (pg_init_privs,
-- which from PostgreSQL 17 on holds the role): DROP OWNED takes it too
DROP OWNED BY upgrade_declarer;
DROP ROLE upgrade_declarer;
SELECT extversion FROM pg_extension WHERE extname = 'pg_backfill';
SELECT name, checksum = :'checksum_before' AS same_checksum
  FROM backfill.declaration WHERE name = 'upgrade_fill';
SELECT backfill_declare('upgrade_fill', 'upgrade_items', 'c IS NULL',
       'UPDATE upgrade_items SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)') = :'checksum_before'
       AS same_checksum_declared_again;
SELECT p.proname, p.pronargs, p.pronargdefaults,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_can_execute,
       obj_description(p.oid, 'pg_proc') AS comment
  FROM pg_proc p WHERE p.proname = 'backfill_declare';
-- a pages source with a count function declared under 0.4 (regprocedure
-- columns), and one whose function is dropped before the update: as the
-- 0.4 library stored them (it refuses now, BF027)
CREATE FUNCTION upgrade_pages04(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT '{"rows": [], "next": null}'::jsonb $$;
CREATE FUNCTION upgrade_count04(input jsonb) RETURNS bigint LANGUAGE sql AS $$ SELECT 0::bigint $$;
CREATE FUNCTION upgrade_gone04(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT '{"rows": [], "next": null}'::jsonb $$;
SELECT length(backfill_declare(name => 'upgrade_gone04', pages => 'upgrade_gone04',
       action => 'SELECT pg_catalog.jsonb_array_length($1)')) AS checksum_length;
INSERT INTO backfill.declaration (name, pages_fn, count_fn, action, batch_size, rate, max_attempts,
       backoff_base_ms, backoff_cap_ms, batch_timeout_ms, min_batch_size, max_batch_size, run_as,
       search_path, owner, checksum)
SELECT f.name, f.pages_fn, f.count_fn, 'SELECT pg_catalog.jsonb_array_length($1)', 1000, 5, 5, 1000,
       60000, 60000, 100, 100000, current_user::regrole, '"$user", public', current_user::regrole,
       f.checksum
  FROM (VALUES ('upgrade_pages04', 'upgrade_pages04(text, jsonb)'::regprocedure,
                'upgrade_count04(jsonb)'::regprocedure,
                '817e0c12fa99b601e43e482d92138dd0d7d53f3b14ee442b609c12561dfad970'),
               ('upgrade_gone04', 'upgrade_gone04(text, jsonb)'::regprocedure, NULL,
                'f3ca32f3df0171ad5f4252ad261580e2c41aa787b735f19f08a1d2f8a656d7a1'))
       f(name, pages_fn, count_fn, checksum);
SELECT checksum AS checksum_pages04 FROM backfill.declaration WHERE name = 'upgrade_pages04' \gset
DROP FUNCTION upgrade_gone04(text, jsonb);
-- and on to 0.5: revert, revert_predicate, max_failed_rows and watch; a
-- privilege taken from PUBLIC stays taken; checksums unchanged; the pages
-- and count functions stored by name (text), which pg_upgrade carries
REVOKE EXECUTE ON FUNCTION backfill_declare(text, text, text, text, text, integer,
    double precision, integer, integer, interval, text[], interval, interval, interval,
    interval, integer, integer, jsonb, text, text, text, text, text, text, jsonb, text, boolean)
    FROM PUBLIC;
-- and functions 0.5 creates again keep what was granted and revoked on them
CREATE ROLE upgrade_reader;
REVOKE EXECUTE ON FUNCTION backfill_partitions(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION backfill_partitions(text) TO upgrade_reader;
ALTER EXTENSION pg_backfill UPDATE TO '0.5';
SELECT extversion FROM pg_extension WHERE extname = 'pg_backfill';
SELECT f.signature, has_function_privilege('public', f.signature, 'EXECUTE') AS public_can_execute,
       has_function_privilege('upgrade_reader', f.signature, 'EXECUTE') AS granted_can_execute
  FROM (VALUES ('backfill_partitions(text)'), ('backfill_status(text)'),
               ('backfill_pending()')) f(signature)
 ORDER BY 1;
GRANT EXECUTE ON FUNCTION backfill_partitions(text) TO PUBLIC;
REVOKE ALL ON FUNCTION backfill_partitions(text) FROM upgrade_reader;
DROP OWNED BY upgrade_reader;
DROP ROLE upgrade_reader;

SELECT p.pronargs, p.pronargdefaults,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_can_execute
  FROM pg_proc p WHERE p.proname = 'backfill_declare';
GRANT EXECUTE ON FUNCTION backfill_declare(text, text, text, text, text, integer,
    double precision, integer, integer, interval, text[], interval, interval, interval,
    interval, integer, integer, jsonb, text, text, text, text, text, text, jsonb, text, boolean,
    text, text, integer, interval) TO PUBLIC;
SELECT backfill_declare('upgrade_fill', 'upgrade_items', 'c IS NULL',
       'UPDATE upgrade_items SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)') = :'checksum_before'
       AS same_checksum_under_05;
SELECT max_failed_rows, revert, watch_ms FROM backfill.declaration WHERE name = 'upgrade_fill';
SELECT a.attname, a.atttypid::regtype FROM pg_attribute a
 WHERE a.attrelid = 'backfill.declaration'::regclass AND a.attname IN ('pages_fn', 'count_fn')
 ORDER BY a.attname;
SELECT count(*) AS columns_pg_upgrade_refuses
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'backfill' AND a.attnum > 0 AND NOT a.attisdropped
   AND a.atttypid IN ('regcollation'::regtype, 'regconfig'::regtype, 'regdictionary'::regtype,
                      'regnamespace'::regtype, 'regoper'::regtype, 'regoperator'::regtype,
                      'regproc'::regtype, 'regprocedure'::regtype);
SELECT name, CASE WHEN pages_fn ~ '^[0-9]+$' THEN '(its oid)' ELSE pages_fn END AS pages_fn,
       count_fn
  FROM backfill.declaration WHERE name LIKE 'upgrade%04' ORDER BY name;
-- the update records who owns each function (none for the one dropped)
SELECT name, pages_owner::text = current_user AS pages_owner_is_me,
       count_owner::text = current_user AS count_owner_is_me
  FROM backfill.declaration WHERE name LIKE 'upgrade%04' ORDER BY name;
SELECT backfill_declare(name => 'upgrade_pages04', pages => 'upgrade_pages04',
       count_function => 'upgrade_count04',
       action => 'SELECT pg_catalog.jsonb_array_length($1)') = :'checksum_pages04'
       AS same_pages_checksum_under_05;
SELECT pages_fn, count_fn FROM backfill.declaration WHERE name = 'upgrade_pages04';
SELECT d.name, i.code, i.message FROM backfill.declaration d,
       backfill.identity_problem(d.name, d.relid, d.relation, d.owner, d.owner_name,
                                 d.run_as, d.run_as_name) i
 WHERE d.name LIKE 'upgrade%04' ORDER BY d.name;
-- and on to 0.6 (runs and controls below need the catalogs at the library's
-- version): the watch's interval in force, shown by backfill_status
-- (created again: what was granted and revoked on it is kept)
CREATE ROLE upgrade_reader;
REVOKE EXECUTE ON FUNCTION backfill_status(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION backfill_status(text) TO upgrade_reader;
REVOKE EXECUTE ON FUNCTION backfill_pending() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION backfill_pending() TO upgrade_reader;
ALTER EXTENSION pg_backfill UPDATE TO '0.6';
SELECT extversion FROM pg_extension WHERE extname = 'pg_backfill';
-- at the library's version its functions work again (BF027 before)
SELECT backfill_outbox_emit('upgrade.topic', 'k1', '{"n": 1}') > 0 AS emitted;
SELECT topic, key, payload, state FROM backfill.outbox;
DELETE FROM backfill.outbox;
SELECT f.signature, has_function_privilege('public', f.signature, 'EXECUTE') AS public_can_execute,
       has_function_privilege('upgrade_reader', f.signature, 'EXECUTE') AS granted_can_execute
  FROM (VALUES ('backfill_status(text)'), ('backfill_pending()')) f(signature)
 ORDER BY 1;
GRANT EXECUTE ON FUNCTION backfill_status(text) TO PUBLIC;
REVOKE ALL ON FUNCTION backfill_status(text) FROM upgrade_reader;
GRANT EXECUTE ON FUNCTION backfill_pending() TO PUBLIC;
REVOKE ALL ON FUNCTION backfill_pending() FROM upgrade_reader;
-- reports read the catalogs only (issue 23): drift from probes recorded by
-- probe workers; backfill.drift_probe, which probed in the caller's session, is gone
SELECT to_regprocedure('backfill.drift_probe(text)') IS NULL AS drift_probe_gone,
       to_regprocedure('backfill_probe(text, interval)') IS NOT NULL AS has_backfill_probe,
       to_regclass('backfill.probe') IS NOT NULL AS has_probe_table;
SELECT string_agg(name, ', ' ORDER BY ord) FILTER (WHERE ord > 13) AS backfill_pending_adds
  FROM pg_proc p, unnest(p.proargnames) WITH ORDINALITY AS u(name, ord)
 WHERE p.oid = 'backfill_pending()'::regprocedure;
SELECT state, drift, drift_probed_at, probe_error FROM backfill_pending() WHERE name = 'upgrade_fill';
DROP OWNED BY upgrade_reader;
DROP ROLE upgrade_reader;
SELECT watch_interval FROM backfill_status('upgrade_fill');
-- 0.6 also lets members of pg_monitor read every role's backfills (a second
-- policy on the declarations and the ledger), gives the outbox's depth per
-- topic without its payloads (backfill_outbox_topics), and backfill_status
-- shows the rate the pass's lanes share
SELECT polname, polrelid::regclass AS relation, polcmd, pg_get_expr(polqual, polrelid) AS qual
  FROM pg_policy WHERE polname LIKE '%monitor' ORDER BY 1;
SELECT name, rate FROM backfill_status('upgrade_fill');
SELECT has_table_privilege('public', 'backfill_outbox_topics', 'SELECT') AS public_reads_topics,
       has_table_privilege('public', 'backfill.outbox', 'SELECT') AS public_reads_outbox;
SELECT count(*) AS topics FROM backfill_outbox_topics;
SELECT backfill_declare(name => 'upgrade_fill', relation => 'upgrade_items', predicate => 'c IS NULL',
       action => 'UPDATE upgrade_items SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
       watch => '5 s') = :'checksum_before' AS same_checksum_under_06;
SELECT watch_interval, backfill.watch_interval_ms('upgrade_fill') AS watch_ms
  FROM backfill_status('upgrade_fill');
-- 0.6 paces on WAL too (issue 27): max_wal_rate, stored in bytes per second,
-- keeps the checksum; roles paused for all are rows of backfill.paused_role
SELECT backfill_declare(name => 'upgrade_fill', relation => 'upgrade_items', predicate => 'c IS NULL',
       action => 'UPDATE upgrade_items SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
       max_wal_rate => '20MB') = :'checksum_before' AS same_checksum_with_wal_budget;
SELECT max_wal_rate FROM backfill.declaration WHERE name = 'upgrade_fill';
-- and on the user's own condition and time windows (issue 27): three more
-- arguments, last, the grants carried over; none enters the checksum
SELECT p.pronargs, p.pronargdefaults,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_can_execute,
       (p.proargnames)[36:38] AS last_arguments
  FROM pg_proc p WHERE p.proname = 'backfill_declare';
SELECT backfill_declare(name => 'upgrade_fill', relation => 'upgrade_items', predicate => 'c IS NULL',
       action => 'UPDATE upgrade_items SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
       throttle_when => 'false', windows => '{"Mon-Fri 22:00-06:00", "Sat-Sun"}',
       window_time_zone => 'UTC') = :'checksum_before' AS same_checksum_with_windows;
SELECT throttle_when, windows, window_time_zone FROM backfill.declaration WHERE name = 'upgrade_fill';
-- and on lifecycle events (issue 28 point 2): events, last, the grants carried
-- over, not in the checksum; the catalogs' triggers that emit them
SELECT p.pronargs, (p.proargnames)[39] AS last_argument,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_can_execute
  FROM pg_proc p WHERE p.proname = 'backfill_declare';
SELECT string_agg(tgrelid::regclass || '.' || tgname, ', ' ORDER BY tgrelid::regclass::text, tgname)
       AS event_triggers
  FROM pg_trigger WHERE tgname LIKE '%event%' AND NOT tgisinternal;
SELECT events FROM backfill.declaration WHERE name = 'upgrade_fill';
SELECT * FROM backfill.window_at('{"Mon-Fri 22:00-06:00"}', 'UTC', '2026-12-05 05:00+00');
SELECT to_regclass('backfill.paused_role') IS NOT NULL AS has_paused_role,
       to_regprocedure('backfill_pause_all(text)') IS NOT NULL AS has_pause_all,
       to_regprocedure('backfill_resume_all(text)') IS NOT NULL AS has_resume_all;
SELECT backfill_declare(name => 'upgrade_fill', relation => 'upgrade_items', predicate => 'c IS NULL',
       action => 'UPDATE upgrade_items SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)') = :'checksum_before'
       AS same_checksum_unwatched;
-- the pages source stored under 0.4 declares again to the same checksum
SELECT backfill_declare(name => 'upgrade_pages04', pages => 'upgrade_pages04',
       count_function => 'upgrade_count04',
       action => 'SELECT pg_catalog.jsonb_array_length($1)') = :'checksum_pages04'
       AS same_pages_checksum_under_06;

\set VERBOSITY terse
SELECT backfill_run('upgrade_gone04');
\set VERBOSITY default
SELECT backfill_drop('upgrade_pages04'), backfill_drop('upgrade_gone04');
DROP FUNCTION upgrade_pages04(text, jsonb);
DROP FUNCTION upgrade_count04(jsonb);
-- poison rows: the failed_row catalog, the ledger's completed_with_failures,
-- backfill_status's failed_rows
SELECT string_agg(attname, ', ' ORDER BY attnum) AS failed_row_columns FROM pg_attribute
 WHERE attrelid = 'backfill.failed_row'::regclass AND attnum > 0;
SELECT pg_get_constraintdef(oid) LIKE '%completed_with_failures%' AS ledger_knows_failures
  FROM pg_constraint WHERE conname = 'ledger_status_check';
SELECT failed_rows FROM backfill_status('upgrade_fill');
-- the ledger's passes of 0.4 went forward; backfill_revert exists
SELECT count(*) AS ledger_rows, count(*) FILTER (WHERE direction = 'forward') AS forward
  FROM backfill.ledger;
SELECT to_regprocedure('backfill_revert(text)') IS NOT NULL AS has_backfill_revert;
-- and no pass of 0.4 was a watch pass or bounded; the watch's counters start empty
SELECT count(*) FILTER (WHERE watch) AS watch_passes FROM backfill.ledger;
SELECT count(*) FILTER (WHERE bound IS NOT NULL OR beyond IS NOT NULL) AS bounded_runs
  FROM backfill.run;
SELECT count(*) AS watch_rows FROM backfill.watch;
-- partitions of a pass planned per leaf name their leaf and its interval;
-- none of 0.4's does, and backfill_partitions shows both
SELECT string_agg(a.attname || ' ' || a.atttypid::regtype, ', ' ORDER BY a.attnum)
       AS partition_leaf_columns
  FROM pg_attribute a
 WHERE a.attrelid = 'backfill.partition'::regclass AND a.attname IN ('leaf', 'leaf_range');
SELECT count(*) FILTER (WHERE leaf IS NOT NULL OR leaf_range IS NOT NULL) AS per_leaf_partitions
  FROM backfill.partition;
SELECT string_agg(name, ', ' ORDER BY ord) FILTER (WHERE ord > 19) AS backfill_partitions_adds
  FROM pg_proc p, unnest(p.proargnames) WITH ORDINALITY AS u(name, ord)
 WHERE p.oid = 'backfill_partitions(text)'::regprocedure;
SELECT to_regprocedure('backfill.drift_probe(text)') IS NOT NULL AS has_drift_probe;
-- a Citus distributed table's pass shard by shard: the workers' checkpoint rows
SELECT to_regclass('backfill.shard_cursor') IS NOT NULL AS has_shard_cursor,
       pg_catalog.has_table_privilege('public', 'backfill.shard_cursor', 'SELECT') AS public_reads_it;
-- a key of one column, declared before 0.5, has no key_columns: its passes
-- read and resume as they did; a composite key fills them
SELECT key_column, key_type, key_columns, key_types FROM backfill.declaration
 WHERE name = 'upgrade_fill';
CREATE TABLE upgrade_tenants (tenant_id int, id int, c int, PRIMARY KEY (tenant_id, id));
SELECT length(backfill_declare('upgrade_tenants', 'upgrade_tenants', 'c IS NULL',
       'UPDATE upgrade_tenants SET c = 1 WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $4) AND (c IS NULL)'))
       AS checksum_length;
SELECT key_column, key_type, key_columns, key_types FROM backfill.declaration
 WHERE name = 'upgrade_tenants';
SELECT backfill_drop('upgrade_tenants');
DROP TABLE upgrade_tenants;
-- a pages source, declared without relation and predicate
CREATE FUNCTION upgrade_pages(cursor text, input jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT '{"rows": [], "next": null}'::jsonb $$;
SELECT length(backfill_declare(name => 'upgrade_pages', pages => 'upgrade_pages',
       action => 'SELECT pg_catalog.jsonb_array_length($1)')) AS checksum_length;
SELECT name, relation, predicate, pages_fn FROM backfill.declaration
 WHERE name = 'upgrade_pages';
SELECT backfill_drop('upgrade_pages');
DROP FUNCTION upgrade_pages(text, jsonb);

-- 0.6 also lets the engine write the batch statement (set, delete) and
-- refuses an UPDATE of the relation that does not repeat the predicate
-- (guard): three arguments and three columns, none in the checksum
SELECT p.pronargs, p.pronargdefaults FROM pg_proc p WHERE p.proname = 'backfill_declare';
SELECT backfill_declare('upgrade_fill', 'upgrade_items', 'c IS NULL',
       'UPDATE upgrade_items SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)') = :'checksum_before'
       AS same_checksum_guarded;
SELECT action_set, action_delete, guard FROM backfill.declaration WHERE name = 'upgrade_fill';
SELECT length(backfill_declare(name => 'upgrade_set', relation => 'upgrade_items',
       predicate => 'c IS NULL', set => 'c = 1')) AS checksum_length;
SELECT action, action_set FROM backfill.declaration WHERE name = 'upgrade_set';
SELECT backfill_drop('upgrade_set');
SELECT to_regprocedure('backfill.estimate_rows_sampled(regclass, text, integer)') IS NOT NULL
       AS has_sampled_estimate;
-- 0.6 (issue 24, points 3 to 5): backfill_ensure_complete, a deploy check
-- that reads the catalogs only; backfill_retire, recorded in
-- backfill.retired (runs refused with BF041, pending shows retired); the
-- privileges granted on backfill_pending survive its new definition
SELECT to_regprocedure('backfill_ensure_complete(text)') IS NOT NULL AS has_ensure_complete,
       to_regprocedure('backfill_retire(text)') IS NOT NULL AS has_retire,
       to_regclass('backfill.retired') IS NOT NULL AS has_retired_table,
       has_function_privilege('public', 'backfill_pending()', 'EXECUTE') AS public_pending;
SELECT state FROM backfill_pending() WHERE name = 'upgrade_fill';
\set VERBOSITY terse
SELECT backfill_ensure_complete('upgrade_fill');
SELECT backfill_retire('upgrade_fill');
\set VERBOSITY default
-- a Citus table's estimate samples shards whose statistics are stale (issue 30)
SELECT to_regprocedure('backfill.estimate_rows_checked(regclass, text, integer)') IS NOT NULL
       AS has_checked_estimate,
       pg_get_function_arguments('backfill.citus_estimate_rows(regclass, text)'::regprocedure)
       AS citus_estimate_arguments;
-- 0.6 also keeps the last batches of each pass (backfill.batch_history) and
-- rehearses a backfill (issue 28)
SELECT to_regclass('backfill.batch') IS NOT NULL AS has_batch_history,
       to_regprocedure('backfill_batches(text, bigint)') IS NOT NULL AS has_batches,
       to_regprocedure('backfill_rehearse(text, integer)') IS NOT NULL AS has_rehearse,
       current_setting('backfill.batch_history') AS batch_history;
\set VERBOSITY default
SELECT * FROM backfill_rehearse('upgrade_fill', 0);
SELECT * FROM backfill_rehearse('upgrade_fill', 101);
SELECT * FROM backfill_rehearse('upgrade_nothing');

-- a pass sweeps again the rows written behind its cursors (issue 31): its
-- sweep and probe key, whether the declaration's action is guarded, the sweep
-- in the reports
SELECT string_agg(attrelid::regclass || '.' || attname, ', ' ORDER BY attrelid::regclass::text, attname)
       AS sweep_columns
  FROM pg_attribute
 WHERE attrelid IN ('backfill.run'::regclass, 'backfill.declaration'::regclass)
   AND attname IN ('sweep', 'probe_key', 'guarded') AND NOT attisdropped;
SELECT name, sweep FROM backfill_status('upgrade_fill');

-- a fresh install gets the same objects as the upgraded one
SET client_min_messages = warning;
DROP EXTENSION pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
RESET client_min_messages;
SELECT extversion FROM pg_extension WHERE extname = 'pg_backfill';
SELECT count(*) AS outbox_objects FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'backfill' AND c.relname LIKE 'outbox%';
SELECT count(*) AS batch_objects FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'backfill' AND c.relname LIKE 'batch%';
DROP TABLE upgrade_items;
