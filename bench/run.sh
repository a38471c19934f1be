#!/usr/bin/env bash
# bench/run.sh: pg_backfill against a single UPDATE and a hand-written PL/pgSQL loop.
#
#   bench/run.sh [N]          N rows (default 5000000; 1000000 for a quick run)
#
# env:
#   REPS=1                    repetitions per case (the tables show the median when > 1)
#   BATCHES="200 1000 10000"  batch sizes of the loop and pg_backfill cases (asynchronous
#                             lane commits; one more case at the smallest, synchronous)
#   PGBASE=/tmp/pg_backfill_bench   throwaway cluster (wiped at start; data removed at exit
#                             unless KEEP=1; server.log stays)
#   PGPORT=55470  PGBIN=/usr/lib/postgresql/15/bin
#   CSV=bench/results/bench.csv     one row per measured case is appended at the end
#   PARTITIONED_ONLY=1        only the partitioned pair (plain vs 8 leaves, planned per leaf)
#   SPEED_ONLY=1              only the speed comparison of issue 29: the PL/pgSQL loop, the
#                             app-side client loop (app_loop.py: python3 + psycopg2 over TCP,
#                             autocommit) and pg_backfill 1 lane at each batch size, side by
#                             side in each repetition (BATCHES defaults to "200 1000 5000 10000"
#                             here); prints the ratios and the targets, appends to the CSV
#   SPEED_SHAPES="plain wide" with SPEED_ONLY, the shapes one run measures, each with its own table
#                             (the wide one at N_WIDE=500000 rows); with N_BIG too, the scale pair of
#                             issue 29 point 4 (1 lane and the loop at batch 1000 on N_SCALE=5000000
#                             and N_BIG rows; target: rows/s at N_BIG >= 0.85x N_SCALE)
#   SHAPE=wide                the wide table instead (sql/make_src_wide.sql, fresh_items_wide.sql:
#                             ~330-byte rows, keys with gaps, an index on c so no update is HOT);
#                             N defaults to 500000 and the composite and partitioned pairs are off
#   PG_CONFIG=                the server whose binaries (and pg_backfill.so) to use: PGBIN is its
#                             --bindir unless PGBIN is set
#   N_BIG=                    also run pg_backfill at batch 1000 with 1 and 2 lanes on N_BIG rows
#                             (20000000 for issue 13's scale target: rows/s within 10% of N,
#                             lane RssAnon flat within 1 MB); unset: those target lines say n/a
#
# Every case starts from a fresh copy of items_src (sql/fresh_items.sql: create, insert in
# id order, primary key, VACUUM ANALYZE, CHECKPOINT). Wall time is client-side around the
# whole job (psql start-up included), as in /work/shared/bench/baseline.sh.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SHAPE=${SHAPE:-plain}
SHAPE0=$SHAPE
case $SHAPE in
    plain) N=${1:-5000000} ;;
    wide)  N=${1:-500000}; COMPOSITE=${COMPOSITE:-0}; PARTITIONED=${PARTITIONED:-0} ;;
    *) echo "run.sh: SHAPE must be plain or wide" >&2; exit 2 ;;
esac
REPS=${REPS:-1}
SPEED_ONLY=${SPEED_ONLY:-0}
if [ "$SPEED_ONLY" = 1 ]; then BATCHES=${BATCHES:-"200 1000 5000 10000"}; fi
# SPEED_ONLY: the shapes whose speed tables one run prints (the wide one at N_WIDE rows),
# and with N_BIG the scale pair at N_SCALE and N_BIG rows
if [ -z "${SPEED_SHAPES:-}" ]; then
    SPEED_SHAPES=$SHAPE0; [ "$SHAPE0" = plain ] && SPEED_SHAPES="plain wide"
fi
N_WIDE=${N_WIDE:-500000}; [ "$SHAPE0" = wide ] && N_WIDE=$N
N_SCALE=${N_SCALE:-5000000}
BATCHES=${BATCHES:-"200 1000 10000"}
PGBASE=${PGBASE:-/tmp/pg_backfill_bench}
PGPORT=${PGPORT:-55470}
if [ -z "${PGBIN:-}" ] && [ -n "${PG_CONFIG:-}" ]; then PGBIN=$("$PG_CONFIG" --bindir); fi
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGRUNAS=${PGRUNAS:-postgres}
CSV=${CSV:-$HERE/results/bench.csv}
KEEP=${KEEP:-0}
DATA=$PGBASE/data
LOG=$PGBASE/server.log
SAMPLE_INTERVAL=0.5
RSS_FLAT_KB=${RSS_FLAT_KB:-4096}   # RssAnon growth first->last sample that still counts as flat

[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 1000 ] || { echo "run.sh: N must be an integer >= 1000" >&2; exit 2; }
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: REPS must be a positive integer" >&2; exit 2; }
case $PGBASE in /|/tmp|/tmp/|"") echo "run.sh: refusing PGBASE=$PGBASE" >&2; exit 2 ;; esac

TMP=$(mktemp -d /tmp/pg_backfill_bench_run.XXXXXX)
SAMPLER_PID=
KEY_PREFIX=                # "big:" while the N_BIG scale cases run

ME=run.sh
# the app-side client loop connects over TCP, as an application does
BENCH_LISTEN=127.0.0.1
. "$HERE/lib.sh"
# the app-side client loop needs psycopg2 (Debian: python3-psycopg2); without it, one SKIP line
# (PYTHON: the interpreter; Debian's package serves /usr/bin/python3, which a python3
# of pyenv or a virtualenv earlier on PATH may not see)
APP=1
if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    $PYTHON -c 'import psycopg2' 2>/dev/null || PYTHON=/usr/bin/python3
fi
if ! "$PYTHON" -c 'import psycopg2' 2>/dev/null; then
    APP=0
    echo "SKIP: app-side client loop (python3-psycopg2 is not installed: apt-get install python3-psycopg2)"
fi

cleanup() {
    local rc=$?
    if [ -n "$SAMPLER_PID" ]; then touch "$TMP/stop"; kill "$SAMPLER_PID" 2>/dev/null || true; fi
    if pg_running; then as_owner "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 120 stop >/dev/null || true; fi
    if [ "$KEEP" != 1 ] && [ -d "$DATA" ]; then rm -rf "$DATA"; fi
    rm -rf "$TMP"
    [ $rc -eq 0 ] || echo "run.sh: FAILED (exit $rc); server log: $LOG" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

Q() { PGHOST=$PGBASE PGPORT=$PGPORT PGOPTIONS="-c client_min_messages=warning" "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -U postgres -d postgres "$@"; }

# ------------------------------------------------------------------ cluster
fresh_cluster

say "building items_src with N=$N rows"
SRC_SQL=$HERE/sql/make_src.sql; FRESH_SQL=$HERE/sql/fresh_items.sql
[ "$SHAPE" = wide ] && { SRC_SQL=$HERE/sql/make_src_wide.sql; FRESH_SQL=$HERE/sql/fresh_items_wide.sql; }
t=$(now); Q -v n="$N" -f "$SRC_SQL"
say "items_src built in $(echo "$(now) - $t" | bc -l | xargs printf '%.1f') s"

# ------------------------------------------------------------------ helpers
# lsn|autovacuums of items|checkpoints|heap bytes
snap() {
    Q -F'|' -c "SELECT pg_current_wal_lsn(),
                       (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = 'items'::regclass),
                       (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter),
                       pg_relation_size('items')"
}

# Background: every SAMPLE_INTERVAL, the lanes' pids from pg_stat_activity and their memory.
# Writes "epoch pid VmHWM VmRSS RssAnon RssShmem" (kB) lines to $1 until $TMP/stop exists.
sampler() {
    local out=$1 pids p
    while [ ! -e "$TMP/stop" ]; do
        pids=$(Q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'" 2>/dev/null || true)
        for p in $pids; do
            awk -v t="$(now)" -v p="$p" '
                /^VmHWM:/ {h=$2} /^VmRSS:/ {r=$2} /^RssAnon:/ {a=$2} /^RssShmem:/ {s=$2}
                END { if (r != "") print t, p, h, r, a, s }' "/proc/$p/status" 2>/dev/null >>"$out" || true
        done
        sleep "$SAMPLE_INTERVAL"
    done
}

median() { sort -g | awk '{a[NR]=$1} END { if (NR == 0) print ""; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }

# results: one line per measured run, tab-separated
#  key kind lanes batch rep secs wal autovac ckpts heap_after partitions plan lane_starts batches
#  server_s startup_s rss_first rss_last anon_first anon_last hwm_peak samples npids
RES=$TMP/results.tsv
: >"$RES"

run_case() {  # kind lanes batch rep
    local kind=$1 lanes=$2 b=$3 rep=$4 key name out t0 t1 secs lsn0 av0 ck0 h0 lsn1 av1 ck1 h1 wal bad
    local parts=- plan=- lstarts=- batches=- server_s=- startup_s=- rf=- rl=- af=- al=- hwm=- ns=0 np=0
    key="${KEY_PREFIX}$kind:$lanes:$b"
    Q -f "$FRESH_SQL"
    case $kind in
        bf|bfsync)
            name="bench_${SHAPE}_${KEY_PREFIX//:/_}${kind}_${lanes}_${b}_${rep}"
            Q -c "SELECT backfill_declare(name => '$name', relation => 'items', predicate => 'c IS NULL',
                      set => 'c = a * 2',
                      batch_size => $b, rate => 100000, max_parallel => $lanes,
                      async_commit => $([ "$kind" = bf ] && echo true || echo false))" >/dev/null
            rm -f "$TMP/stop" "$TMP/samples"; : >"$TMP/samples"
            sampler "$TMP/samples" & SAMPLER_PID=$!
            ;;
    esac
    IFS='|' read -r lsn0 av0 ck0 h0 < <(snap)
    t0=$(now)
    case $kind in
        single) Q -c "UPDATE items SET c = a * 2 WHERE c IS NULL" >/dev/null ;;
        loop)   Q -c "CALL bench_keyset_loop($b)" >/dev/null ;;
        app)    "$PYTHON" "$HERE/app_loop.py" "$PGPORT" "$b" >/dev/null || die "app_loop.py failed" ;;
        bf|bfsync) out=$(Q -F'|' <<SQL
SELECT backfill_run('$name') AS run_id \gset
SELECT :run_id, backfill_wait(:run_id, '30 min');
SQL
) ;;
    esac
    t1=$(now)
    if [ "$kind" = bf ] || [ "$kind" = bfsync ]; then
        touch "$TMP/stop"; wait "$SAMPLER_PID" || true; SAMPLER_PID=
        local run_id=${out%%|*} status=${out#*|}
        [ "$status" = completed ] || die "backfill $name (run $run_id) ended as '$status', not 'completed'"
        IFS='|' read -r parts plan batches server_s startup_s lstarts < <(Q -F'|' -c "
            SELECT s.partitions, s.plan_method, s.batches,
                   round(extract(epoch FROM l.finished_at - l.started_at)::numeric, 2),
                   round(extract(epoch FROM (SELECT min(p.started_at) FROM backfill.partition p
                                              WHERE p.run_id = l.run_id) - l.started_at)::numeric, 2),
                   r.lane_starts
              FROM backfill_status('$name') s
              JOIN backfill.ledger l ON l.run_id = s.run_id
              JOIN backfill.run r ON r.run_id = s.run_id")
        if [ -s "$TMP/samples" ]; then
            # first sample, and the last sample of the same pid; peak VmHWM over all lanes
            read -r rf af rl al hwm ns np < <(awk '
                NR == 1 { p0 = $2; rf = $4; af = $5 }
                $2 == p0 { rl = $4; al = $5 }
                { if ($3 > hwm) hwm = $3; seen[$2] = 1 }
                END { n = 0; for (k in seen) n++; print rf, af, rl, al, hwm, NR, n }' "$TMP/samples")
            cp "$TMP/samples" "$PGBASE/samples_${name}.txt"
        fi
    fi
    # backend stats reach the cumulative stats asynchronously; give them a moment
    sleep 1
    IFS='|' read -r lsn1 av1 ck1 h1 < <(snap)
    wal=$(Q -c "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')::bigint")
    bad=$(Q -c "SELECT count(*) FROM items WHERE c IS DISTINCT FROM a * 2")
    [ "$bad" = 0 ] || die "VERIFY FAILED: $bad rows of items have c IS DISTINCT FROM a*2 after case $key rep $rep"
    secs=$(echo "$t1 - $t0" | bc -l)
    printf '%s\t%s\t%s\t%s\t%s\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$key" "$kind" "$lanes" "$b" "$rep" "$secs" "$wal" $((av1 - av0)) $((ck1 - ck0)) "$h1" \
        "$parts" "$plan" "$lstarts" "$batches" "$server_s" "$startup_s" \
        "$rf" "$rl" "$af" "$al" "$hwm" "$ns" "$np" >>"$RES"
    local extra=""
    [ "$kind" = bf ] || [ "$kind" = bfsync ] && extra=" | partitions $parts ($plan), lane starts $lstarts, batches $batches, \
run->first claim ${startup_s}s, lane RSS ${rf}->${rl} kB (anon ${af}->${al} kB), peak HWM ${hwm} kB, $np pid(s), $ns samples"
    say "$(printf '%-7s lanes=%-2s batch=%-6s rep=%s: %7.2f s  %8.0f rows/s  WAL %5.0f B/row  verify ok%s' \
        "$kind" "$lanes" "$b" "$rep" "$secs" "$(echo "$N / $secs" | bc -l)" "$(echo "$wal / $N" | bc -l)" "$extra")"
}

# ------------------------------------------------------------------ composite key (issue 12)
# The same rows and the same action keyed (tenant_id, id) (sql/fresh_items_ck.sql), beside
# the single-key pass at the same batch size, 1 lane; target: a composite key costs at most
# 10% more per row.  The action is the README's four-branch form ("A composite key"): each
# branch an index scan that starts at the batch's first key and stops at its last (on
# PostgreSQL 15 a row comparison's upper bound does not stop a scan before the end of its
# leading value, and an equality on the leading column replaces a row comparison as the
# scan's start, so ">= ($1, $2) AND (tenant_id < $3 OR (tenant_id = $3 AND id <= $4))"
# read from the start of the tenant to the batch, more in every batch: 1.34x-1.55x at 1M
# rows).  COMPOSITE_BATCHES="1000" the batch sizes; COMPOSITE=0 skips the pair;
# COMPOSITE_ONLY=1 runs only the pair (a quick check at a small N).
COMPOSITE_BATCHES=${COMPOSITE_BATCHES:-1000}
CK_RES=$TMP/composite.tsv
: >"$CK_RES"

# form: hand (the README's four-branch action written by hand) or set (set => 'c = a * 2': the
# engine writes the statement, issue 24); the set form is compared with the hand form (ck_set_report)
ck_case() {  # batch rep [form] -> one line "batch rep secs form" in $CK_RES
    local b=$1 rep=$2 form=${3:-hand} name="bench_ck_1_${b}_${rep}_${3:-hand}" t0 t1 out status bad
    Q -v n="$N" -f "$HERE/sql/fresh_items_ck.sql"
    if [ "$form" = set ]; then
        Q -c "SELECT backfill_declare(name => '$name', relation => 'items_ck', predicate => 'c IS NULL',
              set => 'c = a * 2', batch_size => $b, rate => 100000, max_parallel => 1)" >/dev/null
    else
    Q -c "SELECT backfill_declare(name => '$name', relation => 'items_ck', predicate => 'c IS NULL',
              action => 'UPDATE items_ck SET c = a * 2
                          WHERE ((tenant_id = \$1 AND tenant_id = \$3 AND id BETWEEN \$2 AND \$4)
                              OR (tenant_id = \$1 AND tenant_id < \$3 AND id >= \$2)
                              OR (tenant_id > \$1 AND tenant_id < \$3)
                              OR (tenant_id = \$3 AND tenant_id > \$1 AND id <= \$4)) AND c IS NULL',
              batch_size => $b, rate => 100000, max_parallel => 1)" >/dev/null
    fi
    t0=$(now)
    out=$(Q -F'|' <<SQL
SELECT backfill_run('$name') AS run_id \gset
SELECT :run_id, backfill_wait(:run_id, '30 min');
SQL
)
    t1=$(now)
    status=${out#*|}
    [ "$status" = completed ] || die "backfill $name ended as '$status', not 'completed'"
    bad=$(Q -c "SELECT count(*) FROM items_ck WHERE c IS DISTINCT FROM a * 2")
    [ "$bad" = 0 ] || die "VERIFY FAILED: $bad rows of items_ck have c IS DISTINCT FROM a*2"
    printf '%s\t%s\t%.3f\t%s\n' "$b" "$rep" "$(echo "$t1 - $t0" | bc -l)" "$form" >>"$CK_RES"
    say "$(printf 'composite (tenant_id, id) %-4s lanes=1 batch=%-6s rep=%s: %7.2f s  %8.0f rows/s  verify ok' \
        "$form" "$b" "$rep" "$(echo "$t1 - $t0" | bc -l)" "$(echo "$N / ($t1 - $t0)" | bc -l)")"
    Q -c "DROP TABLE items_ck" >/dev/null
}

ck_pairs() {  # the single-key pass (run_case) and the composite one, back to back
    local b rep
    for b in $COMPOSITE_BATCHES; do
        for rep in $(seq 1 "$REPS"); do
            awk -F'\t' -v k="bf:1:$b" -v r="$rep" '$1 == k && $5 == r { f = 1 } END { exit !f }' "$RES" ||
                run_case bf 1 "$b" "$rep"
            ck_case "$b" "$rep"
            ck_case "$b" "$rep" set
        done
    done
}

ck_report() {
    local b s c x
    echo
    echo "Composite key (tenant_id, id) against the single key id: same rows, same action, 1 lane"
    echo
    echo "| batch | single key s | composite key s | composite / single (per row) | target <= 1.10 |"
    echo "|---:|---:|---:|---:|---|"
    for b in $COMPOSITE_BATCHES; do
        s=$(awk -F'\t' -v k="bf:1:$b" '$1 == k { print $6 }' "$RES" | median)
        c=$(awk -F'\t' -v k="$b" '$1 == k && $4 == "hand" { print $3 }' "$CK_RES" | median)
        x=$(awk -v a="$c" -v b="$s" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }')
        printf '| %s | %.2f | %.2f | %sx | %s |\n' "$b" "$s" "$c" "$x" \
            "$(awk -v x="$x" 'BEGIN { if (x == "-") print "n/a"; else if (x + 0 <= 1.10) print "MET"; else print "NOT MET" }')"
    done
}

# the statement the engine writes (set =>) against the four-branch action written by hand
ck_set_report() {
    local b h t x
    echo
    echo "Composite key (tenant_id, id): set => 'c = a * 2' against the hand-written four-branch action, 1 lane"
    echo
    echo "| batch | hand-written s | set s | set / hand-written (per row) | target <= 1.05 |"
    echo "|---:|---:|---:|---:|---|"
    for b in $COMPOSITE_BATCHES; do
        h=$(awk -F'\t' -v k="$b" '$1 == k && $4 == "hand" { print $3 }' "$CK_RES" | median)
        t=$(awk -F'\t' -v k="$b" '$1 == k && $4 == "set" { print $3 }' "$CK_RES" | median)
        x=$(awk -v a="$t" -v b="$h" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }')
        printf '| %s | %.2f | %.2f | %sx | %s |\n' "$b" "$h" "$t" "$x" \
            "$(awk -v x="$x" 'BEGIN { if (x == "-") print "n/a"; else if (x + 0 <= 1.05) print "MET"; else print "NOT MET" }')"
    done
}

if [ "${COMPOSITE_ONLY:-0}" = 1 ]; then
    ck_pairs
    ck_report
    ck_set_report
    exit 0
fi
# ------------------------------------------------------------------ end of composite key (issue 12)

# ------------------------------------------------------------------ partitioned, per leaf (issue 12, item 4)
# The composite case's rows and action, once in the plain table items_ck and once in items_pt,
# RANGE-partitioned on tenant_id into 8 leaves (sql/fresh_items_pt.sql), planned per leaf: each
# batch's key scan names the parent and is pruned to one leaf, read through its own index;
# 1 lane.  The ratio is the cost per row of a leaf against the plain table.
# PARTITIONED_BATCHES="1000" the batch sizes; PARTITIONED=0 skips it; PARTITIONED_ONLY=1 runs
# only it (a quick check at a small N).
PARTITIONED_BATCHES=${PARTITIONED_BATCHES:-1000}
PT_RES=$TMP/partitioned.tsv
: >"$PT_RES"

pt_case() {  # table batch rep -> one line "table batch rep secs plan" in $PT_RES
    local table=$1 b=$2 rep=$3 name="bench_${1}_${2}_${3}" t0 t1 out status bad plan
    Q -v n="$N" -f "$HERE/sql/fresh_${table}.sql"
    Q -c "SELECT backfill_declare(name => '$name', relation => '$table', predicate => 'c IS NULL',
              action => 'UPDATE $table SET c = a * 2
                          WHERE ((tenant_id = \$1 AND tenant_id = \$3 AND id BETWEEN \$2 AND \$4)
                              OR (tenant_id = \$1 AND tenant_id < \$3 AND id >= \$2)
                              OR (tenant_id > \$1 AND tenant_id < \$3)
                              OR (tenant_id = \$3 AND tenant_id > \$1 AND id <= \$4)) AND c IS NULL',
              batch_size => $b, rate => 100000, max_parallel => 1)" >/dev/null
    t0=$(now)
    out=$(Q -F'|' <<SQL
SELECT backfill_run('$name') AS run_id \gset
SELECT :run_id, backfill_wait(:run_id, '30 min');
SQL
)
    t1=$(now)
    status=${out#*|}
    [ "$status" = completed ] || die "backfill $name ended as '$status', not 'completed'"
    bad=$(Q -c "SELECT count(*) FROM $table WHERE c IS DISTINCT FROM a * 2")
    [ "$bad" = 0 ] || die "VERIFY FAILED: $bad rows of $table have c IS DISTINCT FROM a*2"
    plan=$(Q -c "SELECT plan_method FROM backfill.run WHERE run_id = ${out%%|*}")
    printf '%s\t%s\t%s\t%.3f\t%s\n' "$table" "$b" "$rep" "$(echo "$t1 - $t0" | bc -l)" "$plan" >>"$PT_RES"
    say "$(printf '%-9s lanes=1 batch=%-6s rep=%s: %7.2f s  %8.0f rows/s  verify ok (%s)' \
        "$table" "$b" "$rep" "$(echo "$t1 - $t0" | bc -l)" "$(echo "$N / ($t1 - $t0)" | bc -l)" "$plan")"
    Q -c "DROP TABLE $table" >/dev/null
}

pt_pairs() {
    local b rep
    for b in $PARTITIONED_BATCHES; do
        for rep in $(seq 1 "$REPS"); do
            pt_case items_ck "$b" "$rep"
            pt_case items_pt "$b" "$rep"
        done
    done
}

pt_report() {
    local b p l x
    echo
    echo "Partitioned (8 leaves by RANGE on tenant_id, planned per leaf) against the plain table:"
    echo "same rows, same action, key (tenant_id, id), 1 lane"
    echo
    echo "| batch | plain s | partitioned s | partitioned / plain (per row) | plan |"
    echo "|---:|---:|---:|---:|---|"
    for b in $PARTITIONED_BATCHES; do
        p=$(awk -F'\t' -v b="$b" '$1 == "items_ck" && $2 == b { print $4 }' "$PT_RES" | median)
        l=$(awk -F'\t' -v b="$b" '$1 == "items_pt" && $2 == b { print $4 }' "$PT_RES" | median)
        x=$(awk -v a="$l" -v b="$p" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }')
        printf '| %s | %.2f | %.2f | %sx | %s |\n' "$b" "$p" "$l" "$x" \
            "$(awk -F'\t' -v b="$b" '$1 == "items_pt" && $2 == b { print $5; exit }' "$PT_RES")"
    done
}

if [ "${PARTITIONED_ONLY:-0}" = 1 ]; then
    pt_pairs
    pt_report
    exit 0
fi
# ------------------------------------------------------------------ end of partitioned, per leaf (issue 12, item 4)

# ------------------------------------------------------------------ speed (issue 29)
# The PL/pgSQL loop, the app-side client loop (app_loop.py) and pg_backfill 1 lane at each batch
# size, side by side in every repetition (the order turned round in every other one, so that
# neither always runs first); the ratios from the medians.  SPEED_ONLY=1 runs only these.
SPEED_CSV=${SPEED_CSV:-$HERE/results/speed.csv}

speed_pairs() {
    local b rep kinds k
    for rep in $(seq 1 "$REPS"); do
        for b in $BATCHES; do
            kinds="loop app bf"
            [ $((rep % 2)) = 0 ] && kinds="bf app loop"
            for k in $kinds; do
                [ "$k" = app ] && [ "$APP" = 0 ] && continue
                [ "$k" = bf ] && { run_case bf 1 "$b" "$rep"; continue; }
                run_case "$k" - "$b" "$rep"
            done
            awk '{ print $1 }' /proc/loadavg >>"$TMP/load"
        done
    done
}

speed_med() {  # key -> median seconds
    awk -F'\t' -v k="$1" '$1 == k { print $6 }' "$RES" | median
}

speed_report() {
    local b l a f small large x loads
    loads=$(sort -g "$TMP/load" | awk '{ a[NR] = $1 } END { printf "%s (min %s, max %s)", a[int((NR + 1) / 2)], a[1], a[NR] }')
    echo
    echo "## Speed (issue 29): $SHAPE table, N = $N rows, REPS = $REPS (medians), 1 lane, load average (1 min) after each batch size: median $loads, $(nproc) cores"
    echo
    echo "| batch | PL/pgSQL loop rows/s | app-side loop rows/s | pg_backfill rows/s | pg_backfill / PL/pgSQL | pg_backfill / app-side | autovacuums of items in loop / app / pg_backfill (all reps) |"
    echo "|---:|---:|---:|---:|---:|---:|---|"
    for b in $BATCHES; do
        l=$(speed_med "loop:-:$b"); a=$(speed_med "app:-:$b"); f=$(speed_med "bf:1:$b")
        printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$b" \
            "$(awk -v n="$N" -v s="$l" 'BEGIN { printf "%.0f", n / s }')" \
            "$(awk -v n="$N" -v s="$a" 'BEGIN { if (s == "") print "-"; else printf "%.0f", n / s }')" \
            "$(awk -v n="$N" -v s="$f" 'BEGIN { printf "%.0f", n / s }')" \
            "$(awk -v a="$l" -v b="$f" 'BEGIN { printf "%.2fx", a / b }')" \
            "$(awk -v a="$a" -v b="$f" 'BEGIN { if (a == "") print "-"; else printf "%.2fx", a / b }')" \
            "$(for k in "loop:-:$b" "app:-:$b" "bf:1:$b"; do awk -F'\t' -v k="$k" '$1 == k { n += $8 } END { printf "%d ", n }' "$RES"; done | sed 's/ $//; s/ / \/ /g')"
    done
    echo
    echo "Targets (issue 29):"
    for b in $BATCHES; do
        x=$(awk -v a="$(speed_med "loop:-:$b")" -v b="$(speed_med "bf:1:$b")" 'BEGIN { printf "%.2f", a / b }')
        echo "- 1 lane >= 1.1x the PL/pgSQL loop, batch $b: ${x}x -> $(awk -v x="$x" 'BEGIN { print (x >= 1.1) ? "MET" : "NOT MET" }')"
    done
    for b in $BATCHES; do
        a=$(speed_med "app:-:$b")
        [ -n "$a" ] || { echo "- 1 lane against the app-side loop, batch $b: n/a (SKIP: no psycopg2)"; continue; }
        x=$(awk -v a="$a" -v b="$(speed_med "bf:1:$b")" 'BEGIN { printf "%.2f", a / b }')
        t=1.0; [ "$b" = 1000 ] && t=1.3
        echo "- 1 lane >= ${t}x the app-side client loop, batch $b: ${x}x -> $(awk -v x="$x" -v t="$t" 'BEGIN { print (x >= t) ? "MET" : "NOT MET" }')"
    done
    small=$(tr ' ' '\n' <<<"$BATCHES" | sort -n | head -1); large=$(tr ' ' '\n' <<<"$BATCHES" | sort -n | tail -1)
    x=$(awk -v a="$(speed_med "bf:1:$large")" -v b="$(speed_med "bf:1:$small")" 'BEGIN { printf "%.2f", a / b }')
    echo "- batch $small >= 0.85x the rows/s of batch $large (1 lane): ${x}x -> $(awk -v x="$x" 'BEGIN { print (x >= 0.85) ? "MET" : "NOT MET" }')"
    mkdir -p "$(dirname "$SPEED_CSV")"
    [ -s "$SPEED_CSV" ] || echo "ts,shape,n,pg,commit,case,batch,rep,secs,rows_per_s,batches,so_installed" >"$SPEED_CSV"
    awk -F'\t' -v OFS=, -v ts="$(date -u +%FT%TZ)" -v shape="$SHAPE" -v n="$N" -v pg="$PGVER" \
        -v c="$EXTCOMMIT" -v so="$SOSTAMP" '
        { print ts, shape, n, pg, c, $2 ($3 == "-" ? "" : $3), $4, $5, $6, sprintf("%.0f", n / $6), $14, so }' \
        "$RES" >>"$SPEED_CSV"
    echo "Appended $(wc -l <"$RES") rows to $SPEED_CSV"
}

# The scale pair of issue 29 point 4 (SPEED_ONLY with N_BIG): pg_backfill 1 lane at batch 1000
# on N_SCALE (5,000,000) rows and on N_BIG rows of the plain table, the PL/pgSQL loop at each
# as the control (what a bigger table costs any batched job); the lane's RssAnon first -> last.
speed_scale() {
    local n
    : >"$RES"
    for n in "$N_SCALE" "$N_BIG"; do
        N=$n; KEY_PREFIX="n$n:"
        say "scale pair: building items_src with $N rows"
        Q -v n="$N" -f "$HERE/sql/make_src.sql"
        run_case loop - 1000 1
        run_case bf 1 1000 1
    done
    KEY_PREFIX=
    local ls lb fs fb
    ls=$(speed_med "n$N_SCALE:loop:-:1000"); lb=$(speed_med "n$N_BIG:loop:-:1000")
    fs=$(speed_med "n$N_SCALE:bf:1:1000"); fb=$(speed_med "n$N_BIG:bf:1:1000")
    echo
    echo "## Scale (issue 29 point 4): plain table, batch 1000, 1 lane, $N_SCALE against $N_BIG rows"
    echo
    echo "| rows | PL/pgSQL loop rows/s | pg_backfill rows/s | lane RssAnon first -> last kB |"
    echo "|---:|---:|---:|---|"
    for n in "$N_SCALE" "$N_BIG"; do
        awk -F'\t' -v k="n$n:bf:1:1000" -v l="n$n:loop:-:1000" -v n="$n" '
            $1 == l { ls = $6 } $1 == k { fs = $6; a = $19 " -> " $20 }
            END { printf "| %d | %.0f | %.0f | %s |\n", n, n / ls, n / fs, a }' "$RES"
    done
    x=$(awk -v s="$fs" -v b="$fb" -v ns="$N_SCALE" -v nb="$N_BIG" 'BEGIN { printf "%.2f", (nb / b) / (ns / s) }')
    echo
    echo "- $N_BIG rows >= 0.85x the rows/s of $N_SCALE (1 lane, batch 1000): ${x}x -> $(awk -v x="$x" 'BEGIN { print (x >= 0.85) ? "MET" : "NOT MET" }')"
    echo "- the PL/pgSQL loop, the same: $(awk -v s="$ls" -v b="$lb" -v ns="$N_SCALE" -v nb="$N_BIG" 'BEGIN { printf "%.2f", (nb / b) / (ns / s) }')x (the control)"
    echo "- lane RssAnon flat (within $RSS_FLAT_KB kB) at $N_BIG rows: $(awk -F'\t' -v k="n$N_BIG:bf:1:1000" -v f="$RSS_FLAT_KB" '$1 == k { if ($19 == "-" || $20 == "-") print "n/a (no samples)"; else print ($20 - $19 <= f) ? "MET" : "NOT MET" }' "$RES")"
}

if [ "$SPEED_ONLY" = 1 ]; then
    say "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    N_FIRST=$N; src_of=$SHAPE0
    for shape in $SPEED_SHAPES; do
        SHAPE=$shape
        if [ "$shape" = wide ]; then
            SRC_SQL=$HERE/sql/make_src_wide.sql; FRESH_SQL=$HERE/sql/fresh_items_wide.sql; N=$N_WIDE
        else
            SRC_SQL=$HERE/sql/make_src.sql; FRESH_SQL=$HERE/sql/fresh_items.sql; N=$N_FIRST
        fi
        # the source built above serves the first shape when it is that shape
        if [ "$src_of" != "$shape" ]; then
            say "speed ($shape): building items_src with N=$N rows"
            Q -v n="$N" -f "$SRC_SQL"
            src_of=$shape
        fi
        : >"$RES"; : >"$TMP/load"
        speed_pairs
        speed_report
    done
    FRESH_SQL=$HERE/sql/fresh_items.sql
    if [ -n "${N_BIG:-}" ]; then speed_scale; fi
    exit 0
fi
# ------------------------------------------------------------------ end of speed (issue 29)

# ------------------------------------------------------------------ the cases
CASES=("single:-:-")
for b in $BATCHES; do CASES+=("loop:-:$b"); done
if [ "$APP" = 1 ]; then for b in $BATCHES; do CASES+=("app:-:$b"); done; fi
for l in 1 2; do for b in $BATCHES; do CASES+=("bf:$l:$b"); done; done
B_SMALL=$(tr ' ' '\n' <<<"$BATCHES" | sort -n | head -1)
B_LARGE=$(tr ' ' '\n' <<<"$BATCHES" | sort -n | tail -1)
CASES+=("bfsync:1:$B_SMALL")

T_ALL=$(now)
for c in "${CASES[@]}"; do
    IFS=: read -r kind lanes b <<<"$c"
    for rep in $(seq 1 "$REPS"); do run_case "$kind" "$lanes" "$b" "$rep"; done
done

# ------------------------------------------------------------------ scale (issue 13): N_BIG rows
# With N_BIG set (20000000 for the issue's target), items_src is rebuilt with N_BIG rows and
# pg_backfill runs again at batch 1000 with 1 and 2 lanes (keys big:bf:<lanes>:1000), and the
# PL/pgSQL loop at batch 1000 as the control (big:loop:-:1000: what the scale costs any batched
# job, checkpoints and a table larger than shared_buffers); the targets compare their rows/s with
# the same cases at N, and their lanes' RssAnon first -> last.
if [ -n "${N_BIG:-}" ]; then
    N_MAIN=$N; N=$N_BIG
    say "scale cases: building items_src with N_BIG=$N rows"
    Q -v n="$N" -f "$SRC_SQL"
    KEY_PREFIX=big:
    run_case loop - 1000 1
    for l in 1 2; do run_case bf "$l" 1000 1; done
    KEY_PREFIX=
    N=$N_MAIN
    # the composite and partitioned pairs below read items_src: N rows again, as their
    # single-key partner had (at N_BIG they compared 20,000,000 rows with 5,000,000)
    if [ "${COMPOSITE:-1}" = 1 ] || [ "${PARTITIONED:-1}" = 1 ]; then
        say "scale cases done: building items_src with N=$N rows again"
        Q -v n="$N" -f "$HERE/sql/make_src.sql"
    fi
fi
TOTAL=$(echo "$(now) - $T_ALL" | bc -l)

# ------------------------------------------------------------------ report
med() {  # key column -> median over reps
    awk -F'\t' -v k="$1" -v c="$2" '$1 == k { print $c }' "$RES" | median
}
first() {  # key column -> value of rep 1
    awk -F'\t' -v k="$1" -v c="$2" '$1 == k && $5 == 1 { print $c }' "$RES"
}
fmt_int() { awk -v x="$1" 'BEGIN { s = sprintf("%.0f", x); o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) } print s o }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2fx", a / b }'; }

S_SINGLE=$(med "single:-:-" 6)
declare -A S_LOOP
for b in $BATCHES; do S_LOOP[$b]=$(med "loop:-:$b" 6); done

echo
echo "## pg_backfill bench: N = $(fmt_int "$N") rows, REPS = $REPS$( [ "$REPS" -gt 1 ] && echo ' (medians)'), PostgreSQL $PGVER, repo HEAD $EXTCOMMIT, pg_backfill.so installed $SOSTAMP, $(nproc) cores"
echo
echo "| case | lanes | batch | wall s | rows/s | x single | x plpgsql loop (same batch) | WAL B/row |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for c in "${CASES[@]}"; do
    IFS=: read -r kind lanes b <<<"$c"
    s=$(med "$c" 6); w=$(med "$c" 7)
    case $kind in
        single) label="single UPDATE (1 txn)"; xl="-" ;;
        loop)   label="PL/pgSQL keyset loop, COMMIT per batch"; xl="1.00x" ;;
        app)    label="app-side client loop (psycopg2, TCP, autocommit)"; xl=$(ratio "${S_LOOP[$b]}" "$s") ;;
        bf)     label="pg_backfill"; xl=$(ratio "${S_LOOP[$b]}" "$s") ;;
        bfsync) label="pg_backfill, async_commit => false"; xl=$(ratio "${S_LOOP[$b]}" "$s") ;;
    esac
    printf '| %s | %s | %s | %.2f | %s | %s | %s | %.0f |\n' "$label" "$lanes" "$b" "$s" \
        "$(fmt_int "$(echo "$N / $s" | bc -l)")" "$(ratio "$S_SINGLE" "$s")" "$xl" "$(echo "$w / $N" | bc -l)"
done

echo
echo "pg_backfill passes (rep 1): partitions, plan, lanes, batches, start-up latency, lane memory"
echo
echo "| lanes | batch | partitions | plan_method | lane starts | lane pids seen | batches | batches/s | run -> first claim s | ledger duration s | lane VmRSS first -> last kB | lane RssAnon first -> last kB | peak VmHWM kB |"
echo "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|---:|"
for c in "${CASES[@]}"; do
    IFS=: read -r kind lanes b <<<"$c"
    [ "$kind" = bf ] || [ "$kind" = bfsync ] || continue
    IFS=$'\t' read -r _ _ _ _ _ secs _ _ _ _ parts plan lstarts batches server_s startup_s rf rl af al hwm ns np \
        < <(awk -F'\t' -v k="$c" '$1 == k && $5 == 1' "$RES")
    printf '| %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %s -> %s | %s -> %s | %s |\n' \
        "$lanes" "$b" "$parts" "$plan" "$lstarts" "$np" "$batches" "$(echo "$batches / $secs" | bc -l)" \
        "$startup_s" "$server_s" "$rf" "$rl" "$af" "$al" "$hwm"
done

echo
echo "Targets:"
verdict() { awk -v x="$1" -v t="$2" 'BEGIN { if (x == "" || x == "-") print "n/a"; else if (x + 0 >= t) print "MET"; else print "NOT MET" }'; }
for b in $BATCHES; do
    x=$(ratio "$S_SINGLE" "$(med "bf:1:$b" 6)"); x=${x%x}
    echo "- 1 lane >= 0.95x single, batch $b: ${x}x -> $(verdict "$x" 0.95)"
done
for b in $BATCHES; do
    [ "$b" -le 1000 ] || continue
    x=$(ratio "${S_LOOP[$b]}" "$(med "bf:1:$b" 6)"); x=${x%x}
    echo "- 1 lane >= 1.15x the PL/pgSQL loop, batch $b: ${x}x -> $(verdict "$x" 1.15)"
done
for b in $BATCHES; do
    [ "$APP" = 1 ] || { echo "- 1 lane against the app-side client loop, batch $b: n/a (SKIP: no psycopg2)"; continue; }
    t=1.0; [ "$b" = 1000 ] && t=1.3
    x=$(ratio "$(med "app:-:$b" 6)" "$(med "bf:1:$b" 6)"); x=${x%x}
    echo "- 1 lane >= ${t}x the app-side client loop, batch $b: ${x}x -> $(verdict "$x" "$t")"
done
x=$(ratio "$(med "bf:1:$B_LARGE" 6)" "$(med "bf:1:$B_SMALL" 6)"); x=${x%x}
echo "- batch $B_SMALL >= 0.9x the rows/s of batch $B_LARGE (1 lane, asynchronous commits): ${x}x -> $(verdict "$x" 0.9)"
x=$(ratio "$(med "bfsync:1:$B_SMALL" 6)" "$(med "bf:1:$B_SMALL" 6)"); x=${x%x}
echo "- asynchronous / synchronous lane commits, batch $B_SMALL, 1 lane: ${x}x (information)"
for b in $BATCHES; do
    x=$(ratio "$S_SINGLE" "$(med "bf:2:$b" 6)"); x=${x%x}
    echo "- 2 lanes >= 1.7x single, batch $b: ${x}x -> $(verdict "$x" 1.7)"
done
rb=10000; case " $BATCHES " in *" 10000 "*) ;; *) rb=${BATCHES##* } ;; esac
IFS=$'\t' read -r rf rl af al hwm ns < <(awk -F'\t' -v k="bf:1:$rb" 'BEGIN{OFS="\t"} $1 == k && $5 == 1 { print $17, $18, $19, $20, $21, $22 }' "$RES")
if [[ $af =~ ^[0-9]+$ && $al =~ ^[0-9]+$ ]]; then
    g=$((al - af))
    v=$([ "$g" -le "$RSS_FLAT_KB" ] && echo MET || echo "NOT MET")
    echo "- lane RSS does not grow with rows (1 lane, batch $rb, $ns samples): VmRSS $rf -> $rl kB," \
         "RssAnon (private) $af -> $al kB (growth $g kB, flat if <= $RSS_FLAT_KB kB) -> $v;" \
         "peak VmHWM $hwm kB. VmRSS also counts the shared_buffers pages the lane touched, so it grows with the table."
else
    echo "- lane RSS (1 lane, batch $rb): no samples (the pass ended before the first sample) -> n/a"
fi
if [ -n "${N_BIG:-}" ]; then
    sb=$(first "big:loop:-:1000" 6); ss=$(med "loop:-:1000" 6)
    echo "- the PL/pgSQL loop, batch 1000, $(fmt_int "$N_BIG") vs $(fmt_int "$N") rows/s (the control: what the scale costs" \
         "any batched job): $(awk -v nb="$N_BIG" -v sb="$sb" -v n="$N" -v ss="$ss" 'BEGIN { if (sb == "" || ss == "") print "-"; else printf "%.2fx", (nb / sb) / (n / ss) }') (information)"
fi
for l in 1 2; do
    if [ -z "${N_BIG:-}" ]; then
        echo "- $(fmt_int 20000000) vs $(fmt_int "$N") rows/s within 10%, $l lane(s), batch 1000: n/a (run with N_BIG=20000000)"
        continue
    fi
    sb=$(first "big:bf:$l:1000" 6); ss=$(med "bf:$l:1000" 6)
    x=$(awk -v nb="$N_BIG" -v sb="$sb" -v n="$N" -v ss="$ss" 'BEGIN { if (sb == "" || ss == "") print "-"; else printf "%.2f", (nb / sb) / (n / ss) }')
    echo "- $(fmt_int "$N_BIG") vs $(fmt_int "$N") rows/s within 10%, $l lane(s), batch 1000:" \
         "$(awk -v a="$N_BIG" -v s="$sb" 'BEGIN { if (s == "") print "-"; else printf "%.0f", a / s }') vs" \
         "$(awk -v a="$N" -v s="$ss" 'BEGIN { if (s == "") print "-"; else printf "%.0f", a / s }') rows/s = ${x}x -> $(verdict "$x" 0.9)"
    IFS=$'\t' read -r af al ns < <(awk -F'\t' -v k="big:bf:$l:1000" 'BEGIN{OFS="\t"} $1 == k { print $19, $20, $22 }' "$RES")
    if [[ $af =~ ^[0-9]+$ && $al =~ ^[0-9]+$ ]]; then
        g=$((al - af))
        echo "- lane private memory flat (within 1024 kB) at $(fmt_int "$N_BIG") rows, $l lane(s), batch 1000 ($ns samples):" \
             "RssAnon $af -> $al kB (growth $g kB) -> $([ "$g" -le 1024 ] && echo MET || echo "NOT MET")"
    else
        echo "- lane private memory at $(fmt_int "$N_BIG") rows, $l lane(s): no samples -> n/a"
    fi
done
echo
[ "$(date -u -r "$SOFILE" +%FT%TZ 2>/dev/null || echo unknown)" = "$SOSTAMP" ] ||
    echo "NOTE: $SOFILE was reinstalled during this run; the server kept the build installed at $SOSTAMP."
echo "Total measured time $(printf '%.0f' "$TOTAL") s (incl. table rebuilds). Server log: $LOG"

# composite key (issue 12): the pair and its ratio, after the main cases
[ "${COMPOSITE:-1}" = 1 ] && { ck_pairs; ck_report; ck_set_report; }
# partitioned, per leaf (issue 12, item 4): the pair and its ratio
[ "${PARTITIONED:-1}" = 1 ] && { pt_pairs; pt_report; }

# ------------------------------------------------------------------ csv
mkdir -p "$(dirname "$CSV")"
[ -s "$CSV" ] || echo "ts,n,pg,commit,case,lanes,batch,rep,secs,rows_per_s,x_single,x_loop,wal_bytes,wal_b_per_row,autovacuums,checkpoints,heap_after,partitions,plan_method,lane_starts,batches,ledger_secs,startup_secs,rss_first_kb,rss_last_kb,anon_first_kb,anon_last_kb,hwm_peak_kb,samples,lane_pids,so_installed" >"$CSV"
TS=$(date -u +%FT%TZ)
while IFS=$'\t' read -r key kind lanes b rep secs wal av ck heap parts plan lstarts batches server_s startup_s rf rl af al hwm ns np; do
    n=$N
    # the scale cases: their own N, their ratios against the cases at N (rows/s, not time)
    [[ $key == big:* ]] && { n=$N_BIG; kind=${kind}_scale; secs_n=$(echo "$secs * $N / $N_BIG" | bc -l); } || secs_n=$secs
    xs=$(ratio "$S_SINGLE" "$secs_n"); xl=-
    [ "$kind" = single ] || xl=$(ratio "${S_LOOP[$b]}" "$secs_n")
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%.0f,%s,%s,%s,%.1f,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' \
        "$TS" "$n" "$PGVER" "$EXTCOMMIT" "$kind" "$lanes" "$b" "$rep" "$secs" "$(echo "$n / $secs" | bc -l)" \
        "${xs%x}" "${xl%x}" "$wal" "$(echo "$wal / $n" | bc -l)" "$av" "$ck" "$heap" \
        "$parts" "$plan" "$lstarts" "$batches" "$server_s" "$startup_s" "$rf" "$rl" "$af" "$al" "$hwm" "$ns" "$np" "$SOSTAMP" >>"$CSV"
done <"$RES"
echo "Appended $(wc -l <"$RES") rows to $CSV"
