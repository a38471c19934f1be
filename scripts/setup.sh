#!/usr/bin/env bash
# scripts/setup.sh: install what pg_backfill needs on Debian 12, then build
# and install the extension into PostgreSQL 15.
#
#   sudo scripts/setup.sh        (or: bash scripts/setup.sh as root)
#   scripts/setup.sh --build-only   build and install only, no packages
#   scripts/setup.sh --built-for    print the pg_config the tree was last
#                                   built with (.built-with), and exit
#
# The objects are built for one server at a time: a build for another
# pg_config than the last one starts with make clean.
# Idempotent: apt is skipped when every package is already installed.
# Env: PG_CONFIG (default /usr/lib/postgresql/15/bin/pg_config).
set -euo pipefail

cd "$(dirname "$0")/.."
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
STAMP=.built-with
case "${1:-}" in
    --built-for) cat "$STAMP" 2>/dev/null || true; exit 0 ;;
    --build-only) BUILD_ONLY=1 ;;
    "") BUILD_ONLY=0 ;;
    *) echo "usage: $0 [--build-only | --built-for]" >&2; exit 2 ;;
esac

PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-15-pgtap postgresql-15-cron
          libtap-parser-sourcehandler-pgtap-perl libipc-run-perl build-essential
          libcurl4-openssl-dev python3 debhelper postgresql-server-dev-all)

if [ "$BUILD_ONLY" = 1 ]; then
    :
elif [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: run as root (sudo $0): it installs packages and the extension" >&2
    exit 1
fi

missing=()
[ "$BUILD_ONLY" = 1 ] || for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup.sh: installing ${missing[*]}"
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "${PACKAGES[@]}"
elif [ "$BUILD_ONLY" != 1 ]; then
    echo "setup.sh: packages already installed"
fi

echo "setup.sh: building with $PG_CONFIG"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$PG_CONFIG" ]; then
    make PG_CONFIG="$PG_CONFIG" clean >/dev/null
fi
rm -f "$STAMP"
make PG_CONFIG="$PG_CONFIG"
make PG_CONFIG="$PG_CONFIG" install
echo "$PG_CONFIG" >"$STAMP"
echo "setup.sh: pg_backfill installed into $("$PG_CONFIG" --pkglibdir)"
