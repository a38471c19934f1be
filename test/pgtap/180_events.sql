-- 180_events: lifecycle events through the outbox (issue 28 point 2).
--  * events => topic is checked at declaration: a topic with no sink is
--    BF045, one another role owns and did not grant BF042 (hint: the grant),
--    an empty one BF011; granted, it is accepted; it is not in the checksum
--    and a re-declaration changes it at once
--  * each change of a pass's state is one message in the same transaction:
--    a rolled-back backfill_run emits nothing; queued, started, paused,
--    resumed, cancelled, completed, completed_with_failures, failed,
--    stalled, reverted, retired from real passes (one finalized in the
--    session); throttled / unthrottled
--    (debounced: one of each a minute per pass), drift_found and healed
--    from the catalog rows that record them
--  * the payload: event, backfill, run_id, status, rows, error_code, at and
--    a gap-free seq per pass; emitted_by is the declaration's owner;
--    the function sink receives each event once, in order
--  * the relay checks that owner for every event: with the grant revoked the
--    events die unsent, with the reason, and the pass goes on
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;
DROP TABLE IF EXISTS bf180_items, bf180_log;
DROP FUNCTION IF EXISTS bf180_sink(text, text, jsonb), bf180_events(text), bf180_last(text), bf180_until(text, int);
DROP ROLE IF EXISTS bf180_owner;
DROP ROLE IF EXISTS bf180_other;
CREATE ROLE bf180_owner LOGIN;
CREATE ROLE bf180_other LOGIN;
CREATE TABLE bf180_items (id int PRIMARY KEY, c int);
INSERT INTO bf180_items SELECT g, NULL FROM generate_series(1, 40) g;
GRANT SELECT, UPDATE ON bf180_items TO bf180_owner;
CREATE TABLE bf180_log (n bigserial, key text, payload jsonb);
GRANT INSERT, SELECT ON bf180_log TO bf180_owner;
GRANT USAGE ON SEQUENCE bf180_log_n_seq TO bf180_owner;
GRANT USAGE ON SCHEMA backfill TO bf180_owner, bf180_other;
GRANT SELECT, INSERT, UPDATE, DELETE ON backfill.outbox_sink, backfill.outbox_grant
    TO bf180_owner, bf180_other;
GRANT EXECUTE ON FUNCTION backfill_outbox_sink(text, text, text, text, interval, integer, interval,
    interval), backfill_outbox_grant(text, regrole), backfill_outbox_revoke(text, regrole)
    TO bf180_owner, bf180_other;
CREATE FUNCTION bf180_sink(topic text, key text, payload jsonb) RETURNS void
LANGUAGE sql AS $$ INSERT INTO public.bf180_log (key, payload) VALUES (key, payload) $$;
ALTER FUNCTION bf180_sink(text, text, jsonb) OWNER TO bf180_owner;
SET ROLE bf180_owner;
SELECT backfill_outbox_sink('bf180.events', 'function', 'bf180_sink');
RESET ROLE;
SET ROLE bf180_other;
SELECT backfill_outbox_sink('bf180.other', 'notify', 'bf180_channel');
RESET ROLE;

-- the events of a backfill as queued, oldest first
CREATE FUNCTION bf180_events(p_key text) RETURNS text[] LANGUAGE sql SECURITY DEFINER AS $$
    SELECT coalesce(array_agg(payload->>'event' ORDER BY id), '{}')
      FROM backfill.outbox WHERE key = p_key $$;
CREATE FUNCTION bf180_last(p_key text) RETURNS jsonb LANGUAGE sql SECURITY DEFINER AS $$
    SELECT payload FROM backfill.outbox WHERE key = p_key ORDER BY id DESC LIMIT 1 $$;
-- poll for a condition with a deadline
CREATE FUNCTION bf180_until(cond text, secs int DEFAULT 60) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE ok boolean;
BEGIN
    FOR i IN 1 .. secs * 10 LOOP
        EXECUTE 'SELECT ' || cond INTO ok;
        IF ok THEN RETURN true; END IF;
        PERFORM pg_sleep(0.1);
    END LOOP;
    RETURN false;
END $$;

SELECT * FROM no_plan();

-- ownership at declaration
SET ROLE bf180_owner;
SELECT throws_ok($$SELECT backfill_declare(name => 'bf180', relation => 'bf180_items',
    predicate => 'c IS NULL', set => 'c = id', events => 'bf180.nosink')$$, 'BF045',
    'events topic "bf180.nosink" of backfill "bf180" has no sink', 'a topic with no sink: BF045');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf180', relation => 'bf180_items',
    predicate => 'c IS NULL', set => 'c = id', events => 'bf180.other')$$, 'BF042',
    'backfill "bf180" may not send its events to outbox topic "bf180.other"',
    'another role''s topic, not granted: BF042');
SELECT throws_ok($$SELECT backfill_declare(name => 'bf180', relation => 'bf180_items',
    predicate => 'c IS NULL', set => 'c = id', events => '')$$, 'BF011', NULL,
    'an empty topic: BF011');
DO $$
BEGIN
    PERFORM backfill_declare(name => 'bf180', relation => 'bf180_items',
        predicate => 'c IS NULL', set => 'c = id', events => 'bf180.other');
EXCEPTION WHEN OTHERS THEN
    DECLARE h text;
    BEGIN
        GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
        IF h NOT LIKE '%backfill_outbox_grant(''bf180.other'', ''bf180_owner'')%' THEN
            RAISE EXCEPTION 'hint does not name the grant: %', h;
        END IF;
    END;
END $$;
SELECT pass('the BF042 hint names backfill_outbox_grant');
-- a topic too long for the outbox's index is refused where it is named (a tester's finding)
SELECT throws_ok(format($$SELECT backfill_declare(name => 'bf180', relation => 'bf180_items',
    predicate => 'c IS NULL', set => 'c = id', events => %L)$$, repeat('t', 201)), 'BF011',
    'outbox topic is 201 bytes long, more than 200', 'events => a topic over 200 bytes: BF011');
SELECT throws_ok(format($$SELECT backfill_outbox_emit(%L, 'k', '{}')$$, repeat('t', 201)),
    'BF011', 'outbox topic is 201 bytes long, more than 200', 'an emit to such a topic: BF011');
SELECT throws_ok(format($$SELECT backfill_outbox_sink(%L, 'notify', 'bf180_channel')$$,
    repeat('t', 201)), 'BF011', 'outbox topic is 201 bytes long, more than 200',
    'a sink of such a topic: BF011');
-- a hint quotes the names it prints as SQL literals
DO $$
BEGIN
    PERFORM backfill_declare(name => 'bf180', relation => 'bf180_items',
        predicate => 'c IS NULL', set => 'c = id', events => $t$x'); SELECT 1; --$t$);
EXCEPTION WHEN OTHERS THEN
    DECLARE h text;
    BEGIN
        GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
        IF h NOT LIKE $l$%backfill_outbox_sink('x''); SELECT 1; --', %$l$ THEN
            RAISE EXCEPTION 'hint does not quote the topic: %', h;
        END IF;
    END;
END $$;
SELECT pass('the BF045 hint quotes the topic as a literal');
RESET ROLE;
SET ROLE bf180_other;
SELECT ok(backfill_outbox_grant('bf180.other', 'bf180_owner'), 'the owner grants its topic');
RESET ROLE;
SET ROLE bf180_owner;
SELECT is(backfill_declare(name => 'bf180', relation => 'bf180_items', predicate => 'c IS NULL',
    set => 'c = id', events => 'bf180.other', rate => 0.05, batch_size => 1),
    backfill_declare(name => 'bf180', relation => 'bf180_items', predicate => 'c IS NULL',
    set => 'c = id', rate => 0.05, batch_size => 1),
    'granted: accepted; events is not part of the checksum');
SELECT is((SELECT events FROM backfill.declaration WHERE name = 'bf180'), NULL,
    'declared again without events: none at once');
SELECT length(backfill_declare(name => 'bf180', relation => 'bf180_items', predicate => 'c IS NULL',
    set => 'c = id', events => 'bf180.events', rate => 0.05, batch_size => 1));
SELECT is((SELECT events FROM backfill.declaration WHERE name = 'bf180'), 'bf180.events',
    'declared again with its own topic');

-- a rolled-back run emits nothing
BEGIN;
SELECT ok(backfill_run('bf180') > 0, 'a run in a transaction');
SELECT is(bf180_events('bf180'), '{queued}', 'its queued event is in that transaction');
ROLLBACK;
SELECT is(bf180_events('bf180'), '{}', 'rolled back: no event');

-- queued, started, paused, resumed, cancelled (a slow pass: one row every 20 s)
SELECT backfill_run('bf180') AS run180 \gset
RESET ROLE;
SELECT ok(bf180_until($$bf180_events('bf180') = '{queued,started}'$$), 'queued, then started');
SELECT is(bf180_last('bf180') - 'at',
    jsonb_build_object('event', 'started', 'backfill', 'bf180', 'ledger_name', 'bf180',
        'run_id', :run180, 'seq', 2, 'status', 'running', 'rows', 0, 'error_code', NULL,
        'direction', 'forward', 'watch', false), 'the started payload');
SELECT ok((bf180_last('bf180')->>'at')::timestamptz <= clock_timestamp(), 'at is a time');
SELECT is((SELECT DISTINCT emitted_by::text FROM backfill.outbox WHERE key = 'bf180'),
    'bf180_owner', 'emitted by the declaration''s owner, whoever made the change');
SET ROLE bf180_owner;
SELECT ok(backfill_pause('bf180'), 'paused');
RESET ROLE;
SELECT is(bf180_events('bf180'), '{queued,started,paused}', 'paused: one event');
SELECT ok(bf180_until($$NOT EXISTS (SELECT 1 FROM pg_stat_activity
    WHERE backend_type = 'pg_backfill lane' AND datname = current_database())$$),
    'no lane left while paused');

-- throttled / unthrottled: from the partition's throttle, debounced
UPDATE backfill.partition SET throttle = 'test: hold' WHERE run_id = :run180;
SELECT is(bf180_last('bf180')->>'event', 'throttled', 'a throttle starts: throttled');
UPDATE backfill.partition SET throttle = 'test: other reason' WHERE run_id = :run180;
UPDATE backfill.partition SET throttle = NULL WHERE run_id = :run180;
SELECT is(bf180_last('bf180')->>'event', 'unthrottled', 'it stops: unthrottled');
UPDATE backfill.partition SET throttle = 'test: again' WHERE run_id = :run180;
UPDATE backfill.partition SET throttle = NULL WHERE run_id = :run180;
SELECT is(bf180_events('bf180'), '{queued,started,paused,throttled,unthrottled}',
    'within the minute: no second throttled nor unthrottled');
UPDATE backfill.event_state SET throttled_at = throttled_at - interval '61 seconds',
    unthrottled_at = unthrottled_at - interval '61 seconds' WHERE run_id = :run180;
UPDATE backfill.partition SET throttle = 'test: later' WHERE run_id = :run180;
SELECT is(bf180_last('bf180')->>'event', 'throttled', 'a minute later: throttled again');
BEGIN;
UPDATE backfill.partition SET throttle = NULL WHERE run_id = :run180;
ROLLBACK;
SELECT is(bf180_last('bf180')->>'event', 'throttled', 'a rolled-back change emits nothing');
UPDATE backfill.partition SET throttle = NULL WHERE run_id = :run180;

SET ROLE bf180_owner;
SELECT ok(backfill_resume('bf180'), 'resumed');
SELECT ok(backfill_cancel('bf180'), 'cancelled');
RESET ROLE;
SELECT is(bf180_events('bf180'),
    '{queued,started,paused,throttled,unthrottled,throttled,unthrottled,resumed,cancelled}',
    'resumed, then cancelled: the pass''s events in order');
SELECT is(bf180_last('bf180')->>'status', 'cancelled', 'cancelled: its status');
SELECT is((SELECT array_agg((payload->>'seq')::int ORDER BY id) FROM backfill.outbox
            WHERE key = 'bf180'), '{1,2,3,4,5,6,7,8,9}'::int[], 'seq counts every event of the pass, no gap');

-- completed, then retired
SET ROLE bf180_owner;
SELECT length(backfill_declare(name => 'bf180', relation => 'bf180_items', predicate => 'c IS NULL',
    set => 'c = id', events => 'bf180.events', rate => 100, batch_size => 100));
SELECT backfill_run('bf180') AS r \gset
SELECT is(backfill_wait(:r, '60 s'), 'completed', 'a pass completes');
RESET ROLE;
SELECT is(bf180_last('bf180')->>'event', 'completed', 'completed');
SELECT is((bf180_last('bf180')->>'rows')::bigint, (SELECT rows FROM backfill.ledger WHERE run_id = :r),
    'with its rows, as the ledger says');

-- drift_found (the watch's row) and healed (a catch-up pass's ledger row)
INSERT INTO backfill.watch (declaration, probes, drifts, last_probe_at, last_found)
VALUES ('bf180', 1, 0, now(), 0);
UPDATE backfill.watch SET probes = 2, drifts = 1, last_found = 7 WHERE declaration = 'bf180';
SELECT is(bf180_last('bf180')->>'event', 'drift_found', 'a probe found rows: drift_found');
SELECT is((bf180_last('bf180')->>'rows')::int, 7, 'with the rows it found');
UPDATE backfill.watch SET probes = 3, last_found = 0 WHERE declaration = 'bf180';
SELECT is(bf180_last('bf180')->>'event', 'drift_found', 'a probe that found none: no event');
BEGIN;
INSERT INTO backfill.ledger (ledger_name, declaration, checksum, owner, watch)
SELECT 'bf180', 'bf180', checksum, owner, true FROM backfill.declaration
 WHERE name = 'bf180' RETURNING run_id AS heal \gset
UPDATE backfill.ledger SET status = 'completed', finished_at = now(), rows = 7 WHERE run_id = :heal;
COMMIT;
SELECT is(bf180_last('bf180')->>'event', 'healed', 'a catch-up pass completed: healed');
SET ROLE bf180_owner;
SELECT ok(backfill_retire('bf180') > 0, 'retired');
RESET ROLE;
SELECT is(bf180_last('bf180')->>'event', 'retired', 'retired: its event');

-- failed, stalled, completed_with_failures, reverted
UPDATE bf180_items SET c = NULL;
SET ROLE bf180_owner;
SELECT length(backfill_declare(name => 'bf180f', relation => 'bf180_items', predicate => 'c IS NULL',
    set => 'c = 1 / 0', max_attempts => 1, events => 'bf180.events', rate => 100));
SELECT backfill_run('bf180f') AS r \gset
SELECT is(backfill_wait(:r, '60 s'), 'failed', 'a pass fails');
SELECT length(backfill_declare(name => 'bf180s', relation => 'bf180_items', predicate => 'c IS NULL',
    action => 'UPDATE bf180_items SET c = NULL WHERE id BETWEEN $1 AND $2 AND c IS NULL',
    events => 'bf180.events', rate => 100, batch_size => 100));
SELECT backfill_run('bf180s') AS r \gset
SELECT is(backfill_wait(:r, '60 s'), 'failed', 'a pass stalls');
SELECT length(backfill_declare(name => 'bf180w', relation => 'bf180_items', predicate => 'c IS NULL',
    set => 'c = 10 / (id - 5)', max_failed_rows => 5, events => 'bf180.events', rate => 100,
    revert => 'UPDATE bf180_items SET c = NULL WHERE id BETWEEN $1 AND $2'));
SELECT backfill_run('bf180w') AS r \gset
SELECT is(backfill_wait(:r, '60 s'), 'completed_with_failures',
    'a pass completes with a row failed');
SELECT backfill_revert('bf180w') AS r \gset
SELECT is(backfill_wait(:r, '60 s'), 'completed', 'its revert completes');
RESET ROLE;
SELECT is(bf180_events('bf180f'), '{queued,started,failed}', 'failed');
SELECT is(bf180_last('bf180f')->>'error_code', 'BF018', 'with its error code (attempts spent)');
SELECT is(bf180_events('bf180s'), '{queued,started,stalled}', 'stalled');
SELECT is(bf180_last('bf180s')->>'error_code', 'BF006', 'a stall is BF006');
SELECT is(bf180_events('bf180w'),
    '{queued,started,completed_with_failures,queued,started,reverted}',
    'completed_with_failures, then reverted');

-- a pass that backfill_finalize works in the session (a security-restricted operation)
SET ROLE bf180_owner;
SELECT length(backfill_declare(name => 'bf180z', relation => 'bf180_items', predicate => 'c IS NULL',
    set => 'c = id', events => 'bf180.events', rate => 100));
CALL backfill_finalize('bf180z', '1 minute');
RESET ROLE;
SELECT is(bf180_events('bf180z'), '{queued,started,completed}', 'finalize: queued, started, completed');

-- the relay delivers each event once, in order per backfill
SELECT ok(bf180_until($$NOT EXISTS (SELECT 1 FROM backfill.outbox WHERE state <> 'delivered')$$),
    'every event delivered');
SELECT is((SELECT array_agg(payload->>'seq' ORDER BY n) FROM bf180_log WHERE key = 'bf180w'),
    '{1,2,3,1,2,3}', 'the sink got bf180w''s events once each, in order, numbered per pass');
SELECT is((SELECT array_agg((payload->>'run_id')::bigint ORDER BY n) FROM bf180_log
            WHERE key = 'bf180w'),
          (SELECT array_agg(l.run_id ORDER BY l.run_id, k) FROM backfill.ledger l,
                  generate_series(1, 3) k WHERE l.declaration = 'bf180w'),
    'the forward pass''s three events, then the revert''s');
SELECT is((SELECT count(*) FROM bf180_log), (SELECT count(*) FROM backfill.outbox),
    'as many deliveries as events');

-- the relay checks the emitter (the declaration's owner) of every event:
-- after the topic's grant is revoked, the events die unsent and the pass goes on
SET ROLE bf180_owner;
SELECT length(backfill_declare(name => 'bf180g', relation => 'bf180_items', predicate => 'c IS NULL',
    set => 'c = id', events => 'bf180.other', rate => 100));
RESET ROLE;
SET ROLE bf180_other;
SELECT ok(backfill_outbox_revoke('bf180.other', 'bf180_owner'), 'the grant is taken back');
RESET ROLE;
SET ROLE bf180_owner;
SELECT backfill_run('bf180g') AS r \gset
SELECT is(backfill_wait(:r, '60 s'), 'completed', 'the pass goes on without its events');
RESET ROLE;
SELECT ok(bf180_until($$(SELECT bool_and(state = 'dead') FROM backfill.outbox WHERE key = 'bf180g')$$),
    'its events die unsent');
SELECT is((SELECT DISTINCT last_error FROM backfill.outbox WHERE key = 'bf180g'),
    'role "bf180_owner" may not emit into topic "bf180.other"', 'the relay says why');

DROP FUNCTION bf180_events(text);
DROP FUNCTION bf180_last(text);
DROP FUNCTION bf180_until(text, int);
SELECT * FROM finish();
DROP EXTENSION pg_backfill CASCADE;
DROP TABLE bf180_items, bf180_log;
DROP FUNCTION bf180_sink(text, text, jsonb);
DROP OWNED BY bf180_owner;
DROP OWNED BY bf180_other;
DROP ROLE bf180_owner;
DROP ROLE bf180_other;
