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

/* ---- speed (issue 13) ---- */
