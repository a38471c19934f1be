/* pg_backfill--0.1--0.2.sql: the transactional outbox and its relay */

\echo Use "ALTER EXTENSION pg_backfill UPDATE TO '0.2'" to load this file. \quit

/*
 * Messages emitted in the caller's transaction (a batch action emits the
 * rows it changed: batch, checkpoint and events commit together), then
 * delivered by the relay worker, in order per key, at least once.
 */
CREATE TABLE backfill.outbox (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic            text NOT NULL CHECK (topic <> ''),
    key              text NOT NULL,
    payload          jsonb NOT NULL,
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    delivered_at     timestamptz,
    -- the transactions in flight when it was emitted (those in the
    -- snapshot, and those from its xmax up to the next xid then): one of
    -- them may hold an earlier message of the same key, still invisible;
    -- the relay waits until none is in progress
    emit_snapshot    pg_snapshot NOT NULL,
    emit_next_xid    xid8 NOT NULL
);
-- the relay's question: the oldest pending message of each key
CREATE INDEX outbox_pending_idx ON backfill.outbox (key, id) WHERE state = 'pending';
-- pruning delivered messages
CREATE INDEX outbox_delivered_idx ON backfill.outbox (delivered_at) WHERE state = 'delivered';

/* Where each topic's messages go. */
CREATE TABLE backfill.outbox_sink (
    topic            text PRIMARY KEY CHECK (topic <> ''),
    kind             text NOT NULL CHECK (kind IN ('notify', 'function', 'webhook')),
    target           text NOT NULL,          -- channel, function name or URL
    secret           text,                   -- webhook: HMAC-SHA256 key
    timeout_ms       integer NOT NULL DEFAULT 5000 CHECK (timeout_ms > 0),
    max_attempts     integer NOT NULL DEFAULT 10 CHECK (max_attempts > 0),
    backoff_base_ms  integer NOT NULL DEFAULT 1000 CHECK (backoff_base_ms > 0),
    backoff_cap_ms   integer NOT NULL DEFAULT 300000 CHECK (backoff_cap_ms >= backoff_base_ms),
    run_as           oid NOT NULL,           -- function sinks run as the role that set them
    search_path      text NOT NULL DEFAULT '', -- ... with that role's search_path
    CHECK (kind <> 'webhook' OR target ~ '^https?://')
);

SELECT pg_catalog.pg_extension_config_dump('backfill.outbox_sink', '');

-- payloads and secrets are for operators: no PUBLIC access
REVOKE ALL ON backfill.outbox, backfill.outbox_sink FROM PUBLIC;

CREATE FUNCTION backfill_outbox_emit(topic text, key text, payload jsonb)
RETURNS bigint
LANGUAGE C CALLED ON NULL INPUT VOLATILE
AS 'MODULE_PATHNAME', 'backfill_outbox_emit';
COMMENT ON FUNCTION backfill_outbox_emit(text, text, jsonb) IS
'queue a message in the caller''s transaction; the relay delivers it after commit, in order per key';

CREATE FUNCTION backfill_outbox_sink(topic text, kind text, target text,
                                     secret text DEFAULT NULL,
                                     timeout interval DEFAULT '5 seconds',
                                     max_attempts integer DEFAULT 10,
                                     backoff_base interval DEFAULT '1 second',
                                     backoff_cap interval DEFAULT '5 minutes')
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    fn regprocedure;
BEGIN
    IF topic IS NULL OR topic = '' THEN
        RAISE EXCEPTION 'outbox sink needs a topic'
              USING ERRCODE = 'BF011', HINT = 'Name the topic whose messages go to this sink.';
    END IF;
    IF kind IS NULL OR kind NOT IN ('notify', 'function', 'webhook') THEN
        RAISE EXCEPTION 'outbox sink of topic "%" has unknown kind "%"', topic, kind
              USING ERRCODE = 'BF011', HINT = 'Use notify, function or webhook.';
    END IF;
    IF target IS NULL OR target = '' THEN
        RAISE EXCEPTION 'outbox sink of topic "%" has no target', topic
              USING ERRCODE = 'BF011',
                    HINT = 'A channel for notify, a function name for function, a URL for webhook.';
    END IF;
    IF kind = 'webhook' AND target !~ '^https?://' THEN
        RAISE EXCEPTION 'outbox sink of topic "%" is not an http(s) URL', topic
              USING ERRCODE = 'BF011', HINT = 'Write the webhook as http://host:port/path.';
    END IF;
    IF kind = 'function' THEN
        -- resolved here, in the caller's search_path, and stored qualified
        fn := pg_catalog.to_regprocedure(target || '(text, text, jsonb)');
        IF fn IS NULL THEN
            RAISE EXCEPTION 'outbox sink function %(text, text, jsonb) of topic "%" does not exist',
                  target, topic
                  USING ERRCODE = 'BF011',
                        HINT = 'Create a function (topic text, key text, payload jsonb) first.';
        END IF;
        SELECT pg_catalog.format('%I.%I', n.nspname, p.proname) INTO target
          FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
         WHERE p.oid = fn;
    END IF;
    INSERT INTO backfill.outbox_sink AS s
           (topic, kind, target, secret, timeout_ms, max_attempts, backoff_base_ms,
            backoff_cap_ms, run_as, search_path)
    VALUES (topic, kind, target, secret,
            (extract(epoch FROM timeout) * 1000)::integer, max_attempts,
            (extract(epoch FROM backoff_base) * 1000)::integer,
            (extract(epoch FROM backoff_cap) * 1000)::integer,
            (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user),
            pg_catalog.current_setting('search_path'))
    ON CONFLICT ON CONSTRAINT outbox_sink_pkey DO UPDATE
       SET kind = EXCLUDED.kind, target = EXCLUDED.target, secret = EXCLUDED.secret,
           timeout_ms = EXCLUDED.timeout_ms, max_attempts = EXCLUDED.max_attempts,
           backoff_base_ms = EXCLUDED.backoff_base_ms, backoff_cap_ms = EXCLUDED.backoff_cap_ms,
           run_as = EXCLUDED.run_as, search_path = EXCLUDED.search_path;
END
$$;
COMMENT ON FUNCTION backfill_outbox_sink(text, text, text, text, interval, integer, interval,
                                         interval) IS
'send a topic''s messages to a NOTIFY channel, a SQL function (topic, key, payload) or a webhook';
-- sinks reach outside the database: operators only, unless granted
REVOKE ALL ON FUNCTION backfill_outbox_sink(text, text, text, text, interval, integer, interval,
                                            interval) FROM PUBLIC;

CREATE FUNCTION backfill_outbox_requeue(id bigint)
RETURNS boolean
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    WITH r AS (
        UPDATE backfill.outbox o
           SET state = 'pending', attempts = 0, next_attempt_at = now()
         WHERE o.id = $1 AND o.state = 'dead'
        RETURNING o.id)
    SELECT EXISTS (SELECT 1 FROM r);
$$;
COMMENT ON FUNCTION backfill_outbox_requeue(bigint) IS
'bring a dead message back to pending; true if it was dead';
REVOKE ALL ON FUNCTION backfill_outbox_requeue(bigint) FROM PUBLIC;
