#!/usr/bin/env bash
# scripts/demo.sh: pg_backfill end to end on a throwaway cluster.
#
#   sudo scripts/demo.sh         (or: bash scripts/demo.sh as root)
#
# Installs and builds (scripts/setup.sh), starts a fresh cluster in
# $PGBASE (default /tmp/pg_backfill_demo, port 55481), fills a table of
# 1,000,000 rows, declares a backfill over it, runs it in the background
# workers and prints its progress every second until it ends.
set -euo pipefail

cd "$(dirname "$0")/.."
export PGBASE=${PGBASE:-/tmp/pg_backfill_demo}
export PGPORT=${PGPORT:-55481}
ROWS=${DEMO_ROWS:-1000000}

scripts/setup.sh
scripts/cluster.sh init

export PGHOST="$PGBASE" PGUSER=postgres PGDATABASE=postgres
PSQL=(/usr/lib/postgresql/15/bin/psql -X -v ON_ERROR_STOP=1 -d postgres)
q() { "${PSQL[@]}" -qAt -c "$1"; }

echo
echo "== building items: $ROWS rows"
"${PSQL[@]}" -q <<SQL
CREATE EXTENSION pg_backfill;
CREATE TABLE items (id bigserial PRIMARY KEY, a int, b text, c int);
INSERT INTO items (a, b, c)
SELECT (random() * 1000000)::int, md5(random()::text) || substr(md5(random()::text), 1, 8), NULL
  FROM generate_series(1, $ROWS);
VACUUM ANALYZE items;
SQL

echo "== declaring and running items_fill_c"
"${PSQL[@]}" <<'SQL'
SELECT backfill_declare(
    name       => 'items_fill_c',
    relation   => 'items',
    predicate  => 'c IS NULL',
    set        => 'c = a * 2',
    batch_size => 10000,
    rate       => 1000);
SELECT backfill_run('items_fill_c');
SQL

echo "== progress (status | phase | rows | batches | rows/s | % | eta)"
deadline=$((SECONDS + 600))
while :; do
    line=$(q "SELECT status, phase, rows, batches, round(rows_per_sec), round(progress*100), eta
                FROM backfill_status('items_fill_c')")
    echo "$(date +%T) $line"
    status=${line%%|*}
    [ "$status" = running ] || break
    if [ "$SECONDS" -ge "$deadline" ]; then
        echo "demo.sh: the backfill did not end within 10 minutes" >&2
        tail -n 30 "$PGBASE/server.log" >&2
        scripts/cluster.sh stop
        exit 1
    fi
    sleep 1
done

echo
echo "== backfill_status('items_fill_c')"
"${PSQL[@]}" -x -c "SELECT * FROM backfill_status('items_fill_c')"
echo "== backfill_ledger"
"${PSQL[@]}" -x -c "SELECT * FROM backfill_ledger"
echo "== backfill_pending()"
"${PSQL[@]}" -c "SELECT * FROM backfill_pending()"

wrong=$(q "SELECT count(*) FROM items WHERE c IS DISTINCT FROM a * 2")
rate=$(q "SELECT round(rows_per_sec) FROM backfill_status('items_fill_c')")
status=$(q "SELECT status FROM backfill_status('items_fill_c')")
echo "== rows where c is not a * 2: $wrong"
echo "== status $status, $rate rows/s"

scripts/cluster.sh stop
echo
echo "The cluster is stopped; its data is kept in $PGBASE. To look around:"
echo "  PGBASE=$PGBASE PGPORT=$PGPORT scripts/cluster.sh start"
echo "  PGBASE=$PGBASE PGPORT=$PGPORT scripts/cluster.sh psql"
echo "  PGBASE=$PGBASE PGPORT=$PGPORT scripts/cluster.sh destroy   # when done"

if [ "$wrong" != 0 ] || [ "$status" != completed ]; then
    echo "demo.sh: FAILED ($wrong rows wrong, status $status)" >&2
    exit 1
fi
echo "demo.sh: OK"
