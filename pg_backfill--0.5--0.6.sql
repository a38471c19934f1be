/* pg_backfill--0.5--0.6.sql: the declarer's SQL only in processes of its own, and bounded
 * (issue 23); safe by default for the people who use it (issue 24) */

\echo Use "ALTER EXTENSION pg_backfill UPDATE TO '0.6'" to load this file. \quit

/*
 * backfill_status returns new columns (watch_interval, rate), so it is
 * dropped and created again below; what an operator granted or revoked on
 * it is kept for it (given back at the end of this script).
 */
SELECT pg_catalog.set_config('pg_backfill.upgrade_acl_status', coalesce(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc p WHERE p.oid = 'backfill_status(text)'::pg_catalog.regprocedure;

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

/* ---- catch-up passes back off (issue 23) ---- */

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
 * backfill_status: as 0.5 made it, the watch's interval in force, and the
 * rate the pass's lanes share (at most that many batches a second for the
 * pass, however many lanes work it: issue 24).
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
    watch_interval interval,
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
           make_interval(secs => backfill.watch_interval_ms($1) / 1000.0),
           (SELECT dd.rate FROM backfill.declaration dd WHERE dd.name = $1)
      FROM d LEFT JOIN s ON true CROSS JOIN w;
$$;
COMMENT ON FUNCTION backfill_status(text) IS
'status, progress, rows/s and ETA of the newest pass of a backfill, its direction, bound, watch (with the interval in force), and the rate its lanes share';

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

/* ---- a dropped table fails a pass with 42P01, whoever finds out ---- */

/*
 * backfill.identity_problem as 0.5 made it, but a table that no longer
 * exists at all (dropped, not renamed or replaced by another of its name)
 * is 42P01, undefined_table: the code its lane's next batch fails with.
 * Which process saw the drop first (the lane, or the scheduler failing
 * a pass that cannot start) no longer changes the pass's error code.
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
            -- dropped: the error a lane's batch meets then too (undefined_table)
            code := CASE WHEN found_relid IS NULL
                          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                                           WHERE c.oid = p_relid::oid)
                         THEN '42P01' ELSE 'BF001' END;
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

/* ---- the engine writes the batch statement; hand-written ones guard themselves (issue 24) ---- */

/*
 * set => 'c = a * 2' declares an UPDATE of the relation, delete => true a
 * DELETE, whose WHERE clause the engine writes (the batch's key range AND
 * the predicate); the statement written is stored as the action, which
 * the checksum covers, so neither new column enters it.  guard => false
 * lets a hand-written UPDATE or DELETE of the relation leave the predicate
 * out.  A new argument is a new signature: the function of 0.5 is dropped
 * and created again with the new options last (with issue 27's
 * max_wal_rate, below), its privileges carried over as in the update to 0.5.
 */
ALTER TABLE backfill.declaration
    ADD COLUMN action_set text,
    ADD COLUMN action_delete boolean NOT NULL DEFAULT false,
    ADD COLUMN guard boolean NOT NULL DEFAULT true;

/* the three arguments come with max_wal_rate's below: one new signature */

/*
 * The rows a pass has to do when the statistics cannot say (a column of
 * the predicate added since the last ANALYZE): TABLESAMPLE SYSTEM of at most
 * max_pages pages of the table's leaves, or a count of a table no larger.
 * Run by the lanes as the declaring role (engine/estimate.c), as
 * estimate_rows is.
 */
CREATE FUNCTION backfill.estimate_rows_sampled(rel regclass, predicate text, max_pages integer,
                                               OUT estimate bigint, OUT percent double precision)
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
    pages double precision;
    found bigint;
BEGIN
    -- a partitioned table's leaves (pg_partition_tree lists none for a plain table)
    SELECT COALESCE(pg_catalog.sum(pg_catalog.pg_relation_size(t.relid)),
                    pg_catalog.pg_relation_size(rel))
           / pg_catalog.current_setting('block_size')::pg_catalog.float8
      INTO pages
      FROM pg_catalog.pg_partition_tree(rel) t WHERE t.isleaf;
    percent := CASE WHEN pages <= max_pages THEN 100 ELSE 100 * max_pages / pages END;
    IF percent >= 100 THEN
        EXECUTE pg_catalog.format(E'SELECT pg_catalog.count(*) FROM %s WHERE (\n%s\n)',
                                  rel, predicate) INTO found;
        estimate := found;
    ELSE
        EXECUTE pg_catalog.format(E'SELECT pg_catalog.count(*) FROM %s TABLESAMPLE SYSTEM (%s) WHERE (\n%s\n)',
                                  rel, percent, predicate) INTO found;
        estimate := pg_catalog.round(found * 100 / percent)::bigint;
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

/* ==== pacing on what DBAs fear (issue 27): a WAL budget, one switch for a role ==== */

/*
 * max_wal_rate: WAL bytes per second the pass's lanes together may write
 * (NULL: no budget of its own; backfill.max_wal_rate bounds every lane of
 * the cluster).  Tuning, not part of the checksum: lanes follow a new one
 * at their next checkpoint.
 */
ALTER TABLE backfill.declaration ADD COLUMN max_wal_rate bigint
    CHECK (max_wal_rate IS NULL OR max_wal_rate >= 1024);

/*
 * backfill_declare of 0.5 gains set, delete, guard (issue 24, above) and
 * max_wal_rate, last: dropped and created again once, its privileges
 * carried over
 */
SELECT pg_catalog.set_config('pg_backfill.upgrade_declare_acl', coalesce(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc p
 WHERE p.oid = 'backfill_declare(text, text, text, text, text, integer, double precision,
                integer, integer, interval, text[], interval, interval, interval, interval,
                integer, integer, jsonb, text, text, text, text, text, text, jsonb,
                text, boolean, text, text, integer, interval)'::pg_catalog.regprocedure;

DROP FUNCTION backfill_declare(text, text, text, text, text, integer, double precision,
                               integer, integer, interval, text[], interval, interval,
                               interval, interval, integer, integer, jsonb, text, text,
                               text, text, text, text, jsonb, text, boolean, text, text,
                               integer, interval);

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
    watch            interval DEFAULT NULL,
    set              text DEFAULT NULL,
    delete           boolean DEFAULT false,
    guard            boolean DEFAULT true,
    max_wal_rate     text DEFAULT NULL)
RETURNS text
LANGUAGE C CALLED ON NULL INPUT VOLATILE
AS 'MODULE_PATHNAME', 'backfill_declare';

COMMENT ON FUNCTION backfill_declare(text, text, text, text, text, integer, double precision,
                                     integer, integer, interval, text[], interval, interval,
                                     interval, interval, integer, integer, jsonb, text, text,
                                     text, text, text, text, jsonb, text, boolean, text, text,
                                     integer, interval, text, boolean, boolean, text) IS
'declare (or update) a backfill; returns the checksum of its definition';

DO $$
DECLARE
    acl pg_catalog.aclitem[] :=
        NULLIF(pg_catalog.current_setting('pg_backfill.upgrade_declare_acl', true), '');
    fn text := 'backfill_declare(text, text, text, text, text, integer, double precision, '
               'integer, integer, interval, text[], interval, interval, interval, interval, '
               'integer, integer, jsonb, text, text, text, text, text, text, jsonb, text, boolean, '
               'text, text, integer, interval, text, boolean, boolean, text)';
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

/*
 * Roles paused for all (backfill_pause_all): every lane of a backfill the
 * role owns or runs as holds at its batch boundary while its row is here.
 * A table, so that the pause survives restarts and failovers.  Read by
 * everyone (the role's members see why their lanes hold); written only
 * through the two functions, as the extension's owner.
 */
CREATE TABLE backfill.paused_role (
    role       pg_catalog.regrole PRIMARY KEY,
    paused_by  pg_catalog.regrole NOT NULL,
    paused_at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);
SELECT pg_catalog.pg_extension_config_dump('backfill.paused_role', '');
GRANT SELECT ON backfill.paused_role TO PUBLIC;

CREATE FUNCTION backfill_pause_all(role text) RETURNS boolean
LANGUAGE C CALLED ON NULL INPUT VOLATILE
AS 'MODULE_PATHNAME', 'backfill_pause_all';
COMMENT ON FUNCTION backfill_pause_all(text) IS
'hold every lane of the backfills a role owns or runs as at its batch boundary (persisted); true if it was not held';

CREATE FUNCTION backfill_resume_all(role text) RETURNS boolean
LANGUAGE C CALLED ON NULL INPUT VOLATILE
AS 'MODULE_PATHNAME', 'backfill_resume_all';
COMMENT ON FUNCTION backfill_resume_all(text) IS
'lift backfill_pause_all for a role; true if it was held';

/*
 * A Citus shard split mid-pass (issue 30): a shard's partition keeps its
 * shard's hash range (shard_min, shard_max), so that when Citus splits the
 * shard the lane finds the shards that now cover that range and gives each
 * a partition of its own (split_from: the partition it goes on from, at its
 * checkpoint's key).  NULL for any other partition.
 */
ALTER TABLE backfill.partition
    ADD COLUMN shard_min integer,
    ADD COLUMN shard_max integer,
    ADD COLUMN split_from integer;

/* ==== finalize leaves no row behind; a deploy check; the end of a backfill's life (issue 24, points 3 to 5) ==== */

/*
 * A retired backfill (backfill_retire): its work is done for good (a
 * completed forward pass with its checksum, run_id), its columns may be
 * gone.  Its declaration and ledger stay; runs, retries and reverts of it
 * are refused (BF041), its watch stops, backfill_pending shows it retired.
 */
CREATE TABLE backfill.retired (
    declaration      text PRIMARY KEY REFERENCES backfill.declaration (name)
                     ON DELETE CASCADE ON UPDATE CASCADE,
    run_id           bigint NOT NULL,        -- the completed forward pass whose work it keeps
    retired_at       timestamptz NOT NULL,
    retired_by       name NOT NULL           -- the role that called backfill_retire
);
REVOKE ALL ON backfill.retired FROM PUBLIC;
GRANT SELECT ON backfill.retired TO PUBLIC;
-- dumped with the declarations and the ledger: a restored backfill stays retired
SELECT pg_catalog.pg_extension_config_dump('backfill.retired', '');
ALTER TABLE backfill.retired ENABLE ROW LEVEL SECURITY;
CREATE POLICY retired_member ON backfill.retired FOR SELECT
    USING (EXISTS (SELECT 1 FROM backfill.declaration d WHERE d.name = retired.declaration));
COMMENT ON TABLE backfill.retired IS
'backfills retired by backfill_retire: their work done for good; runs, retries and reverts refused (BF041)';

CREATE FUNCTION backfill_retire(name text) RETURNS bigint
LANGUAGE C VOLATILE STRICT
AS 'MODULE_PATHNAME', 'backfill_retire';
COMMENT ON FUNCTION backfill_retire(text) IS
'end a completed backfill''s life: its ledger stays, later runs, retries and reverts are refused (BF041); returns the completed run it keeps';

-- not STRICT: a NULL name must raise (BF012), never pass a deploy check as NULL
CREATE FUNCTION backfill_ensure_complete(name text) RETURNS text
LANGUAGE C VOLATILE CALLED ON NULL INPUT
AS 'MODULE_PATHNAME', 'backfill_ensure_complete';
COMMENT ON FUNCTION backfill_ensure_complete(text) IS
'a deploy check for a migration''s transaction, from the catalogs only: raises unless the newest pass completed with the current checksum and the newest recorded count after it found no row left';

COMMENT ON PROCEDURE backfill_finalize(text, interval) IS
'returns once the backfill is complete with its current definition and a count after its newest pass found no row matching the predicate (rows that drifted are worked by a catch-up pass first); waits at most timeout';

/* backfill_pending: a retired backfill shows as retired (its privileges kept: same signature) */
CREATE OR REPLACE FUNCTION backfill_pending()
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
             WHEN EXISTS (SELECT 1 FROM backfill.retired rt WHERE rt.declaration = d.name)
                  THEN 'retired'
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
             AND NOT EXISTS (SELECT 1 FROM backfill.retired rt WHERE rt.declaration = d.name)
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

/* ==== issue 30 (a tester's findings 4 and 5): a failed pass's partitions end; shard estimates from samples ==== */

/*
 * The scheduler fails a running pass whose declaration is gone or no longer
 * names its table and roles (alter_distributed_table replaces a table under
 * its name).  As every other end of a pass, its open partitions end too
 * (cancelled), and the scheduler tells the pass's lanes to stop at the
 * commit (scheduler.c): no lane is left retrying what cannot work.
 */
CREATE OR REPLACE FUNCTION backfill.fail_unbound_passes() RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer;
BEGIN
    WITH bad AS (
        SELECT l.run_id,
               coalesce(p.code, 'BF007') AS code,
               coalesce(p.message || ': ' || p.detail,
                        'the declaration was dropped while the pass was running') AS message
          FROM backfill.ledger l
          JOIN backfill.run r ON r.run_id = l.run_id
          LEFT JOIN backfill.declaration d ON d.name = l.declaration
          LEFT JOIN LATERAL backfill.identity_problem(d.name, d.relid, d.relation, d.owner,
                                                      d.owner_name, d.run_as, d.run_as_name) p
                 ON d.name IS NOT NULL
         WHERE l.status = 'running' AND NOT r.paused   -- a paused pass gets no lane anyway
           AND (d.name IS NULL OR p.code IS NOT NULL)
           FOR UPDATE OF l SKIP LOCKED),
    ended AS (
        UPDATE backfill.ledger l
           SET status = 'failed', finished_at = now(), error_code = bad.code,
               error_message = bad.message,
               rows = (SELECT coalesce(sum(q.rows), 0) FROM backfill.partition q
                        WHERE q.run_id = l.run_id),
               batches = (SELECT coalesce(sum(q.batches), 0) FROM backfill.partition q
                           WHERE q.run_id = l.run_id)
          FROM bad
         WHERE l.run_id = bad.run_id
        RETURNING l.run_id, bad.message)
    UPDATE backfill.run r SET phase = 'done', last_error = ended.message, updated_at = now()
      FROM ended WHERE r.run_id = ended.run_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        UPDATE backfill.partition p SET state = 'cancelled', finished_at = now()
          FROM backfill.ledger l
         WHERE l.run_id = p.run_id AND l.status = 'failed' AND l.finished_at = now()
           AND p.state IN ('pending', 'running');
    END IF;
    RETURN n;
END
$$;
REVOKE ALL ON FUNCTION backfill.fail_unbound_passes() FROM PUBLIC;

/*
 * The rows a predicate matches in a table (a Citus shard, on its node):
 * the planner's estimate while the table's statistics are fresh, else a
 * count over a bounded sample of its pages (estimate_rows_sampled), and
 * sampled says so.  Stale: never analyzed, or more rows changed since its
 * last ANALYZE than a tenth of the rows it had then (a pass that has just
 * written every row leaves statistics by which the next pass's predicate
 * matches about 1 row a shard).
 */
CREATE FUNCTION backfill.estimate_rows_checked(rel regclass, predicate text, max_pages integer,
                                               OUT estimate bigint, OUT sampled boolean)
LANGUAGE plpgsql VOLATILE STRICT
AS $$
BEGIN
    SELECT s.relid IS NULL OR (s.last_analyze IS NULL AND s.last_autoanalyze IS NULL)
           OR s.n_mod_since_analyze OPERATOR(pg_catalog.>)
              (GREATEST(c.reltuples, 0) OPERATOR(pg_catalog./) 10)
      INTO sampled
      FROM pg_catalog.pg_class c
      LEFT JOIN pg_catalog.pg_stat_all_tables s ON s.relid OPERATOR(pg_catalog.=) c.oid
     WHERE c.oid OPERATOR(pg_catalog.=) rel;
    sampled := coalesce(sampled, true);
    IF sampled THEN
        SELECT e.estimate INTO estimate
          FROM backfill.estimate_rows_sampled(rel, predicate, max_pages) e;
    ELSE
        estimate := backfill.estimate_rows(rel::pg_catalog.text, predicate);
    END IF;
END
$$;

/*
 * A Citus distributed table's rows to do: each shard's estimate on its node
 * (estimate_rows_checked), summed; at most 1,000 pages sampled in all (at
 * least 16 a shard); sampled counts the shards whose statistics were
 * missing or stale.  A worker with an older pg_backfill answers with the
 * planner's estimate as before.
 */
DROP FUNCTION backfill.citus_estimate_rows(regclass, text);
CREATE FUNCTION backfill.citus_estimate_rows(rel regclass, predicate text,
                                             OUT estimate bigint, OUT shards integer,
                                             OUT sampled integer)
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
    failed integer;
    pages integer;
    quoted text := pg_catalog.replace(pg_catalog.quote_literal(predicate), '%', '%%');
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension e WHERE e.extname OPERATOR(pg_catalog.=) 'citus') THEN
        RETURN;
    END IF;
    EXECUTE 'SELECT GREATEST(16, (1000 OPERATOR(pg_catalog./)'
            '       GREATEST(pg_catalog.count(*), 1)))::pg_catalog.int4'
            '  FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid OPERATOR(pg_catalog.=) $1'
       INTO pages USING rel;
    -- run_command_on_shards formats the command with the shard's name: %L
    -- is that name as a literal, and the predicate's own % are doubled
    BEGIN
        EXECUTE 'SELECT pg_catalog.sum(pg_catalog.split_part(r.result, '':'', 1)::pg_catalog.int8)'
                '         FILTER (WHERE r.success)::pg_catalog.int8,'
                '       pg_catalog.count(*)::pg_catalog.int4,'
                '       pg_catalog.count(*) FILTER (WHERE NOT r.success)::pg_catalog.int4,'
                '       pg_catalog.count(*) FILTER (WHERE r.success'
                '         AND pg_catalog.split_part(r.result, '':'', 2) OPERATOR(pg_catalog.=) ''true'')::pg_catalog.int4'
                '  FROM pg_catalog.run_command_on_shards($1, $2) r'
           INTO estimate, shards, failed, sampled
          USING rel, 'SELECT e.estimate OPERATOR(pg_catalog.||) '':'' OPERATOR(pg_catalog.||) e.sampled'
                     ' FROM backfill.estimate_rows_checked(%L, '
                     OPERATOR(pg_catalog.||) quoted OPERATOR(pg_catalog.||) ', '
                     OPERATOR(pg_catalog.||) pages OPERATOR(pg_catalog.||) ') e';
    EXCEPTION WHEN OTHERS THEN
        failed := 1;
    END;
    IF failed IS NULL OR failed OPERATOR(pg_catalog.>) 0 THEN
        sampled := 0;
        EXECUTE 'SELECT pg_catalog.sum(r.result::pg_catalog.int8) FILTER (WHERE r.success)::pg_catalog.int8,'
                '       pg_catalog.count(*)::pg_catalog.int4,'
                '       pg_catalog.count(*) FILTER (WHERE NOT r.success)::pg_catalog.int4'
                '  FROM pg_catalog.run_command_on_shards($1, $2) r'
           INTO estimate, shards, failed
          USING rel, 'SELECT backfill.estimate_rows(%L, ' OPERATOR(pg_catalog.||) quoted
                     OPERATOR(pg_catalog.||) ')';
    END IF;
    IF failed OPERATOR(pg_catalog.>) 0 OR shards OPERATOR(pg_catalog.=) 0 THEN
        estimate := NULL;
    END IF;
EXCEPTION WHEN OTHERS THEN
    estimate := NULL;
    shards := NULL;
    sampled := NULL;
END
$$;

/* ---- issue 28: a rehearsal that rolls back (point 1), a batch history (point 3) ---- */

/*
 * The last backfill.batch_history batches of each pass (100 by default; 0
 * records none): written by the batch's own transaction, with its
 * checkpoint, so it is exactly as durable as the checkpoint; older rows of
 * the pass are pruned in the same transaction every 16th batch of a lane
 * (history.c), and backfill_batches shows the newest batch_history.  seq
 * orders a pass's batches
 * (one sequence for every pass).  Read by whoever may read the pass's
 * ledger row (the owner's members, pg_monitor).
 */
CREATE TABLE backfill.batch (
    run_id      bigint NOT NULL,
    seq         bigint NOT NULL,
    part_no     integer NOT NULL,
    first_key   text,                    -- the batch's first key (a page: the cursor it was asked after)
    last_key    text,                    -- its last key: the cursor its checkpoint wrote
    rows        bigint NOT NULL,
    ms          double precision NOT NULL,   -- key scan and action
    wal_bytes   bigint NOT NULL,             -- WAL its lane wrote since the last batch
    batch_size  integer NOT NULL,
    throttle    text,                        -- why the lane held back before it, or NULL
    at          timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (run_id, seq)
);
CREATE SEQUENCE backfill.batch_seq;
ALTER TABLE backfill.batch ALTER COLUMN seq SET DEFAULT pg_catalog.nextval('backfill.batch_seq');
REVOKE ALL ON backfill.batch FROM PUBLIC;
GRANT SELECT ON backfill.batch TO PUBLIC;
ALTER TABLE backfill.batch ENABLE ROW LEVEL SECURITY;
CREATE POLICY batch_member ON backfill.batch FOR SELECT
    USING (EXISTS (SELECT 1 FROM backfill.ledger l WHERE l.run_id = batch.run_id));
COMMENT ON TABLE backfill.batch IS
'the last backfill.batch_history batches of each pass: partition, key range, rows, ms, WAL, batch size, throttle';

CREATE FUNCTION backfill_batches(name text, run_id bigint DEFAULT NULL)
RETURNS TABLE (
    run_id      bigint,
    seq         bigint,
    part_no     integer,
    first_key   text,
    last_key    text,
    rows        bigint,
    ms          double precision,
    wal_bytes   bigint,
    batch_size  integer,
    throttle    text,
    at          timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH r AS (
        SELECT coalesce($2, (SELECT max(l.run_id) FROM backfill.ledger l
                              WHERE l.declaration = $1)) AS run_id
    ),
    k AS (
        SELECT b.* FROM backfill.batch b, r
         WHERE b.run_id = r.run_id
           AND EXISTS (SELECT 1 FROM backfill.ledger l
                        WHERE l.run_id = b.run_id AND l.declaration = $1)
         ORDER BY b.seq DESC
         LIMIT (SELECT NULLIF(greatest(pg_catalog.current_setting('backfill.batch_history',
                                                                   true)::integer, 0), 0))
    )
    SELECT k.run_id, k.seq, k.part_no, k.first_key, k.last_key, k.rows, k.ms, k.wal_bytes,
           k.batch_size, k.throttle, k.at
      FROM k ORDER BY k.seq;
$$;
COMMENT ON FUNCTION backfill_batches(text, bigint) IS
'the newest backfill.batch_history recorded batches of a backfill''s newest pass, or of run_id, oldest first';

/*
 * backfill_rehearse(name, batches): up to that many real batches of the
 * declaration, spread over its key space, each rolled back, run in a
 * "pg_backfill rehearsal" worker logged in as its run_as role (restricted,
 * the lanes' settings); nothing persists.  One row per batch (kind
 * 'batch'), then one row (kind 'projection') for the whole pass at the
 * declared rate, lanes and batch size: rows is the estimate of the rows
 * to do, batch the batches, ms the duration, wal_bytes the WAL, and
 * assumptions what the projection assumes.
 */
CREATE FUNCTION backfill_rehearse(name text, batches integer DEFAULT 5)
RETURNS TABLE (
    kind           text,
    batch          integer,
    "position"     text,
    first_key      text,
    last_key       text,
    rows           bigint,
    ms             double precision,
    wal_bytes      bigint,
    shared_hit     bigint,
    shared_read    bigint,
    locks          text[],
    key_scan_index boolean,
    action_index   boolean,
    key_scan_plan  text,
    action_plan    text,
    error          text,
    assumptions    text)
LANGUAGE C VOLATILE STRICT
AS 'MODULE_PATHNAME', 'backfill_rehearse';
COMMENT ON FUNCTION backfill_rehearse(text, integer) IS
'run up to batches real batches of a backfill, spread over its key space, each rolled back, in a worker as its role; per batch its rows, time, WAL, buffers, locks and plans, then a projection of the whole pass';

/* ==== the user's own condition and time windows (issue 27, points 3 and 4) ==== */

/*
 * throttle_when: one SQL boolean expression, true while the pass's lanes
 * must hold back; a lane evaluates it (engine/condition.c) as run_as,
 * restricted, with timeouts, at most once a second per pass.  windows: the
 * times the lanes may work ("Mon-Fri 22:00-06:00", "Sat-Sun"), in
 * window_time_zone (stored; backfill_declare fills in the server's
 * TimeZone).  Tuning: none of them enters the checksum.
 */
ALTER TABLE backfill.declaration
    ADD COLUMN throttle_when text,
    ADD COLUMN windows text[],
    ADD COLUMN window_time_zone text;

/*
 * Whether a time is inside one of the windows, and the next start after
 * it: what the scheduler, the lanes and backfill_status ask (C, no SQL of
 * anyone's); refuses what backfill_declare refuses (BF011).
 */
CREATE FUNCTION backfill.window_at(windows text[], time_zone text, at timestamptz,
                                   OUT inside boolean, OUT next_start timestamptz)
LANGUAGE C STABLE CALLED ON NULL INPUT
AS 'MODULE_PATHNAME', 'backfill_window_at';
COMMENT ON FUNCTION backfill.window_at(text[], text, timestamptz) IS
'is a time inside one of the windows (in time_zone), and when the next one starts after it';

/* backfill_declare gains throttle_when, windows and window_time_zone, last */
SELECT pg_catalog.set_config('pg_backfill.upgrade_declare_acl', coalesce(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc p
 WHERE p.oid = 'backfill_declare(text, text, text, text, text, integer, double precision,
                integer, integer, interval, text[], interval, interval, interval, interval,
                integer, integer, jsonb, text, text, text, text, text, text, jsonb,
                text, boolean, text, text, integer, interval, text, boolean, boolean,
                text)'::pg_catalog.regprocedure;

DROP FUNCTION backfill_declare(text, text, text, text, text, integer, double precision,
                               integer, integer, interval, text[], interval, interval,
                               interval, interval, integer, integer, jsonb, text, text,
                               text, text, text, text, jsonb, text, boolean, text, text,
                               integer, interval, text, boolean, boolean, text);

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
    watch            interval DEFAULT NULL,
    set              text DEFAULT NULL,
    delete           boolean DEFAULT false,
    guard            boolean DEFAULT true,
    max_wal_rate     text DEFAULT NULL,
    throttle_when    text DEFAULT NULL,
    windows          text[] DEFAULT NULL,
    window_time_zone text DEFAULT NULL)
RETURNS text
LANGUAGE C CALLED ON NULL INPUT VOLATILE
AS 'MODULE_PATHNAME', 'backfill_declare';

COMMENT ON FUNCTION backfill_declare(text, text, text, text, text, integer, double precision,
                                     integer, integer, interval, text[], interval, interval,
                                     interval, interval, integer, integer, jsonb, text, text,
                                     text, text, text, text, jsonb, text, boolean, text, text,
                                     integer, interval, text, boolean, boolean, text, text,
                                     text[], text) IS
'declare (or update) a backfill; returns the checksum of its definition';

DO $$
DECLARE
    acl pg_catalog.aclitem[] :=
        NULLIF(pg_catalog.current_setting('pg_backfill.upgrade_declare_acl', true), '');
    fn text := 'backfill_declare(text, text, text, text, text, integer, double precision, '
               'integer, integer, interval, text[], interval, interval, interval, interval, '
               'integer, integer, jsonb, text, text, text, text, text, text, jsonb, text, boolean, '
               'text, text, integer, interval, text, boolean, boolean, text, text, text[], text)';
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

/*
 * backfill_status: as above, its throttle saying "window: waiting for a
 * window (next at ...)" while a running pass is outside its windows
 * (its lanes gave their partitions back).  Same columns: replaced in
 * place, its privileges kept.
 */
CREATE OR REPLACE FUNCTION backfill_status(name text)
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
    watch_interval interval,
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
           s.live, s.paused, s.batch_size,
           coalesce((SELECT 'window: waiting for a window (next at ' || wa.next_start || ')'
                       FROM backfill.declaration dd,
                            backfill.window_at(dd.windows, dd.window_time_zone, now()) wa
                      WHERE dd.name = $1 AND dd.windows IS NOT NULL AND NOT wa.inside
                        AND s.status = 'running' AND NOT coalesce(s.paused, false)),
                    s.throttle),
           s.plan_method,
           s.started_at, s.finished_at, s.last_error, coalesce(s.failed_rows, 0), s.direction,
           s.watch, coalesce(w.probes, 0), coalesce(w.drifts, 0), w.last_probe_at, w.healed,
           s.bound, s.beyond,
           make_interval(secs => backfill.watch_interval_ms($1) / 1000.0),
           (SELECT dd.rate FROM backfill.declaration dd WHERE dd.name = $1)
      FROM d LEFT JOIN s ON true CROSS JOIN w;
$$;
COMMENT ON FUNCTION backfill_status(text) IS
'status, progress, rows/s and ETA of the newest pass of a backfill, its direction, bound, watch (with the interval in force), and the rate its lanes share';

/*
 * Issue 23 (a fresh-context attacker's findings): backfill_probe and
 * backfill_wait refuse a NULL argument with an error of their own (BF012,
 * BF011, BF002) instead of answering NULL, so they are no longer STRICT.
 */
ALTER FUNCTION backfill_probe(text, interval) CALLED ON NULL INPUT;
ALTER FUNCTION backfill_wait(bigint, interval) CALLED ON NULL INPUT;

/* ---- a pass sweeps again the rows written behind its cursors within its bound (issue 31) ---- */

/*
 * A pass whose convergence count finds rows still matching within its
 * bound (written behind the lanes' cursors while it ran) and whose action
 * is guarded (it changes only rows that match the predicate) sweeps its
 * partitions again instead of failing STALLED: run.sweep counts the
 * sweeps, run.probe_key is the smallest key that still matched when the
 * last one began (still matching at the next count: the action does not
 * fix it, BF006).  declaration.guarded: backfill_declare found the action
 * guarded (the engine's set/delete statement, or a hand-written UPDATE or
 * DELETE of the relation that repeats the predicate); false for a
 * declaration stored before 0.6 that is neither set nor delete, until it
 * is declared again.  backfill_status and backfill_partitions show the sweep.
 */
ALTER TABLE backfill.declaration
    ADD COLUMN guarded boolean NOT NULL DEFAULT false;
ALTER TABLE backfill.run
    ADD COLUMN sweep integer NOT NULL DEFAULT 0,
    ADD COLUMN probe_key text;

/* both functions get a column: dropped and created again, their privileges kept */
DO $$
BEGIN
    PERFORM pg_catalog.set_config('pg_backfill.upgrade_acl_status31',
        coalesce((SELECT p.proacl::text FROM pg_catalog.pg_proc p
                   WHERE p.oid = 'backfill_status(text)'::pg_catalog.regprocedure), ''), true);
    PERFORM pg_catalog.set_config('pg_backfill.upgrade_acl_partitions31',
        coalesce((SELECT p.proacl::text FROM pg_catalog.pg_proc p
                   WHERE p.oid = 'backfill_partitions(text)'::pg_catalog.regprocedure), ''), true);
END
$$;

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
    watch_interval interval,
    rate          double precision,
    sweep         integer)
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
               l.direction, l.watch, r.bound, r.beyond, r.sweep
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
           s.live, s.paused, s.batch_size,
           coalesce((SELECT 'window: waiting for a window (next at ' || wa.next_start || ')'
                       FROM backfill.declaration dd,
                            backfill.window_at(dd.windows, dd.window_time_zone, now()) wa
                      WHERE dd.name = $1 AND dd.windows IS NOT NULL AND NOT wa.inside
                        AND s.status = 'running' AND NOT coalesce(s.paused, false)),
                    s.throttle),
           s.plan_method,
           s.started_at, s.finished_at, s.last_error, coalesce(s.failed_rows, 0), s.direction,
           s.watch, coalesce(w.probes, 0), coalesce(w.drifts, 0), w.last_probe_at, w.healed,
           s.bound, s.beyond,
           make_interval(secs => backfill.watch_interval_ms($1) / 1000.0),
           (SELECT dd.rate FROM backfill.declaration dd WHERE dd.name = $1),
           coalesce(s.sweep, 0)
      FROM d LEFT JOIN s ON true CROSS JOIN w;
$$;
COMMENT ON FUNCTION backfill_status(text) IS
'status, progress, rows/s and ETA of the newest pass of a backfill, its direction, bound, watch (with the interval in force), the rate its lanes share, and its sweep';

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
    shard_group   integer,
    sweep         integer)
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
           p.shard, p.shard_group,
           (SELECT r.sweep FROM backfill.run r WHERE r.run_id = p.run_id)
      FROM backfill.partition p
     WHERE p.run_id = (SELECT max(l.run_id) FROM backfill.ledger l WHERE l.declaration = $1)
     ORDER BY p.part_no;
$$;
COMMENT ON FUNCTION backfill_partitions(text) IS
'the partitions of the newest pass: bounds, cursor, lease holder, claims, reclaims, failures, leaf, Citus shard, the pass''s sweep';

DO $$
DECLARE
    f text;
    acl pg_catalog.aclitem[];
    item record;
BEGIN
    FOREACH f IN ARRAY ARRAY['status', 'partitions'] LOOP
        acl := NULLIF(pg_catalog.current_setting('pg_backfill.upgrade_acl_' || f || '31', true), '');
        IF acl IS NOT NULL THEN
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION backfill_%s(text) FROM PUBLIC', f);
            FOR item IN SELECT a.grantee, a.is_grantable FROM pg_catalog.aclexplode(acl) a
                         WHERE a.privilege_type = 'EXECUTE'
            LOOP
                EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION backfill_%s(text) TO %s%s', f,
                    CASE WHEN item.grantee = 0 THEN 'PUBLIC'
                         ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
                    CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
            END LOOP;
        END IF;
    END LOOP;
END
$$;

/*
 * A fresh-context attacker's findings after issues 23 and 28 (D1-D3):
 * backfill_rehearse refuses a NULL name (BF012) or a NULL number of
 * batches (BF043) instead of answering with no rows, so it is no longer
 * STRICT.  (Its worker now terminates itself past a batch's timeout and
 * when its caller is gone, and one role rehearses one at a time: C only.)
 */
ALTER FUNCTION backfill_rehearse(text, integer) CALLED ON NULL INPUT;

/* ==== issue 28 point 2: lifecycle events, exactly once, through the outbox ==== */
/*
 * events => 'topic' on a declaration: each change of its passes' state
 * emits one outbox message in the transaction that makes the change.  The
 * changes are caught by AFTER triggers on the catalogs that record them,
 * filtered by column lists and WHEN clauses (a batch's checkpoint fires
 * none of them unless its throttle starts or stops), so whichever C module
 * writes those rows, the event commits or rolls back with it.  (Not
 * deferred to the commit: a deferred trigger cannot fire in a
 * security-restricted operation, where backfill_finalize commits.)  A
 * pass's event number is a row lock of its own (backfill.event_state, by
 * run_id), taken after the locks the writers already take in their order
 * (declaration, ledger, run: state/), so it adds no cycle, and a
 * transaction that holds one pass's number open (a backfill_run not yet
 * committed) holds up no other pass, nor the scheduler; the watch's
 * trigger takes the declaration first, as the catch-up pass will.  The
 * message is emitted by the
 * declaration's owner; the relay checks that role against the topic's
 * owner and grants like any message's.
 */
ALTER TABLE backfill.declaration ADD COLUMN events text;   -- not in the checksum

/*
 * Per pass: the sequence number of its last event (1 is its queued: a
 * consumer sees a gap), and the throttle state its events last said
 * (throttled / unthrottled: at most one of each a minute per pass).
 */
CREATE TABLE backfill.event_state (
    run_id         bigint PRIMARY KEY,
    seq            bigint NOT NULL DEFAULT 0,
    throttled      boolean NOT NULL DEFAULT false,
    throttled_at   timestamptz,
    unthrottled_at timestamptz
);
-- dumped: a restored pass's events go on from its last number
SELECT pg_catalog.pg_extension_config_dump('backfill.event_state', '');
REVOKE ALL ON backfill.event_state FROM PUBLIC;

CREATE FUNCTION backfill.event_emit(topic text, key text, payload jsonb, emitter regrole)
RETURNS bigint
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'backfill_event_emit';
REVOKE ALL ON FUNCTION backfill.event_emit(text, text, jsonb, regrole) FROM PUBLIC;

/*
 * Emit event of a pass (run_id; NULL: none, and no number) of backfill
 * p_declaration, if the declaration names a topic.  throttle: NULL for
 * every event but the throttle's, whose number is taken only if no other
 * transaction holds it (debounced anyway: a lane never waits for, nor
 * deadlocks with, another).
 */
CREATE FUNCTION backfill.lifecycle_event(p_declaration text, p_event text, p_run_id bigint,
                                         p_rows bigint DEFAULT NULL, p_throttle boolean DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    d   record;
    l   record;
    st  record;
    n   bigint;
BEGIN
    SELECT dc.events, dc.owner INTO d FROM backfill.declaration dc WHERE dc.name = p_declaration;
    IF d.events IS NULL THEN
        RETURN;
    END IF;
    IF p_throttle IS NULL THEN
        IF p_run_id IS NOT NULL THEN
            INSERT INTO backfill.event_state AS s (run_id, seq) VALUES (p_run_id, 1)
            ON CONFLICT (run_id) DO UPDATE SET seq = s.seq + 1
            RETURNING s.seq INTO n;
        END IF;
    ELSE
        SELECT * INTO st FROM backfill.event_state s
         WHERE s.run_id = p_run_id FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        IF st.throttled = p_throttle
           OR (CASE WHEN p_throttle THEN st.throttled_at ELSE st.unthrottled_at END)
              > now() - interval '1 minute'
           OR (NOT p_throttle AND EXISTS (SELECT 1 FROM backfill.partition p
                                           WHERE p.run_id = p_run_id AND p.state = 'running'
                                             AND p.throttle IS NOT NULL)) THEN
            RETURN;
        END IF;
        UPDATE backfill.event_state s
           SET seq = s.seq + 1, throttled = p_throttle,
               throttled_at = CASE WHEN p_throttle THEN now() ELSE st.throttled_at END,
               unthrottled_at = CASE WHEN p_throttle THEN st.unthrottled_at ELSE now() END
         WHERE s.run_id = p_run_id
        RETURNING s.seq INTO n;
    END IF;
    SELECT g.ledger_name, g.status, g.rows, g.error_code, g.direction, g.watch INTO l
      FROM backfill.ledger g WHERE g.run_id = p_run_id;
    PERFORM backfill.event_emit(d.events, p_declaration, pg_catalog.jsonb_build_object(
        'event', p_event, 'backfill', p_declaration, 'ledger_name', l.ledger_name,
        'run_id', p_run_id, 'seq', n, 'status', l.status,
        'rows', coalesce(p_rows, l.rows,
                         (SELECT pg_catalog.sum(p.rows) FROM backfill.partition p
                           WHERE p.run_id = p_run_id), 0),
        'error_code', l.error_code, 'direction', l.direction, 'watch', l.watch,
        'at', pg_catalog.clock_timestamp()), d.owner);
END
$$;
REVOKE ALL ON FUNCTION backfill.lifecycle_event(text, text, bigint, bigint, boolean) FROM PUBLIC;

/* a pass queued (a new ledger row) and ended (its status set, once) */
CREATE FUNCTION backfill.ledger_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM backfill.lifecycle_event(NEW.declaration,
        CASE WHEN TG_OP = 'INSERT' THEN 'queued'
             WHEN NEW.status = 'completed' AND NEW.watch THEN 'healed'
             WHEN NEW.status = 'completed' AND NEW.direction = 'revert' THEN 'reverted'
             WHEN NEW.status = 'failed' AND NEW.error_code = 'BF006' THEN 'stalled'
             ELSE NEW.status END,
        NEW.run_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER ledger_event_queued AFTER INSERT ON backfill.ledger
    FOR EACH ROW EXECUTE FUNCTION backfill.ledger_event();
CREATE TRIGGER ledger_event_ended AFTER UPDATE OF status ON backfill.ledger
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running')
    EXECUTE FUNCTION backfill.ledger_event();

/*
 * started (the pass left the queue: planned, or resumed from a failed
 * pass's cursors by backfill_retry), paused and resumed; a pass that ends
 * is unpaused by the same statement: its end is its event
 */
CREATE FUNCTION backfill.run_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    decl text;
BEGIN
    SELECT l.declaration INTO decl FROM backfill.ledger l
     WHERE l.run_id = NEW.run_id AND l.status = 'running';
    IF NOT FOUND OR NEW.phase = 'done' THEN
        RETURN NULL;
    END IF;
    IF OLD.phase = 'queued' AND NEW.phase <> 'queued' THEN
        PERFORM backfill.lifecycle_event(decl, 'started', NEW.run_id);
    END IF;
    IF OLD.paused <> NEW.paused THEN
        PERFORM backfill.lifecycle_event(decl, CASE WHEN NEW.paused THEN 'paused' ELSE 'resumed' END,
                                         NEW.run_id);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER run_event AFTER UPDATE OF phase, paused ON backfill.run
    FOR EACH ROW WHEN ((OLD.phase = 'queued' AND NEW.phase <> 'queued') OR OLD.paused <> NEW.paused)
    EXECUTE FUNCTION backfill.run_event();

/* throttled and unthrottled: a lane's throttle starts or stops (debounced above) */
CREATE FUNCTION backfill.partition_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    decl text;
BEGIN
    SELECT l.declaration INTO decl FROM backfill.ledger l
     WHERE l.run_id = NEW.run_id AND l.status = 'running';
    IF FOUND THEN
        PERFORM backfill.lifecycle_event(decl,
            CASE WHEN NEW.throttle IS NULL THEN 'unthrottled' ELSE 'throttled' END,
            NEW.run_id, NULL, NEW.throttle IS NOT NULL);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER partition_event AFTER UPDATE OF throttle ON backfill.partition
    FOR EACH ROW WHEN ((OLD.throttle IS NULL) <> (NEW.throttle IS NULL))
    EXECUTE FUNCTION backfill.partition_event();

/* drift_found: a watch probe found rows (the pass it drifted from: the newest) */
CREATE FUNCTION backfill.watch_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- the declaration before the event number, as backfill_run and the catch-up pass lock it
    PERFORM 1 FROM backfill.declaration d WHERE d.name = NEW.declaration FOR UPDATE;
    PERFORM backfill.lifecycle_event(NEW.declaration, 'drift_found',
        (SELECT pg_catalog.max(l.run_id) FROM backfill.ledger l
          WHERE l.declaration = NEW.declaration), NEW.last_found);
    RETURN NULL;
END
$$;
CREATE TRIGGER watch_event_first AFTER INSERT ON backfill.watch
    FOR EACH ROW WHEN (NEW.drifts > 0) EXECUTE FUNCTION backfill.watch_event();
CREATE TRIGGER watch_event AFTER UPDATE OF drifts ON backfill.watch
    FOR EACH ROW WHEN (NEW.drifts > OLD.drifts) EXECUTE FUNCTION backfill.watch_event();

/* retired: the end of a backfill's life (its last completed pass) */
CREATE FUNCTION backfill.retired_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM backfill.lifecycle_event(NEW.declaration, 'retired', NEW.run_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER retired_event AFTER INSERT ON backfill.retired
    FOR EACH ROW EXECUTE FUNCTION backfill.retired_event();
REVOKE ALL ON FUNCTION backfill.ledger_event(), backfill.run_event(), backfill.partition_event(),
    backfill.watch_event(), backfill.retired_event() FROM PUBLIC;

/* backfill_declare gains events, last (its privileges kept) */
SELECT pg_catalog.set_config('pg_backfill.upgrade_declare_acl', coalesce(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc p
 WHERE p.oid = 'backfill_declare(text, text, text, text, text, integer, double precision,
                integer, integer, interval, text[], interval, interval, interval, interval,
                integer, integer, jsonb, text, text, text, text, text, text, jsonb,
                text, boolean, text, text, integer, interval, text, boolean, boolean,
                text, text, text[], text)'::pg_catalog.regprocedure;

DROP FUNCTION backfill_declare(text, text, text, text, text, integer, double precision,
                               integer, integer, interval, text[], interval, interval,
                               interval, interval, integer, integer, jsonb, text, text,
                               text, text, text, text, jsonb, text, boolean, text, text,
                               integer, interval, text, boolean, boolean, text, text,
                               text[], text);

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
    watch            interval DEFAULT NULL,
    set              text DEFAULT NULL,
    delete           boolean DEFAULT false,
    guard            boolean DEFAULT true,
    max_wal_rate     text DEFAULT NULL,
    throttle_when    text DEFAULT NULL,
    windows          text[] DEFAULT NULL,
    window_time_zone text DEFAULT NULL,
    events           text DEFAULT NULL)
RETURNS text
LANGUAGE C CALLED ON NULL INPUT VOLATILE
AS 'MODULE_PATHNAME', 'backfill_declare';

COMMENT ON FUNCTION backfill_declare(text, text, text, text, text, integer, double precision,
                                     integer, integer, interval, text[], interval, interval,
                                     interval, interval, integer, integer, jsonb, text, text,
                                     text, text, text, text, jsonb, text, boolean, text, text,
                                     integer, interval, text, boolean, boolean, text, text,
                                     text[], text, text) IS
'declare (or update) a backfill; returns the checksum of its definition';

DO $$
DECLARE
    acl pg_catalog.aclitem[] :=
        NULLIF(pg_catalog.current_setting('pg_backfill.upgrade_declare_acl', true), '');
    fn text := 'backfill_declare(text, text, text, text, text, integer, double precision, '
               'integer, integer, interval, text[], interval, interval, interval, interval, '
               'integer, integer, jsonb, text, text, text, text, text, text, jsonb, text, boolean, '
               'text, text, integer, interval, text, boolean, boolean, text, text, text[], text, text)';
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

/*
 * Issue 25: the lease rule written once.  A partition's lease is live
 * while a backend of its holder's pid, started when the holder did, is
 * there (backfill.lease_live); a dead holder that held it less than 5 s
 * (renewed_at - holder_start) is cooling: not reclaimed until 2^reclaims
 * seconds (at most 60 s) after its last renewal (backfill.lease_cooling).
 * backfill.claim_partition, the scheduler's look (which counts cooling
 * partitions as not claimable) and CALL backfill_finalize (which counts
 * the live lanes) call these, and no other place says the rule.
 */
CREATE FUNCTION backfill.lease_live(p_pid integer, p_start timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM pg_stat_activity a
                    WHERE a.pid = p_pid AND a.backend_start = p_start);
$$;
REVOKE ALL ON FUNCTION backfill.lease_live(integer, timestamptz) FROM PUBLIC;

CREATE FUNCTION backfill.lease_cooling(p_renewed_at timestamptz, p_holder_start timestamptz,
                                       p_reclaims integer)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(p_renewed_at - p_holder_start < interval '5 s'
                    AND now() < p_renewed_at
                        + least(60, power(2, least(p_reclaims, 6))) * interval '1 s', false);
$$;
REVOKE ALL ON FUNCTION backfill.lease_cooling(timestamptz, timestamptz, integer) FROM PUBLIC;

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
                    AND NOT backfill.lease_live(q.holder_pid, q.holder_start)
                    AND NOT backfill.lease_cooling(q.renewed_at, q.holder_start, q.reclaims)))
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

/* ==== issue 28 point 2, a tester's findings: an outbox topic fits the outbox's index ==== */
/*
 * A topic of at most 200 bytes (OUTBOX_TOPIC_MAX in outbox.h; backfill
 * names are too): with a backfill's name as its events' key it always fits
 * the outbox's (topic, key, id) index, so emitting an event cannot fail
 * the transaction that changed the pass (the scheduler's included).
 * backfill_outbox_emit and events => check it in C; a sink's row here.
 */
CREATE FUNCTION backfill.outbox_sink_topic_check() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF octet_length(NEW.topic) > 200 THEN
        RAISE EXCEPTION 'outbox topic is % bytes long, more than 200', octet_length(NEW.topic)
              USING ERRCODE = 'BF011',
                    HINT = 'Name the topic in at most 200 bytes, e.g. ''orders.backfills''.';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER outbox_sink_topic_check BEFORE INSERT OR UPDATE OF topic ON backfill.outbox_sink
    FOR EACH ROW EXECUTE FUNCTION backfill.outbox_sink_topic_check();

/* ==== issue 24 follow-up (a new user's finding): backfill_drop(name, abandon) ==== */
/*
 * A backfill whose table (or the column it wrote) is gone can be neither
 * reverted nor declared again: abandon => true drops it as it is, its
 * owner's word that nothing is left to undo.  The one-argument form goes;
 * its privileges carry over.
 */
SELECT pg_catalog.set_config('pg_backfill.upgrade_drop_acl', coalesce(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc p WHERE p.oid = 'backfill_drop(text)'::pg_catalog.regprocedure;
DROP FUNCTION backfill_drop(text);
CREATE FUNCTION backfill_drop(name text, abandon boolean DEFAULT false) RETURNS boolean
LANGUAGE C STRICT VOLATILE AS 'MODULE_PATHNAME', 'backfill_drop';
COMMENT ON FUNCTION backfill_drop(text, boolean) IS
'withdraw a declaration (refused once it wrote rows without a way back, unless abandon)';
DO $$
DECLARE
    acl pg_catalog.aclitem[] :=
        NULLIF(pg_catalog.current_setting('pg_backfill.upgrade_drop_acl', true), '');
    item record;
BEGIN
    IF acl IS NULL THEN
        RETURN;
    END IF;
    REVOKE ALL ON FUNCTION backfill_drop(text, boolean) FROM PUBLIC;
    FOR item IN SELECT a.grantee, a.is_grantable FROM pg_catalog.aclexplode(acl) a
                 WHERE a.privilege_type = 'EXECUTE'
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION backfill_drop(text, boolean) TO %s%s',
            CASE WHEN item.grantee = 0 THEN 'PUBLIC'
                 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
            CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;

