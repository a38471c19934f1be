#!/usr/bin/env bash
# bench/citus.sh: a pass over a Citus distributed table shard by shard, on two
# workers and on one, against the same pass coordinator-side and over a plain
# table on the coordinator.
#
#   bench/citus.sh [N]        N rows (default 200000)
#
# env:
#   PGBIN=/usr/lib/postgresql/15/bin   a server with Citus installed (citus.so in its
#                             pg_config --pkglibdir); without it the bench prints one SKIP line
#   PGBASE=/tmp/pg_backfill_citus_bench  three throwaway clusters (coord, w1, w2; wiped at start,
#                             removed at exit unless KEEP=1)
#   PGPORT=55480              the coordinator's port; the workers take the next two
#   REPS=3                    passes per case (each line is one pass)
#   LANES=4                   max_parallel of every pass
#
# Three nodes on loopback, shared_preload_libraries = 'citus,pg_backfill'; a hash-distributed
# table of 8 shards and a plain table, each N rows (id bigint PRIMARY KEY, n int), one pass of
# `UPDATE ... SET n = n + 1 WHERE id BETWEEN $1 AND $2` at batch 1000, LANES lanes, no pacing to
# speak of (rate 1000). Rows/s are the ledger's rows over its finished_at - started_at; every
# row must end done once. The last lines print the medians and their ratios.
set -euo pipefail

ME=citus.sh
N=${1:-200000}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGBASE=${PGBASE:-/tmp/pg_backfill_citus_bench}
PGPORT=${PGPORT:-55480}
PGRUNAS=${PGRUNAS:-postgres}
REPS=${REPS:-3}
LANES=${LANES:-4}
KEEP=${KEEP:-0}

[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 1000 ] || { echo "$ME: N must be an integer >= 1000" >&2; exit 2; }
case $PGBASE in /|/tmp|/tmp/|"") echo "$ME: refusing PGBASE=$PGBASE" >&2; exit 2 ;; esac
LIBDIR=$("$PGBIN/pg_config" --pkglibdir)
if [ ! -f "$LIBDIR/citus.so" ]; then
    echo "SKIP: bench/citus.sh needs Citus (no citus.so in $LIBDIR)"
    exit 0
fi

as_owner() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u "$PGRUNAS" -- "$@"; else "$@"; fi
}
say() { echo "[$(date +%T)] $*"; }
NODES=(coord w1 w2)
port_of() { echo $((PGPORT + $1)); }
Q() { local i=$1; shift; PGOPTIONS="-c client_min_messages=warning" as_owner "$PGBIN/psql" -X -h 127.0.0.1 -p "$(port_of "$i")" -U postgres -d postgres -Atq -v ON_ERROR_STOP=1 "$@"; }

stop_all() {
    for i in 0 1 2; do
        if [ -f "$PGBASE/${NODES[$i]}/postmaster.pid" ]; then
            as_owner "$PGBIN/pg_ctl" -D "$PGBASE/${NODES[$i]}" -m fast -w stop >/dev/null 2>&1 || true
        fi
    done
    if [ "$KEEP" != 1 ]; then rm -rf "$PGBASE"; fi
}
trap stop_all EXIT

rm -rf "$PGBASE"
mkdir -p "$PGBASE"
if [ "$(id -u)" -eq 0 ]; then chown "$PGRUNAS": "$PGBASE"; fi
for i in 0 1 2; do
    data=$PGBASE/${NODES[$i]}
    as_owner "$PGBIN/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    as_owner tee -a "$data/postgresql.conf" >/dev/null <<CONF

# ---- written by bench/$ME ----
listen_addresses = '127.0.0.1'
port = $(port_of "$i")
unix_socket_directories = '$PGBASE'
shared_preload_libraries = 'citus,pg_backfill'
max_prepared_transactions = 100
backfill.database_names = 'postgres'
backfill.naptime = 1
max_worker_processes = 32
CONF
    as_owner "$PGBIN/pg_ctl" -D "$data" -l "$PGBASE/${NODES[$i]}.log" -w -t 60 start >/dev/null
    Q "$i" -c "CREATE EXTENSION citus"
done
Q 0 -c "SELECT citus_set_coordinator_host('localhost', $(port_of 0))" >/dev/null
Q 0 -c "SELECT citus_add_node('localhost', $(port_of 1))" >/dev/null
Q 0 -c "SELECT citus_add_node('localhost', $(port_of 2))" >/dev/null
Q 0 -c "CREATE EXTENSION pg_backfill"
say "Citus $(Q 0 -c "SELECT extversion FROM pg_extension WHERE extname = 'citus'"), $(Q 0 -c 'SHOW server_version'), N = $N"

# one pass of a case: plain (a table on the coordinator), shard (distributed,
# shard by shard), coord (distributed, coordinator-side: backfill.citus_per_shard
# off), shard1 (distributed, shard by shard, every shard moved to the first
# worker); prints its rows/s
pass() {
    local kind=$1 t=bench_$1 run per_shard=on
    [ "$kind" = coord ] && per_shard=off
    Q 0 -c "ALTER SYSTEM SET backfill.citus_per_shard = $per_shard" >/dev/null
    Q 0 -c "SELECT pg_reload_conf()" >/dev/null
    Q 0 -c "DROP TABLE IF EXISTS $t" >/dev/null
    Q 0 -c "CREATE TABLE $t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0)"
    if [ "$kind" != plain ]; then
        Q 0 -c "SET citus.shard_count = 8; SELECT create_distributed_table('$t', 'id')" >/dev/null
    fi
    Q 0 -c "INSERT INTO $t (id) SELECT g FROM generate_series(1, $N) g"
    if [ "$kind" = shard1 ]; then
        Q 0 -c "SELECT count(citus_move_shard_placement(s.shardid, 'localhost', $(port_of 2),
                    'localhost', $(port_of 1), shard_transfer_mode => 'block_writes'))
                  FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
                  JOIN pg_dist_node d ON d.groupid = p.groupid
                 WHERE s.logicalrelid = '$t'::regclass AND d.nodeport = $(port_of 2)" >/dev/null
    fi
    Q 0 -c "ANALYZE $t"
    Q 0 -c "SELECT backfill_declare('b_$kind', '$t', 'n = 0',
        'UPDATE $t SET n = n + 1 WHERE id BETWEEN \$1 AND \$2',
        batch_size => 1000, rate => 1000, max_parallel => $LANES, guard => false)" >/dev/null
    run=$(Q 0 -c "SELECT backfill_run('b_$kind', force => true)")
    until [ "$(Q 0 -c "SELECT status <> 'running' FROM backfill.ledger WHERE run_id = $run")" = t ]; do
        sleep 0.5
    done
    [ "$(Q 0 -c "SELECT count(*) FROM $t WHERE n <> 1")" = 0 ] || { echo "$ME: $kind: rows not done once" >&2; exit 1; }
    Q 0 -c "SELECT status || ' ' || rows || ' rows, ' ||
               round(rows / extract(epoch FROM finished_at - started_at)) || ' rows/s, ' ||
               (SELECT plan_method FROM backfill.run r WHERE r.run_id = l.run_id)
              FROM backfill.ledger l WHERE run_id = $run"
}

# the median rows/s of a case's lines in $OUT
median() {
    grep "^$1 " "$OUT" | sed -E 's/.* ([0-9]+) rows\/s.*/\1/' | sort -n |
        awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

OUT=$PGBASE/passes.txt
: >"$OUT"
for rep in $(seq 1 "$REPS"); do
    for kind in plain shard coord shard1; do
        line="$kind pass $rep: $(pass $kind)"
        echo "$line" | tee -a "$OUT"
    done
done
echo
echo "medians over $REPS passes ($LANES lanes, batch 1000, N = $N), rows/s:"
for kind in plain shard coord shard1; do printf '  %-7s %s\n' "$kind" "$(median $kind)"; done
ratio() { awk -v a="$(median "$1")" -v b="$(median "$2")" 'BEGIN {printf "%.2fx", a / b}'; }
echo "shard by shard, 2 workers / 1 worker:         $(ratio shard shard1)"
echo "shard by shard / coordinator-side (2 workers): $(ratio shard coord)"
echo "shard by shard (2 workers) / a plain table:    $(ratio shard plain)"
