-- bench/sql/fresh_items_ck.sql: items_src's rows keyed (tenant_id, id), for the
-- composite-key case of bench/run.sh (issue 12): 20 tenants, each a run of ids,
-- as a multi-tenant table holds them; same columns, same values, vacuumed,
-- analyzed, right after a checkpoint.  usage: psql -v n=N -f fresh_items_ck.sql
\set ON_ERROR_STOP 1
DROP TABLE IF EXISTS items_ck;
CREATE TABLE items_ck (tenant_id int, id bigint, a int, b text, c int);
INSERT INTO items_ck (tenant_id, id, a, b, c)
SELECT ((id - 1) * 20 / :n)::int, id, a, b, c FROM items_src ORDER BY id;
ALTER TABLE items_ck ADD PRIMARY KEY (tenant_id, id);
SELECT pg_stat_force_next_flush() \g /dev/null
VACUUM ANALYZE items_ck;
CHECKPOINT;
