#!/usr/bin/env bash
# bench/wal_budget.sh: a pass's WAL budget (issue 27): the WAL the server writes per second while a
# pass with max_wal_rate => BUDGET runs over bench/run.sh's table (items, asynchronous commits, two
# lanes, batch 1000, an unlimited rate: only the budget paces it).
#
#   bench/wal_budget.sh                      N = 4,000,000 rows, BUDGET = 5MB, WINDOW = 60 s
#   N=1000000 WINDOW=30 bench/wal_budget.sh  a quicker run (the pass must outlast the window)
#
# It waits WARMUP seconds after the pass's first rows, then reads pg_current_wal_lsn() every
# second for WINDOW seconds and prints: the rate over the whole window against the budget (the
# target: within +10% of it, and not below 90%), the highest and lowest rate over any 10 s in it,
# and the median of the 1 s rates. Every byte of WAL the server wrote counts, the pass's or not.
#
# env:
#   N=4000000  BUDGET=5MB  WINDOW=60  WARMUP=10  LANES=2  BATCH=1000
#   AUTOVACUUM=on             off: autovacuum_enabled = off on items, so that the WAL counted
#                             is the lanes' alone (autovacuum's WAL is not the pass's, and no
#                             budget charges it; the counts of its runs in the window are printed)
#   PGBASE=/tmp/pg_backfill_walbench   throwaway cluster (wiped at start; data removed at exit
#                             unless KEEP=1; server.log stays)
#   PGPORT=55472  PGBIN=/usr/lib/postgresql/15/bin
#   CSV=bench/results/wal_budget.csv  one row per run is appended at the end
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
N=${N:-4000000}
BUDGET=${BUDGET:-5MB}
WINDOW=${WINDOW:-60}
WARMUP=${WARMUP:-10}
LANES=${LANES:-2}
AUTOVACUUM=${AUTOVACUUM:-on}
BATCH=${BATCH:-1000}
PGBASE=${PGBASE:-/tmp/pg_backfill_walbench}
PGPORT=${PGPORT:-55472}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGRUNAS=${PGRUNAS:-postgres}
CSV=${CSV:-$HERE/results/wal_budget.csv}
KEEP=${KEEP:-0}
DATA=$PGBASE/data
LOG=$PGBASE/server.log

[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 1000 ] || { echo "wal_budget.sh: N must be an integer >= 1000" >&2; exit 2; }
[[ $WINDOW =~ ^[1-9][0-9]*$ ]] && [ "$WINDOW" -ge 10 ] || { echo "wal_budget.sh: WINDOW must be at least 10 (seconds)" >&2; exit 2; }
case $PGBASE in /|/tmp|/tmp/|"") echo "wal_budget.sh: refusing PGBASE=$PGBASE" >&2; exit 2 ;; esac

TMP=$(mktemp -d /tmp/pg_backfill_walbench_run.XXXXXX)
ME=wal_budget.sh
. "$HERE/lib.sh"

cleanup() {
    local rc=$?
    if pg_running; then as_owner "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 120 stop >/dev/null || true; fi
    if [ "$KEEP" != 1 ] && [ -d "$DATA" ]; then rm -rf "$DATA"; fi
    rm -rf "$TMP"
    [ $rc -eq 0 ] || echo "wal_budget.sh: FAILED (exit $rc); server log: $LOG" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

Q() { PGHOST=$PGBASE PGPORT=$PGPORT PGOPTIONS="-c client_min_messages=warning" "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -U postgres -d postgres "$@"; }

fresh_cluster
say "building items_src with N=$N rows"
Q -v n="$N" -f "$HERE/sql/make_src.sql"
Q -f "$HERE/sql/fresh_items.sql" >/dev/null
BUDGET_BYTES=$(Q -c "SELECT pg_size_bytes('$BUDGET')")
[ "$AUTOVACUUM" = on ] || Q -c "ALTER TABLE items SET (autovacuum_enabled = off)"
vacuums() { Q -c "SELECT autovacuum_count + autoanalyze_count FROM pg_stat_user_tables WHERE relid = 'items'::regclass"; }

Q -c "SELECT backfill_declare(name => 'walbench', relation => 'items', predicate => 'c IS NULL',
          action => 'UPDATE items SET c = a * 2 WHERE id BETWEEN \$1 AND \$2 AND c IS NULL',
          batch_size => $BATCH, rate => 100000, max_parallel => $LANES,
          max_wal_rate => '$BUDGET')" >/dev/null
RUN=$(Q -c "SELECT backfill_run('walbench')")
say "run $RUN: max_wal_rate $BUDGET ($BUDGET_BYTES bytes/s), $LANES lanes, batch $BATCH"
for _ in $(seq 1 600); do
    [ "$(Q -c "SELECT rows > 0 FROM backfill_status('walbench')")" = t ] && break
    sleep 0.5
done
sleep "$WARMUP"
VAC0=$(vacuums)

# one sample a second: epoch|lsn bytes|rows|throttle
for i in $(seq 0 "$WINDOW"); do
    Q -F'|' -c "SELECT extract(epoch FROM clock_timestamp()),
                       pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0'),
                       rows, coalesce(throttle, '')
                  FROM backfill_status('walbench')" >>"$TMP/samples"
    [ "$i" -lt "$WINDOW" ] && sleep 1
done
STATUS=$(Q -c "SELECT status FROM backfill_status('walbench')")
VAC1=$(vacuums)
Q -c "SELECT backfill_cancel('walbench')" >/dev/null

read -r RATE MAX10 MIN10 ROWS SECS <<<"$(awk -F'|' '
    { t[NR] = $1; w[NR] = $2; r[NR] = $3 }
    END {
        n = NR; secs = t[n] - t[1]
        rate = (w[n] - w[1]) / secs
        max10 = 0; min10 = -1
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
            if (t[j] - t[i] >= 10) {
                x = (w[j] - w[i]) / (t[j] - t[i])
                if (x > max10) max10 = x
                if (min10 < 0 || x < min10) min10 = x
                break
            }
        printf "%.0f %.0f %.0f %d %.1f\n", rate, max10, min10, r[n] - r[1], secs
    }' "$TMP/samples")"
# the median of the 1 s rates
MED1=$(awk -F'|' 'NR > 1 { printf "%.0f\n", ($2 - w) / ($1 - t) } { t = $1; w = $2 }' "$TMP/samples" |
       sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
mb() { awk -v x="$1" 'BEGIN { printf "%.2f MB/s", x / 1048576 }'; }
pct() { awk -v x="$1" -v b="$BUDGET_BYTES" 'BEGIN { printf "%+.1f%%", (x / b - 1) * 100 }'; }
VERDICT=$(awk -v x="$RATE" -v y="$MAX10" -v b="$BUDGET_BYTES" 'BEGIN {
    print (x <= 1.1 * b && x >= 0.9 * b && y <= 1.1 * b) ? "MET" : "MISSED" }')

echo
echo "WAL budget $BUDGET ($(mb "$BUDGET_BYTES")), $LANES lanes, batch $BATCH, window $SECS s (pass $STATUS at its end, $ROWS rows in it):"
echo "  autovacuum on items: $AUTOVACUUM, $((VAC1 - VAC0)) autovacuum/autoanalyze runs of it counted in the window"
echo "  whole window      $(mb "$RATE")   $(pct "$RATE") of the budget"
echo "  highest 10 s      $(mb "$MAX10")   $(pct "$MAX10")"
echo "  lowest 10 s       $(mb "$MIN10")   $(pct "$MIN10")"
echo "  median 1 s        $(mb "$MED1")"
echo "  throttle at the end: $(tail -1 "$TMP/samples" | cut -d'|' -f4)"
echo "  target (window within -10%..+10%, every 10 s at most +10%): $VERDICT"

mkdir -p "$(dirname "$CSV")"
[ -f "$CSV" ] || echo "date,commit,n,budget_bytes,lanes,batch,autovacuum,window_s,rate,max10,min10,median1,verdict" >"$CSV"
echo "$(date -u +%FT%TZ),$EXTCOMMIT,$N,$BUDGET_BYTES,$LANES,$BATCH,$AUTOVACUUM,$SECS,$RATE,$MAX10,$MIN10,$MED1,$VERDICT" >>"$CSV"
