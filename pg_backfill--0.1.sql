/* pg_backfill--0.1.sql: catalogs, SQL API and reports of pg_backfill 0.1 */

\echo Use "CREATE EXTENSION pg_backfill" to load this file. \quit

/*
 * Catalogs live in the schema "backfill"; the functions people call live in
 * the extension's schema (@extschema@, usually public) so that
 * SELECT backfill_run('x') works without qualification.
 *
 * Nobody but the extension owner writes the catalogs: the C functions switch
 * to the owner for their bookkeeping.  Everybody may read the rows of the
 * backfills whose owning role they are a member of (row-level security).
 */
CREATE SCHEMA backfill;
REVOKE ALL ON SCHEMA backfill FROM PUBLIC;
GRANT USAGE ON SCHEMA backfill TO PUBLIC;

-- One row per declared backfill.
CREATE TABLE backfill.declaration (
    name             text PRIMARY KEY,
    relid            oid,                    -- a local source: the table ...
    relation         text,                   -- ... its qualified name at declaration time
    key_column       name,
    key_type         regtype,
    predicate        text,
    pages_fn         regprocedure,           -- or a pages source: fn(cursor text, input jsonb)
    count_fn         regprocedure,           -- its optional convergence count: fn(input jsonb)
    action           text NOT NULL,
    batch_size       integer NOT NULL CHECK (batch_size > 0),
    rate             double precision NOT NULL CHECK (rate > 0 AND rate < 'infinity'),
    max_parallel     integer NOT NULL DEFAULT 1 CHECK (max_parallel > 0),
    max_attempts     integer NOT NULL CHECK (max_attempts > 0),
    backoff_base_ms  integer NOT NULL CHECK (backoff_base_ms > 0),
    backoff_cap_ms   integer NOT NULL CHECK (backoff_cap_ms >= backoff_base_ms),
    batch_timeout_ms integer NOT NULL CHECK (batch_timeout_ms > 0),
    lock_timeout_ms  integer NOT NULL DEFAULT 2000 CHECK (lock_timeout_ms > 0),
    target_batch_ms  integer CHECK (target_batch_ms > 0),  -- NULL: fixed batch size
    min_batch_size   integer NOT NULL DEFAULT 1 CHECK (min_batch_size > 0),
    max_batch_size   integer NOT NULL DEFAULT 1000000 CHECK (max_batch_size >= min_batch_size),
    environments     text[],                 -- NULL: every environment
    input_shape      jsonb,                  -- scoped: {"key": "type", ...}
    scope            text,                   -- scoped: SQL expression over input
    requires         text,                   -- a schema migration id
    requires_backfill text,                  -- another backfill that must be complete
    run_as           oid NOT NULL,           -- the role lanes log in as
    settings         jsonb,                  -- {"app.setting": "value"} set per batch
    tenant           text,                   -- 'none': declared to run across tenants
    search_path      text NOT NULL DEFAULT '', -- the declarer's, which lanes use
    owner            oid NOT NULL,           -- the declaring role; lanes run as it
    checksum         text NOT NULL,          -- sha256 of the normalized definition
    declared_at      timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK ((relid IS NULL) <> (pages_fn IS NULL)),
    CHECK ((input_shape IS NULL) = (scope IS NULL))
);

-- One row per pass; append-only (see backfill.ledger_guard).
CREATE TABLE backfill.ledger (
    run_id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_name      text NOT NULL,
    declaration      text NOT NULL,          -- no foreign key: history outlives declarations
    checksum         text NOT NULL,
    status           text NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    forced           boolean NOT NULL DEFAULT false,
    previous_run_id  bigint REFERENCES backfill.ledger (run_id),
    owner            oid NOT NULL,
    rows             bigint,
    batches          bigint,
    started_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    error_code       text,
    error_message    text,
    CHECK ((status = 'running') = (finished_at IS NULL))
);
CREATE INDEX ledger_name_idx ON backfill.ledger (ledger_name, run_id);
CREATE INDEX ledger_running_idx ON backfill.ledger (run_id) WHERE status = 'running';

-- Live state of a pass while it runs; one row per ledger row.
CREATE TABLE backfill.run (
    run_id           bigint PRIMARY KEY REFERENCES backfill.ledger (run_id),
    input            jsonb,                  -- a scoped pass's input
    phase            text NOT NULL DEFAULT 'queued'
                     CHECK (phase IN ('queued', 'running', 'counting', 'done')),
    paused           boolean NOT NULL DEFAULT false,
    plan_method      text,
    estimate         bigint,
    remaining        bigint,                 -- rows still matching after the pass
    lane_starts      integer NOT NULL DEFAULT 0,
    interruptions    integer NOT NULL DEFAULT 0,
    last_error       text,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- The checkpoint: one row per partition of a pass's key space.
CREATE TABLE backfill.partition (
    run_id           bigint NOT NULL REFERENCES backfill.run (run_id),
    part_no          integer NOT NULL,
    lo               text,                   -- exclusive; NULL: no lower bound
    hi               text,                   -- inclusive; NULL: no upper bound
    cursor           text,                   -- last key done; NULL: start at lo
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    rows             bigint NOT NULL DEFAULT 0,
    batches          bigint NOT NULL DEFAULT 0,
    holder_pid       integer,
    holder_start     timestamptz,
    renewed_at       timestamptz,
    claims           integer NOT NULL DEFAULT 0,
    reclaims         integer NOT NULL DEFAULT 0,
    failures         integer NOT NULL DEFAULT 0,  -- failed attempts in a row
    last_error       text,
    batch_size       integer,                -- the holder's current (adaptive) batch size
    last_batch_ms    double precision,       -- how long the last batch took
    throttle         text,                   -- why the holder is holding back, if it is
    started_at       timestamptz,
    finished_at      timestamptz,
    PRIMARY KEY (run_id, part_no)
);

/*
 * The ledger is history: a row may change only while its pass is running,
 * and no row is ever deleted.
 */
CREATE FUNCTION backfill.ledger_guard() RETURNS trigger
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
       OR NEW.checksum <> OLD.checksum OR NEW.started_at <> OLD.started_at THEN
        RAISE EXCEPTION 'ledger row % of backfill "%" cannot be rewritten',
              OLD.run_id, OLD.declaration
              USING ERRCODE = 'BF017',
                    DETAIL = 'Only the status, counters and end of a running pass may change.',
                    HINT = 'Re-run the backfill with force => true to record a new pass.';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON backfill.ledger
    FOR EACH ROW EXECUTE FUNCTION backfill.ledger_guard();

-- pg_dump keeps the declarations and the history.
SELECT pg_catalog.pg_extension_config_dump('backfill.declaration', '');
SELECT pg_catalog.pg_extension_config_dump('backfill.ledger', '');

-- Reading: only the rows of backfills whose owner the reader is a member of.
REVOKE ALL ON backfill.declaration, backfill.ledger, backfill.run, backfill.partition FROM PUBLIC;
GRANT SELECT ON backfill.declaration, backfill.ledger, backfill.run, backfill.partition TO PUBLIC;
ALTER TABLE backfill.declaration ENABLE ROW LEVEL SECURITY;
ALTER TABLE backfill.ledger ENABLE ROW LEVEL SECURITY;
ALTER TABLE backfill.run ENABLE ROW LEVEL SECURITY;
ALTER TABLE backfill.partition ENABLE ROW LEVEL SECURITY;
CREATE POLICY declaration_member ON backfill.declaration FOR SELECT
    USING (pg_catalog.pg_has_role(owner, 'USAGE'));
CREATE POLICY ledger_member ON backfill.ledger FOR SELECT
    USING (pg_catalog.pg_has_role(owner, 'USAGE'));
CREATE POLICY run_member ON backfill.run FOR SELECT
    USING (EXISTS (SELECT 1 FROM backfill.ledger l WHERE l.run_id = run.run_id));
CREATE POLICY partition_member ON backfill.partition FOR SELECT
    USING (EXISTS (SELECT 1 FROM backfill.ledger l WHERE l.run_id = partition.run_id));

/*
 * The lease.  A lane claims the first partition that is pending or whose
 * holder backend no longer exists (same pid AND same start time: a reused
 * pid is not the same holder).  A live holder is never displaced, however
 * slow.  SKIP LOCKED keeps two lanes that claim at once off one partition.
 * Called by the lanes as the extension's owner; not executable by PUBLIC.
 */
CREATE FUNCTION backfill.claim_partition(p_run_id bigint, p_pid integer,
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
                                       AND a.backend_start = q.holder_start)))
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

/*
 * The plan: interior bounds that split the key space into about n
 * partitions, from the planner's histogram of the key when there is one,
 * else from min/max of an integer key.  Run as the declaring role.
 * Returns the method and the bounds (as text, in key order).
 */
CREATE FUNCTION backfill.plan_bounds(rel regclass, key name, keytype regtype, n integer,
                                     OUT method text, OUT bounds text[])
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hist text;
    lo numeric;
    hi numeric;
BEGIN
    method := 'single';
    bounds := '{}';
    IF n <= 1 THEN
        RETURN;
    END IF;
    SELECT s.histogram_bounds::text INTO hist
      FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename
      JOIN pg_namespace ns ON ns.oid = c.relnamespace AND ns.nspname = s.schemaname
     WHERE c.oid = rel AND s.attname = key AND NOT s.inherited;
    IF hist IS NOT NULL THEN
        EXECUTE format(
            'SELECT array_agg(b::text ORDER BY b) FROM ('
            '  SELECT DISTINCT h[1 + (i * (array_length(h, 1) - 1)) / $2] AS b'
            '    FROM (SELECT $1::%1$s[] AS h) x, generate_series(1, $2 - 1) i) y',
            keytype) INTO bounds USING hist, n;
        method := 'histogram';
        RETURN;
    END IF;
    IF keytype IN ('smallint'::regtype, 'integer'::regtype, 'bigint'::regtype) THEN
        EXECUTE format('SELECT min(%1$I)::numeric, max(%1$I)::numeric FROM %2$s', key, rel)
           INTO lo, hi;
        IF lo IS NOT NULL AND hi - lo >= n THEN
            SELECT array_agg((lo + floor((hi - lo) * i / n))::bigint::text ORDER BY i)
              INTO bounds FROM generate_series(1, n - 1) i;
            method := 'minmax';
        END IF;
    END IF;
END
$$;

/*
 * Is a schema migration applied?  NULL if so, else why not.  It reads the
 * migrations table named by backfill.migrations_table ("table(column)";
 * an unqualified table is looked up in schema public) on behalf of any
 * caller, so it is SECURITY DEFINER; it says nothing about backfills.
 */
CREATE FUNCTION backfill.migration_unapplied(p_id text) RETURNS text
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    spec text := current_setting('backfill.migrations_table');
    m text[];
    tbl regclass;
    applied boolean;
BEGIN
    m := regexp_match(spec, '^\s*(.+?)\s*\(\s*([^()]+?)\s*\)\s*$');
    IF m IS NULL THEN
        RETURN format('migration %s: backfill.migrations_table %L is not "table(column)"',
                      p_id, spec);
    END IF;
    tbl := to_regclass(CASE WHEN m[1] LIKE '%.%' THEN m[1] ELSE 'public.' || m[1] END);
    IF tbl IS NULL THEN
        RETURN format('migration %s is not applied: table %s does not exist', p_id, m[1]);
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I::text = $1)', tbl, m[2])
       INTO applied USING p_id;
    IF NOT applied THEN
        RETURN format('migration %s is not applied (no such %s in %s)', p_id, m[2], tbl);
    END IF;
    RETURN NULL;
END
$$;

/*
 * What a declaration still waits for before a pass may start, or NULL: its
 * schema migration, and the completion of the backfill it requires.  It
 * runs as the caller, so it answers only about backfills the caller may
 * see (row-level security on the catalogs); lanes and the launcher see all.
 */
CREATE FUNCTION backfill.unmet_requirement(p_name text) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d backfill.declaration;
    why text;
    last_status text;
BEGIN
    SELECT * INTO d FROM backfill.declaration WHERE name = p_name;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF d.requires IS NOT NULL THEN
        why := backfill.migration_unapplied(d.requires);
        IF why IS NOT NULL THEN
            RETURN why;
        END IF;
    END IF;
    IF d.requires_backfill IS NOT NULL THEN
        SELECT l.status INTO last_status FROM backfill.ledger l
         WHERE l.ledger_name = d.requires_backfill ORDER BY l.run_id DESC LIMIT 1;
        IF last_status IS DISTINCT FROM 'completed' THEN
            RETURN format('backfill %s has not completed (its last pass: %s)',
                          d.requires_backfill, coalesce(last_status, 'none'));
        END IF;
    END IF;
    RETURN NULL;
END
$$;

/* ---------------------------------------------------------------- API */

/* The input of the scoped pass a lane runs (NULL outside one). */
CREATE FUNCTION backfill_input() RETURNS jsonb
LANGUAGE sql STABLE
AS $$ SELECT nullif(pg_catalog.current_setting('backfill.input', true), '')::jsonb $$;
COMMENT ON FUNCTION backfill_input() IS
'the input of the scoped pass being run; read it in predicates, actions and policies';


CREATE FUNCTION backfill_declare(
    name             text,
    relation         text,
    predicate        text,
    action           text,
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
    tenant           text DEFAULT NULL)
RETURNS text
LANGUAGE C CALLED ON NULL INPUT VOLATILE
AS 'MODULE_PATHNAME', 'backfill_declare';

COMMENT ON FUNCTION backfill_declare(text, text, text, text, text, integer, double precision,
                                     integer, integer, interval, text[], interval, interval,
                                     interval, interval, integer, integer, jsonb, text, text,
                                     text, text, text, text, jsonb, text) IS
'declare (or update) a backfill; returns the checksum of its definition';

CREATE FUNCTION backfill_run(name text, force boolean DEFAULT false, input jsonb DEFAULT NULL,
                             wait boolean DEFAULT true)
RETURNS bigint
LANGUAGE C CALLED ON NULL INPUT VOLATILE
AS 'MODULE_PATHNAME', 'backfill_run';

COMMENT ON FUNCTION backfill_run(text, boolean, jsonb, boolean) IS
'enqueue a pass of a backfill (started when the transaction commits); returns its run id';

CREATE FUNCTION backfill_wait(run_id bigint, timeout interval DEFAULT '1 hour')
RETURNS text
LANGUAGE C STRICT VOLATILE
AS 'MODULE_PATHNAME', 'backfill_wait';

COMMENT ON FUNCTION backfill_wait(bigint, interval) IS
'wait until a pass ends or the timeout passes; returns its ledger status';

-- security_invoker: the catalogs' row-level security applies to the reader
CREATE VIEW backfill_ledger WITH (security_invoker = true) AS
    SELECT l.run_id, l.ledger_name, l.declaration, l.status, l.forced, l.previous_run_id,
           l.rows, l.batches, l.started_at, l.finished_at,
           l.finished_at - l.started_at AS duration,
           l.error_code, l.error_message, l.checksum,
           pg_catalog.pg_get_userbyid(l.owner) AS owner
      FROM backfill.ledger l;
GRANT SELECT ON backfill_ledger TO PUBLIC;

/*
 * backfill_status: where a backfill stands now (its newest pass).
 */
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
    last_error    text)
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
                                  - coalesce(p.first_start, l.started_at)) AS secs
          FROM l LEFT JOIN backfill.run r USING (run_id), p
    )
    SELECT d.name, s.run_id,
           coalesce(s.status, 'never run'),
           s.phase, coalesce(s.rows, 0), coalesce(s.batches, 0),
           CASE WHEN s.secs > 0 THEN s.rows / s.secs END,
           s.estimate,
           CASE WHEN s.status = 'completed' THEN 1.0
                WHEN s.estimate > 0 THEN least(1.0, s.rows::float8 / s.estimate) END,
           CASE WHEN s.status = 'running' AND s.secs > 0 AND s.rows > 0 AND s.estimate IS NOT NULL
                THEN make_interval(secs => greatest(s.estimate - s.rows, 0) / (s.rows / s.secs)) END,
           s.partitions, s.pending, s.running, s.done, s.failed,
           s.live, s.paused, s.batch_size, s.throttle, s.plan_method,
           s.started_at, s.finished_at, s.last_error
      FROM d LEFT JOIN s ON true;
$$;

COMMENT ON FUNCTION backfill_status(text) IS
'status, progress, rows/s and ETA of the newest pass of a backfill';

/*
 * backfill_pending: one row per declaration, plus ledger names that no
 * declaration owns (orphaned).
 */
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
    blocked_by            text)
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
    done AS (
        SELECT DISTINCT ON (l.ledger_name) l.*
          FROM backfill.ledger l
         WHERE l.status = 'completed'
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
             WHEN last.status = 'running'
                  AND backfill.unmet_requirement(d.name) IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM backfill.partition p
                                   WHERE p.run_id = last.run_id) THEN 'blocked'
             WHEN last.status = 'running' THEN 'running'
             WHEN last.status = 'failed' AND last.error_code = 'BF006' THEN 'stalled'
             WHEN last.status IN ('failed', 'cancelled') THEN 'failed'
             WHEN done.run_id IS NOT NULL AND done.checksum <> d.checksum THEN 'changed'
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
           backfill.unmet_requirement(d.name)
      FROM histories h
      JOIN backfill.declaration d ON d.name = h.declaration
      CROSS JOIN env
      LEFT JOIN last ON last.ledger_name = h.ledger_name
      LEFT JOIN done ON done.ledger_name = h.ledger_name
    UNION ALL
    SELECT last.ledger_name, 'orphaned', NULL, done.checksum, NULL, NULL,
           last.run_id, done.run_id, last.rows, NULL
      FROM last
      LEFT JOIN done ON done.ledger_name = last.ledger_name
     WHERE NOT EXISTS (SELECT 1 FROM backfill.declaration d
                        WHERE d.name = last.declaration)
    ORDER BY 1;
$$;

COMMENT ON FUNCTION backfill_pending() IS
'one row per declared backfill with its state; ledger names no declaration owns are orphaned';

CREATE FUNCTION backfill_pause(name text) RETURNS boolean
LANGUAGE C STRICT VOLATILE AS 'MODULE_PATHNAME', 'backfill_pause';
COMMENT ON FUNCTION backfill_pause(text) IS
'lanes stop at the next batch boundary; the pass keeps its checkpoints; true if it changed anything';

CREATE FUNCTION backfill_resume(name text) RETURNS boolean
LANGUAGE C STRICT VOLATILE AS 'MODULE_PATHNAME', 'backfill_resume';
COMMENT ON FUNCTION backfill_resume(text) IS
'let a paused pass run again; true if it changed anything';

CREATE FUNCTION backfill_cancel(name text) RETURNS boolean
LANGUAGE C STRICT VOLATILE AS 'MODULE_PATHNAME', 'backfill_cancel';
COMMENT ON FUNCTION backfill_cancel(text) IS
'end the running pass as cancelled (after in-flight batches commit); true if it changed anything';

CREATE FUNCTION backfill_retry(name text) RETURNS boolean
LANGUAGE C STRICT VOLATILE AS 'MODULE_PATHNAME', 'backfill_retry';
COMMENT ON FUNCTION backfill_retry(text) IS
'failed partitions back to pending: in the running pass, or in a new pass that resumes a failed one';

CREATE FUNCTION backfill_drop(name text) RETURNS boolean
LANGUAGE C STRICT VOLATILE AS 'MODULE_PATHNAME', 'backfill_drop';
COMMENT ON FUNCTION backfill_drop(text) IS
'withdraw a declaration that has written no rows; its ledger history stays';

/*
 * backfill_partitions: each partition of the newest pass of a backfill.
 */
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
    throttle      text)
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.run_id, p.part_no, p.lo, p.hi, p.cursor, p.state, p.rows, p.batches,
           p.holder_pid,
           p.holder_pid IS NOT NULL AND EXISTS (SELECT 1 FROM pg_stat_activity a
                                                 WHERE a.pid = p.holder_pid
                                                   AND a.backend_start = p.holder_start),
           p.renewed_at, p.claims, p.reclaims, p.failures, p.last_error,
           p.batch_size, p.last_batch_ms, p.throttle
      FROM backfill.partition p
     WHERE p.run_id = (SELECT max(l.run_id) FROM backfill.ledger l WHERE l.declaration = $1)
     ORDER BY p.part_no;
$$;
COMMENT ON FUNCTION backfill_partitions(text) IS
'the partitions of the newest pass: bounds, cursor, lease holder, claims, reclaims, failures';

/*
 * Helper run as the declaring role: the planner's estimate of rows to do.
 * It keeps the caller's search_path: the predicate is the user's SQL.
 */
CREATE FUNCTION backfill.estimate_rows(rel text, predicate text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
    plan json;
BEGIN
    EXECUTE format(E'EXPLAIN (FORMAT JSON) SELECT 1 FROM %s WHERE (\n%s\n)', rel, predicate)
       INTO plan;
    RETURN (plan -> 0 -> 'Plan' ->> 'Plan Rows')::float8::bigint;
END
$$;
