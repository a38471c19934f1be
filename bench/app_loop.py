#!/usr/bin/env python3
"""bench/app_loop.py: the app-side peer of pg_backfill (issue 29, point 2).

What GitLab's batched background migrations and Shopify's maintenance_tasks do
from the application: a client connection over TCP, autocommit, and per batch
one query for the batch's last key and one UPDATE of the range.

    python3 bench/app_loop.py PORT BATCH [HOST]

Exits 3 with one "SKIP" line when psycopg2 is missing (Debian: python3-psycopg2);
prints "batches rows" when done.
"""
import sys

try:
    import psycopg2
except ImportError:
    print("SKIP: python3-psycopg2 is not installed (apt-get install python3-psycopg2)")
    sys.exit(3)


def main():
    port, batch = int(sys.argv[1]), int(sys.argv[2])
    host = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
    conn = psycopg2.connect(host=host, port=port, user="postgres", dbname="postgres")
    conn.autocommit = True
    cur = conn.cursor()
    last, batches, rows = 0, 0, 0
    while True:
        cur.execute("SELECT max(id) FROM (SELECT id FROM items WHERE id > %s AND c IS NULL"
                    " ORDER BY id LIMIT %s) s", (last, batch))
        upper = cur.fetchone()[0]
        if upper is None:
            break
        cur.execute("UPDATE items SET c = a * 2 WHERE id > %s AND id <= %s AND c IS NULL",
                    (last, upper))
        rows += cur.rowcount
        batches += 1
        last = upper
    conn.close()
    print(batches, rows)


if __name__ == "__main__":
    main()
