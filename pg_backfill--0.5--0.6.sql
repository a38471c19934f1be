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
