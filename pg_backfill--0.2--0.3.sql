/* pg_backfill--0.2--0.3.sql: trust boundary and true states */

\echo Use "ALTER EXTENSION pg_backfill UPDATE TO '0.3'" to load this file. \quit

/*
 * A fresh CREATE EXTENSION runs 0.1, then 0.1--0.2, then this file, so an
 * upgraded installation and a new one are the same.  Every function that
 * changes here is replaced with CREATE OR REPLACE, keeping its grants.
 */

-- ===================================================================
-- Trust: declarations, requirements, scoped runs, run_as
-- ===================================================================

-- -------------------------------------------------------------------
-- Dump and restore: tables and roles by name (issue 9, finding 8)
--
-- pg_dump writes the catalogs marked with pg_extension_config_dump as
-- COPY data.  Oid columns went out as raw numbers, which in another
-- cluster name other tables and other roles.  The columns that name a
-- table or a role are regclass and regrole: pg_dump writes their names
-- (schema-qualified: it dumps with an empty search_path) and the restore
-- looks the names up again.  A name cannot stand for an object that is
-- gone, so a declaration also keeps the names it was declared with, and
-- backfill.identity_problem() refuses one whose oids no longer carry
-- them (a dropped role's oid, dumped as a number, may belong to another
-- role after a restore).  No lane ever logs in as such a role.
-- -------------------------------------------------------------------

-- policies and the ledger view read owner: set aside while its type changes
DROP POLICY declaration_member ON backfill.declaration;
DROP POLICY ledger_member ON backfill.ledger;
DROP VIEW backfill_ledger;

ALTER TABLE backfill.declaration
    ALTER COLUMN relid TYPE pg_catalog.regclass,
    ALTER COLUMN owner TYPE pg_catalog.regrole,
    ALTER COLUMN run_as TYPE pg_catalog.regrole,
    ADD COLUMN owner_name name,
    ADD COLUMN run_as_name name;
UPDATE backfill.declaration
   SET owner_name = pg_catalog.pg_get_userbyid(owner),
       run_as_name = pg_catalog.pg_get_userbyid(run_as);

/*
 * backfill_declare writes the oids; the names follow them here, on every
 * write but the COPY of a restore, which brings the names it was dumped
 * with.  Declaring again (a member of the owner) writes them anew.
 */
CREATE FUNCTION backfill.declaration_names() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' OR NEW.owner_name IS NULL THEN
        NEW.owner_name := pg_catalog.pg_get_userbyid(NEW.owner);
    END IF;
    IF TG_OP = 'UPDATE' OR NEW.run_as_name IS NULL THEN
        NEW.run_as_name := pg_catalog.pg_get_userbyid(NEW.run_as);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER declaration_names BEFORE INSERT OR UPDATE ON backfill.declaration
    FOR EACH ROW EXECUTE FUNCTION backfill.declaration_names();
ALTER TABLE backfill.declaration
    ALTER COLUMN owner_name SET NOT NULL,
    ALTER COLUMN run_as_name SET NOT NULL;
COMMENT ON COLUMN backfill.declaration.owner_name IS
'the owner''s name when it was declared; an owner oid that no longer carries it is refused';
COMMENT ON COLUMN backfill.declaration.run_as_name IS
'the run_as role''s name when it was declared; checked like owner_name';

ALTER TABLE backfill.ledger ALTER COLUMN owner TYPE pg_catalog.regrole;

ALTER TABLE backfill.outbox_sink
    ALTER COLUMN run_as TYPE pg_catalog.regrole,
    ADD COLUMN run_as_name name;
UPDATE backfill.outbox_sink SET run_as_name = pg_catalog.pg_get_userbyid(run_as);

/* the same for a sink: backfill_outbox_sink writes run_as alone */
CREATE FUNCTION backfill.outbox_sink_names() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' OR NEW.run_as_name IS NULL THEN
        NEW.run_as_name := pg_catalog.pg_get_userbyid(NEW.run_as);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER outbox_sink_names BEFORE INSERT OR UPDATE ON backfill.outbox_sink
    FOR EACH ROW EXECUTE FUNCTION backfill.outbox_sink_names();

CREATE POLICY declaration_member ON backfill.declaration FOR SELECT
    USING (pg_catalog.pg_has_role(owner, 'USAGE'));
CREATE POLICY ledger_member ON backfill.ledger FOR SELECT
    USING (pg_catalog.pg_has_role(owner, 'USAGE'));

CREATE VIEW backfill_ledger WITH (security_invoker = true) AS
    SELECT l.run_id, l.ledger_name, l.declaration, l.status, l.forced, l.previous_run_id,
           l.rows, l.batches, l.started_at, l.finished_at,
           l.finished_at - l.started_at AS duration,
           l.error_code, l.error_message, l.checksum,
           pg_catalog.pg_get_userbyid(l.owner) AS owner
      FROM backfill.ledger l;
GRANT SELECT ON backfill_ledger TO PUBLIC;

-- the run ids go on after a restore: pg_dump keeps the sequence's value
SELECT pg_catalog.pg_extension_config_dump('backfill.ledger_run_id_seq', '');

/*
 * Why a declaration cannot run as it is stored, or NULL: a role oid does
 * not carry the name it was declared with, or its table is not the one it
 * names.  Only catalog lookups: safe in any session, the scheduler's too.
 */
CREATE FUNCTION backfill.identity_problem(p_name text, p_relid pg_catalog.regclass,
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
    END IF;
END
$$;
REVOKE ALL ON FUNCTION backfill.identity_problem(text, pg_catalog.regclass, text,
    pg_catalog.regrole, name, pg_catalog.regrole, name) FROM PUBLIC;

/*
 * Run by the scheduler before it starts lanes: a running pass (not paused)
 * whose declaration is gone, or cannot run as stored, fails here, so that
 * no lane logs in as a role the declaration does not name.
 */
CREATE FUNCTION backfill.fail_unbound_passes() RETURNS integer
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
    RETURN n;
END
$$;
REVOKE ALL ON FUNCTION backfill.fail_unbound_passes() FROM PUBLIC;

-- -------------------------------------------------------------------
-- Requirements, drift and scoped runs as the declaring role (issue 9,
-- findings 1, 2, 5)
-- -------------------------------------------------------------------

/*
 * Is a schema migration applied?  NULL if so, else why not.  The
 * migrations table is the application's (a view, a cast, a policy of its
 * may call its functions), so it is read as a role, never as the
 * extension's owner: with p_role, as that role (the caller must have its
 * privileges); without, as the caller.  Restricted, search_path
 * pg_catalog, pg_temp, every setting it changes rolled back (asrole.c).
 * No longer SECURITY DEFINER.
 */
CREATE OR REPLACE FUNCTION backfill.migration_unapplied(p_id text) RETURNS text
LANGUAGE C STABLE STRICT
AS 'MODULE_PATHNAME', 'backfill_migration_unapplied';

CREATE FUNCTION backfill.migration_unapplied(p_id text, p_role oid) RETURNS text
LANGUAGE C STABLE STRICT
AS 'MODULE_PATHNAME', 'backfill_migration_unapplied';

/*
 * What a declaration still waits for before a pass may start, or NULL.
 * The migration is read as the declaring role.  A required backfill counts
 * only if its owner is a role the declaring role is a member of: another
 * role's backfill stays "not completed" whatever its ledger says, so its
 * progress does not leak and the scheduler never starts (or reopens on
 * drift) anything on its account.
 */
CREATE OR REPLACE FUNCTION backfill.unmet_requirement(p_name text) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d backfill.declaration;
    why text;
    required_owner oid;
    last_status text;
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
        SELECT l.status INTO last_status FROM backfill.ledger l
         WHERE l.ledger_name = d.requires_backfill
           AND pg_has_role(d.owner::oid, l.owner::oid, 'USAGE')
         ORDER BY l.run_id DESC LIMIT 1;
        IF last_status IS DISTINCT FROM 'completed' THEN
            RETURN format('backfill %s has not completed (its last pass: %s)',
                          d.requires_backfill, coalesce(last_status, 'none'));
        END IF;
    END IF;
    RETURN NULL;
END
$$;

/*
 * Run by the lanes as the declaring role: names of the extension's own
 * are schema-qualified, so that nothing on the role's search_path stands
 * in for them.  The predicate keeps the role's search_path.
 */
CREATE OR REPLACE FUNCTION backfill.estimate_rows(rel text, predicate text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
    plan pg_catalog.json;
BEGIN
    EXECUTE pg_catalog.format(E'EXPLAIN (FORMAT JSON) SELECT 1 FROM %s WHERE (\n%s\n)',
                              rel, predicate)
       INTO plan;
    RETURN pg_catalog.json_extract_path_text(plan, '0', 'Plan', 'Plan Rows')
           ::pg_catalog.float8::pg_catalog.int8;
END
$$;

CREATE OR REPLACE FUNCTION backfill_input() RETURNS jsonb
LANGUAGE sql STABLE
AS $$ SELECT NULLIF(pg_catalog.current_setting('backfill.input', true), '')::pg_catalog.jsonb $$;

-- (end of trust: declarations)


-- ===================================================================
-- Trust: outbox topics, fair share, bounds
-- ===================================================================

/*
 * A topic's owner is the role that set its sink (outbox_sink.run_as).
 * Members of the owner, and roles the owner granted the topic to, may emit
 * into it; a message records the role that emitted it, and the relay
 * checks that role again before it delivers.  Anyone may emit into a
 * topic with no sink: its messages wait, undelivered, and are pruned after
 * backfill.outbox_dead_retention like dead ones.
 */
CREATE TABLE backfill.outbox_grant (
    topic       text NOT NULL CHECK (topic <> ''),
    grantee     regrole NOT NULL,       -- dumped by name, so a restore keeps the role
    granted_by  regrole NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (topic, grantee)
);
SELECT pg_catalog.pg_extension_config_dump('backfill.outbox_grant', '');
REVOKE ALL ON backfill.outbox_grant FROM PUBLIC;

-- who emitted a message (NULL: emitted before 0.3), when it died
ALTER TABLE backfill.outbox ADD COLUMN emitted_by regrole;
ALTER TABLE backfill.outbox ADD COLUMN dead_at timestamptz;
UPDATE backfill.outbox SET dead_at = next_attempt_at WHERE state = 'dead';

-- order is per topic and key: one topic's messages never wait behind another's
DROP INDEX backfill.outbox_pending_idx;
CREATE INDEX outbox_pending_idx ON backfill.outbox (topic, key, id) WHERE state = 'pending';
-- pruning messages of topics with no sink, and dead ones
CREATE INDEX outbox_pending_created_idx ON backfill.outbox (created_at) WHERE state = 'pending';
CREATE INDEX outbox_dead_idx ON backfill.outbox (dead_at) WHERE state = 'dead';

-- a function sink is the function the sink was set to, by oid: one dropped
-- and created again (by anyone) under that name is not it
ALTER TABLE backfill.outbox_sink ADD COLUMN target_fn oid;
UPDATE backfill.outbox_sink
   SET target_fn = pg_catalog.to_regprocedure(target || '(text, text, jsonb)')
 WHERE kind = 'function';

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

-- the owner of a topic that has a sink, for grant and revoke (or an error)
CREATE FUNCTION backfill._outbox_topic_owner(topic text)
RETURNS oid
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    owner oid;
BEGIN
    SELECT s.run_as INTO owner FROM backfill.outbox_sink s WHERE s.topic = _outbox_topic_owner.topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox topic "%" has no sink', topic
              USING ERRCODE = 'BF002',
                    DETAIL = 'A topic is owned by the role that sets its sink; until then anyone may emit into it.',
                    HINT = 'Set its sink first: SELECT backfill_outbox_sink(topic, kind, target);';
    END IF;
    IF NOT pg_has_role(current_user, owner, 'USAGE') THEN
        RAISE EXCEPTION 'permission denied for outbox topic "%"', topic
              USING ERRCODE = 'BF016',
                    DETAIL = format('The topic belongs to role %s, which set its sink.', owner::regrole),
                    HINT = 'Ask a member of that role, or have it GRANT the role to you.';
    END IF;
    RETURN owner;
END
$$;

CREATE FUNCTION backfill_outbox_grant(topic text, role regrole)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
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
COMMENT ON FUNCTION backfill_outbox_grant(text, regrole) IS
'let a role (and its members) emit into a topic; the caller must be a member of the topic''s owner';
REVOKE ALL ON FUNCTION backfill_outbox_grant(text, regrole) FROM PUBLIC;

CREATE FUNCTION backfill_outbox_revoke(topic text, role regrole)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM backfill._outbox_topic_owner(topic);
    DELETE FROM backfill.outbox_grant g
     WHERE g.topic = backfill_outbox_revoke.topic AND g.grantee = backfill_outbox_revoke.role;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION backfill_outbox_revoke(text, regrole) IS
'take back a grant of backfill_outbox_grant; messages the role emitted and not yet delivered die';
REVOKE ALL ON FUNCTION backfill_outbox_revoke(text, regrole) FROM PUBLIC;

CREATE OR REPLACE FUNCTION backfill_outbox_requeue(id bigint)
RETURNS boolean
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    WITH r AS (
        UPDATE backfill.outbox o
           SET state = 'pending', attempts = 0, next_attempt_at = now(), dead_at = NULL
         WHERE o.id = $1 AND o.state = 'dead'
        RETURNING o.id)
    SELECT EXISTS (SELECT 1 FROM r);
$$;

-- (end of trust: outbox)


-- ===================================================================
-- True states: runs, retries, controls, counting
-- ===================================================================

/*
 * One running pass per backfill (per ledger name), in the catalog itself:
 * two transactions that both enqueue a pass cannot both commit.  A 0.2
 * installation may already hold two running passes of one name (two
 * REPEATABLE READ callers could both enqueue); all but the oldest are
 * ended as cancelled first, with the reason, so that the index can be
 * built.  Their lanes find the pass ended at their next checkpoint.
 */
CREATE FUNCTION backfill.second_running_passes()
RETURNS TABLE (run_id bigint, kept bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT l.run_id,
           (SELECT min(o.run_id) FROM backfill.ledger o
             WHERE o.ledger_name = l.ledger_name AND o.status = 'running')
      FROM backfill.ledger l
     WHERE l.status = 'running'
       AND EXISTS (SELECT 1 FROM backfill.ledger o
                    WHERE o.ledger_name = l.ledger_name AND o.status = 'running'
                      AND o.run_id < l.run_id)
$$;

UPDATE backfill.partition p SET state = 'cancelled', finished_at = now()
  FROM backfill.second_running_passes() s
 WHERE p.run_id = s.run_id AND p.state IN ('pending', 'running');

UPDATE backfill.run r
   SET phase = 'done', paused = false, updated_at = now(),
       last_error = pg_catalog.format('cancelled by the upgrade to 0.3: run %s of the same '
                                      'backfill was already running', s.kept)
  FROM backfill.second_running_passes() s
 WHERE r.run_id = s.run_id;

UPDATE backfill.ledger l
   SET status = 'cancelled', finished_at = now(), error_code = 'BF010',
       error_message = pg_catalog.format('cancelled by the upgrade to 0.3: run %s of the same '
                                         'backfill was already running', s.kept),
       rows = (SELECT coalesce(sum(p.rows), 0) FROM backfill.partition p
                WHERE p.run_id = l.run_id),
       batches = (SELECT coalesce(sum(p.batches), 0) FROM backfill.partition p
                   WHERE p.run_id = l.run_id)
  FROM backfill.second_running_passes() s
 WHERE l.run_id = s.run_id;

DROP FUNCTION backfill.second_running_passes();

CREATE UNIQUE INDEX ledger_one_running_idx ON backfill.ledger (ledger_name)
    WHERE status = 'running';

-- (end of true states: runs)


-- ===================================================================
-- True states: pacing, pages, predicates, workers
-- ===================================================================

-- (end of true states: workers)
