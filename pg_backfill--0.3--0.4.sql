/* pg_backfill--0.3--0.4.sql: backfill_declare's signature follows its column table; async_commit */

\echo Use "ALTER EXTENSION pg_backfill UPDATE TO '0.4'" to load this file. \quit

/*
 * Every argument of backfill_declare but the name now has a default, the
 * one its row of the declaration's column table gives (declaration.c).
 * relation and predicate had none, so a pages source declared without
 * them, as the README shows, was "function does not exist"; action must
 * follow them.  What a source kind requires is refused in C when it is
 * missing, with its SQLSTATE and hint.  The library reads the arguments
 * by name (declaration.c's table names each), also under an older
 * signature, where the options it lacks take their defaults.
 */

/*
 * async_commit: a lane's batch and its checkpoint commit together, so a
 * batch need not wait for its commit to reach disk (a crash loses both,
 * and the batch is done again).  On by default; off for an action with
 * effects outside the database.  The end of a pass and every transaction
 * that emitted outbox messages stay synchronous.
 */
ALTER TABLE backfill.declaration ADD COLUMN async_commit boolean NOT NULL DEFAULT true;

/*
 * A new argument is a new signature: the function of 0.3 is dropped and
 * created again with async_commit last.  An object of yours that depends
 * on it (a SQL function with BEGIN ATOMIC that calls it, say) makes this
 * update fail with PostgreSQL's "other objects depend on it": drop it,
 * update, create it again.  The privileges on the old function (an
 * operator may have revoked EXECUTE from PUBLIC and granted it to some
 * roles) are kept aside here and given to the new one below.
 */
SELECT pg_catalog.set_config('pg_backfill.upgrade_declare_acl', coalesce(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc p
 WHERE p.oid = 'backfill_declare(text, text, text, text, text, integer, double precision,
                integer, integer, interval, text[], interval, interval, interval, interval,
                integer, integer, jsonb, text, text, text, text, text, text, jsonb,
                text)'::pg_catalog.regprocedure;

DROP FUNCTION backfill_declare(text, text, text, text, text, integer, double precision,
                               integer, integer, interval, text[], interval, interval,
                               interval, interval, integer, integer, jsonb, text, text,
                               text, text, text, text, jsonb, text);

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
    async_commit     boolean DEFAULT true)
RETURNS text
LANGUAGE C CALLED ON NULL INPUT VOLATILE
AS 'MODULE_PATHNAME', 'backfill_declare';

COMMENT ON FUNCTION backfill_declare(text, text, text, text, text, integer, double precision,
                                     integer, integer, interval, text[], interval, interval,
                                     interval, interval, integer, integer, jsonb, text, text,
                                     text, text, text, text, jsonb, text, boolean) IS
'declare (or update) a backfill; returns the checksum of its definition';

/* the old function's privileges, given to the new one (none kept: the defaults) */
DO $$
DECLARE
    acl pg_catalog.aclitem[] :=
        NULLIF(pg_catalog.current_setting('pg_backfill.upgrade_declare_acl', true), '');
    fn text := 'backfill_declare(text, text, text, text, text, integer, double precision, '
               'integer, integer, interval, text[], interval, interval, interval, interval, '
               'integer, integer, jsonb, text, text, text, text, text, text, jsonb, text, boolean)';
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
