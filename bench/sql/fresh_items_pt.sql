-- bench/sql/fresh_items_pt.sql: items_src's rows keyed (tenant_id, id) as in
-- fresh_items_ck.sql, in a table partitioned by RANGE (tenant_id) into 8 leaves
-- (20 tenants, tenants 0-2, 3-4, 5-7, ... per leaf), for the partitioned case of
-- bench/run.sh (issue 12, item 4); vacuumed, analyzed (each leaf and the parent),
-- right after a checkpoint.  usage: psql -v n=N -f fresh_items_pt.sql
\set ON_ERROR_STOP 1
DROP TABLE IF EXISTS items_pt;
CREATE TABLE items_pt (tenant_id int, id bigint, a int, b text, c int,
                       PRIMARY KEY (tenant_id, id)) PARTITION BY RANGE (tenant_id);
SELECT format('CREATE TABLE items_pt_%s PARTITION OF items_pt FOR VALUES FROM (%s) TO (%s)',
              i, i * 20 / 8, (i + 1) * 20 / 8)
  FROM generate_series(0, 7) i \gexec
INSERT INTO items_pt (tenant_id, id, a, b, c)
SELECT ((id - 1) * 20 / :n)::int, id, a, b, c FROM items_src ORDER BY id;
SELECT pg_stat_force_next_flush() \g /dev/null
VACUUM ANALYZE items_pt;
CHECKPOINT;
