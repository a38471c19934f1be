-- bench/sql/fresh_items_wide.sql: the wide shape's `items` (SHAPE=wide), fresh before every
-- case: items(id bigint primary key, a int, b text, c int, pad text) with an index on c,
-- the column the job fills, so that no update is HOT (each one writes a new index entry in
-- both indexes); vacuumed, analyzed, right after a checkpoint.
\set ON_ERROR_STOP 1
DROP TABLE IF EXISTS items;
CREATE TABLE items (id bigint, a int, b text, c int, pad text);
INSERT INTO items (id, a, b, c, pad) SELECT id, a, b, c, pad FROM items_src ORDER BY id;
ALTER TABLE items ADD PRIMARY KEY (id);
CREATE INDEX items_c ON items (c);
SELECT pg_stat_force_next_flush() \g /dev/null
VACUUM ANALYZE items;
CHECKPOINT;
