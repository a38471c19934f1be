#!/usr/bin/env bash
# scripts/cluster.sh: a throwaway PostgreSQL 15 cluster with pg_cron and
# pg_backfill preloaded.  It never touches the Debian-managed clusters.
#
#   scripts/cluster.sh init      # wipe $PGBASE, initdb, configure, start, create
#                                # backfill_regress, backfill_test and backfill_iso
#                                # (served isolation specs), restart
#   scripts/cluster.sh start     # start (no-op when running)
#   scripts/cluster.sh stop      # fast shutdown (no-op when stopped)
#   scripts/cluster.sh restart
#   scripts/cluster.sh destroy   # stop, then rm -rf $PGBASE
#   scripts/cluster.sh env       # export lines: eval "$(scripts/cluster.sh env)"
#   scripts/cluster.sh psql [args...]   # psql as postgres (database postgres)
#
# Env: PGBASE (default /tmp/pg_backfill_cluster), PGPORT (default 55480),
#      PGBIN (default /usr/lib/postgresql/15/bin), PGRUNAS (default postgres),
#      PGEXTRA_CONF (lines appended to postgresql.conf at init),
#      BACKFILL_DATABASE_NAMES: an allow-list for backfill.database_names
#      (comma-separated).  Unset, the cluster serves every database where
#      pg_backfill is installed, so a database created later works at once,
#      without a restart.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGBASE=${PGBASE:-/tmp/pg_backfill_cluster}
PGPORT=${PGPORT:-55480}
PGRUNAS=${PGRUNAS:-postgres}
DATA="$PGBASE/data"
LOG="$PGBASE/server.log"

# The server refuses to run as root: run its tools as the cluster owner.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u "$PGRUNAS" -- "$@"
    else
        "$@"
    fi
}

is_running() {
    [ -f "$DATA/postmaster.pid" ] && as_owner "$PGBIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

psql_cmd() {
    PGHOST="$PGBASE" PGPORT="$PGPORT" PGUSER=postgres \
        "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -d postgres "$@"
}

cmd_start() {
    if is_running; then
        echo "cluster.sh: already running on port $PGPORT ($DATA)"
        return 0
    fi
    [ -d "$DATA" ] || { echo "cluster.sh: no cluster in $DATA; run: $0 init" >&2; exit 1; }
    if ! as_owner "$PGBIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null; then
        echo "cluster.sh: server did not start; tail of $LOG:" >&2
        tail -n 30 "$LOG" >&2 || true
        exit 1
    fi
    echo "cluster.sh: running on port $PGPORT, socket in $PGBASE, log $LOG"
}

cmd_stop() {
    if is_running; then
        as_owner "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null
        echo "cluster.sh: stopped ($DATA)"
    fi
}

cmd_restart() {
    cmd_stop
    cmd_start
}

cmd_init() {
    cmd_stop
    # pg_cron where this server has it (a hand-built PostgreSQL may not)
    if [ -f "$("$PGBIN/pg_config" --pkglibdir)/pg_cron.so" ]; then
        PRELOAD=pg_cron,pg_backfill
    else
        PRELOAD=pg_backfill
    fi
    rm -rf "$PGBASE"
    mkdir -p "$PGBASE"
    # $PGBASE holds the unix socket too: 0755 so any user can reach it.
    if [ "$(id -u)" -eq 0 ]; then chown "$PGRUNAS": "$PGBASE"; fi
    chmod 0755 "$PGBASE"
    as_owner "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
        >"$PGBASE/initdb.log" 2>&1 || { cat "$PGBASE/initdb.log" >&2; exit 1; }
    as_owner tee -a "$DATA/postgresql.conf" >/dev/null <<CONF

# ---- written by scripts/cluster.sh ----
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$PGBASE'
logging_collector = off
log_line_prefix = '%m [%p] %q%a '
shared_preload_libraries = '$PRELOAD'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 32
${BACKFILL_DATABASE_NAMES:+backfill.database_names = '$BACKFILL_DATABASE_NAMES'}
backfill.naptime = 2
${PGEXTRA_CONF:-}
CONF
    cmd_start
    psql_cmd -q -c 'CREATE DATABASE backfill_regress' -c 'CREATE DATABASE backfill_test' \
        -c 'CREATE DATABASE backfill_iso'
    # a launcher whose database was missing retries every 10 s: restart so
    # that every database's launcher connects at once
    cmd_restart
}

cmd_destroy() {
    cmd_stop
    rm -rf "$PGBASE"
    echo "cluster.sh: removed $PGBASE"
}

cmd_env() {
    cat <<ENV
export PGHOST='$PGBASE'
export PGPORT='$PGPORT'
export PGUSER=postgres
export PATH='$PGBIN':"\$PATH"
ENV
}

case "${1:-}" in
    init) cmd_init ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    restart) cmd_restart ;;
    destroy) cmd_destroy ;;
    env) cmd_env ;;
    psql) shift; psql_cmd "$@" ;;
    *)
        echo "usage: $0 init|start|stop|restart|destroy|env|psql [args...]" >&2
        exit 2
        ;;
esac
