#!/usr/bin/env bash
# bench/foreground.sh: the foreground impact of a backfill (issue 4).
#
# pgbench (a small read/write workload, TPC-B-like, scale 10) runs for DURATION seconds
#   1. alone;
#   2. beside a paced pg_backfill pass over `items` (1 lane, batch 1000, rate 20 batches/s),
#      with the foreground throttle (backfill.foreground_throttle, on by default);
#   2b. the same with backfill.foreground_throttle = off (what the throttle buys);
#   3. beside an unpaced pass (rate 100000, max_parallel 2), as a contrast;
#   4. beside the PL/pgSQL keyset loop (sql/procs.sql, batch 1000), the hand-written contrast;
#   5. a half-loaded box (issue 29): pgbench limited (-R) to half the tps of case 1, alone and
#      beside the paced pass, and the paced pass alone on the idle box (no pgbench): the pass
#      must keep at least 50% of its idle rows/s while pgbench's p99 stays within 1.2x of
#      pgbench alone at that rate.
# It prints pgbench's tps, p50 and p99 latency (exact, from pgbench's per-transaction log) for
# each case, and the target line: paced backfill p99 within 1.2x of pgbench alone (with the
# rows/s the pass did in the window), and the same ratio with the throttle off.
#
#   bench/foreground.sh                 N = 2,000,000 rows in items, DURATION = 30 s (about 5 minutes)
#   N=500000 DURATION=10 bench/foreground.sh     quick check (the paced pass must still outlast pgbench)
#
# env:
#   N=2000000                 rows of items (rebuilt fresh from items_src before every case)
#   DURATION=30               seconds of each pgbench run (-T)
#   WARMUP=5                  seconds of an unmeasured pgbench run before case 1 (0: none)
#   PGBASE=/tmp/pg_backfill_fg      throwaway cluster (wiped at start; data removed at exit
#                             unless KEEP=1; server.log and the pgbench outputs stay)
#   PGPORT=55471  PGBIN=/usr/lib/postgresql/15/bin
#   CSV=bench/results/foreground.csv   one row per case is appended at the end
#   HALF_REPS=3               the half-loaded pair (half_alone, half_paced) this many times, turn about
#   CASES="alone paced paced_nice10 paced_nofg unpaced loop idle_pass half_alone half_paced half_nice10"   (alone is
#                             always run; paced_nice10, half_nice10: paced and half_paced with
#                             backfill.lane_nice = 10, the lanes at a lower CPU priority than the
#                             server's (the default is 0), information)
#
# Cases 2-4 start their backfill right before pgbench and stop it right after it: the passes
# with backfill_cancel, the loop with pg_cancel_backend. Committed batches stay, so "rows done"
# is count(*) WHERE c IS NOT NULL once the backfill is stopped.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
N=${N:-2000000}
DURATION=${DURATION:-30}
WARMUP=${WARMUP:-5}
PGBASE=${PGBASE:-/tmp/pg_backfill_fg}
PGPORT=${PGPORT:-55471}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGRUNAS=${PGRUNAS:-postgres}
CSV=${CSV:-$HERE/results/foreground.csv}
CASES=${CASES:-alone paced paced_nice10 paced_nofg unpaced loop idle_pass half_alone half_paced half_nice10}
KEEP=${KEEP:-0}
HALF_REPS=${HALF_REPS:-3}
DATA=$PGBASE/data
LOG=$PGBASE/server.log
TARGET=1.2            # paced p99 / alone p99
CLIENTS=4 THREADS=2 SCALE=10
PACED_RATE=20 PACED_BATCH=1000

[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 1000 ] || { echo "foreground.sh: N must be an integer >= 1000" >&2; exit 2; }
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || { echo "foreground.sh: DURATION must be a positive integer (seconds)" >&2; exit 2; }
[[ $WARMUP =~ ^[0-9]+$ ]] || { echo "foreground.sh: WARMUP must be an integer (seconds)" >&2; exit 2; }
case $PGBASE in /|/tmp|/tmp/|"") echo "foreground.sh: refusing PGBASE=$PGBASE" >&2; exit 2 ;; esac

TMP=$(mktemp -d /tmp/pg_backfill_fg_run.XXXXXX)
chmod 0755 "$TMP"
BGPIDS=()

ME=foreground.sh
. "$HERE/lib.sh"

cleanup() {
    local rc=$? p
    for p in "${BGPIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    if pg_running; then as_owner "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 120 stop >/dev/null || true; fi
    if [ "$KEEP" != 1 ] && [ -d "$DATA" ]; then rm -rf "$DATA"; fi
    rm -rf "$TMP"
    [ $rc -eq 0 ] || echo "foreground.sh: FAILED (exit $rc); server log: $LOG" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export PGHOST=$PGBASE PGPORT PGUSER=postgres PGDATABASE=postgres
Q() { PGOPTIONS="-c client_min_messages=warning" "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

LOAD_START=$(loadavg)
say "load average at start: $LOAD_START ($(nproc) cores)"

# ------------------------------------------------------------------ cluster
fresh_cluster

say "pgbench -i -s $SCALE"
"$PGBIN/pgbench" -i -s "$SCALE" -q >"$PGBASE/pgbench_init.out" 2>&1 || { cat "$PGBASE/pgbench_init.out" >&2; die "pgbench -i failed"; }
say "building items_src with N=$N rows"
Q -v n="$N" -f "$HERE/sql/make_src.sql"

# ------------------------------------------------------------------ helpers
# Nearest-rank percentiles (ms) of column 3 (latency, us) of pgbench's per-transaction logs.
# Lines whose latency is not a number (skipped or failed transactions) are left out.
percentiles() {  # log files... -> "p50 p99 count"
    awk '$3 ~ /^[0-9]+$/ { print $3 }' "$@" | nearest_rank
}
# The same of the latency less the schedule lag (column 7 with -R): the time the server took,
# without the wait for a free client that -R's schedule adds (information).
service_p99() {  # log files... -> p99 ms
    awk '$3 ~ /^[0-9]+$/ { print $3 - ($7 ~ /^[0-9]+$/ ? $7 : 0) }' "$@" | nearest_rank | cut -d' ' -f2
}
nearest_rank() {  # sorted-or-not microseconds on stdin -> "p50 p99 count" in ms
    sort -n | awk '
        { a[NR] = $1 }
        END {
            if (NR == 0) { print "- - 0"; exit }
            i50 = int(0.50 * NR); if (i50 < 0.50 * NR) i50++
            i99 = int(0.99 * NR); if (i99 < 0.99 * NR) i99++
            printf "%.3f %.3f %d\n", a[i50] / 1000, a[i99] / 1000, NR
        }'
}

# Background: every second, the pass's throttle column ("-" when not holding back).
throttle_sampler() {  # name out stopfile
    while [ ! -e "$3" ]; do
        Q -c "SELECT coalesce(nullif(throttle::text, ''), '-') FROM backfill_status('$1')" >>"$2" 2>/dev/null || true
        sleep 1
    done
}

# results, one tab-separated line per case:
#   case label tps p50 p99 txns rows_done load1_before load1_after service_p99 note (last: it may be empty)
RES=$TMP/results.tsv
: >"$RES"

reset_tables() {
    Q -c "VACUUM ANALYZE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history"
    Q -f "$HERE/sql/fresh_items.sql"      # ends with CHECKPOINT
}

HALF_TPS=""          # half of case 1's tps, set once it ran
run_pgbench() {  # tag -> pgbench output in $PGBASE/pgbench_<tag>.out, logs in $TMP/log_<tag>.*
    local limit=()
    case $1 in half_*) limit=(-R "$HALF_TPS") ;; esac
    "$PGBIN/pgbench" -c "$CLIENTS" -j "$THREADS" -T "$DURATION" -r -P 5 "${limit[@]}" \
        -l --log-prefix="$TMP/log_$1" >"$PGBASE/pgbench_$1.out" 2>&1 \
        || { cat "$PGBASE/pgbench_$1.out" >&2; die "pgbench ($1) failed"; }
}

run_case() {  # case label
    local c=$1 label=$2 name="" bgpid="" sampler="" stop=$TMP/stop_$1 l0 l1 tps p50 p99 nx rows=- note="" sp99=-
    reset_tables
    l0=$(loadavg | cut -d' ' -f1)
    case $c in
        paced|paced_nofg|paced_nice10|unpaced|idle_pass|half_paced*|half_nice10*)
            local rate=$PACED_RATE lanes=1
            [ "$c" = unpaced ] && { rate=100000; lanes=2; }
            name="fg_${c//./_}"
            # the foreground throttle (on by default) off for this case only; lanes start after the reload
            [ "$c" = paced_nofg ] && Q -c "ALTER SYSTEM SET backfill.foreground_throttle = off" -c "SELECT pg_reload_conf()" >/dev/null
            # the lanes at a lower CPU priority for this case only (a lane reads it as it starts)
            case $c in paced_nice10|half_nice10*) Q -c "ALTER SYSTEM SET backfill.lane_nice = 10" -c "SELECT pg_reload_conf()" >/dev/null ;; esac
            Q -c "SELECT backfill_declare(name => '$name', relation => 'items', predicate => 'c IS NULL',
                      action => 'UPDATE items SET c = a * 2 WHERE id BETWEEN \$1 AND \$2 AND c IS NULL',
                      batch_size => $PACED_BATCH, rate => $rate, max_parallel => $lanes)" >/dev/null
            Q -c "SELECT backfill_run('$name')" >/dev/null          # commits: the launcher starts the lane(s)
            rm -f "$stop"; : >"$TMP/throttle_$c"
            throttle_sampler "$name" "$TMP/throttle_$c" "$stop" & sampler=$!; BGPIDS+=("$sampler")
            ;;
        loop)
            PGAPPNAME=fg_loop Q -c "CALL bench_keyset_loop($PACED_BATCH)" >"$TMP/loop.out" 2>&1 & bgpid=$!
            BGPIDS+=("$bgpid")
            ;;
    esac
    if [ "$c" = idle_pass ]; then sleep "$DURATION"; else run_pgbench "$c"; fi
    case $c in
        paced|paced_nofg|paced_nice10|unpaced|idle_pass|half_paced*|half_nice10*)
            local status
            status=$(Q -c "SELECT status FROM backfill_status('$name')")
            if [ "$status" = running ]; then
                Q -c "SELECT backfill_cancel('$name')" >/dev/null
                note="pass still running at the end, cancelled"
            else
                note="pass ended '$status' before pgbench did"
            fi
            [ "$c" = paced_nofg ] && Q -c "ALTER SYSTEM RESET backfill.foreground_throttle" -c "SELECT pg_reload_conf()" >/dev/null
            case $c in paced_nice10|half_nice10*) Q -c "ALTER SYSTEM RESET backfill.lane_nice" -c "SELECT pg_reload_conf()" >/dev/null ;; esac
            touch "$stop"; wait "$sampler" || true
            local ns nt
            ns=$(wc -l <"$TMP/throttle_$c"); nt=$(grep -vc '^-$' "$TMP/throttle_$c" || true)
            note="$note; throttle engaged in $nt of $ns 1-s samples"
            if [ "$nt" -gt 0 ]; then
                note="$note ($(grep -v '^-$' "$TMP/throttle_$c" | sed 's/ [0-9.]* client sessions at work/ N client sessions at work/' | sort | uniq -c | awk '{n=$1; $1=""; sub(/^ /, ""); printf "%s%s x%s", (NR>1?", ":""), $0, n}'))"
            fi
            ;;
        loop)
            local k
            k=$(Q -c "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE application_name = 'fg_loop'")
            if wait "$bgpid"; then note="loop finished before pgbench did"
            elif [ "$k" -gt 0 ]; then note="loop still running at the end, cancelled (pg_cancel_backend)"
            else note="loop failed: $(tail -n 1 "$TMP/loop.out")"; fi
            ;;
    esac
    [ "$c" = alone ] || rows=$(Q -c "SELECT count(*) FROM items WHERE c IS NOT NULL")
    l1=$(loadavg | cut -d' ' -f1)
    if [ "$c" = idle_pass ]; then
        tps=0 p50=- p99=- nx=0
    else
        tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time).*/\1/p' "$PGBASE/pgbench_$c.out")
        [ -n "$tps" ] || die "no tps in $PGBASE/pgbench_$c.out"
        read -r p50 p99 nx < <(percentiles "$TMP"/log_"$c".*)
        sp99=$(service_p99 "$TMP"/log_"$c".*)
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$label" "$tps" "$p50" "$p99" "$nx" "$rows" "$l0" "$l1" "$sp99" "$note" >>"$RES"
    say "$(printf '%-8s tps %8.1f  p50 %7s ms  p99 %7s ms  %6d txns  rows done %-8s load %s -> %s  %s' \
        "$c" "$tps" "$p50" "$p99" "$nx" "$rows" "$l0" "$l1" "$note")"
}

# ------------------------------------------------------------------ the cases
if [ "$WARMUP" -gt 0 ]; then
    say "warm-up: pgbench ${WARMUP} s (not measured)"
    "$PGBIN/pgbench" -c "$CLIENTS" -j "$THREADS" -T "$WARMUP" >"$PGBASE/pgbench_warmup.out" 2>&1 || die "warm-up pgbench failed"
fi
say "cases: pgbench -c $CLIENTS -j $THREADS -T $DURATION, alone and beside three backfills over $N rows"
wanted() { case " $CASES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
run_case alone    "pgbench alone"
HALF_TPS=$(awk -F'\t' '$1 == "alone" { printf "%.0f", $3 / 2 }' "$RES")
wanted paced      && run_case paced    "beside pg_backfill, paced (1 lane, batch $PACED_BATCH, rate $PACED_RATE/s)"
wanted paced_nice10 && run_case paced_nice10 "beside pg_backfill, paced, backfill.lane_nice = 10"
wanted paced_nofg && run_case paced_nofg "beside pg_backfill, paced, backfill.foreground_throttle = off"
wanted unpaced    && run_case unpaced  "beside pg_backfill, unpaced (2 lanes, batch $PACED_BATCH, rate 100000/s)"
wanted loop       && run_case loop     "beside PL/pgSQL keyset loop (batch $PACED_BATCH, unpaced)"
wanted idle_pass  && run_case idle_pass "pg_backfill paced alone on the idle box (no pgbench)"
# the half-loaded pair HALF_REPS times, turn about: -R's p99 moves with every stall of this
# shared box, so the target compares medians
for r in $(seq 1 "$HALF_REPS"); do
    wanted half_alone && run_case "half_alone.$r" "pgbench -R $HALF_TPS (half of alone's tps) alone, rep $r"
    wanted half_paced && run_case "half_paced.$r" "pgbench -R $HALF_TPS beside pg_backfill, paced, rep $r"
    wanted half_nice10 && run_case "half_nice10.$r" "pgbench -R $HALF_TPS beside pg_backfill, paced, backfill.lane_nice = 10, rep $r"
done
LOAD_END=$(loadavg)

# ------------------------------------------------------------------ report
P99_ALONE=$(awk -F'\t' '$1 == "alone" { print $5 }' "$RES")
xalone() { awk -v a="$P99_ALONE" -v b="$1" 'BEGIN { if (a == "" || a == "-" || a == 0 || b == "-") print "-"; else printf "%.2f", b / a }'; }
fmt_int() { awk -v x="$1" 'BEGIN { if (x == "-") { print x; exit } s = sprintf("%.0f", x); o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) } print s o }'; }

echo
echo "## Foreground impact: pgbench -c $CLIENTS -j $THREADS -T $DURATION (scale $SCALE) beside a backfill of N = $(fmt_int "$N") rows"
echo
echo "PostgreSQL $PGVER, repo HEAD $EXTCOMMIT, pg_backfill.so installed $SOSTAMP, $(nproc) cores;" \
     "load average $LOAD_START at start, $LOAD_END at end."
echo
echo "| case | pgbench tps | p50 ms | p99 ms | p99 x alone | backfill rows done during the window |"
echo "|---|---:|---:|---:|---:|---:|"
while IFS=$'\t' read -r c label tps p50 p99 nx rows l0 l1 sp99 note; do
    printf '| %s | %.1f | %s | %s | %s | %s |\n' "$label" "$tps" "$p50" "$p99" "$(xalone "$p99")" "$(fmt_int "$rows")"
done <"$RES"
echo
while IFS=$'\t' read -r c label tps p50 p99 nx rows l0 l1 sp99 note; do
    echo "- $c: $(fmt_int "$nx") transactions logged; p99 less schedule lag $sp99 ms; load1 $l0 -> $l1${note:+; $note}"
done <"$RES"
echo
X=$(xalone "$(awk -F'\t' '$1 == "paced" { print $5 }' "$RES")")
V=$(awk -v x="$X" -v t="$TARGET" 'BEGIN { if (x == "-") print "n/a"; else if (x + 0 <= t) print "MET"; else print "NOT MET" }')
PACED_NOTE=$(awk -F'\t' '$1 == "paced" { print $11 }' "$RES")
case $PACED_NOTE in *"before pgbench did"*) V="$V (but the paced pass ended before pgbench did: raise N)" ;; esac
rps() { awk -F'\t' -v c="$1" -v d="$DURATION" '$1 == c { if ($7 == "-") print "-"; else printf "%.0f", $7 / d }' "$RES"; }
echo "paced backfill: p99 within ${TARGET}x of pgbench alone -> $V (${X}x; $(rps paced) rows/s in the window)"
XZ=$(xalone "$(awk -F'\t' '$1 == "paced_nice10" { print $5 }' "$RES")")
echo "paced backfill, backfill.lane_nice = 10: p99 ${XZ}x pgbench alone ($(rps paced_nice10) rows/s in the window) (information: what a lower CPU priority for the lanes does)"
XN=$(xalone "$(awk -F'\t' '$1 == "paced_nofg" { print $5 }' "$RES")")
echo "paced backfill, foreground throttle off: p99 ${XN}x pgbench alone ($(rps paced_nofg) rows/s in the window) (information: what the throttle buys)"
# the half-loaded box: the pass's rows/s against its own on the idle box, pgbench's p99 against
# pgbench alone at the same (-R) rate
col() { awk -F'\t' -v c="$1" -v k="$2" '$1 == c { print $k }' "$RES"; }
# the median of column k over the reps of a half-loaded case (c.1, c.2, ...)
medcol() { awk -F'\t' -v c="$1" -v k="$2" 'index($1, c ".") == 1 { print $k }' "$RES" | sort -g |
    awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
if wanted idle_pass && wanted half_alone && wanted half_paced; then
    KEEP_RATIO=$(awk -v a="$(medcol half_paced 7)" -v b="$(col idle_pass 7)" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }')
    HALF_X=$(awk -v a="$(medcol half_paced 5)" -v b="$(medcol half_alone 5)" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }')
    HV=$(awk -v k="$KEEP_RATIO" -v x="$HALF_X" -v t="$TARGET" 'BEGIN { if (k == "-" || x == "-") print "n/a"; else if (k + 0 >= 0.5 && x + 0 <= t) print "MET"; else print "NOT MET" }')
    SERV_X=$(awk -v a="$(medcol half_paced 10)" -v b="$(medcol half_alone 10)" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }')
    echo "half-loaded box (pgbench -R $HALF_TPS, $HALF_REPS reps, medians): the paced pass keeps ${KEEP_RATIO}x its idle-box rows/s ($(awk -v r="$(medcol half_paced 7)" -v d="$DURATION" 'BEGIN { printf "%.0f", r / d }') vs $(rps idle_pass); target >= 0.50) while pgbench's p99 is ${HALF_X}x pgbench alone at that rate (target <= ${TARGET}x) -> $HV"
    echo "half-loaded box: pgbench's p99 less its schedule lag ${SERV_X}x pgbench alone (information: the server's own time, without -R's queue for a client)"
    if wanted half_nice10; then
        N10_X=$(awk -v a="$(medcol half_nice10 5)" -v b="$(medcol half_alone 5)" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }')
        N10_K=$(awk -v a="$(medcol half_nice10 7)" -v b="$(col idle_pass 7)" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }')
        echo "half-loaded box with backfill.lane_nice = 10: the pass keeps ${N10_K}x its idle-box rows/s, pgbench's p99 ${N10_X}x alone (information: what a lower CPU priority for the lanes does)"
    fi
fi
echo
[ "$(date -u -r "$SOFILE" +%FT%TZ 2>/dev/null || echo unknown)" = "$SOSTAMP" ] ||
    echo "NOTE: $SOFILE was reinstalled during this run; the server kept the build installed at $SOSTAMP."
echo "pgbench outputs (with -r per-statement latencies and -P 5 progress): $PGBASE/pgbench_*.out; server log: $LOG"

# ------------------------------------------------------------------ csv
mkdir -p "$(dirname "$CSV")"
[ -s "$CSV" ] || echo "ts,n,duration_s,clients,threads,scale,pg,commit,so_installed,case,tps,p50_ms,p99_ms,p99_x_alone,txns,rows_done,load1_before,load1_after,target_met" >"$CSV"
TS=$(date -u +%FT%TZ)
while IFS=$'\t' read -r c label tps p50 p99 nx rows l0 l1 sp99 note; do
    met=-; [ "$c" = paced ] && met=${V%% (*}; met=${met// /_}
    echo "$TS,$N,$DURATION,$CLIENTS,$THREADS,$SCALE,$PGVER,$EXTCOMMIT,$SOSTAMP,$c,$tps,$p50,$p99,$(xalone "$p99"),$nx,$rows,$l0,$l1,$met" >>"$CSV"
done <"$RES"
echo "Appended $(wc -l <"$RES") rows to $CSV"
