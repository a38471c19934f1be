# 131_drift_watch.pl
#
# Drift noticed and healed (issue 14, part 3).
#  (a) A completed backfill whose predicate matches rows again: 100 rows
#      inserted after completion, then a probe (backfill_probe, run by a
#      probe worker), make backfill_pending() say drifted, with "100 rows"
#      and when it was probed; 2,000 more say "at least 1,000 rows" (the
#      probe stops at 1,000: a LIMIT, not a count).  backfill_pending
#      evaluates nothing itself: before the probe it still says completed.
#      The probe runs as the declaring role: a declarer who cannot read the
#      table (its grant revoked) finds no drift rather than the superuser's
#      answer, and the probe's error is recorded (BF039 to the caller).
#  (b) watch => '1 s': the scheduler probes a completed backfill at that
#      interval (watch_probes grows, no pass starts while nothing drifted);
#      100 rows inserted are healed by one catch-up pass (ledger: watch,
#      forced, after the completed pass), every row done exactly once by
#      the non-idempotent action, healed_rows = 100; the time from the
#      insert's commit to the heal is reported.
#  (c) A pass beside a writer that inserts matching rows faster than the
#      pass goes: the pass is bounded to the key range that existed when it
#      was planned, so it completes while the writer still writes; every row
#      up to its bound is done once, none beyond it, and the rows beyond
#      show as drift (beyond_bound in backfill_status, drifted in pending).
#      The writer writes until the test tells it to stop, so it is still
#      writing when the pass ends however long the pass takes.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('drift_watch');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE dw_owner LOGIN;
	CREATE TABLE d (id bigserial PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO d (n) SELECT 0 FROM generate_series(1, 1000);
	GRANT SELECT, UPDATE ON d TO dw_owner;
	CREATE TABLE w (id bigserial PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO w (n) SELECT 0 FROM generate_series(1, 1000);
	CREATE TABLE b (id bigserial PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO b (n) SELECT 0 FROM generate_series(1, 20000);
	CREATE TABLE writer_stop (stop boolean);
	CREATE PROCEDURE writer(per_tick int, max_secs float8) LANGUAGE plpgsql AS $$
	DECLARE
	    deadline timestamptz := clock_timestamp() + make_interval(secs => max_secs);
	BEGIN
	    WHILE clock_timestamp() < deadline AND NOT EXISTS (SELECT 1 FROM writer_stop) LOOP
	        INSERT INTO b (n) SELECT 0 FROM generate_series(1, per_tick);
	        COMMIT;
	        PERFORM pg_sleep(0.05);
	    END LOOP;
	END
	$$;
	ANALYZE d, w, b;
});

# ------------------------------------------------------------------
# (a) drifted, as a bounded count, as the declaring role
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	SET ROLE dw_owner;
	SELECT backfill_declare(name => 'dd', relation => 'd', predicate => 'n = 0',
		action => 'UPDATE d SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 500, rate => 100, guard => false);
});
my $run = sq($node, q{SET ROLE dw_owner; SELECT backfill_run('dd')});
is(wait_pass_end($node, $run, 300), 'completed', '(a) the pass completed');
is(sq($node, q{SELECT state, drift IS NULL, drift_rows > 0 FROM backfill_pending() WHERE name = 'dd'}),
	'completed|t|f', '(a) pending right after: completed, no drift');
sq($node, q{INSERT INTO d (n) SELECT 0 FROM generate_series(1, 100)});
is(sq($node, q{SELECT state FROM backfill_pending() WHERE name = 'dd'}), 'completed',
	'(a) backfill_pending evaluates no predicate: before a probe it still says completed');
is(sq($node, q{SELECT backfill_probe('dd')}), '100', '(a) backfill_probe: 100 rows');
is(sq($node, q{SELECT state, drift, drift_rows, drift_probed_at > now() - interval '1 hour'
		FROM backfill_pending() WHERE name = 'dd'}),
	'drifted|100 rows|100|t', '(a) 100 rows inserted after completion: drifted, "100 rows", with the probe\'s time');
is(sq($node, q{SET ROLE dw_owner; SELECT state FROM backfill_pending() WHERE name = 'dd'}),
	'drifted', '(a) the declaring role sees the same');
sq($node, q{INSERT INTO d (n) SELECT 0 FROM generate_series(1, 2000)});
is(sq($node, q{SET ROLE dw_owner; SELECT backfill_probe('dd')}), '1000',
	'(a) the declaring role probes it too: at most 1,000');
is(sq($node, q{SELECT state, drift, drift_rows FROM backfill_pending() WHERE name = 'dd'}),
	'drifted|at least 1,000 rows|1000', '(a) 2,100 rows: "at least 1,000 rows" (the probe stops at 1,000)');
sq($node, q{REVOKE SELECT, UPDATE ON d FROM dw_owner});
my ($rc, $out, $err) = $node->psql('postgres', q{SELECT backfill_probe('dd')});
like($err, qr/probe of backfill "dd" failed.*42501/s,
	'(a) the probe runs as the declaring role: without its grant it fails (BF039, the error 42501)');
is(sq($node, q{SELECT state, drift IS NULL, probe_error LIKE '42501:%' FROM backfill_pending() WHERE name = 'dd'}),
	'completed|t|t', '(a) and finds no drift: pending shows the probe\'s error instead');
sq($node, q{GRANT SELECT, UPDATE ON d TO dw_owner});
is(sq($node, q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'dd'}), '1',
	'(a) without watch, drift starts no pass');

# ------------------------------------------------------------------
# (b) watch => '1 s': probes, one catch-up pass, exactly once
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	SELECT backfill_declare(name => 'ww', relation => 'w', predicate => 'n = 0',
		action => 'UPDATE w SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 500, rate => 100, watch => '1 s', guard => false);
});
my $first = sq($node, q{SELECT backfill_run('ww')});
is(wait_pass_end($node, $first, 300), 'completed', '(b) the watched backfill completed');
ok(poll_until($node, q{SELECT watch_probes >= 2 FROM backfill_status('ww')}, 't', 180),
	'(b) the scheduler probes it at its interval');
is(sq($node, q{SELECT count(*), count(*) FILTER (WHERE watch) FROM backfill.ledger WHERE declaration = 'ww'}),
	'1|0', '(b) no drift, no pass');
is(sq($node, q{SELECT watch_drifts FROM backfill_status('ww')}), '0', '(b) no probe found drift');

sq($node, q{INSERT INTO w (n) SELECT 0 FROM generate_series(1, 100)});
my $t0 = time();
ok(poll_until($node, q{SELECT count(*) = 1 FROM backfill.ledger
		WHERE declaration = 'ww' AND watch AND status = 'completed'}, 't', 300),
	'(b) a catch-up pass healed the drift');
my $healed_s = time() - $t0;
note(sprintf('(b) healed %.1f s after the insert committed (watch interval 1 s)', $healed_s));
my $watch_run = sq($node, q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'ww'});
is(ledger($node, $watch_run, 'watch, forced, previous_run_id, direction, rows'),
	"t|t|$first|forward|100", '(b) the ledger shows the catch-up pass: watch, forced, after the first, 100 rows');
is(sq($node, q{SELECT count(*) FILTER (WHERE n = 1), count(*) FROM w}), '1100|1100',
	'(b) every row, old and new, done exactly once (n = 1)');
is(sq($node, q{SELECT healed_rows, watch_drifts, watch FROM backfill_status('ww')}), '100|1|t',
	'(b) backfill_status: 100 healed rows, one drifting probe, the newest pass a watch pass');
is(sq($node, q{SELECT state FROM backfill_pending() WHERE name = 'ww'}), 'completed',
	'(b) pending: completed again');
my $probes = sq($node, q{SELECT watch_probes FROM backfill_status('ww')});
ok(poll_until($node, qq{SELECT watch_probes > $probes FROM backfill_status('ww')}, 't', 180),
	'(b) the watch goes on probing after the heal');
is(sq($node, q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'ww'}), '2',
	'(b) and starts no further pass');

# ------------------------------------------------------------------
# (c) a pass beside a faster writer ends at its bound
# ------------------------------------------------------------------
# the pass: 4 batches/s x 500 rows = 2,000 rows/s; the writer: 500 rows
# every 50 ms plus its commit, several thousand rows/s, until the test
# stops it (or an hour passes)
$node->safe_psql('postgres', q{
	SELECT backfill_declare(name => 'bb', relation => 'b', predicate => 'n = 0',
		action => 'UPDATE b SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 500, rate => 4, guard => false);
});
my ($wout, $werr) = ('', '');
my $writer = IPC::Run::start(
	[ 'psql', '-X', '-d', $node->connstr('postgres'), '-c', 'CALL writer(500, 3600)' ],
	'<', \undef, '>', \$wout, '2>', \$werr);
ok(poll_until($node, q{SELECT count(*) > 21000 FROM b}, 't', 180), '(c) the writer is writing');
my $brun = sq($node, q{SELECT backfill_run('bb')});
is(wait_pass_end($node, $brun, 600), 'completed', '(c) the pass completed while the writer writes');
ok($writer->pumpable, '(c) the writer was still running when the pass ended');
my $rate = sq($node, q{SELECT count(*) FROM b}) ;
my $bound = sq($node, q{SELECT bound FROM backfill_status('bb')});
like($bound, qr/^\d+$/, "(c) the pass recorded its bound ($bound)");
cmp_ok($bound, '>', 20000, '(c) the bound is the largest key when the pass was planned');
is(sq($node, qq{SELECT count(*) FROM b WHERE id <= $bound AND n <> 1}), '0',
	'(c) every row up to the bound done exactly once');
is(sq($node, qq{SELECT count(*) FROM b WHERE id > $bound AND n <> 0}), '0',
	'(c) no row beyond the bound was touched');
is(ledger($node, $brun, 'rows'), $bound, '(c) the ledger counts the rows within the bound');
cmp_ok(sq($node, q{SELECT beyond_bound FROM backfill_status('bb')}), '>', 0,
	'(c) the rows beyond the bound are reported (beyond_bound)');
is(sq($node, q{SELECT state FROM backfill_pending() WHERE name = 'bb'}), 'drifted',
	'(c) and backfill_pending says drifted');
sq($node, q{INSERT INTO writer_stop VALUES (true)});
$writer->finish;
note("(c) table b had $rate rows when the pass ended; bound $bound");
like(slurp_file($node->logfile), qr/backfill "bb" run $brun completed.*beyond its bound/,
	'(c) the server log says rows lie beyond the bound');

# ------------------------------------------------------------------
# (d) the same with a composite key: (tenant, id), the writer adding
# tenants above the largest key; the bound is a row literal
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE cb (tenant int NOT NULL, id bigint NOT NULL, n int NOT NULL DEFAULT 0,
	                 PRIMARY KEY (tenant, id));
	INSERT INTO cb (tenant, id) SELECT g % 5, g FROM generate_series(1, 10000) g;
	ANALYZE cb;
	CREATE TABLE cwriter_stop (stop boolean);
	CREATE PROCEDURE cwriter(per_tick int, max_secs float8) LANGUAGE plpgsql AS $$
	DECLARE
	    deadline timestamptz := clock_timestamp() + make_interval(secs => max_secs);
	    t int := 5;
	BEGIN
	    WHILE clock_timestamp() < deadline AND NOT EXISTS (SELECT 1 FROM cwriter_stop) LOOP
	        INSERT INTO cb (tenant, id) SELECT t, g FROM generate_series(1, per_tick) g;
	        t := t + 1;
	        COMMIT;
	        PERFORM pg_sleep(0.05);
	    END LOOP;
	END
	$$;
	SELECT backfill_declare(name => 'cbb', relation => 'cb', predicate => 'n = 0',
		action => 'UPDATE cb SET n = n + 1 WHERE (tenant, id) >= ($1, $2)
		           AND (tenant < $3 OR (tenant = $3 AND id <= $4))',
		batch_size => 500, rate => 4, guard => false);
});
my $cwriter = IPC::Run::start(
	[ 'psql', '-X', '-d', $node->connstr('postgres'), '-c', 'CALL cwriter(500, 3600)' ],
	'<', \undef, '>', \$wout, '2>', \$werr);
ok(poll_until($node, q{SELECT count(*) > 11000 FROM cb}, 't', 180), '(d) the writer is adding tenants');
my $crun = sq($node, q{SELECT backfill_run('cbb')});
is(wait_pass_end($node, $crun, 600), 'completed', '(d) the composite pass completed while the writer writes');
ok($cwriter->pumpable, '(d) the writer was still running when the pass ended');
my $cbound = sq($node, q{SELECT bound FROM backfill_status('cbb')});
like($cbound, qr/^\(\d+,\d+\)$/, "(d) the bound is a row literal ($cbound)");
my ($bt, $bi) = $cbound =~ /^\((\d+),(\d+)\)$/;
is(sq($node, qq{SELECT count(*) FROM cb WHERE (tenant, id) <= ($bt, $bi) AND n <> 1}), '0',
	'(d) every row up to the bound done exactly once');
is(sq($node, qq{SELECT count(*) FROM cb WHERE (tenant, id) > ($bt, $bi) AND n <> 0}), '0',
	'(d) no row beyond the bound was touched');
is(ledger($node, $crun, 'rows'),
	sq($node, qq{SELECT count(*) FROM cb WHERE (tenant, id) <= ($bt, $bi)}),
	'(d) the ledger counts the rows within the bound');
cmp_ok(sq($node, q{SELECT beyond_bound FROM backfill_status('cbb')}), '>', 0,
	'(d) the rows beyond the bound are reported (beyond_bound)');
sq($node, q{INSERT INTO cwriter_stop VALUES (true)});
$cwriter->finish;

$node->stop;
done_testing();
