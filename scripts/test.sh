#!/usr/bin/env bash
# scripts/test.sh: build, install and run every test layer of pg_backfill
# against a fresh throwaway cluster, for each PostgreSQL installed.
#
#   bash scripts/test.sh        (as root: it installs packages and the extension)
#
# The servers: every /usr/lib/postgresql/*/bin/pg_config there is (on a
# fresh Debian 12 machine, 15 only), or the one PG_CONFIG names alone.  The
# layers run once per server, each ending in "PostgreSQL N: N passed, M
# failed"; the package layer runs once, for every version it packages.
#
# Layers, each skipped when it has no tests:
#   regress    make installcheck (sql/, expected/) in database backfill_regress
#   pgtap      pg_prove test/pgtap/*.sql in database backfill_test
#   tap        prove test/t/*.pl (PostgreSQL::Test::Cluster; own clusters, as postgres)
#   isolation  pg_isolation_regress test/specs/*.spec (expected output in
#              test/expected/) in database isolation_regression, which
#              pg_isolation_regress creates and no launcher serves (the test
#              cluster keeps an allow-list, BACKFILL_DATABASE_NAMES below,
#              while scripts/cluster.sh alone serves every database); the
#              specs named states_*.spec call backfill_run and friends, which
#              need a served database: they run in backfill_iso (created by
#              scripts/cluster.sh, in that allow-list)
#   doctest    scripts/doctest.py: the SQL examples of README.md and doc/*.md
#              that show a result, run in a cluster of their own made by
#              scripts/cluster.sh as a user gets it (every database served;
#              $TEST_PGBASE-doc, port $TEST_PGPORT + 5), output compared;
#              and doc/reference.md names every function, setting and code
#   package    (root) dpkg-buildpackage of debian/, dpkg -i, then the
#              pg_regress suite against the installed package
# The last line is "N passed, M failed" (individual tests); the exit status
# is non-zero when anything failed.
#
# Env: TEST_PGBASE (default /tmp/pg_backfill_test; -N is appended for the
#      servers after the first), TEST_PGPORT (55482; +10 per further server),
#      SKIP_SETUP=1 to skip scripts/setup.sh,
#      TEST_LAYERS to run only some layers (default "regress pgtap tap isolation doctest package"),
#      PG_CONFIG: test against this server alone,
#      PG_TEST_PORT_DIR: port reservations shared by TAP runs going on at once
#      (default /tmp/pg_backfill_portlock, one for every run on the machine),
#      TEST_JOBS: how many TAP files run at once (default 6; 1 runs them one by one),
#      TEST_MATCH: an extended regex; only test files whose path matches run
#      (e.g. TEST_MATCH='050_|upgrade').
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
if [ "${SKIP_SETUP:-0}" != 1 ]; then
    # the packages, and the extension for the default (or named) server
    scripts/setup.sh || { echo "test.sh: setup failed"; echo "0 passed, 1 failed"; exit 1; }
fi
if [ -n "${PG_CONFIG:-}" ]; then
    configs=("$PG_CONFIG")
else
    mapfile -t configs < <(ls /usr/lib/postgresql/*/bin/pg_config 2>/dev/null | sort -V)
fi
if [ ${#configs[@]} -eq 0 ]; then
    echo "test.sh: no PostgreSQL server found (run scripts/setup.sh as root)"
    echo "0 passed, 1 failed"
    exit 1
fi

WORK=$(mktemp -d /tmp/pg_backfill_testrun.XXXXXX)
chmod 0755 "$WORK"
LAYERS=" ${TEST_LAYERS:-regress pgtap tap isolation doctest package} "
want() { [[ "$LAYERS" == *" $1 "* ]]; }

passed=0
failed=0
layer_failed=()
total_passed=0
total_failed=0
any_failed=0

cleanup() {
    if [ -n "${PGBASE:-}" ]; then
        PGBASE=$PGBASE PGPORT=$PGPORT "$ROOT/scripts/cluster.sh" stop >/dev/null 2>&1 || true
    fi
    # keep the outputs and TAP logs of a failed run for a look afterwards
    if [ "$any_failed" -ne 0 ] || [ "$failed" -gt 0 ] || [ ${#layer_failed[@]} -gt 0 ]; then
        echo "test.sh: outputs and TAP logs kept in $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

# count "Files=, Tests=" output of prove / pg_prove: $1 = output file, $2 = exit status.
# Each script in the "Test Summary Report" counts its failed subtests, or 1
# when it failed otherwise (died, bad plan, non-zero exit); one listed only
# because TODO tests passed counts nothing.
count_tap() {
    local out=$1 rc=$2 tests subfails fails
    tests=$(sed -n 's/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' "$out" | tail -n 1)
    tests=${tests:-0}
    # (a script listed with Wstat 0 and Failed 0 only had TODO tests pass)
    read -r subfails fails < <(sed -n 's/.*(Wstat: \([0-9]*\) Tests: [0-9]* Failed: \([0-9]*\)).*/\1 \2/p' "$out" |
        awk '{s += $2; f += ($2 > 0 ? $2 : ($1 > 0 ? 1 : 0))} END {print s+0, f+0}')
    if [ "$rc" -ne 0 ] && [ "$fails" -eq 0 ]; then fails=1; fi
    passed=$((passed + tests - subfails))
    failed=$((failed + fails))
}

# count pg_regress / pg_isolation_regress output: $1 = output file, $2 = exit status.
# Up to 15 a test's line reads "test name ... ok"; from 16 on it is TAP,
# "ok 1 - name" or "not ok 1 - name".
count_regress() {
    local out=$1 rc=$2 ok bad
    ok=$(grep -cE '\.\.\. +ok|^ok [0-9]+ ' "$out")
    bad=$(grep -cE '\.\.\. +(FAILED|failed)|^not ok [0-9]+ ' "$out")
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
    passed=$((passed + ok))
    failed=$((failed + bad))
}

# The layers that run against one server ($PG_CONFIG), in a fresh cluster;
# they add to passed / failed.
run_layers() {
    local OUT
    OUT="$WORK/$("$PG_CONFIG" --version | awk '{print "pg" $2}')"
    mkdir -p "$OUT"
    chmod 0755 "$OUT"
    PGXS_DIR=$(dirname "$("$PG_CONFIG" --pgxs)")
    PG_REGRESS_BIN="$PGXS_DIR/../../src/test/regress/pg_regress"
    PG_ISOLATION_REGRESS="$PGXS_DIR/../../src/test/isolation/pg_isolation_regress"
    PERL_LIB="$PGXS_DIR/../../src/test/perl"
    echo "== test.sh: fresh cluster in $PGBASE (port $PGPORT)"
    # the test cluster serves the layers' databases only: isolation_regression,
    # which pg_isolation_regress drops and creates, stays unserved
    if ! BACKFILL_DATABASE_NAMES=postgres,backfill_regress,backfill_test,backfill_iso \
        scripts/cluster.sh init; then
        echo "test.sh: could not start the test cluster"
        layer_failed+=(cluster)
        return
    fi
    export PGHOST=$PGBASE PGUSER=postgres

    # (a) pg_regress
    mapfile -t regress_sql < <(only sql/*.sql)
    if ! want regress; then
        echo "== regress: not in TEST_LAYERS, skipped"
    elif [ ${#regress_sql[@]} -gt 0 ]; then
        echo "== regress: make installcheck"
        rm -f regression.diffs regression.out
        # CONTRIB_TESTDB: pg_regress keeps the last --dbname, and pgxs appends
        # --dbname=$(CONTRIB_TESTDB); pin it to the served database.  ISOLATION=:
        # the isolation layer below runs every spec, so make must not run them too.
        regress_names=()
        for f in "${regress_sql[@]}"; do regress_names+=("$(basename "$f" .sql)"); done
        make PG_CONFIG="$PG_CONFIG" CONTRIB_TESTDB=backfill_regress ISOLATION= \
            REGRESS="${regress_names[*]}" installcheck 2>&1 | tee "$OUT/regress.out"
        rc=${PIPESTATUS[0]}
        count_regress "$OUT/regress.out" "$rc"
        if [ "$rc" -ne 0 ]; then
            layer_failed+=(regress)
            if [ -f regression.diffs ]; then
                echo "== regression.diffs"
                cat regression.diffs
            fi
        fi
    else
        echo "== regress: no sql/*.sql, skipped"
    fi

    # (b) pgTAP
    mapfile -t pgtap < <(only test/pgtap/*.sql)
    if ! want pgtap; then
        echo "== pgtap: not in TEST_LAYERS, skipped"
    elif [ ! -f "$("$PG_CONFIG" --sharedir)/extension/pgtap.control" ]; then
        echo "== pgtap: SKIP (pgTAP is not installed for $("$PG_CONFIG" --version))"
    elif [ ${#pgtap[@]} -gt 0 ]; then
        echo "== pgtap: pg_prove -d backfill_test ${pgtap[*]}"
        PATH="$PGBIN:$PATH" pg_prove -d backfill_test "${pgtap[@]}" 2>&1 | tee "$OUT/pgtap.out"
        rc=${PIPESTATUS[0]}
        count_tap "$OUT/pgtap.out" "$rc"
        [ "$rc" -eq 0 ] || layer_failed+=(pgtap)
    else
        echo "== pgtap: no test/pgtap/*.sql, skipped"
    fi

    # (c) TAP tests with PostgreSQL::Test::Cluster: initdb refuses root, so run
    # prove as postgres, with tmp_check/ in a directory postgres owns
    mapfile -t tap < <(only test/t/*.pl)
    if ! want tap; then
        echo "== tap: not in TEST_LAYERS, skipped"
    elif [ ${#tap[@]} -gt 0 ]; then
        # The files run at once, each with its own clusters on ports that
        # PostgreSQL::Test::Cluster reserves in PG_TEST_PORT_DIR: one
        # directory for the machine, so that two test runs at once (two
        # clones) never start servers on the same port; the longest files
        # start first so that none is left to run alone at the end.
        jobs=${TEST_JOBS:-6}
        export PG_TEST_PORT_DIR=${PG_TEST_PORT_DIR:-/tmp/pg_backfill_portlock}
        mkdir -p "$PG_TEST_PORT_DIR"
        chmod 1777 "$PG_TEST_PORT_DIR" 2>/dev/null || true
        mapfile -t tap < <(slow_first "${tap[@]}")
        echo "== tap: prove -j $jobs --timer ${tap[*]#test/}"
        mkdir -p "$OUT/tap"
        chown -R postgres: "$OUT/tap"
        (cd test && runuser -u postgres -- env -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE \
            PATH="$PGBIN:/usr/local/bin:/usr/bin:/bin" \
            PG_REGRESS="$PG_REGRESS_BIN" \
            PERL5LIB="$PERL_LIB${PERL5LIB:+:$PERL5LIB}" \
            TESTDIR="$OUT/tap" TESTDATADIR="$OUT/tap/tmp_check" TESTLOGDIR="$OUT/tap/tmp_check/log" \
            prove -j "$jobs" --timer "${tap[@]#test/}") 2>&1 | tee "$OUT/tap.out"
        rc=${PIPESTATUS[0]}
        count_tap "$OUT/tap.out" "$rc"
        if [ "$rc" -ne 0 ]; then
            layer_failed+=(tap)
            for f in "$OUT"/tap/tmp_check/log/*; do
                echo "== tail of $f"
                tail -n 40 "$f"
            done
        fi
    else
        echo "== tap: no test/t/*.pl, skipped"
    fi

    # (d) isolation specs
    mapfile -t specs < <(only test/specs/*.spec)
    if ! want isolation; then
        echo "== isolation: not in TEST_LAYERS, skipped"
    elif [ ${#specs[@]} -gt 0 ]; then
        names=()
        served=()
        for s in "${specs[@]}"; do
            n=$(basename "$s" .spec)
            if [[ "$n" == states_* ]]; then served+=("$n"); else names+=("$n"); fi
        done
        # $1: output name, $2...: pg_isolation_regress options and spec names
        run_isolation() {
            local out=$1
            shift
            "$PG_ISOLATION_REGRESS" --inputdir=test --outputdir="$OUT/$out" --bindir="$PGBIN" \
                "$@" 2>&1 | tee "$OUT/$out.out"
            rc=${PIPESTATUS[0]}
            count_regress "$OUT/$out.out" "$rc"
            if [ "$rc" -ne 0 ]; then
                layer_failed+=(isolation)
                if [ -f "$OUT/$out/regression.diffs" ]; then
                    echo "== isolation regression.diffs"
                    cat "$OUT/$out/regression.diffs"
                fi
            fi
        }
        if [ ${#names[@]} -gt 0 ]; then
            echo "== isolation: ${names[*]}"
            run_isolation iso --dbname=isolation_regression "${names[@]}"
        fi
        if [ ${#served[@]} -gt 0 ]; then
            echo "== isolation (served database backfill_iso): ${served[*]}"
            run_isolation iso_served --dbname=backfill_iso --use-existing "${served[@]}"
        fi
    else
        echo "== isolation: no test/specs/*.spec, skipped"
    fi

    run_doctest
}

# (e) the docs' examples, in a fresh cluster that scripts/cluster.sh makes
# with its defaults (every database served), as a reader of the README gets
# it; TEST_MATCH selects Markdown files too (e.g. TEST_MATCH=README)
run_doctest() {
    local docs=() f rc
    mapfile -t docs < <(only README.md doc/*.md)
    if ! want doctest; then
        echo "== doctest: not in TEST_LAYERS, skipped"
        return
    elif [ ${#docs[@]} -eq 0 ]; then
        echo "== doctest: no Markdown file matches TEST_MATCH, skipped"
        return
    fi
    echo "== doctest: ${docs[*]}"
    if ! PGBASE="$PGBASE-doc" PGPORT=$((PGPORT + 5)) scripts/cluster.sh init >"$OUT/doctest-cluster.out" 2>&1; then
        cat "$OUT/doctest-cluster.out"
        echo "not ok 1 - the doctest cluster starts" | tee "$OUT/doctest.out"
        rc=1
    else
        PGHOST="$PGBASE-doc" PGPORT=$((PGPORT + 5)) PGUSER=postgres DOCTEST_FILES="${docs[*]}" \
            python3 scripts/doctest.py 2>&1 | tee "$OUT/doctest.out"
        rc=${PIPESTATUS[0]}
    fi
    PGBASE="$PGBASE-doc" PGPORT=$((PGPORT + 5)) scripts/cluster.sh destroy >/dev/null 2>&1 || true
    passed=$((passed + $(grep -c '^ok [0-9]' "$OUT/doctest.out")))
    failed=$((failed + $(grep -c '^not ok [0-9]' "$OUT/doctest.out")))
    if [ "$rc" -ne 0 ]; then
        layer_failed+=(doctest)
        grep -q '^not ok' "$OUT/doctest.out" || failed=$((failed + 1))
    fi
}

shopt -s nullglob

# the TAP files that take longest (a minute or more on 2 cores), first;
# then the rest in their order
TAP_SLOW='/(083|023|002|022|141|020|085|086|102|110|111|150|142|131|084|089|182)_'
slow_first() {
    local f
    for f in "$@"; do [[ "$f" =~ $TAP_SLOW ]] && echo "$f"; done
    for f in "$@"; do [[ "$f" =~ $TAP_SLOW ]] || echo "$f"; done
}

# keep the paths that match $TEST_MATCH (all of them when it is unset)
only() {
    local f
    for f in "$@"; do
        if [ -z "${TEST_MATCH:-}" ] || [[ "$f" =~ $TEST_MATCH ]]; then echo "$f"; fi
    done
}

n=0
for PG_CONFIG in "${configs[@]}"; do
    export PG_CONFIG
    export PGBIN=$("$PG_CONFIG" --bindir)
    version=$("$PG_CONFIG" --version)
    if [ "$n" -eq 0 ]; then suffix=""; else suffix="-$n"; fi
    export PGBASE=${TEST_PGBASE:-/tmp/pg_backfill_test}$suffix
    export PGPORT=$(( ${TEST_PGPORT:-55482} + 10 * n ))
    n=$((n + 1))
    echo "== $version ($PG_CONFIG)"
    passed=0
    failed=0
    layer_failed=()
    if [ "${SKIP_SETUP:-0}" != 1 ] && [ "$PG_CONFIG" != "$(scripts/setup.sh --built-for)" ] &&
        ! scripts/setup.sh --build-only; then
        echo "test.sh: could not build and install pg_backfill for $version"
        layer_failed+=(build)
    else
        run_layers
    fi
    PGBASE=$PGBASE PGPORT=$PGPORT scripts/cluster.sh stop >/dev/null 2>&1 || true
    if [ ${#layer_failed[@]} -gt 0 ]; then
        echo "== $version: failed layers: ${layer_failed[*]} (server log: $PGBASE/server.log)"
        [ "$failed" -gt 0 ] || failed=1
    fi
    echo "$version: $passed passed, $failed failed"
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    [ "$failed" -eq 0 ] || any_failed=1
done
passed=0
failed=0
layer_failed=()

# (f) the Debian package: build it from a copy of the tree, check what each
# .deb holds beside the extension, install it, and run the pg_regress suite
# against what it installed (debian/tests/installcheck, which also checks the
# client on PATH and the exporter's queries as installed)

# each .deb ships metrics/queries.yaml and puts its client on PATH
# (update-alternatives for /usr/bin/pg_backfill in its postinst)
package_contents() {
    local deb v list
    for deb in "$@"; do
        v=$(dpkg-deb -f "$deb" Package | sed -n 's/^postgresql-\([0-9.]*\)-backfill$/\1/p')
        [ -n "$v" ] || continue
        list=$(dpkg-deb -c "$deb") || return 1
        grep -q " \./usr/share/postgresql/$v/contrib/pg_backfill/metrics/queries\.yaml\$" <<<"$list" ||
            { echo "package: $deb ships no metrics/queries.yaml"; return 1; }
        dpkg-deb -I "$deb" postinst | grep "update-alternatives --install /usr/bin/pg_backfill pg_backfill" >/dev/null ||
            { echo "package: $deb does not put pg_backfill on PATH"; return 1; }
        echo "package: $deb ships queries.yaml and puts pg_backfill on PATH"
    done
}

mapfile -t pkgtest < <(only debian/tests/installcheck)
if ! want package; then
    echo "== package: not in TEST_LAYERS, skipped"
elif [ ${#pkgtest[@]} -eq 0 ]; then
    echo "== package: debian/tests/installcheck does not match TEST_MATCH, skipped"
elif [ "$(id -u)" -ne 0 ] || ! command -v dpkg-buildpackage >/dev/null || ! command -v pg_buildext >/dev/null; then
    echo "== package: SKIP (needs root, dpkg-buildpackage and pg_buildext: run scripts/setup.sh as root)"
else
    echo "== package: dpkg-buildpackage -us -uc -b, dpkg -i, debian/tests/installcheck"
    pkg="$WORK/pkg"
    mkdir -p "$pkg/src"
    git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -C "$pkg/src" -xf -
    if (cd "$pkg/src" && dpkg-buildpackage -us -uc -b) >"$WORK/package-build.out" 2>&1 &&
        debs=$(ls "$pkg"/postgresql-*-backfill_*.deb) &&
        package_contents $debs >>"$WORK/package-build.out" 2>&1 &&
        dpkg -i $debs >>"$WORK/package-build.out" 2>&1; then
        echo "package: installed $(basename -a $debs | tr '\n' ' ')"
        PKG_TEST_OUT="$WORK/pkgtest" debian/tests/installcheck 2>&1 | tee "$WORK/package.out"
        rc=${PIPESTATUS[0]}
    else
        echo "package: the package did not build or install; tail of its log:"
        tail -n 40 "$WORK/package-build.out"
        : >"$WORK/package.out"
        rc=1
    fi
    count_regress "$WORK/package.out" "$rc"
    [ "$rc" -eq 0 ] || layer_failed+=(package)
fi

if [ ${#layer_failed[@]} -gt 0 ]; then
    echo "== failed layers: ${layer_failed[*]}"
    [ "$failed" -gt 0 ] || failed=1
fi
[ "$failed" -eq 0 ] || any_failed=1
total_passed=$((total_passed + passed))
total_failed=$((total_failed + failed))
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
