# bench/lib.sh: what bench/run.sh and bench/foreground.sh share: running
# commands as the cluster owner and making their throwaway cluster.
# Sourced, not run.  The caller sets ME (its name, for messages), HERE,
# PGBIN, PGRUNAS, PGBASE, PGPORT, DATA and LOG first, and defines Q (psql
# against the cluster).  BENCH_LISTEN (optional): the TCP address the cluster
# listens on besides its socket (run.sh's app-side client loop: 127.0.0.1).

as_owner() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u "$PGRUNAS" -- "$@"; else "$@"; fi
}
pg_running() { [ -f "$DATA/postmaster.pid" ] && as_owner "$PGBIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }
now() { date +%s.%N; }
say() { echo "[$(date +%T)] $*"; }
die() { echo "$ME: $*" >&2; [ -f "$LOG" ] && { echo "--- tail of $LOG" >&2; tail -n 40 "$LOG" >&2; }; exit 1; }

# A fresh cluster with the baseline's settings (BASELINE.md) and pg_backfill
# preloaded; the extension and the bench procedures created in postgres.
# EXTRA_CONF: more lines for postgresql.conf (backfill.lane_nice = 0, say).
# Sets PGVER, EXTCOMMIT, SOFILE and SOSTAMP (the build the postmaster
# preloaded: later installs do not reach this run).
fresh_cluster() {
    say "cluster: fresh initdb in $DATA (port $PGPORT)"
    if pg_running; then as_owner "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 120 stop >/dev/null; fi
    rm -rf "$PGBASE"
    mkdir -p "$PGBASE"
    if [ "$(id -u)" -eq 0 ]; then chown "$PGRUNAS": "$PGBASE"; fi
    chmod 0755 "$PGBASE"
    as_owner "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
        >"$PGBASE/initdb.log" 2>&1 || { cat "$PGBASE/initdb.log" >&2; exit 1; }
    as_owner tee -a "$DATA/postgresql.conf" >/dev/null <<CONF

# ---- written by bench/$ME ----
listen_addresses = '${BENCH_LISTEN:-}'
port = $PGPORT
unix_socket_directories = '$PGBASE'
log_line_prefix = '%m [%p] %q%a '
log_checkpoints = on
shared_buffers = 1GB
max_wal_size = 4GB
checkpoint_timeout = 15min
shared_preload_libraries = 'pg_backfill'
backfill.database_names = 'postgres'
backfill.naptime = 1
max_worker_processes = 16
backfill.max_workers = 4
${EXTRA_CONF:-}
CONF
    as_owner "$PGBIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null || die "server did not start"
    Q -c "CREATE EXTENSION IF NOT EXISTS pg_backfill"
    Q -f "$HERE/sql/procs.sql"
    PGVER=$(Q -c "SHOW server_version")
    EXTCOMMIT=$(git -C "$HERE/.." rev-parse --short HEAD 2>/dev/null || echo unknown)
    SOFILE="$("$PGBIN/pg_config" --pkglibdir 2>/dev/null || echo /usr/lib/postgresql/15/lib)/pg_backfill.so"
    SOSTAMP=$(date -u -r "$SOFILE" +%FT%TZ 2>/dev/null || echo unknown)
}
