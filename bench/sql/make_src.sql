-- bench/sql/make_src.sql: the source rows, built once per run.
-- usage: psql -v n=5000000 -f make_src.sql
-- items_src(id, a, b, c): ids 1..n, a random in [0, 1e9], b 40 random hex chars, c NULL.
\set ON_ERROR_STOP 1
DROP TABLE IF EXISTS items_src;
SELECT setseed(0.42) \g /dev/null
CREATE TABLE items_src (id bigint, a int, b text, c int);
INSERT INTO items_src
SELECT g,
       (random() * 1000000000)::int,                          -- a * 2 < 2^31
       left(md5(random()::text) || md5(random()::text), 40),  -- 40 hex chars
       NULL
  FROM generate_series(1, :n) g;
SELECT pg_stat_force_next_flush() \g /dev/null
VACUUM ANALYZE items_src;
