-- bench/sql/make_src_wide.sql: the source rows of the wide shape (SHAPE=wide), built once per run.
-- usage: psql -v n=500000 -f make_src_wide.sql
-- items_src(id, a, b, c, pad): n rows whose ids have gaps (row g gets an id in [3g, 3g+2]),
-- a random in [0, 1e9], b 40 random hex chars, c NULL, pad 256 random hex chars: about
-- 330 bytes a row.
\set ON_ERROR_STOP 1
DROP TABLE IF EXISTS items_src;
SELECT setseed(0.42) \g /dev/null
CREATE TABLE items_src (id bigint, a int, b text, c int, pad text);
INSERT INTO items_src
SELECT g * 3 + floor(random() * 3)::int,
       (random() * 1000000000)::int,                          -- a * 2 < 2^31
       left(md5(random()::text) || md5(random()::text), 40),  -- 40 hex chars
       NULL,
       repeat(md5(random()::text), 8)                         -- 256 hex chars
  FROM generate_series(1, :n) g;
SELECT pg_stat_force_next_flush() \g /dev/null
VACUUM ANALYZE items_src;
