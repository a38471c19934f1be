#!/usr/bin/env bash
# bench/rehearse.sh: a rehearsal's projection against the real pass (issue 28 point 1), and
# what the batch history costs (point 3), on bench/run.sh's table (items, c = a * 2).
#
#   bench/rehearse.sh                   N = 1,000,000 rows
#   N=200000 REPS=1 bench/rehearse.sh   a quick run
#
# Rehearsal: on a fresh items, backfill_rehearse(name, 5) of a pass with the bench's settings
# (BATCH, LANES, rate 100000, asynchronous commits); then, on items fresh again, the real pass
# with the same declaration.  Prints the projected duration, the pass's own (ledger started_at
# to finished_at, which also holds the plan and the convergence count the projection leaves out)
# and the ratio projected / real; the target is within 30% (0.77 to 1.30).
# History: the same pass with backfill.batch_history = 100 and = 0, REPS times each, in turns
# (ABBA),
# each on a fresh items; rows/s from the ledger's duration; prints the medians and the cost of
# the history (1 - rows/s at 100 / rows/s at 0), and the same for the best run of each (the one
# other load slowed least: on a shared machine the spread between runs is larger than 3%); the
# target is at most 3%.  Then the history's statements alone, 5,000 times in one session: their
# time a batch against a batch's time without history (less noisy than two passes' rows/s).
#
# env:
#   N=1000000  BATCH=1000  LANES=1  REPS=3  HISTORY=100
#   PGBASE=/tmp/pg_backfill_rehearsebench   throwaway cluster (wiped at start; data removed at
#                             exit unless KEEP=1; server.log stays)
#   PGPORT=55474  PGBIN=/usr/lib/postgresql/15/bin (a server with pg_backfill installed)
#   CSV=bench/results/rehearse.csv  one row per run is appended at the end
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
N=${N:-1000000}
BATCH=${BATCH:-1000}
LANES=${LANES:-1}
REPS=${REPS:-3}
HISTORY=${HISTORY:-100}
PGBASE=${PGBASE:-/tmp/pg_backfill_rehearsebench}
PGPORT=${PGPORT:-55474}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGRUNAS=${PGRUNAS:-postgres}
CSV=${CSV:-$HERE/results/rehearse.csv}
KEEP=${KEEP:-0}
DATA=$PGBASE/data
LOG=$PGBASE/server.log

[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 1000 ] || { echo "rehearse.sh: N must be an integer >= 1000" >&2; exit 2; }
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "rehearse.sh: REPS must be a positive integer" >&2; exit 2; }
case $PGBASE in /|/tmp|/tmp/|"") echo "rehearse.sh: refusing PGBASE=$PGBASE" >&2; exit 2 ;; esac

ME=rehearse.sh
. "$HERE/lib.sh"

cleanup() {
    local rc=$?
    if pg_running; then as_owner "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 120 stop >/dev/null || true; fi
    if [ "$KEEP" != 1 ] && [ -d "$DATA" ]; then rm -rf "$DATA"; fi
    [ $rc -eq 0 ] || echo "rehearse.sh: FAILED (exit $rc); server log: $LOG" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

Q() { PGHOST=$PGBASE PGPORT=$PGPORT PGOPTIONS="-c client_min_messages=warning" "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -U postgres -d postgres "$@"; }
median() { sort -g | awk '{a[NR]=$1} END { if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }

# items fresh from items_src (a new table: the name declared again over it)
declare_pass() {  # name
    Q -f "$HERE/sql/fresh_items.sql" >/dev/null
    Q -c "SELECT backfill_declare(name => '$1', relation => 'items', predicate => 'c IS NULL',
              set => 'c = a * 2', batch_size => $BATCH, rate => 100000, max_parallel => $LANES,
              async_commit => true)" >/dev/null
}

# a pass of a declared name: its seconds (ledger), once every row is checked done
real_pass() {  # name
    local run status bad
    run=$(Q -c "SELECT backfill_run('$1', force => true)")
    status=$(Q -c "SELECT backfill_wait($run, '30 min')")
    [ "$status" = completed ] || die "backfill $1 (run $run) ended as '$status'"
    bad=$(Q -c "SELECT count(*) FROM items WHERE c IS DISTINCT FROM a * 2")
    [ "$bad" = 0 ] || die "VERIFY FAILED: $bad rows of items not done after run $run"
    Q -c "SELECT extract(epoch FROM finished_at - started_at) FROM backfill.ledger WHERE run_id = $run"
}

set_history() {  # n
    Q -c "ALTER SYSTEM SET backfill.batch_history = $1" -c "SELECT pg_reload_conf()" >/dev/null
    for _ in $(seq 1 50); do [ "$(Q -c 'SHOW backfill.batch_history')" = "$1" ] && return; sleep 0.1; done
    die "backfill.batch_history did not become $1"
}

fresh_cluster
say "building items_src with N=$N rows"
Q -v n="$N" -f "$HERE/sql/make_src.sql"

# ------------------------------------------------------------------ rehearsal vs the pass
set_history "$HISTORY"
declare_pass rehearsed
Q -c "CREATE TABLE rehearsal AS SELECT * FROM backfill_rehearse('rehearsed', 5)"
IFS='|' read -r P_ROWS P_BATCHES P_MS P_WAL P_WHY < <(Q -F'|' -c "
    SELECT rows, batch, round(ms), wal_bytes, assumptions FROM rehearsal WHERE kind = 'projection'")
[ -n "$P_MS" ] || die "the rehearsal projected nothing: $P_WHY"
Q -F' ' -c "SELECT 'rehearsed batch', batch, position, rows, round(ms::numeric, 1) || ' ms',
                   wal_bytes || ' B WAL', key_scan_index, action_index
              FROM rehearsal WHERE kind = 'batch' ORDER BY batch" | while read -r l; do say "$l"; done
declare_pass rehearsed
REAL=$(real_pass rehearsed)
RATIO=$(echo "$P_MS / 1000 / $REAL" | bc -l)
say "projection: $P_ROWS rows in $P_BATCHES batches, $(printf '%.2f' "$(echo "$P_MS / 1000" | bc -l)") s, $P_WAL bytes of WAL"
say "assumptions: $P_WHY"
say "real pass: $(printf '%.2f' "$REAL") s (ledger, plan and count included)"
MET=$(echo "$RATIO >= 0.77 && $RATIO <= 1.30" | bc -l)
say "$(printf 'projected / real = %.2f (target 0.77..1.30): %s' "$RATIO" "$([ "$MET" = 1 ] && echo MET || echo 'NOT MET')")"

# ------------------------------------------------------------------ the history's cost
: >"$PGBASE/h100"; : >"$PGBASE/h0"
for rep in $(seq 1 "$REPS"); do
    # ABBA: the setting that goes first alternates, so that a load that grows or fades
    # over the run favours neither
    order="$HISTORY 0"; [ $((rep % 2)) = 0 ] && order="0 $HISTORY"
    for n in $order; do
        set_history "$n"
        declare_pass history
        secs=$(real_pass history)
        rps=$(echo "$N / $secs" | bc -l)
        echo "$rps" >>"$PGBASE/h$([ "$n" = 0 ] && echo 0 || echo 100)"
        say "$(printf 'batch_history = %-4s rep %s: %7.2f s  %9.0f rows/s' "$n" "$rep" "$secs" "$rps")"
    done
done
R100=$(median <"$PGBASE/h100"); R0=$(median <"$PGBASE/h0")
COST=$(echo "(1 - $R100 / $R0) * 100" | bc -l)
# the best run of each: the one other load on the machine slowed least
B100=$(sort -g "$PGBASE/h100" | tail -1); B0=$(sort -g "$PGBASE/h0" | tail -1)
BCOST=$(echo "(1 - $B100 / $B0) * 100" | bc -l)
say "$(printf 'median rows/s: batch_history = %s %.0f, = 0 %.0f; the history costs %.1f%% (target <= 3%%): %s' \
    "$HISTORY" "$R100" "$R0" "$COST" "$([ "$(echo "$COST <= 3" | bc -l)" = 1 ] && echo MET || echo 'NOT MET')")"
say "$(printf 'best rows/s: batch_history = %s %.0f, = 0 %.0f; the history costs %.1f%%' \
    "$HISTORY" "$B100" "$B0" "$BCOST")"

# the history's statements alone, timed in one session: what a lane adds to each batch (an
# INSERT, and every 16th batch the prune), against a batch's time without history
US=$(Q -c "DO \$\$ DECLARE t0 timestamptz := clock_timestamp(); BEGIN
      FOR i IN 1..5000 LOOP
        INSERT INTO backfill.batch (run_id, part_no, first_key, last_key, rows, ms, wal_bytes,
                                    batch_size, throttle)
             VALUES (-1, 0, (i * 1000)::text, (i * 1000 + 999)::text, 1000, 5.0, 400000, 1000, NULL);
        IF i % 16 = 0 THEN
          DELETE FROM backfill.batch b WHERE b.run_id = -1 AND b.seq IN (
            SELECT o.seq FROM backfill.batch o WHERE o.run_id = -1 ORDER BY o.seq DESC
            OFFSET $HISTORY LIMIT 256);
        END IF;
      END LOOP;
      PERFORM set_config('bench.us', (extract(epoch FROM clock_timestamp() - t0) * 1e6 / 5000)::text, false);
      DELETE FROM backfill.batch WHERE run_id = -1;
    END \$\$;
    SELECT current_setting('bench.us')")
BATCH_MS=$(echo "1000 * $N / $R0 / (($N + $BATCH - 1) / $BATCH)" | bc -l)
say "$(printf 'the history statements alone: %.0f us a batch, %.1f%% of a batch without history (%.2f ms at batch %s)' \
    "$US" "$(echo "$US / 10 / $BATCH_MS" | bc -l)" "$BATCH_MS" "$BATCH")"

mkdir -p "$(dirname "$CSV")"
[ -s "$CSV" ] || echo "date,commit,n,batch,lanes,projected_s,real_s,ratio,history,reps,rows_s_history,rows_s_none,history_cost_pct" >"$CSV"
printf '%s,%s,%s,%s,%s,%.3f,%.3f,%.3f,%s,%s,%.0f,%.0f,%.2f\n' "$(date -u +%FT%TZ)" "$EXTCOMMIT" "$N" "$BATCH" \
    "$LANES" "$(echo "$P_MS / 1000" | bc -l)" "$REAL" "$RATIO" "$HISTORY" "$REPS" "$R100" "$R0" "$COST" >>"$CSV"
