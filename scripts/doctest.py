#!/usr/bin/env python3
"""scripts/doctest.py: the doc-test layer of scripts/test.sh (issue 26).

Runs the SQL examples of README.md and doc/*.md against a running cluster
and compares what they print with what the Markdown shows.  The convention:

    ```sql                      an example: run with psql, and its output
    SELECT ...;                 compared with the ```text block right after
    ```                         it (blank lines between the two allowed)
    ```text
     col
    -----
     1
    ```

    ```sql run                  run (setup an example needs), output not shown
    ```sql db=postgres          run in that database (default: the file's own)
    ```sql needs=pg_cron        run only where the server has that extension

Any other ```sql block is an illustration (a fragment, a placeholder) and is
not run.  Each Markdown file gets a fresh database, doc_<file>, and its
blocks run in order, each in a psql session of its own (psql -X, aligned
output without footers, client_min_messages = warning, ON_ERROR_STOP): an
error ends the block and is part of its output, "ERROR:  ..." as psql prints
it.  Trailing white space is ignored; everything else must match.

It also checks that doc/reference.md names every SQL function and view of
the extension with each of their arguments and columns, every backfill.*
setting (src/: DefineCustom...Variable) and every BF error code
(src/errors.h); and that README.md stays under 400 lines, its quick start
at most 40, with its two commands (the demo, every test as .ci/run runs it).

Env: PGHOST/PGPORT/PGUSER as for psql, PGBIN (psql's directory),
DOCTEST_FILES (default README.md doc/*.md), DOCTEST_MATCH (a regex over the
file paths).  Prints one "ok N - ..." / "not ok N - ..." line per check, then
"doctest: N examples, M checks, K failed in S s"; exit status 1 on a failure.
"""
import glob, os, re, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PSQL = os.path.join(os.environ.get('PGBIN', ''), 'psql') if os.environ.get('PGBIN') else 'psql'
FENCE = re.compile(r'^```(\S*)\s*(.*)$')


def blocks(path):
    """(line, info, options, body) of every fenced block of a Markdown file."""
    out, lines, i = [], open(path, encoding='utf-8').read().split('\n'), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m and m.group(1):
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i].rstrip() != '```':
                body.append(lines[i])
                i += 1
            out.append((start, m.group(1), m.group(2).split(), '\n'.join(body), i))
        i += 1
    return out


def examples(path):
    """(line, db, sql, expected or None) in the file's order."""
    bs, res = blocks(path), []
    lines = open(path, encoding='utf-8').read().split('\n')
    for n, (start, info, opts, body, end) in enumerate(bs):
        if info != 'sql':
            continue
        db = next((o[3:] for o in opts if o.startswith('db=')), None)
        expected = None
        if n + 1 < len(bs) and bs[n + 1][1] == 'text':
            between = lines[end + 1:bs[n + 1][0] - 1]
            if all(not l.strip() for l in between):
                expected = bs[n + 1][3]
        needs = [o[6:] for o in opts if o.startswith('needs=')]
        if expected is not None or 'run' in opts:
            res.append((start, db, body, expected, needs))
    return res


def psql(db, sql):
    env = dict(os.environ, PGOPTIONS='-c client_min_messages=warning')
    p = subprocess.run([PSQL, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-P', 'footer=off', '-d', db],
                       input=sql, capture_output=True, text=True, env=env, timeout=120)
    err = re.sub(r'^psql:<stdin>:\d+: ', '', p.stderr, flags=re.M)
    return (p.stdout + err), p.returncode


def norm(s):
    return '\n'.join(l.rstrip() for l in s.strip('\n').split('\n')).strip('\n')


class Report:
    def __init__(self):
        self.n = self.failed = 0

    def check(self, ok, what, diag=''):
        self.n += 1
        print(('ok' if ok else 'not ok') + f' {self.n} - {what}')
        if not ok:
            self.failed += 1
            for l in diag.split('\n'):
                print('#   ' + l)
        sys.stdout.flush()


def run_file(rep, path):
    rel = os.path.relpath(path, ROOT)
    db = 'doc_' + re.sub(r'\W', '_', os.path.splitext(os.path.basename(path))[0].lower())
    exs = examples(path)
    psql('postgres', f'DROP DATABASE IF EXISTS {db};')
    out, rc = psql('postgres', f'CREATE DATABASE {db};')
    if rc != 0:
        rep.check(False, f'{rel}: create database {db}', out)
        return 0
    out, _ = psql(db, '\\pset tuples_only on\n\\pset format unaligned\nSELECT name FROM pg_available_extensions;')
    available = set(out.split())
    for line, bdb, sql, expected, needs in exs:
        missing = [x for x in needs if x not in available]
        if missing:
            print(f'ok {rep.n + 1} - {rel}:{line}: # SKIP the server has no {" ".join(missing)}')
            rep.n += 1
            continue
        out, rc = psql(bdb or db, sql)
        if expected is None:
            rep.check(rc == 0, f'{rel}:{line}: runs', out)
        else:
            ok = norm(out) == norm(expected)
            diag = '--- the Markdown shows\n' + norm(expected) + '\n--- psql printed\n' + norm(out)
            rep.check(ok, f'{rel}:{line}: prints what the example shows', diag)
    return len(exs)


def reference_complete(rep):
    ref = open(os.path.join(ROOT, 'doc/reference.md'), encoding='utf-8').read()
    out, rc = psql('doc_reference', """
        CREATE EXTENSION IF NOT EXISTS pg_backfill;
        SELECT DISTINCT coalesce(nullif(n.nspname, e.extnamespace::regnamespace::text) || '.', '') ||
               coalesce(p.proname, c.relname)
          FROM pg_extension e
          JOIN pg_depend d ON d.refobjid = e.oid AND d.deptype = 'e'
          LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
          LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid AND c.relkind = 'v'
          JOIN pg_namespace n ON n.oid = coalesce(p.pronamespace, c.relnamespace)
         WHERE e.extname = 'pg_backfill' AND coalesce(p.proname, c.relname) IS NOT NULL
         ORDER BY 1""".replace('SELECT', '\\pset tuples_only on\n\\pset format unaligned\nSELECT', 1))
    names = [l for l in out.split('\n') if l.strip()]
    rep.check(rc == 0 and len(names) > 20, f'the extension has {len(names)} functions and views', out)
    missing = [f for f in names if not re.search(r'`' + re.escape(f) + r'[`(]', ref)]
    rep.check(not missing, 'doc/reference.md names every SQL function and view', 'missing: ' + ' '.join(missing))
    # every argument and result column of the functions and views in the extension's schema
    out, rc = psql('doc_reference', """\\pset tuples_only on
\\pset format unaligned
SELECT p.proname || ' ' || a.name
  FROM pg_extension e
  JOIN pg_depend d ON d.refobjid = e.oid AND d.deptype = 'e' AND d.classid = 'pg_proc'::regclass
  JOIN pg_proc p ON p.oid = d.objid AND p.pronamespace = e.extnamespace
 CROSS JOIN LATERAL unnest(p.proargnames) AS a(name)
 WHERE e.extname = 'pg_backfill' AND a.name <> ''
UNION
SELECT c.relname || ' ' || att.attname
  FROM pg_extension e
  JOIN pg_depend d ON d.refobjid = e.oid AND d.deptype = 'e' AND d.classid = 'pg_class'::regclass
  JOIN pg_class c ON c.oid = d.objid AND c.relkind = 'v' AND c.relnamespace = e.extnamespace
  JOIN pg_attribute att ON att.attrelid = c.oid AND att.attnum > 0
 WHERE e.extname = 'pg_backfill'
 ORDER BY 1;""")
    pairs = [l.split(' ', 1) for l in out.split('\n') if ' ' in l.strip()]
    missing = [f'{f}.{a}' for f, a in pairs if '`' + a + '`' not in ref]
    rep.check(rc == 0 and len(pairs) > 100 and not missing,
              f'doc/reference.md names every argument and column of them ({len(pairs)})',
              'missing: ' + ' '.join(missing) + ('' if rc == 0 else out))
    gucs = set()
    for f in glob.glob(os.path.join(ROOT, 'src/**/*.c'), recursive=True):
        gucs |= set(re.findall(r'DefineCustom\w+Variable\(\s*"([\w.]+)"', open(f).read()))
    missing = sorted(g for g in gucs if '`' + g + '`' not in ref)
    rep.check(len(gucs) > 10 and not missing, f'doc/reference.md names every setting ({len(gucs)})',
              'missing: ' + ' '.join(missing))
    codes = sorted(set(re.findall(r"MAKE_SQLSTATE\('B','F','(\d)','(\d)','(\d)'\)",
                                  open(os.path.join(ROOT, 'src/errors.h')).read())))
    codes = ['BF' + ''.join(c) for c in codes]
    missing = [c for c in codes if not re.search(r'^\| `' + c + '` \|', ref, re.M)]
    rep.check(len(codes) > 30 and not missing, f'doc/reference.md has a row for every error code ({len(codes)})',
              'missing: ' + ' '.join(missing))


def readme_shape(rep):
    """The README stays what a DBA reads in ten minutes (issue 26)."""
    text = open(os.path.join(ROOT, 'README.md'), encoding='utf-8').read()
    lines = text.split('\n')
    rep.check(len(lines) < 400, f'README.md is under 400 lines ({len(lines)})')
    m = re.search(r'^## Quick start\n(.*?)(?=^## )', text, re.M | re.S)
    n = len(m.group(0).rstrip('\n').split('\n')) if m else 0
    rep.check(0 < n <= 40, f'its quick start is at most 40 lines ({n})')
    m = re.search(r'^## Try it.*?```sh\n(.*?)```', text, re.M | re.S)
    cmds = [l.split('#')[0].strip() for l in (m.group(1) if m else '').split('\n') if l.strip()]
    ci = open(os.path.join(ROOT, '.ci/run')).read()
    rep.check(cmds == ['sudo scripts/demo.sh', 'bash scripts/test.sh'] and 'bash scripts/test.sh' in ci,
              'its two commands: the demo and every test, as CI runs them', 'found: ' + repr(cmds))


def main():
    t0 = time.time()
    files = os.environ.get('DOCTEST_FILES', '').split() or \
        ['README.md'] + sorted(glob.glob(os.path.join(ROOT, 'doc/*.md')))
    files = [f if os.path.isabs(f) else os.path.join(ROOT, f) for f in files]
    match = os.environ.get('DOCTEST_MATCH')
    if match:
        files = [f for f in files if re.search(match, os.path.relpath(f, ROOT))]
    rep = Report()
    n = sum(run_file(rep, f) for f in files)
    if any(f.endswith('doc/reference.md') for f in files):
        reference_complete(rep)
    if any(f.endswith('/README.md') and os.path.dirname(f) == ROOT for f in files):
        readme_shape(rep)
    print(f'1..{rep.n}')
    print(f'doctest: {n} examples, {rep.n} checks, {rep.failed} failed in {time.time() - t0:.1f} s')
    return 1 if rep.failed else 0


if __name__ == '__main__':
    sys.exit(main())
