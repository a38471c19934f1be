/* pg_backfill--0.4--0.5.sql: composite keys, the rest of a backfill's life, speed, more nodes */

\echo Use "ALTER EXTENSION pg_backfill UPDATE TO '0.5'" to load this file. \quit

/*
 * The rest of a backfill's life (issue 14): poison rows isolated and
 * tolerated up to max_failed_rows, a revert with its own predicate, and a
 * drift watch at an interval.  None of them enters the checksum: changing
 * how a backfill is undone or watched does not change what it does.
 */
ALTER TABLE backfill.declaration
    ADD COLUMN revert text,
    ADD COLUMN revert_predicate text,
    ADD COLUMN max_failed_rows integer NOT NULL DEFAULT 0,
    ADD COLUMN watch_ms integer;

/*
 * backfill_partitions, backfill_status and backfill_pending return new
 * columns, so they are dropped and created again below; what an operator
 * granted or revoked on them is kept for them (given back at the end of
 * this script).
 */
SELECT pg_catalog.set_config('pg_backfill.upgrade_acl_' || f.tag, coalesce(p.proacl::text, ''), true)
  FROM (VALUES ('partitions', 'backfill_partitions(text)'), ('status', 'backfill_status(text)'),
               ('pending', 'backfill_pending()')) f(tag, signature)
  JOIN pg_catalog.pg_proc p ON p.oid = f.signature::pg_catalog.regprocedure;

/*
 * A new argument is a new signature: the function of 0.4 is dropped and
 * created again with the new options last, its privileges carried over as
 * in the update to 0.4.
 */
SELECT pg_catalog.set_config('pg_backfill.upgrade_declare_acl', coalesce(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc p
 WHERE p.oid = 'backfill_declare(text, text, text, text, text, integer, double precision,
                integer, integer, interval, text[], interval, interval, interval, interval,
                integer, integer, jsonb, text, text, text, text, text, text, jsonb,
                text, boolean)'::pg_catalog.regprocedure;

DROP FUNCTION backfill_declare(text, text, text, text, text, integer, double precision,
                               integer, integer, interval, text[], interval, interval,
                               interval, interval, integer, integer, jsonb, text, text,
                               text, text, text, text, jsonb, text, boolean);

CREATE FUNCTION backfill_declare(
    name             text,
    relation         text DEFAULT NULL,
    predicate        text DEFAULT NULL,
    action           text DEFAULT NULL,
    key              text DEFAULT NULL,
    batch_size       integer DEFAULT 1000,
    rate             double precision DEFAULT NULL,
    max_parallel     integer DEFAULT 1,
    max_attempts     integer DEFAULT 5,
    batch_timeout    interval DEFAULT '1 minute',
    environments     text[] DEFAULT NULL,
    backoff_base     interval DEFAULT '1 second',
    backoff_cap      interval DEFAULT '1 minute',
    lock_timeout     interval DEFAULT '2 seconds',
    target_batch_time interval DEFAULT NULL,
    min_batch_size   integer DEFAULT NULL,
    max_batch_size   integer DEFAULT NULL,
    input            jsonb DEFAULT NULL,
    scope            text DEFAULT NULL,
    pages            text DEFAULT NULL,
    count_function   text DEFAULT NULL,
    requires         text DEFAULT NULL,
    requires_backfill text DEFAULT NULL,
    run_as           text DEFAULT NULL,
    settings         jsonb DEFAULT NULL,
    tenant           text DEFAULT NULL,
    async_commit     boolean DEFAULT true,
    revert           text DEFAULT NULL,
    revert_predicate text DEFAULT NULL,
    max_failed_rows  integer DEFAULT 0,
    watch            interval DEFAULT NULL)
RETURNS text
LANGUAGE C CALLED ON NULL INPUT VOLATILE
AS 'MODULE_PATHNAME', 'backfill_declare';

COMMENT ON FUNCTION backfill_declare(text, text, text, text, text, integer, double precision,
                                     integer, integer, interval, text[], interval, interval,
                                     interval, interval, integer, integer, jsonb, text, text,
                                     text, text, text, text, jsonb, text, boolean, text, text,
                                     integer, interval) IS
'declare (or update) a backfill; returns the checksum of its definition';

/* the old function's privileges, given to the new one (none kept: the defaults) */
DO $$
DECLARE
    acl pg_catalog.aclitem[] :=
        NULLIF(pg_catalog.current_setting('pg_backfill.upgrade_declare_acl', true), '');
    fn text := 'backfill_declare(text, text, text, text, text, integer, double precision, '
               'integer, integer, interval, text[], interval, interval, interval, interval, '
               'integer, integer, jsonb, text, text, text, text, text, text, jsonb, text, boolean, '
               'text, text, integer, interval)';
    item record;
BEGIN
    IF acl IS NULL THEN
        RETURN;
    END IF;
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn);
    FOR item IN SELECT a.grantee, a.is_grantable FROM pg_catalog.aclexplode(acl) a
                 WHERE a.privilege_type = 'EXECUTE'
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', fn,
            CASE WHEN item.grantee = 0 THEN 'PUBLIC'
                 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
            CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;

/* ---- composite keys and partitioned tables (issue 12) ---- */

/*
 * A key of two to four columns: every column in index order, with its
 * type.  key_column and key_type keep the first, as they did; a key of one
 * column leaves both arrays NULL, so its declaration, its checksum and its
 * cursors read exactly as before.
 */
ALTER TABLE backfill.declaration
    ADD COLUMN key_columns text[],
    ADD COLUMN key_types regtype[],
    ADD CONSTRAINT declaration_composite_key CHECK (
        (key_columns IS NULL AND key_types IS NULL)
        OR (pg_catalog.array_length(key_columns, 1) BETWEEN 2 AND 4
            AND pg_catalog.array_length(key_types, 1) = pg_catalog.array_length(key_columns, 1)));

/*
 * A partitioned table planned per leaf: each partition of such a pass
 * lies inside one leaf's interval of the leading key column, its
 * leaf_range ("[10,15)", "[7,7]", "(,100)"), which every key scan of the
 * partition adds to its bounds; the scan still names the parent, so the
 * parent's privileges and row-level security apply and the planner prunes
 * to that one leaf.  leaf is the leaf it was planned for (a regclass:
 * pg_upgrade keeps a table's oid, a dump writes its name).  Both NULL in
 * a pass that walks the parent; backfill_partitions shows leaf NULL once
 * the leaf is dropped.
 */
ALTER TABLE backfill.partition
    ADD COLUMN leaf regclass,
    ADD COLUMN leaf_range text,
    -- a Citus distributed table's pass shard by shard (see "Citus" below):
    -- the shard, and the Citus group of the node whose backfill.shard_cursor
    -- row holds the partition's authoritative checkpoint (NULL until opened)
    ADD COLUMN shard bigint,
    ADD COLUMN shard_group integer,
    -- the run whose row it is on that node: this run's, or, in a retry, the
    -- run it resumes (the row goes on)
    ADD COLUMN shard_run bigint;

DROP FUNCTION backfill_partitions(text);
CREATE FUNCTION backfill_partitions(name text)
RETURNS TABLE (
    run_id        bigint,
    part_no       integer,
    lo            text,
    hi            text,
    cursor        text,
    state         text,
    rows          bigint,
    batches       bigint,
    holder_pid    integer,
    holder_alive  boolean,
    renewed_at    timestamptz,
    claims        integer,
    reclaims      integer,
    failures      integer,
    last_error    text,
    batch_size    integer,
    last_batch_ms double precision,
    throttle      text,
    leaf          regclass,
    leaf_range    text,
    shard         bigint,
    shard_group   integer)
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.run_id, p.part_no, p.lo, p.hi, p.cursor, p.state, p.rows, p.batches,
           p.holder_pid,
           p.holder_pid IS NOT NULL AND EXISTS (SELECT 1 FROM pg_stat_activity a
                                                 WHERE a.pid = p.holder_pid
                                                   AND a.backend_start = p.holder_start),
           p.renewed_at, p.claims, p.reclaims, p.failures, p.last_error,
           p.batch_size, p.last_batch_ms, p.throttle,
           -- a leaf dropped since: NULL, not its bare oid
           (SELECT c.oid::regclass FROM pg_class c WHERE c.oid = p.leaf), p.leaf_range,
           p.shard, p.shard_group
      FROM backfill.partition p
     WHERE p.run_id = (SELECT max(l.run_id) FROM backfill.ledger l WHERE l.declaration = $1)
     ORDER BY p.part_no;
$$;
COMMENT ON FUNCTION backfill_partitions(text) IS
'the partitions of the newest pass: bounds, cursor, lease holder, claims, reclaims, failures, leaf, Citus shard';

/* ---- poison rows (issue 14, part 1) and finalize (part 4) ---- */

/*
 * A pass may end with rows it could not do: the rows that failed on their
 * own once their batch was bisected, recorded and skipped (up to the
 * declaration's max_failed_rows).  Such a pass is not "completed".
 */
ALTER TABLE backfill.ledger DROP CONSTRAINT ledger_status_check;
ALTER TABLE backfill.ledger ADD CONSTRAINT ledger_status_check
    CHECK (status IN ('running', 'completed', 'completed_with_failures', 'failed',
                      'cancelled'));

-- A row that failed alone: recorded and skipped in the transaction that moved the cursor past it.
CREATE TABLE backfill.failed_row (
    run_id           bigint NOT NULL REFERENCES backfill.run (run_id),
    part_no          integer NOT NULL,
    key              text NOT NULL,          -- the key as the cursor writes it
    after_key        text,                   -- the cursor before it; NULL: the open start
    sqlstate         text NOT NULL,
    message          text NOT NULL,
    attempts         integer NOT NULL,       -- failed batches while it was isolated
    at               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, part_no, key)
);
REVOKE ALL ON backfill.failed_row FROM PUBLIC;
GRANT SELECT ON backfill.failed_row TO PUBLIC;
ALTER TABLE backfill.failed_row ENABLE ROW LEVEL SECURITY;
CREATE POLICY failed_row_member ON backfill.failed_row FOR SELECT
    USING (EXISTS (SELECT 1 FROM backfill.ledger l WHERE l.run_id = failed_row.run_id));

/*
 * backfill_failed_rows: the rows the newest pass of a backfill recorded and
 * skipped (backfill_retry takes exactly these, and the failed partitions).
 */
CREATE FUNCTION backfill_failed_rows(name text)
RETURNS TABLE (
    run_id        bigint,
    part_no       integer,
    key           text,
    sqlstate      text,
    message       text,
    attempts      integer,
    at            timestamptz)
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT f.run_id, f.part_no, f.key, f.sqlstate, f.message, f.attempts, f.at
      FROM backfill.failed_row f
     WHERE f.run_id = (SELECT max(l.run_id) FROM backfill.ledger l WHERE l.declaration = $1)
     ORDER BY f.at, f.part_no, f.key;
$$;
COMMENT ON FUNCTION backfill_failed_rows(text) IS
'the rows the newest pass of a backfill isolated, recorded and skipped';

/* backfill_status, with failed_rows: in the last section, which defines it once */

/* backfill_pending, with completed_with_failures: in the last section, which defines it once */

/*
 * CALL backfill_finalize(name, timeout): returns once the newest pass is
 * completed with the current checksum; waits for a running pass, and works
 * it in the calling session (as the role a lane logs in as) when no lane
 * does; BF019 when the timeout passes first.
 */
CREATE PROCEDURE backfill_finalize(name text, timeout interval DEFAULT '1 hour')
LANGUAGE C AS 'MODULE_PATHNAME', 'backfill_finalize';
COMMENT ON PROCEDURE backfill_finalize(text, interval) IS
'return once the backfill is complete with its current definition, running its batches here when no lane does';

/* ---- revert (issue 14, part 2) and drift watch (part 3) ---- */

/*
 * A pass goes forward (the action over the predicate's rows) or reverts
 * (the declared revert over the revert_predicate's rows, or over every
 * row when there is none).  The direction is part of a pass's history:
 * like its checksum, it never changes.
 */
ALTER TABLE backfill.ledger
    ADD COLUMN direction text NOT NULL DEFAULT 'forward'
               CHECK (direction IN ('forward', 'revert'));

/*
 * Drift (part 3).  A watch pass is a forward pass the scheduler started
 * because the watch's probe found rows matching the predicate again after
 * the backfill completed.  A pass is bounded to the key range that existed
 * when it was planned (bound: its upper end, inclusive, as key text): it
 * converges within it, and what matches beyond it at its end (beyond,
 * counted up to 1,000) is drift for the watch or the next pass.
 */
ALTER TABLE backfill.ledger ADD COLUMN watch boolean NOT NULL DEFAULT false;
ALTER TABLE backfill.run
    ADD COLUMN bound text,
    ADD COLUMN beyond bigint;

-- what the watch of a declaration has done: its probes, and what they found
CREATE TABLE backfill.watch (
    declaration      text PRIMARY KEY REFERENCES backfill.declaration (name)
                     ON DELETE CASCADE ON UPDATE CASCADE,
    probes           bigint NOT NULL DEFAULT 0,
    drifts           bigint NOT NULL DEFAULT 0,      -- probes that found rows
    last_probe_at    timestamptz,
    last_found       bigint                          -- rows the last probe found (at most 1,000)
);
REVOKE ALL ON backfill.watch FROM PUBLIC;
GRANT SELECT ON backfill.watch TO PUBLIC;
ALTER TABLE backfill.watch ENABLE ROW LEVEL SECURITY;
CREATE POLICY watch_member ON backfill.watch FOR SELECT
    USING (EXISTS (SELECT 1 FROM backfill.declaration d WHERE d.name = watch.declaration));

/*
 * How many rows (at most 1,000) match a plain table backfill's predicate
 * now, read as its run_as role with its search_path (restricted, rolled
 * back); NULL for a pages or scoped backfill, one the caller is not a
 * member of the owner of, or one whose predicate cannot be read.
 */
CREATE FUNCTION backfill.drift_probe(p_name text) RETURNS bigint
LANGUAGE C STRICT VOLATILE AS 'MODULE_PATHNAME', 'backfill_drift_probe';

CREATE OR REPLACE FUNCTION backfill.ledger_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'ledger row % of backfill "%" cannot be deleted',
              OLD.run_id, OLD.declaration
              USING ERRCODE = 'BF017',
                    DETAIL = 'The ledger is append-only: it is the history of every pass.',
                    HINT = 'Re-run the backfill with force => true to record a new pass.';
    END IF;
    IF OLD.status <> 'running' THEN
        RAISE EXCEPTION 'ledger row % of backfill "%" has ended and cannot be changed',
              OLD.run_id, OLD.declaration
              USING ERRCODE = 'BF017',
                    DETAIL = format('The pass ended as %s at %s.', OLD.status, OLD.finished_at),
                    HINT = 'Re-run the backfill with force => true to record a new pass.';
    END IF;
    IF NEW.run_id <> OLD.run_id OR NEW.ledger_name <> OLD.ledger_name
       OR NEW.checksum <> OLD.checksum OR NEW.started_at <> OLD.started_at
       OR NEW.direction <> OLD.direction OR NEW.watch <> OLD.watch THEN
        RAISE EXCEPTION 'ledger row % of backfill "%" cannot be rewritten',
              OLD.run_id, OLD.declaration
              USING ERRCODE = 'BF017',
                    DETAIL = 'Only the status, counters and end of a running pass may change.',
                    HINT = 'Re-run the backfill with force => true to record a new pass.';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE VIEW backfill_ledger WITH (security_invoker = true) AS
    SELECT l.run_id, l.ledger_name, l.declaration, l.status, l.forced, l.previous_run_id,
           l.rows, l.batches, l.started_at, l.finished_at,
           l.finished_at - l.started_at AS duration,
           l.error_code, l.error_message, l.checksum,
           pg_catalog.pg_get_userbyid(l.owner) AS owner,
           l.direction, l.watch
      FROM backfill.ledger l;

CREATE FUNCTION backfill_revert(name text) RETURNS bigint
LANGUAGE C STRICT VOLATILE AS 'MODULE_PATHNAME', 'backfill_revert';
COMMENT ON FUNCTION backfill_revert(text) IS
'start a revert pass (the declared revert over what the forward passes did); returns its run id';

/* backfill_status, with direction, bound and watch: in the last section (one definition) */

/* backfill_pending, with reverted and drifted: in the last section, which defines it once */

COMMENT ON FUNCTION backfill_drop(text) IS
'withdraw a declaration that has written no rows, or whose newest pass is a completed revert';

/* a required backfill whose newest pass is a completed revert is not done */
CREATE OR REPLACE FUNCTION backfill.unmet_requirement(p_name text) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d backfill.declaration;
    why text;
    required_owner oid;
    last_status text;
    last_direction text;
BEGIN
    SELECT * INTO d FROM backfill.declaration WHERE name = p_name;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF d.requires IS NOT NULL THEN
        why := backfill.migration_unapplied(d.requires, d.owner::oid);
        IF why IS NOT NULL THEN
            RETURN why;
        END IF;
    END IF;
    IF d.requires_backfill IS NOT NULL THEN
        SELECT b.owner INTO required_owner FROM backfill.declaration b
         WHERE b.name = d.requires_backfill;
        IF FOUND AND NOT pg_has_role(d.owner::oid, required_owner, 'USAGE') THEN
            RETURN format('backfill %s belongs to role %s, which role %s is not a member of',
                          d.requires_backfill, pg_get_userbyid(required_owner),
                          pg_get_userbyid(d.owner));
        END IF;
        SELECT l.status, l.direction INTO last_status, last_direction FROM backfill.ledger l
         WHERE l.ledger_name = d.requires_backfill
           AND pg_has_role(d.owner::oid, l.owner::oid, 'USAGE')
         ORDER BY l.run_id DESC LIMIT 1;
        IF last_status = 'completed' AND last_direction = 'revert' THEN
            RETURN format('backfill %s was reverted (its last pass is a completed revert)',
                          d.requires_backfill);
        END IF;
        IF last_status IS DISTINCT FROM 'completed' THEN
            RETURN format('backfill %s has not completed (its last pass: %s)',
                          d.requires_backfill, coalesce(last_status, 'none'));
        END IF;
    END IF;
    RETURN NULL;
END
$$;

/* ---- PostgreSQL 15-18 and pg_upgrade (issue 16) ---- */

/*
 * pg_upgrade refuses user columns of the reg* types whose oids it does not
 * keep (regproc, regprocedure, regoper, ...): pg_proc oids change.  So a
 * pages source's function and its count function are stored by name, as
 * their qualified signature, which pg_dump, pg_restore and pg_upgrade all
 * carry as text; the library resolves the name when it loads the
 * declaration.  The names are written here as the library writes them
 * (regprocedure's output under search_path pg_catalog: schema-qualified).
 * A function dropped before this update keeps its oid, as a number, which
 * resolves to nothing.  The checksum is of the function, not of how the
 * column stores it: it does not change.
 */
SELECT pg_catalog.set_config('pg_backfill.upgrade_search_path',
                             pg_catalog.current_setting('search_path'), true);
SELECT pg_catalog.set_config('search_path', 'pg_catalog', true);
ALTER TABLE backfill.declaration
    ALTER COLUMN pages_fn TYPE pg_catalog.text USING pages_fn::pg_catalog.text,
    ALTER COLUMN count_fn TYPE pg_catalog.text USING count_fn::pg_catalog.text;
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.current_setting('pg_backfill.upgrade_search_path'), true);

/* backfill.identity_problem, a function gone: in the last section, which defines it once */

/*
 * On a hot standby the outbox's writers are refused like the other writers
 * (check_not_standby in catalog.c: BF026, with the way out), before any
 * statement fails with a bare "read-only transaction" error.  The bodies
 * are those of 0.3 with the check first.
 */
CREATE FUNCTION backfill.refuse_on_standby(what text, name text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION 'cannot % "%" on a standby', what, name
              USING ERRCODE = 'BF026',
                    DETAIL = 'This server is in recovery: pg_backfill''s catalogs are read-only '
                             'copies of the primary''s, and no lane runs here.',
                    HINT = 'Run it on the primary. backfill_status, backfill_pending, '
                           'backfill_partitions and the ledger can be read here.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION backfill_outbox_sink(topic text, kind text, target text,
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
    owner oid;
BEGIN
    PERFORM backfill.refuse_on_standby('set the sink of outbox topic', topic);
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
    -- the topic belongs to the role that set its sink: only its members set it again
    SELECT s.run_as INTO owner FROM backfill.outbox_sink s
     WHERE s.topic = backfill_outbox_sink.topic FOR UPDATE;
    IF FOUND AND NOT pg_catalog.pg_has_role(current_user, owner, 'USAGE') THEN
        RAISE EXCEPTION 'permission denied for outbox topic "%"', topic
              USING ERRCODE = 'BF016',
                    DETAIL = pg_catalog.format('The topic belongs to role %s, which set its sink.',
                                               owner::regrole),
                    HINT = 'Ask a member of that role, or have it GRANT the role to you.';
    END IF;
    IF kind = 'function' THEN
        -- resolved here, in the caller's search_path, and stored qualified
        -- and by oid; a sink of four arguments also gets the emitting role
        fn := pg_catalog.to_regprocedure(target || '(text, text, jsonb, regrole)');
        IF fn IS NULL THEN
            fn := pg_catalog.to_regprocedure(target || '(text, text, jsonb)');
        END IF;
        IF fn IS NULL THEN
            RAISE EXCEPTION 'outbox sink function %(text, text, jsonb) of topic "%" does not exist',
                  target, topic
                  USING ERRCODE = 'BF011',
                        HINT = 'Create a function (topic text, key text, payload jsonb'
                               ' [, emitted_by regrole]) first.';
        END IF;
        -- the relay runs it with this role's privileges: its owner must
        -- have them already (this role itself, or a role with its
        -- privileges), never a role that could CREATE OR REPLACE it into
        -- something that runs with more privilege than it has
        IF NOT pg_catalog.pg_has_role(
                  (SELECT p.proowner FROM pg_catalog.pg_proc p WHERE p.oid = fn),
                  current_user, 'USAGE') THEN
            RAISE EXCEPTION 'outbox sink function % of topic "%" belongs to role %',
                  fn, topic, (SELECT p.proowner::regrole FROM pg_catalog.pg_proc p WHERE p.oid = fn)
                  USING ERRCODE = 'BF016',
                        DETAIL = pg_catalog.format('The relay would run it as role %s, and its '
                                 'owner could change what it does.', current_user),
                        HINT = 'Use a function owned by your role.';
        END IF;
        SELECT pg_catalog.format('%I.%I', n.nspname, p.proname) INTO target
          FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
         WHERE p.oid = fn;
    END IF;
    INSERT INTO backfill.outbox_sink AS s
           (topic, kind, target, target_fn, secret, timeout_ms, max_attempts, backoff_base_ms,
            backoff_cap_ms, run_as, search_path)
    VALUES (topic, kind, target, fn, secret,
            -- operators qualified: the caller's search_path is in force here
            (extract(epoch FROM timeout) OPERATOR(pg_catalog.*) 1000)::integer, max_attempts,
            (extract(epoch FROM backoff_base) OPERATOR(pg_catalog.*) 1000)::integer,
            (extract(epoch FROM backoff_cap) OPERATOR(pg_catalog.*) 1000)::integer,
            (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user),
            pg_catalog.current_setting('search_path'))
    ON CONFLICT ON CONSTRAINT outbox_sink_pkey DO UPDATE
       SET kind = EXCLUDED.kind, target = EXCLUDED.target, target_fn = EXCLUDED.target_fn,
           secret = EXCLUDED.secret,
           timeout_ms = EXCLUDED.timeout_ms, max_attempts = EXCLUDED.max_attempts,
           backoff_base_ms = EXCLUDED.backoff_base_ms, backoff_cap_ms = EXCLUDED.backoff_cap_ms,
           run_as = EXCLUDED.run_as, search_path = EXCLUDED.search_path;
END
$$;

CREATE OR REPLACE FUNCTION backfill_outbox_grant(topic text, role regrole)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM backfill.refuse_on_standby('grant outbox topic', topic);
    IF role IS NULL THEN
        RAISE EXCEPTION 'outbox grant of topic "%" needs a role', topic
              USING ERRCODE = 'BF011', HINT = 'Name the role that may emit into the topic.';
    END IF;
    PERFORM backfill._outbox_topic_owner(topic);
    INSERT INTO backfill.outbox_grant (topic, grantee, granted_by)
    VALUES (topic, role, (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user))
    ON CONFLICT DO NOTHING;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION backfill_outbox_revoke(topic text, role regrole)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM backfill.refuse_on_standby('revoke outbox topic', topic);
    PERFORM backfill._outbox_topic_owner(topic);
    DELETE FROM backfill.outbox_grant g
     WHERE g.topic = backfill_outbox_revoke.topic AND g.grantee = backfill_outbox_revoke.role;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION backfill_outbox_requeue(id bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM backfill.refuse_on_standby('requeue outbox message', id::text);
    UPDATE backfill.outbox o
       SET state = 'pending', attempts = 0, next_attempt_at = now(), dead_at = NULL
     WHERE o.id = backfill_outbox_requeue.id AND o.state = 'dead';
    RETURN FOUND;
END
$$;

/* ---- speed (issue 13) ---- */

/* ---- trust: the owner of a pages or count function (lead) ---- */

/*
 * A pages or count function is stored by name (above), and a name is
 * anyone's to take once the function is dropped or renamed: another role
 * could create a function of that name, and the next pass would run it as
 * the declarer.  So the declaration also records who owned the function
 * when it was declared (a role, which pg_dump and pg_upgrade carry), and
 * a function of that name owned by anyone else never runs: the lanes
 * resolve it to nothing and backfill.identity_problem refuses the run.
 */
ALTER TABLE backfill.declaration
    ADD COLUMN pages_owner pg_catalog.regrole,
    ADD COLUMN count_owner pg_catalog.regrole;
UPDATE backfill.declaration d
   SET pages_owner = (SELECT p.proowner FROM pg_catalog.pg_proc p
                       WHERE p.oid OPERATOR(pg_catalog.=) CASE
                             WHEN d.pages_fn OPERATOR(pg_catalog.~) '^[0-9]+$' THEN NULL
                             ELSE pg_catalog.to_regprocedure(d.pages_fn) END),
       count_owner = (SELECT p.proowner FROM pg_catalog.pg_proc p
                       WHERE p.oid OPERATOR(pg_catalog.=) CASE
                             WHEN d.count_fn OPERATOR(pg_catalog.~) '^[0-9]+$' THEN NULL
                             ELSE pg_catalog.to_regprocedure(d.count_fn) END)
 WHERE d.pages_fn IS NOT NULL OR d.count_fn IS NOT NULL;

/* backfill.identity_problem, a function of another owner: in the last section (one definition) */

/* ---- attacker fixes of issue 14: a scoped backfill reverted per scope (h6) ---- */

CREATE FUNCTION backfill_revert(name text, input jsonb) RETURNS bigint
LANGUAGE C STRICT VOLATILE AS 'MODULE_PATHNAME', 'backfill_revert';
COMMENT ON FUNCTION backfill_revert(text, jsonb) IS
'start a revert pass of one scope of a scoped backfill (the scope its input names); returns its run id';

/* ---- a lane that dies at once: its partition cools down (lead) ---- */

/*
 * A lane that crashes (a segfault in a C function the action calls, say)
 * takes the whole server through a crash restart, which empties shared
 * memory and with it the scheduler's doubling delay for lanes that stop
 * too soon: the next lane reclaimed the partition at once and crashed
 * again, 29 restarts in a few seconds.  So the delay lives in the
 * partition row: a partition whose dead holder held it less than 5 s
 * (renewed_at - holder_start; a long-lived lane that dies is reclaimed at
 * once) is not reclaimed until 2^reclaims seconds (1 s, 2 s, 4 s ... at
 * most 60 s) after its last renewal.  The scheduler's look (scheduler.c)
 * counts such partitions as cooling, not claimable, with the same rule.
 */
CREATE OR REPLACE FUNCTION backfill.claim_partition(p_run_id bigint, p_pid integer,
                                                    p_start timestamptz)
RETURNS TABLE (part_no integer, cursor text, hi text, rows bigint,
               reclaimed boolean, dead_pid integer)
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    -- MATERIALIZED: the locking subquery must run once.  Inlined, the
    -- planner may rescan it per partition row, and every rescan skips the
    -- rows this statement has already locked and takes the next one.
    WITH c AS MATERIALIZED (
        SELECT q.part_no, q.state = 'running' AS reclaim, q.holder_pid
          FROM backfill.partition q
         WHERE q.run_id = p_run_id
           AND EXISTS (SELECT 1 FROM backfill.run r
                         JOIN backfill.ledger l ON l.run_id = r.run_id
                        WHERE r.run_id = p_run_id AND NOT r.paused
                          AND l.status = 'running')
           AND (q.state = 'pending'
                OR (q.state = 'running'
                    AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                                     WHERE a.pid = q.holder_pid
                                       AND a.backend_start = q.holder_start)
                    AND NOT coalesce(q.renewed_at - q.holder_start < interval '5 s'
                                     AND now() < q.renewed_at
                                         + least(60, power(2, least(q.reclaims, 6)))
                                           * interval '1 s', false)))
         ORDER BY q.part_no
         LIMIT 1
           FOR UPDATE SKIP LOCKED)
    UPDATE backfill.partition p
       SET state = 'running', holder_pid = p_pid, holder_start = p_start,
           renewed_at = now(), claims = p.claims + 1,
           reclaims = p.reclaims + c.reclaim::integer,
           started_at = coalesce(p.started_at, now())
      FROM c
     WHERE p.run_id = p_run_id AND p.part_no = c.part_no
    RETURNING p.part_no, coalesce(p.cursor, p.lo), p.hi, p.rows, c.reclaim, c.holder_pid;
$$;
REVOKE ALL ON FUNCTION backfill.claim_partition(bigint, integer, timestamptz) FROM PUBLIC;

/* ---- functions several sections change: one definition each ---- */

/*
 * backfill_status, backfill_pending and backfill.identity_problem are
 * changed by more than one section above; each is defined once, here,
 * after every table and function they read, as the sections together
 * want it.  A section that changes one of them again changes it here.
 *
 * backfill_status: the newest pass's rows recorded and skipped
 * (failed_rows, issue 14 part 1), its direction (part 2), the watch's
 * probes and what its passes healed, and the pass's bound and what
 * matched beyond it (part 3).
 */
DROP FUNCTION backfill_status(text);
CREATE FUNCTION backfill_status(name text)
RETURNS TABLE (
    name          text,
    run_id        bigint,
    status        text,
    phase         text,
    rows          bigint,
    batches       bigint,
    rows_per_sec  double precision,
    estimate      bigint,
    progress      double precision,
    eta           interval,
    partitions    integer,
    partitions_pending integer,
    partitions_running integer,
    partitions_done    integer,
    partitions_failed  integer,
    live_leases   integer,
    paused        boolean,
    batch_size    integer,
    throttle      text,
    plan_method   text,
    started_at    timestamptz,
    finished_at   timestamptz,
    last_error    text,
    failed_rows   bigint,
    direction     text,
    watch         boolean,
    watch_probes  bigint,
    watch_drifts  bigint,
    last_probe_at timestamptz,
    healed_rows   bigint,
    bound         text,
    beyond_bound  bigint)
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    WITH d AS (
        SELECT d.name FROM backfill.declaration d WHERE d.name = $1
        UNION
        SELECT l.declaration FROM backfill.ledger l WHERE l.declaration = $1
    ),
    l AS (
        SELECT l.* FROM backfill.ledger l
         WHERE l.declaration = $1
         ORDER BY l.run_id DESC LIMIT 1
    ),
    p AS (
        SELECT coalesce(sum(p.rows), 0)::bigint AS rows,
               coalesce(sum(p.batches), 0)::bigint AS batches,
               count(*)::integer AS partitions,
               (count(*) FILTER (WHERE p.state = 'pending'))::integer AS pending,
               (count(*) FILTER (WHERE p.state = 'running'))::integer AS running,
               (count(*) FILTER (WHERE p.state = 'done'))::integer AS done,
               (count(*) FILTER (WHERE p.state = 'failed'))::integer AS failed,
               (count(*) FILTER (WHERE p.holder_pid IS NOT NULL AND p.state = 'running'
                   AND EXISTS (SELECT 1 FROM pg_stat_activity a
                                WHERE a.pid = p.holder_pid
                                  AND a.backend_start = p.holder_start)))::integer AS live,
               min(p.started_at) AS first_start,
               (avg(p.batch_size) FILTER (WHERE p.state = 'running'))::integer AS batch_size,
               string_agg(DISTINCT p.throttle, '; ') FILTER (WHERE p.state = 'running') AS throttle
          FROM backfill.partition p, l
         WHERE p.run_id = l.run_id
    ),
    s AS (
        SELECT l.run_id, l.status, r.phase, r.plan_method, r.estimate, r.paused,
               coalesce(l.rows, p.rows) AS rows,
               coalesce(l.batches, p.batches) AS batches,
               p.partitions, p.pending, p.running, p.done, p.failed, p.live,
               p.batch_size, p.throttle,
               l.started_at, l.finished_at,
               coalesce(l.error_code || ': ' || l.error_message, r.last_error) AS last_error,
               extract(epoch FROM coalesce(l.finished_at, now())
                                  - coalesce(p.first_start, l.started_at)) AS secs,
               (SELECT count(*) FROM backfill.failed_row f WHERE f.run_id = l.run_id) AS failed_rows,
               l.direction, l.watch, r.bound, r.beyond
          FROM l LEFT JOIN backfill.run r USING (run_id), p
    ),
    w AS (
        SELECT w.probes, w.drifts, w.last_probe_at,
               (SELECT coalesce(sum(h.rows), 0)::bigint FROM backfill.ledger h
                 WHERE h.declaration = $1 AND h.watch AND h.status = 'completed') AS healed
          FROM (SELECT 1) one LEFT JOIN backfill.watch w ON w.declaration = $1
    )
    SELECT d.name, s.run_id,
           coalesce(s.status, 'never run'),
           s.phase, coalesce(s.rows, 0), coalesce(s.batches, 0),
           CASE WHEN s.secs > 0 THEN s.rows / s.secs END,
           s.estimate,
           CASE WHEN s.status IN ('completed', 'completed_with_failures') THEN 1.0
                WHEN s.estimate > 0 THEN least(1.0, s.rows::float8 / s.estimate) END,
           CASE WHEN s.status = 'running' AND s.secs > 0 AND s.rows > 0 AND s.estimate IS NOT NULL
                THEN make_interval(secs => greatest(s.estimate - s.rows, 0) / (s.rows / s.secs)) END,
           s.partitions, s.pending, s.running, s.done, s.failed,
           s.live, s.paused, s.batch_size, s.throttle, s.plan_method,
           s.started_at, s.finished_at, s.last_error, coalesce(s.failed_rows, 0), s.direction,
           s.watch, coalesce(w.probes, 0), coalesce(w.drifts, 0), w.last_probe_at, w.healed,
           s.bound, s.beyond
      FROM d LEFT JOIN s ON true CROSS JOIN w;
$$;
COMMENT ON FUNCTION backfill_status(text) IS
'status, progress, rows/s and ETA of the newest pass of a backfill, its direction, bound and watch';

/*
 * backfill_pending: a pass that ended with tolerated failed rows is
 * completed_with_failures (issue 14 part 1), and the direction of the
 * newest pass shows (part 2).  A forward pass completes the backfill only
 * when no revert completed after it: its state is then reverted
 * (reverting while a revert runs).  A completed plain table backfill
 * whose predicate matches rows again has drifted (part 3): a probe as its
 * role, LIMIT 1,000, never a full count.
 */
DROP FUNCTION backfill_pending();
CREATE FUNCTION backfill_pending()
RETURNS TABLE (
    name                  text,
    state                 text,
    checksum              text,
    completed_checksum    text,
    changed               boolean,
    environments          text[],
    last_run_id           bigint,
    last_completed_run_id bigint,
    rows                  bigint,
    blocked_by            text,
    direction             text,
    drift                 text,
    drift_rows            bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH env AS (
        SELECT current_setting('backfill.environment') AS e
    ),
    last AS (
        SELECT DISTINCT ON (l.ledger_name) l.*
          FROM backfill.ledger l
         ORDER BY l.ledger_name, l.run_id DESC
    ),
    reverted AS (
        SELECT l.ledger_name, max(l.run_id) AS run_id
          FROM backfill.ledger l
         WHERE l.status = 'completed' AND l.direction = 'revert'
         GROUP BY l.ledger_name
    ),
    done AS (
        SELECT DISTINCT ON (l.ledger_name) l.*
          FROM backfill.ledger l
          LEFT JOIN reverted rv ON rv.ledger_name = l.ledger_name
         WHERE l.status = 'completed' AND l.direction = 'forward'
           AND l.run_id > coalesce(rv.run_id, 0)
         ORDER BY l.ledger_name, l.run_id DESC
    ),
    -- a plain declaration has one history; a scoped one, one per scope run
    histories AS (
        SELECT d.name AS ledger_name, d.name AS declaration
          FROM backfill.declaration d WHERE d.scope IS NULL
        UNION ALL
        SELECT DISTINCT l.ledger_name, d.name
          FROM backfill.declaration d JOIN backfill.ledger l ON l.declaration = d.name
         WHERE d.scope IS NOT NULL
    )
    SELECT h.ledger_name,
           CASE
             WHEN d.environments IS NOT NULL AND NOT (env.e = ANY (d.environments))
                  THEN 'not-in-this-environment'
             WHEN last.status = 'running' AND last.direction = 'revert' THEN 'reverting'
             WHEN last.status = 'running'
                  AND backfill.unmet_requirement(d.name) IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM backfill.partition p
                                   WHERE p.run_id = last.run_id) THEN 'blocked'
             WHEN last.status = 'running' THEN 'running'
             WHEN last.status = 'failed' AND last.error_code = 'BF006' THEN 'stalled'
             WHEN last.status IN ('failed', 'cancelled') THEN 'failed'
             WHEN last.status = 'completed' AND last.direction = 'revert' THEN 'reverted'
             WHEN last.status = 'completed_with_failures' AND last.checksum = d.checksum
                  THEN 'completed_with_failures'
             WHEN done.run_id IS NOT NULL AND done.checksum <> d.checksum THEN 'changed'
             WHEN dp.n > 0 THEN 'drifted'
             WHEN done.run_id IS NOT NULL THEN 'completed'
             WHEN backfill.unmet_requirement(d.name) IS NOT NULL THEN 'blocked'
             ELSE 'pending'
           END,
           d.checksum,
           done.checksum,
           done.run_id IS NOT NULL AND done.checksum <> d.checksum,
           d.environments,
           last.run_id,
           done.run_id,
           coalesce(last.rows,
                    (SELECT sum(p.rows)::bigint FROM backfill.partition p
                      WHERE p.run_id = last.run_id)),
           backfill.unmet_requirement(d.name),
           last.direction,
           CASE WHEN dp.n >= 1000 THEN 'at least 1,000 rows'
                WHEN dp.n > 0 THEN dp.n || ' rows' END,
           dp.n
      FROM histories h
      JOIN backfill.declaration d ON d.name = h.declaration
      CROSS JOIN env
      LEFT JOIN last ON last.ledger_name = h.ledger_name
      LEFT JOIN done ON done.ledger_name = h.ledger_name
      -- a completed plain table backfill: is its predicate true of rows again?
      LEFT JOIN LATERAL (
          SELECT backfill.drift_probe(d.name) AS n
           WHERE last.status = 'completed' AND last.direction = 'forward'
             AND done.run_id IS NOT NULL AND done.checksum = d.checksum
             AND d.scope IS NULL AND d.relid IS NOT NULL
             AND (d.environments IS NULL OR env.e = ANY (d.environments))) dp ON true
    UNION ALL
    SELECT last.ledger_name, 'orphaned', NULL, done.checksum, NULL, NULL,
           last.run_id, done.run_id, last.rows, NULL, last.direction, NULL, NULL
      FROM last
      LEFT JOIN done ON done.ledger_name = last.ledger_name
     WHERE NOT EXISTS (SELECT 1 FROM backfill.declaration d
                        WHERE d.name = last.declaration)
    ORDER BY 1;
$$;
COMMENT ON FUNCTION backfill_pending() IS
'one row per declared backfill with its state; ledger names no declaration owns are orphaned';

/*
 * backfill.identity_problem: a declaration whose pages or count function
 * no longer resolves does not run (issue 16), nor one whose function of
 * that name now belongs to another role than the one it was declared with
 * (the trust section above).
 */
CREATE OR REPLACE FUNCTION backfill.identity_problem(p_name text, p_relid pg_catalog.regclass,
                                          p_relation text, p_owner pg_catalog.regrole,
                                          p_owner_name name, p_run_as pg_catalog.regrole,
                                          p_run_as_name name,
                                          OUT code text, OUT message text, OUT detail text,
                                          OUT hint text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found_relid oid;
    fn record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                    WHERE r.oid = p_owner AND r.rolname = p_owner_name) THEN
        code := 'BF016';
        message := format('the owner of backfill "%s" is no longer role "%s"',
                          p_name, p_owner_name);
        detail := format('The declaration was made by role "%s"; its role oid %s is %s now.',
                         p_owner_name, p_owner::oid,
                         pg_catalog.pg_get_userbyid(p_owner));
        hint := format('Create role %s before restoring a dump, or declare the backfill again '
                       'as its owner.', quote_ident(p_owner_name));
    ELSIF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.oid = p_run_as AND r.rolname = p_run_as_name) THEN
        code := 'BF016';
        message := format('the run_as role of backfill "%s" is no longer role "%s"',
                          p_name, p_run_as_name);
        detail := format('The declaration runs as role "%s"; its role oid %s is %s now.',
                         p_run_as_name, p_run_as::oid,
                         pg_catalog.pg_get_userbyid(p_run_as));
        hint := format('Create role %s before restoring a dump, or declare the backfill again.',
                       quote_ident(p_run_as_name));
    ELSIF p_relation IS NOT NULL THEN
        found_relid := pg_catalog.to_regclass(p_relation);
        IF found_relid IS DISTINCT FROM p_relid::oid
           OR (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = found_relid)
              NOT IN ('r', 'p') THEN
            code := 'BF001';
            message := format('the table of backfill "%s" is no longer %s', p_name, p_relation);
            detail := format('The declaration holds relation oid %s; the name %s is %s now.',
                             p_relid::oid, p_relation,
                             coalesce(found_relid::pg_catalog.regclass::text || ' (oid '
                                      || found_relid || ')', 'no relation'));
            hint := format('Declare the backfill again over the table it should rewrite '
                           '(%s was dropped, renamed or restored under another name).',
                           p_relation);
        END IF;
    ELSE
        FOR fn IN
            SELECT f.what, f.signature, f.owner,
                   (SELECT p.proowner FROM pg_catalog.pg_proc p
                     WHERE p.oid = CASE WHEN f.signature ~ '^[0-9]+$' THEN NULL  -- an oid: dropped before 0.5
                                        ELSE pg_catalog.to_regprocedure(f.signature) END) AS found_owner
              FROM backfill.declaration d,
                   LATERAL (VALUES ('pages', d.pages_fn, d.pages_owner),
                                   ('count', d.count_fn, d.count_owner)) f(what, signature, owner)
             WHERE d.name = p_name AND f.signature IS NOT NULL
        LOOP
            IF fn.found_owner IS NULL THEN
                code := 'BF001';
                message := format('the %s function of backfill "%s" no longer exists',
                                  fn.what, p_name);
                detail := format('The declaration names function %s, which this database '
                                 'does not have.', fn.signature);
                hint := 'Create the function again (or restore it), or declare the backfill '
                        'again with the function it should call.';
                RETURN;
            ELSIF fn.owner IS NULL OR fn.found_owner <> fn.owner THEN
                code := 'BF016';
                message := format('the %s function of backfill "%s" is not the one it was declared with',
                                  fn.what, p_name);
                detail := format('Function %s belongs to role "%s"; the declaration was made '
                                 'with a function of role "%s". It never runs as the declarer.',
                                 fn.signature, pg_catalog.pg_get_userbyid(fn.found_owner),
                                 coalesce(pg_catalog.pg_get_userbyid(fn.owner), 'unknown'));
                hint := 'Declare the backfill again with the function it should call '
                        '(as a member of that function''s owner).';
                RETURN;
            END IF;
        END LOOP;
    END IF;
END
$$;

/* ---- privileges of the functions created again (see the top) ---- */

DO $$
DECLARE
    f record;
    item record;
    acl pg_catalog.aclitem[];
BEGIN
    FOR f IN SELECT * FROM (VALUES ('partitions', 'backfill_partitions(text)'),
                                   ('status', 'backfill_status(text)'),
                                   ('pending', 'backfill_pending()')) v(tag, signature)
    LOOP
        acl := NULLIF(pg_catalog.current_setting('pg_backfill.upgrade_acl_' || f.tag, true), '');
        CONTINUE WHEN acl IS NULL;
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.signature);
        FOR item IN SELECT a.grantee, a.is_grantable FROM pg_catalog.aclexplode(acl) a
                     WHERE a.privilege_type = 'EXECUTE'
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', f.signature,
                CASE WHEN item.grantee = 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
                CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$$;

/* ---- Citus (issue 15) ---- */

/*
 * The rows a predicate matches in a Citus distributed table, from the
 * shards' own statistics: the planner's estimate on each shard, on the
 * node that holds it (Citus's run_command_on_shards, which connects as the
 * current role), summed.  The coordinator's planner knows nothing of the
 * shards: it answers a fixed 100,000.  Run by the lanes as the declaring
 * role; estimate is NULL when Citus is not installed or a shard did not
 * answer (the plan keeps the coordinator's estimate then).  Nothing of
 * Citus is named unless it is installed: the statement is EXECUTEd.
 */
CREATE FUNCTION backfill.citus_estimate_rows(rel regclass, predicate text,
                                             OUT estimate bigint, OUT shards integer)
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
    failed integer;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'citus') THEN
        RETURN;
    END IF;
    -- run_command_on_shards formats the command with the shard's name: %L
    -- is that name as a literal, and the predicate's own % are doubled
    EXECUTE 'SELECT pg_catalog.sum(r.result::pg_catalog.int8) FILTER (WHERE r.success)::pg_catalog.int8,'
            '       pg_catalog.count(*)::pg_catalog.int4,'
            '       pg_catalog.count(*) FILTER (WHERE NOT r.success)::pg_catalog.int4'
            '  FROM pg_catalog.run_command_on_shards($1, $2) r'
       INTO estimate, shards, failed
      USING rel, 'SELECT backfill.estimate_rows(%L, '
                 OPERATOR(pg_catalog.||) pg_catalog.replace(pg_catalog.quote_literal(predicate), '%', '%%')
                 OPERATOR(pg_catalog.||) ')';
    IF failed OPERATOR(pg_catalog.>) 0 OR shards OPERATOR(pg_catalog.=) 0 THEN
        estimate := NULL;
    END IF;
EXCEPTION WHEN OTHERS THEN
    estimate := NULL;
    shards := NULL;
END
$$;

/*
 * A distributed table's pass shard by shard: each partition is one shard,
 * and each of its batches runs on the node that holds the shard, as one
 * local transaction there that also writes the partition's checkpoint: a
 * row of backfill.shard_cursor on that node, which is the one that counts
 * (the coordinator's backfill.partition row follows it).  A coordinator's
 * lane calls these two functions on the worker, connected as its own role.
 * origin names the coordinator (its system identifier and database oid),
 * so runs of two clusters never share a row; owner is the role that opened
 * the row, and part of its key: a role reads and moves only its own rows,
 * and rows another role opened under the same run never stand in its way.
 * Opening a row needs SELECT on the shard's table.
 */
CREATE TABLE backfill.shard_cursor (
    origin      text        NOT NULL,
    run_id      bigint      NOT NULL,
    part_no     integer     NOT NULL,
    shardid     bigint      NOT NULL,
    owner       oid         NOT NULL,
    cursor      text,
    rows        bigint      NOT NULL DEFAULT 0,
    batches     bigint      NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (origin, run_id, part_no, owner)
);

/*
 * The checkpoint row of a shard's partition on this node: mode 'read'
 * returns it (found false when there is none), 'open' creates it with the
 * given cursor and rows unless it exists, 'replace' sets them (the
 * partition's shard moved here: the row of its old node is taken over).
 */
CREATE FUNCTION backfill.shard_checkpoint(origin text, run_id bigint, part_no integer,
                                          shardid bigint, at_cursor text, at_rows bigint,
                                          mode text,
                                          OUT cursor text, OUT rows bigint, OUT found boolean)
RETURNS record
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'backfill_shard_checkpoint';

/*
 * One batch of a shard's partition, on the node that holds the shard:
 * fenced against a move of the shard (BF034), the key scan and the action
 * on the shard table itself as the calling role, the checkpoint row moved
 * in the same transaction.  status is 'batch' (done: cursor, rows, keys),
 * 'done' (nothing left) or 'adopt' (the row is not at the cursor and rows
 * the caller expected: nothing done, the row's are returned).
 */
CREATE FUNCTION backfill.shard_batch(origin text, run_id bigint, part_no integer,
                                     shardid bigint, relation text, key text,
                                     at_cursor text, at_rows bigint, hi text,
                                     batch_size integer, predicate text, action text,
                                     path text, async_commit boolean, lock_timeout_ms integer,
                                     OUT status text, OUT cursor text, OUT rows bigint,
                                     OUT keys bigint)
RETURNS record
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'backfill_shard_batch';
