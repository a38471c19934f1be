/* pg_backfill--0.5--0.6.sql: safe by default for the people who use it (issue 24) */

\echo Use "ALTER EXTENSION pg_backfill UPDATE TO '0.6'" to load this file. \quit

/* ---- monitoring without write power (issue 24 B) ---- */

/*
 * Members of pg_monitor read every role's backfills: declarations and
 * ledger rows (a second policy beside the owner's members'), and through
 * them runs, partitions, failed rows and watches, whose policies ask the
 * ledger or the declaration.  Reading is all: every control still asks
 * for membership in the owner, and no report evaluates a declarer's SQL
 * for them (backfill.drift_probe reports the watch's recorded probe to a
 * member of pg_monitor who is not one of the owner's; unmet_requirement
 * reads no migrations table as an owner the caller cannot act for).
 */
CREATE POLICY declaration_monitor ON backfill.declaration FOR SELECT
    USING (pg_catalog.pg_has_role('pg_monitor', 'USAGE'));
CREATE POLICY ledger_monitor ON backfill.ledger FOR SELECT
    USING (pg_catalog.pg_has_role('pg_monitor', 'USAGE'));

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
    -- the migrations table is read as the owner: only for whoever may act for it
    IF d.requires IS NOT NULL AND pg_has_role(d.owner::oid, 'USAGE') THEN
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

/*
 * The outbox's depth per topic and state, without its payloads: for
 * members of pg_monitor every topic; for others the topics whose sink
 * they set (a member of its role) or were granted, and the messages they
 * emitted.  The view reads backfill.outbox as its owner (no one else
 * may); current_user inside it is still the reader.
 */
CREATE VIEW backfill_outbox_topics WITH (security_barrier = true) AS
    SELECT o.topic, o.state, pg_catalog.count(*)::bigint AS messages,
           pg_catalog.max(o.attempts)::bigint AS max_attempts,
           pg_catalog.min(o.created_at) AS oldest_created_at
      FROM backfill.outbox o
     WHERE pg_catalog.pg_has_role('pg_monitor', 'USAGE')
        OR EXISTS (SELECT 1 FROM backfill.outbox_sink s
                    WHERE s.topic = o.topic AND pg_catalog.pg_has_role(s.run_as::oid, 'USAGE'))
        OR EXISTS (SELECT 1 FROM backfill.outbox_grant g
                    WHERE g.topic = o.topic AND pg_catalog.pg_has_role(g.grantee::oid, 'USAGE'))
        OR (o.emitted_by IS NOT NULL AND pg_catalog.pg_has_role(o.emitted_by::oid, 'USAGE'))
     GROUP BY o.topic, o.state;
GRANT SELECT ON backfill_outbox_topics TO PUBLIC;
COMMENT ON VIEW backfill_outbox_topics IS
'outbox messages per topic and state (no payloads): every topic for pg_monitor, else the reader''s own';

/* ---- the rate is the pass's (issue 24 A) ---- */

/*
 * backfill_status shows the rate its lanes share: at most that many
 * batches a second for the pass, however many lanes work it.  A new
 * column: the function is dropped and created again, and what an
 * operator granted or revoked on it is given back.
 */
SELECT pg_catalog.set_config('pg_backfill.upgrade_acl_status', coalesce(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc p WHERE p.oid = 'backfill_status(text)'::pg_catalog.regprocedure;
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
    rate          double precision)
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
           (SELECT dd.rate FROM backfill.declaration dd WHERE dd.name = $1)
      FROM d LEFT JOIN s ON true CROSS JOIN w;
$$;
COMMENT ON FUNCTION backfill_status(text) IS
'status, progress, rows/s and ETA of the newest pass of a backfill, its direction, bound, watch, and the rate its lanes share';

DO $$
DECLARE
    acl pg_catalog.aclitem[] :=
        NULLIF(pg_catalog.current_setting('pg_backfill.upgrade_acl_status', true), '');
    item record;
BEGIN
    IF acl IS NULL THEN
        RETURN;
    END IF;
    REVOKE ALL ON FUNCTION backfill_status(text) FROM PUBLIC;
    FOR item IN SELECT a.grantee, a.is_grantable FROM pg_catalog.aclexplode(acl) a
                 WHERE a.privilege_type = 'EXECUTE'
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION backfill_status(text) TO %s%s',
            CASE WHEN item.grantee = 0 THEN 'PUBLIC'
                 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
            CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;
