-- bench/sql/fresh_items.sql: a fresh `items` copied from items_src before every case,
-- so that every case starts from the same table: vacuumed, analyzed, right after a checkpoint.
-- Final shape: items(id bigserial primary key, a int, b text, c int).
\set ON_ERROR_STOP 1
DROP TABLE IF EXISTS items;
CREATE TABLE items (id bigserial, a int, b text, c int);
INSERT INTO items (id, a, b, c) SELECT id, a, b, c FROM items_src ORDER BY id;
ALTER TABLE items ADD PRIMARY KEY (id);
SELECT setval(pg_get_serial_sequence('items', 'id'), (SELECT max(id) FROM items)) \g /dev/null
-- flush the insert counters now, so that VACUUM really resets them and autovacuum
-- does not pick `items` up in the middle of the measured case
SELECT pg_stat_force_next_flush() \g /dev/null
VACUUM ANALYZE items;
CHECKPOINT;
