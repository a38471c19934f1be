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

/* ---- poison rows (issue 14, part 1) and finalize (part 4) ---- */

/* ---- revert (issue 14, part 2) and drift watch (part 3) ---- */

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

/* a declaration whose pages or count function no longer resolves does not run */
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
        SELECT f.what, f.signature INTO fn
          FROM backfill.declaration d,
               LATERAL (VALUES ('pages', d.pages_fn), ('count', d.count_fn)) f(what, signature)
         WHERE d.name = p_name AND f.signature IS NOT NULL
           AND CASE WHEN f.signature ~ '^[0-9]+$' THEN true  -- an oid: dropped before 0.5
                    ELSE pg_catalog.to_regprocedure(f.signature) IS NULL END
         LIMIT 1;
        IF FOUND THEN
            code := 'BF001';
            message := format('the %s function of backfill "%s" no longer exists',
                              fn.what, p_name);
            detail := format('The declaration names function %s, which this database '
                             'does not have.', fn.signature);
            hint := 'Create the function again (or restore it), or declare the backfill '
                    'again with the function it should call.';
        END IF;
    END IF;
END
$$;

/* ---- speed (issue 13) ---- */
