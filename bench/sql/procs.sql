-- bench/sql/procs.sql: the hand-written peer, a PL/pgSQL keyset loop with COMMIT per batch.
-- Each batch: the batch's upper id from an index-ordered LIMIT, then one range UPDATE.
\set ON_ERROR_STOP 1
CREATE OR REPLACE PROCEDURE bench_keyset_loop(batch int)
LANGUAGE plpgsql AS $$
DECLARE
  last  bigint := 0;     -- exclusive lower bound of the next batch
  upper bigint;
BEGIN
  LOOP
    SELECT max(id) INTO upper
      FROM (SELECT id FROM items WHERE id > last AND c IS NULL ORDER BY id LIMIT batch) s;
    EXIT WHEN upper IS NULL;
    UPDATE items SET c = a * 2 WHERE id > last AND id <= upper AND c IS NULL;
    last := upper;
    COMMIT;
  END LOOP;
END $$;
