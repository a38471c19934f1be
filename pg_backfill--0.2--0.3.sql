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

-- (end of trust: declarations)


-- ===================================================================
-- Trust: outbox topics, fair share, bounds
-- ===================================================================

-- (end of trust: outbox)


-- ===================================================================
-- True states: runs, retries, controls, counting
-- ===================================================================

-- (end of true states: runs)


-- ===================================================================
-- True states: pacing, pages, predicates, workers
-- ===================================================================

-- (end of true states: workers)
