#!/usr/bin/env bash
# bench/blocks.sh: block order (key => 'ctid') against key order on a shuffled table
# (issue 29 point 6).
#
#   bench/blocks.sh [N]       N rows (default 1000000)
#
# env:
#   REPS=2                    repetitions; each runs both passes side by side, the order
#                             turned round in every other one (the table shows medians)
#   BATCH=1000                the batch size of both passes (1 lane each)
#   SHARED_BUFFERS=64MB       smaller than the table (about 140 MB at N = 1000000), as a
#                             table's working set is next to years of data: pages leave
#                             shared_buffers between two visits
#   FILLFACTOR=100            of the copy each pass works on: 100, every page full, so no
#                             update is HOT and each writes an index entry (at a random place
#                             of the index in block order, in order in key order); below 100,
#                             room in every page, as a table that updates and vacuums has,
#                             so updates stay HOT in their page
#   PGBASE=/tmp/pg_backfill_bench_blocks  PGPORT=55480  PGBIN=/usr/lib/postgresql/15/bin
#   PG_CONFIG=                the server whose binaries (and pg_backfill.so) to use
#   CSV=bench/results/blocks.csv   one row per measured pass is appended at the end
#   KEEP=1                    keep the data directory
#
# The table: id bigint primary key, a int, c int (NULL: to do), pad text (100 bytes),
# inserted ORDER BY random(), so that its physical order is as far from its key order as
# years of updates leave it (pg_stats.correlation of id about 0).  Every pass starts from a
# fresh copy (CREATE TABLE AS keeps the shuffled order; the primary key; VACUUM ANALYZE;
# CHECKPOINT) and does set => 'c = a * 2' where c IS NULL: in key order (key => 'id', each
# batch's keys found through the index, its rows on pages all over the heap) and in block
# order (key => 'ctid', each batch a Tid Range Scan of a few blocks).  Wall time is
# client-side around backfill_run + backfill_wait.  Prints rows/s, the ratio block / key in
# each repetition and of the medians, and the target (at least 1.5x).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
N=${1:-1000000}
REPS=${REPS:-2}
BATCH=${BATCH:-1000}
SHARED_BUFFERS=${SHARED_BUFFERS:-64MB}
FILLFACTOR=${FILLFACTOR:-100}
PGBASE=${PGBASE:-/tmp/pg_backfill_bench_blocks}
PGPORT=${PGPORT:-55480}
if [ -z "${PGBIN:-}" ] && [ -n "${PG_CONFIG:-}" ]; then PGBIN=$("$PG_CONFIG" --bindir); fi
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGRUNAS=${PGRUNAS:-postgres}
CSV=${CSV:-$HERE/results/blocks.csv}
KEEP=${KEEP:-0}
DATA=$PGBASE/data
LOG=$PGBASE/server.log
ME=blocks.sh

[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 1000 ] || { echo "blocks.sh: N must be an integer >= 1000" >&2; exit 2; }
[[ $FILLFACTOR =~ ^[0-9]+$ ]] && [ "$FILLFACTOR" -ge 10 ] && [ "$FILLFACTOR" -le 100 ] || { echo "blocks.sh: FILLFACTOR must be 10-100" >&2; exit 2; }
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "blocks.sh: REPS must be a positive integer" >&2; exit 2; }
case $PGBASE in /|/tmp|/tmp/|"") echo "blocks.sh: refusing PGBASE=$PGBASE" >&2; exit 2 ;; esac

. "$HERE/lib.sh"
TMP=$(mktemp -d /tmp/pg_backfill_bench_blocks.XXXXXX)
cleanup() {
    local rc=$?
    if pg_running; then as_owner "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 120 stop >/dev/null || true; fi
    if [ "$KEEP" != 1 ] && [ -d "$DATA" ]; then rm -rf "$DATA"; fi
    rm -rf "$TMP"
    [ $rc -eq 0 ] || echo "blocks.sh: FAILED (exit $rc); server log: $LOG" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

Q() { PGHOST=$PGBASE PGPORT=$PGPORT PGOPTIONS="-c client_min_messages=warning" "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -U postgres -d postgres "$@"; }

fresh_cluster
as_owner tee -a "$DATA/postgresql.conf" >/dev/null <<CONF
shared_buffers = $SHARED_BUFFERS
CONF
as_owner "$PGBIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 120 restart >/dev/null || die "server did not restart"

say "building items_shuf_src: $N rows in random order"
t=$(now)
Q <<SQL
SELECT setseed(0.29);
CREATE TABLE items_shuf_src AS
  SELECT g::bigint AS id, (random() * 1e9)::int AS a, NULL::int AS c, repeat('x', 100) AS pad
    FROM generate_series(1, $N) g ORDER BY random();
SQL
say "built in $(echo "$(now) - $t" | bc -l | xargs printf '%.1f') s"

fresh() {
    Q <<SQL
SET synchronize_seqscans = off;
DROP TABLE IF EXISTS items_shuf;
CREATE TABLE items_shuf WITH (fillfactor = $FILLFACTOR) AS SELECT * FROM items_shuf_src;
ALTER TABLE items_shuf ADD PRIMARY KEY (id);
VACUUM ANALYZE items_shuf;
CHECKPOINT;
SQL
}

RES=$TMP/results.tsv
: >"$RES"
run_pass() {  # order rep -> one line "order rep secs rows plan" in $RES
    local order=$1 rep=$2 name="bench_blocks_${1}_${2}" key t0 t1 out status bad plan rows
    key=$([ "$order" = block ] && echo ctid || echo id)
    fresh
    Q -c "SELECT backfill_declare(name => '$name', relation => 'items_shuf', key => '$key',
              predicate => 'c IS NULL', set => 'c = a * 2',
              batch_size => $BATCH, rate => 100000, max_parallel => 1)" >/dev/null
    t0=$(now)
    out=$(Q -F'|' <<SQL
SELECT backfill_run('$name') AS run_id \gset
SELECT :run_id, backfill_wait(:run_id, '60 min');
SQL
)
    t1=$(now)
    status=${out#*|}
    [ "$status" = completed ] || die "backfill $name ended as '$status', not 'completed'"
    bad=$(Q -c "SELECT count(*) FROM items_shuf WHERE c IS DISTINCT FROM a * 2")
    [ "$bad" = 0 ] || die "VERIFY FAILED: $bad rows of items_shuf not done after $name"
    IFS='|' read -r rows plan < <(Q -F'|' -c "SELECT rows, plan_method FROM backfill_status('$name')")
    printf '%s\t%s\t%.3f\t%s\t%s\n' "$order" "$rep" "$(echo "$t1 - $t0" | bc -l)" "$rows" "$plan" >>"$RES"
    say "$order order, rep $rep: $(awk -v n="$rows" -v s="$(echo "$t1 - $t0" | bc -l)" 'BEGIN { printf "%.0f rows/s (%d rows, %.1f s)", n / s, n, s }'); plan: $plan"
}

fresh
say "items_shuf: $(Q -c "SELECT pg_size_pretty(pg_relation_size('items_shuf'))"), correlation of id with the physical order $(Q -c "SELECT round(correlation::numeric, 3) FROM pg_stats WHERE tablename = 'items_shuf' AND attname = 'id'"); shared_buffers $(Q -c 'SHOW shared_buffers'), fillfactor $FILLFACTOR; load $(cut -d' ' -f1-3 /proc/loadavg)"
Q -c "SELECT backfill_declare(name => 'bench_blocks_explain', relation => 'items_shuf', key => 'ctid',
          predicate => 'c IS NULL', set => 'c = a * 2')" >/dev/null
ACTION=$(Q -c "SELECT action FROM backfill.declaration WHERE name = 'bench_blocks_explain'")
say "the block-order batch: $(Q <<SQL | grep -o 'Tid Range Scan on [a-z_]*' | head -1
SET plan_cache_mode = force_generic_plan;
PREPARE a(tid, tid) AS $ACTION;
EXPLAIN (COSTS OFF) EXECUTE a('(0,0)', '(10,0)');
SQL
)"
Q -c "SELECT backfill_drop('bench_blocks_explain')" >/dev/null

for rep in $(seq 1 "$REPS"); do
    if [ $((rep % 2)) = 1 ]; then run_pass key "$rep"; run_pass block "$rep"
    else run_pass block "$rep"; run_pass key "$rep"; fi
done

med() { awk -F'\t' -v o="$1" '$1 == o { print $4 / $3 }' "$RES" | sort -g | awk '{a[NR]=$1} END { if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }
echo
echo "== block order (key => 'ctid') against key order, $N shuffled rows, fillfactor $FILLFACTOR, shared_buffers $SHARED_BUFFERS, batch $BATCH, 1 lane, $REPS rep(s)"
printf '%-6s %14s %14s %8s\n' rep "key rows/s" "block rows/s" ratio
for rep in $(seq 1 "$REPS"); do
    awk -F'\t' -v r="$rep" '$2 == r { v[$1] = $4 / $3 } END { printf "%-6s %14.0f %14.0f %7.2fx\n", r, v["key"], v["block"], v["block"] / v["key"] }' "$RES"
done
KEYM=$(med key); BLOCKM=$(med block)
RATIO=$(awk -v a="$BLOCKM" -v b="$KEYM" 'BEGIN { printf "%.2f", a / b }')
printf '%-6s %14.0f %14.0f %7.2fx\n' median "$KEYM" "$BLOCKM" "$RATIO"
echo "target: block order at least 1.5x key order on the shuffled table: $RATIO x $(awk -v x="$RATIO" 'BEGIN { print (x >= 1.5 ? "MET" : "NOT MET") }')"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (a shared box: other work runs beside this)"

mkdir -p "$(dirname "$CSV")"
[ -s "$CSV" ] || echo "when,commit,pg,n,batch,shared_buffers,fillfactor,order,rep,secs,rows,rows_per_s,plan" >"$CSV"
WHEN=$(date -u +%FT%TZ)
awk -F'\t' -v w="$WHEN" -v c="$EXTCOMMIT" -v pg="$PGVER" -v n="$N" -v b="$BATCH" -v sb="$SHARED_BUFFERS" -v ff="$FILLFACTOR" \
    '{ printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%.0f,\"%s\"\n", w, c, pg, n, b, sb, ff, $1, $2, $3, $4, $4 / $3, $5 }' "$RES" >>"$CSV"
