--
-- declare: what backfill_declare accepts and how it refuses
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
\set VERBOSITY default

DROP TABLE IF EXISTS orders, order_notes CASCADE;
SET client_min_messages = notice;
CREATE TABLE orders (id bigint PRIMARY KEY, qty int NOT NULL, price numeric NOT NULL,
                     total numeric);
INSERT INTO orders SELECT g, g % 7 + 1, (g % 100) + 0.5, NULL FROM generate_series(1, 300) g;
CREATE TABLE order_notes (order_id bigint, note text);
CREATE VIEW orders_v AS SELECT * FROM orders;

-- a declaration returns the checksum of its definition
SELECT backfill_declare(
    name      => 'orders_fill_total',
    relation  => 'orders',
    predicate => 'total IS NULL',
    action    => 'UPDATE orders SET total = qty * price
                   WHERE id BETWEEN $1 AND $2 AND total IS NULL',
    batch_size => 100,
    rate       => 50);
SELECT name, relation, key_column, key_type, predicate, batch_size, rate, max_parallel,
       max_attempts, batch_timeout_ms, backoff_base_ms, backoff_cap_ms, environments
  FROM backfill.declaration;

-- re-indenting keeps the checksum; changing the tuning keeps it too
SELECT backfill_declare('orders_fill_total', 'orders', 'total IS NULL',
    'UPDATE orders
        SET total = qty * price
      WHERE id BETWEEN $1 AND $2
        AND total IS NULL',
    batch_size => 50, rate => 100);
-- a different action is a different definition
SELECT backfill_declare('orders_fill_total', 'orders', 'total IS NULL',
    'UPDATE orders SET total = qty * price * 1.2 WHERE id BETWEEN $1 AND $2 AND total IS NULL');
SELECT name, batch_size, rate, checksum FROM backfill.declaration;

-- refusals: each names the backfill and says how to fix it
SELECT backfill_declare('', 'orders', 'total IS NULL', 'SELECT 1');
SELECT backfill_declare('orders:eu', 'orders', 'total IS NULL', 'SELECT 1');
SELECT backfill_declare('fill', 'no_such_table', 'total IS NULL', 'SELECT 1');
SELECT backfill_declare('fill', 'orders_v', 'total IS NULL', 'SELECT 1');
SELECT backfill_declare('fill', 'order_notes', 'note IS NULL', 'SELECT 1');
SELECT backfill_declare('fill', 'orders', 'total IS NULL', 'SELECT 1', key => 'qty');
SELECT backfill_declare('fill', 'orders', 'totl IS NULL', 'SELECT 1');
SELECT backfill_declare('fill', 'orders', 'qty + 1', 'SELECT 1');
SELECT backfill_declare('fill', 'orders', 'true) ; DROP TABLE orders; SELECT (1', 'SELECT 1');
SELECT count(*) AS orders_still_there FROM orders;
SELECT backfill_declare('fill', 'orders', 'total IS NULL', 'UPDATE orders SET total = 1; SELECT 1');
SELECT backfill_declare('fill', 'orders', 'total IS NULL', 'UPDATE orders SET totl = 1 WHERE (total IS NULL)');
SELECT backfill_declare('fill', 'orders', 'total IS NULL', 'SELECT 1', batch_size => 0);
SELECT backfill_declare('fill', 'orders', 'total IS NULL', 'SELECT 1', rate => 0);
SELECT backfill_declare('fill', 'orders', 'total IS NULL', 'SELECT 1', rate => 'Infinity');
SELECT backfill_declare('fill', 'orders', 'total IS NULL', 'SELECT 1', rate => 1e-13);
SELECT backfill_declare('fill', 'orders', 'total IS NULL', 'SELECT 1',
                        backoff_base => '10 s', backoff_cap => '1 s');
SELECT backfill_declare('fill', 'orders', 'total IS NULL', 'SELECT 1', environments => '{}');

-- nothing was stored by the refusals
SELECT name FROM backfill.declaration ORDER BY name;

DROP VIEW orders_v;
DROP TABLE orders, order_notes;
