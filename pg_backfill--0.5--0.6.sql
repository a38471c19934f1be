/* pg_backfill--0.5--0.6.sql: the declarer's SQL only in processes of its own, and bounded */

\echo Use "ALTER EXTENSION pg_backfill UPDATE TO '0.6'" to load this file. \quit

/*
 * backfill_status returns a new column (watch_interval), so it is dropped
 * and created again below; what an operator granted or revoked on it is
 * kept for it (given back at the end of this script).
 */
SELECT pg_catalog.set_config('pg_backfill.upgrade_acl_status', coalesce(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc p WHERE p.oid = 'backfill_status(text)'::pg_catalog.regprocedure;

/*
 * Catch-up passes back off (issue 23).  A watched backfill's interval in
 * force, in milliseconds: its watch interval doubled for each catch-up
 * pass in a row that completed healing no row, up to a day (never below
 * the declared interval).  The run is counted from the newest catch-up
 * pass that healed rows and from the declaration's last change (a
 * re-declaration starts it again).  A predicate that matches only where
 * the scheduler probes (application_name, say) used to make a new pass at
 * every interval, each healing nothing: now they come ever further apart.
 * The scheduler probes at this interval; backfill_status shows it.  NULL
 * for a backfill without a watch.  Counting stops at 32 passes: 2^27 ms is
 * past a day already.
 */
CREATE FUNCTION backfill.watch_interval_ms(name text)
RETURNS bigint
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT greatest(d.watch_ms::bigint,
                    least(d.watch_ms::bigint << (SELECT count(*)::integer FROM (
                              SELECT 1 FROM backfill.ledger l
                               WHERE l.ledger_name = d.name AND l.watch
                                 AND l.status = 'completed' AND l.rows = 0
                                 AND l.started_at >= d.updated_at
                                 AND l.run_id > coalesce((SELECT max(h.run_id) FROM backfill.ledger h
                                                           WHERE h.ledger_name = d.name AND h.watch
                                                             AND h.rows > 0), 0)
                               LIMIT 32) empty),
                          86400000::bigint))
      FROM backfill.declaration d
     WHERE d.name = $1 AND d.watch_ms IS NOT NULL
$$;
COMMENT ON FUNCTION backfill.watch_interval_ms(text) IS
'the watch interval in force of a backfill, in ms: doubled by each catch-up pass in a row that healed no row, up to a day';

/*
 * backfill_status: as 0.5 made it, and the watch's interval in force.
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
    beyond_bound  bigint,
    watch_interval interval)
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
           s.bound, s.beyond,
           make_interval(secs => backfill.watch_interval_ms($1) / 1000.0)
      FROM d LEFT JOIN s ON true CROSS JOIN w;
$$;
COMMENT ON FUNCTION backfill_status(text) IS
'status, progress, rows/s and ETA of the newest pass of a backfill, its direction, bound and watch (with the interval in force)';

/* ---- privileges of backfill_status, created again (see the top) ---- */

DO $$
DECLARE
    item record;
    acl pg_catalog.aclitem[];
BEGIN
    acl := NULLIF(pg_catalog.current_setting('pg_backfill.upgrade_acl_status', true), '');
    IF acl IS NOT NULL THEN
        REVOKE ALL ON FUNCTION backfill_status(text) FROM PUBLIC;
        FOR item IN SELECT a.grantee, a.is_grantable FROM pg_catalog.aclexplode(acl) a
                     WHERE a.privilege_type = 'EXECUTE'
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION backfill_status(text) TO %s%s',
                CASE WHEN item.grantee = 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
                CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END IF;
END
$$;

/* ==== issue 23 points 2, 4, 6: reports read the catalogs only; probes in workers ==== */

/*
 * backfill_pending evaluated each declarer's predicate (a drift probe) and
 * read the migrations table in the caller's session: a superuser's
 * monitoring scrape ran every role's SQL, next to its cursors, and waited
 * for every one of them.  From 0.6 a report reads the catalogs only.  A
 * probe runs in a "pg_backfill probe" background worker, logged in as the
 * backfill's run_as role, under backfill.probe_lock_timeout (1 s) and
 * backfill.probe_timeout (60 s), started by the scheduler (a watch that is
 * due; the backfill a queued pass requires) or by backfill_probe(name);
 * each records its answer here, with its time, and backfill_pending shows
 * the newest (or, before any probe after the pass, what the pass's own
 * end found beyond its bound, run.beyond).
 */
SELECT pg_catalog.set_config('pg_backfill.upgrade_acl_pending', coalesce(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc p WHERE p.oid = 'backfill_pending()'::pg_catalog.regprocedure;

CREATE TABLE backfill.probe (
    declaration      text PRIMARY KEY REFERENCES backfill.declaration (name)
                     ON DELETE CASCADE ON UPDATE CASCADE,
    run_id           bigint,                 -- the backfill's newest pass when it was taken
    kind             text NOT NULL,          -- asked (backfill_probe), watch, required
    taken_at         timestamptz NOT NULL,
    found            bigint,                 -- rows its predicate matched (at most 1,000); NULL: failed
    error_code       text,                   -- the SQLSTATE that ended it (lock or statement timeout...)
    error_message    text,
    probes           bigint NOT NULL DEFAULT 1
);
REVOKE ALL ON backfill.probe FROM PUBLIC;
GRANT SELECT ON backfill.probe TO PUBLIC;
ALTER TABLE backfill.probe ENABLE ROW LEVEL SECURITY;
CREATE POLICY probe_member ON backfill.probe FOR SELECT
    USING (EXISTS (SELECT 1 FROM backfill.declaration d WHERE d.name = probe.declaration));
COMMENT ON TABLE backfill.probe IS
'the newest drift probe of each backfill, taken by a probe worker as its role: what it found, when, or why it failed';

/*
 * The migration a backfill requires, as a probe worker last read it (the
 * migrations table, as the declaring role): the scheduler starts one for
 * a queued pass whose declaration has requires, and lets the pass start
 * once one taken after it was enqueued found the migration applied;
 * backfill_probe and the drift probes read it too.  The scheduler's own
 * look reads only this.
 */
CREATE TABLE backfill.requirement (
    declaration      text PRIMARY KEY REFERENCES backfill.declaration (name)
                     ON DELETE CASCADE ON UPDATE CASCADE,
    unmet            text,                   -- why the migration is not applied; NULL: applied
    checked_at       timestamptz NOT NULL
);
REVOKE ALL ON backfill.requirement FROM PUBLIC;
GRANT SELECT ON backfill.requirement TO PUBLIC;
ALTER TABLE backfill.requirement ENABLE ROW LEVEL SECURITY;
CREATE POLICY requirement_member ON backfill.requirement FOR SELECT
    USING (EXISTS (SELECT 1 FROM backfill.declaration d WHERE d.name = requirement.declaration));

-- evaluated the predicate in the caller's session: replaced by backfill_probe
DROP FUNCTION backfill.drift_probe(text);

CREATE FUNCTION backfill_probe(name text, timeout interval DEFAULT '1 minute')
RETURNS bigint
LANGUAGE C VOLATILE STRICT
AS 'MODULE_PATHNAME', 'backfill_probe';
COMMENT ON FUNCTION backfill_probe(text, interval) IS
'probe a completed table backfill for drift in a worker as its role; waits at most timeout; returns the rows found (at most 1,000)';

/*
 * The part of backfill.unmet_requirement that reads the catalogs only: a
 * required backfill that is not completed (or not the declarer's to
 * require).
 */
CREATE FUNCTION backfill.unmet_required_backfill(p_name text) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d backfill.declaration;
    required_owner oid;
    last_status text;
    last_direction text;
BEGIN
    SELECT * INTO d FROM backfill.declaration WHERE name = p_name;
    IF NOT FOUND OR d.requires_backfill IS NULL THEN
        RETURN NULL;
    END IF;
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
    RETURN NULL;
END
$$;

-- the migration (read as the declaring role, asrole.c), then the required backfill
CREATE OR REPLACE FUNCTION backfill.unmet_requirement(p_name text) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d backfill.declaration;
BEGIN
    SELECT * INTO d FROM backfill.declaration WHERE name = p_name;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN coalesce(CASE WHEN d.requires IS NOT NULL
                         THEN backfill.migration_unapplied(d.requires, d.owner::oid) END,
                    backfill.unmet_required_backfill(p_name));
END
$$;

/*
 * What backfill_pending shows as blocked_by, from the catalogs only: the
 * migration as the newest probe found it (none yet: not known, NULL; a
 * pass of the backfill completed since: it was applied when that pass
 * started), then the required backfill.
 */
CREATE FUNCTION backfill.recorded_requirement(p_name text) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT q.unmet FROM backfill.requirement q
                       JOIN backfill.declaration d ON d.name = q.declaration
                      WHERE q.declaration = $1 AND d.requires IS NOT NULL
                        AND NOT EXISTS (SELECT 1 FROM backfill.ledger l
                                         WHERE l.declaration = $1
                                           AND l.status IN ('completed', 'completed_with_failures')
                                           AND l.finished_at > q.checked_at)),
                    backfill.unmet_required_backfill($1));
$$;

/*
 * backfill_pending: as 0.5 made it, from the catalogs only.  drift and
 * drift_rows come from the newest probe taken after the completed pass
 * (backfill.probe: the watch, backfill_probe, the check before a pass that
 * requires it), with its time (drift_probed_at) and its error
 * (probe_error); before any, from what matched beyond the pass's bound at
 * its end (at finished_at).  blocked_by names the migration as the newest
 * probe found it, then the required backfill.  Nothing here evaluates a
 * declarer's SQL: its cost does not grow with the tables.
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
    drift_rows            bigint,
    drift_probed_at       timestamptz,
    probe_error           text)
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
                  AND backfill.recorded_requirement(d.name) IS NOT NULL
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
             WHEN backfill.recorded_requirement(d.name) IS NOT NULL THEN 'blocked'
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
           backfill.recorded_requirement(d.name),
           last.direction,
           CASE WHEN dp.n >= 1000 THEN 'at least 1,000 rows'
                WHEN dp.n > 0 THEN dp.n || ' rows' END,
           dp.n,
           dp.at,
           dp.error
      FROM histories h
      JOIN backfill.declaration d ON d.name = h.declaration
      CROSS JOIN env
      LEFT JOIN last ON last.ledger_name = h.ledger_name
      LEFT JOIN done ON done.ledger_name = h.ledger_name
      -- a completed plain table backfill: did the newest probe after its pass find rows
      -- (backfill.probe), or, before any, what matched beyond its bound at its end?
      LEFT JOIN LATERAL (
          SELECT CASE WHEN pr.taken_at IS NOT NULL THEN pr.found ELSE r.beyond END AS n,
                 coalesce(pr.taken_at, done.finished_at) AS at,
                 pr.error_code || ': ' || pr.error_message AS error
            FROM (SELECT 1) one
            LEFT JOIN backfill.run r ON r.run_id = done.run_id
            LEFT JOIN backfill.probe pr ON pr.declaration = d.name
                  AND pr.run_id = done.run_id AND pr.taken_at >= done.finished_at
           WHERE last.status = 'completed' AND last.direction = 'forward'
             AND last.run_id = done.run_id AND done.checksum = d.checksum
             AND d.scope IS NULL AND d.relid IS NOT NULL
             AND (d.environments IS NULL OR env.e = ANY (d.environments))) dp ON true
    UNION ALL
    SELECT last.ledger_name, 'orphaned', NULL, done.checksum, NULL, NULL,
           last.run_id, done.run_id, last.rows, NULL, last.direction, NULL, NULL, NULL, NULL
      FROM last
      LEFT JOIN done ON done.ledger_name = last.ledger_name
     WHERE NOT EXISTS (SELECT 1 FROM backfill.declaration d
                        WHERE d.name = last.declaration)
    ORDER BY 1;
$$;
COMMENT ON FUNCTION backfill_pending() IS
'one row per declared backfill with its state, from the catalogs only (drift as recorded by probes); ledger names no declaration owns are orphaned';

/* ---- privileges of backfill_pending, created again (see the top of this block) ---- */

DO $$
DECLARE
    item record;
    acl pg_catalog.aclitem[];
BEGIN
    acl := NULLIF(pg_catalog.current_setting('pg_backfill.upgrade_acl_pending', true), '');
    IF acl IS NOT NULL THEN
        REVOKE ALL ON FUNCTION backfill_pending() FROM PUBLIC;
        FOR item IN SELECT a.grantee, a.is_grantable FROM pg_catalog.aclexplode(acl) a
                     WHERE a.privilege_type = 'EXECUTE'
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION backfill_pending() TO %s%s',
                CASE WHEN item.grantee = 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
                CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END IF;
END
$$;
