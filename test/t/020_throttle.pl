# 020_throttle.pl
#
# Pacing: the health throttle and the adaptive batch size (src/engine/pacing.c).
#  (1) replication lag, for real: a streaming standby whose replay is paused
#      falls more than backfill.max_replication_lag behind; the lane holds
#      back ("replication: ..." in backfill_status.throttle) and writes no
#      more rows until replay resumes, then the pass completes;
#  (2) lock contention: (a) an application session that waits on a batch's
#      row locks makes the lane yield ("locks: N session(s) waited on the
#      last batch"); (b) an application session that holds a row lock the
#      lane needs makes the batch fail after the declared lock_timeout
#      (55P03), which is retried with backoff until the session commits;
#  (3) adaptive batch size: fast batches grow it (never above
#      max_batch_size), slow batches shrink it (never below min_batch_size);
#  (4) dead tuples: above backfill.max_dead_tuples the lane holds back
#      ("vacuum: ...") until VACUUM brings the count down.
# Every action is non-idempotent (n = n + 1): each pass must leave n = 1 on
# every row.
#
# No assertion depends on how fast the machine is: the states asserted on
# are made true by construction (replay paused, a row lock held, a gate a
# lane's batch waits at, batches that sleep), the rates bound how fast a
# pass can go, and the batch times that make the batch size grow are far
# below the target, whatever the load.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('throttle_primary',
	init => { allows_streaming => 1 },
	extra_conf => "backfill.throttle_delay = 200\n");
$BackfillTest::poll_interval = 0.1;

# Every row of $table rewritten exactly once, and the ledger agrees.
sub exactly_once
{
	my ($table, $rows, $run, $what) = @_;
	is(sq($node, "SELECT count(*), count(*) FILTER (WHERE n = 1), sum(n) FROM $table"),
		"$rows|$rows|$rows", "$what: every row of $table rewritten exactly once (n = 1)");
	is(sq($node, "SELECT rows FROM backfill.ledger WHERE run_id = $run"),
		$rows, "$what: the ledger counts $rows rows");
}

my $t0 = time();
sq($node, 'CREATE EXTENSION pg_backfill');

# ------------------------------------------------------------------
# (1) replication lag with a real streaming standby
# ------------------------------------------------------------------
$node->backup('b1');
my $standby = PostgreSQL::Test::Cluster->new('throttle_standby');
$standby->init_from_backup($node, 'b1', has_streaming => 1);
$standby->start;

my $LAG_ROWS = 50_000;
sq($node, qq{
	CREATE TABLE tr (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO tr (id) SELECT g FROM generate_series(1, $LAG_ROWS) g;
	ANALYZE tr;
});
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT count(*) FROM tr'),
	$LAG_ROWS, 'the standby has replayed the table');

sq($node, q{ALTER SYSTEM SET backfill.max_replication_lag = '64kB'});
sq($node, 'SELECT pg_reload_conf()');
ok(poll_until($node, 'SHOW backfill.max_replication_lag', '64kB', 60),
	'backfill.max_replication_lag is 64kB after the reload');

$standby->safe_psql('postgres', 'SELECT pg_wal_replay_pause()');
ok($standby->poll_query_until('postgres',
		q{SELECT pg_get_wal_replay_pause_state() = 'paused'}),
	'replay on the standby is paused');

sq($node, q{
	SELECT backfill_declare(name => 'lag', relation => 'tr', predicate => 'n = 0',
		action => 'UPDATE tr SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 1000, rate => 10, guard => false);
});
my $run = sq($node, q{SELECT backfill_run('lag')});
like($run, qr/^\d+$/, 'lag: backfill_run returned a run id');

ok( poll_until($node,
		q{SELECT throttle LIKE 'replication:%' FROM backfill_status('lag')}, 't', 180),
	'lag: backfill_status shows the replication throttle while replay is paused');
my ($rows0, $bs0, $thr) = split /\|/,
  sq($node, q{SELECT rows, batch_size, throttle FROM backfill_status('lag')});
note("lag: throttled at $rows0 rows (batch size $bs0): $thr");
like($thr, qr/^replication: a standby's replay is \d+ kB behind \(backfill\.max_replication_lag is 64 kB\)$/,
	'lag: the throttle says how far behind the standby is');
cmp_ok($rows0, '<', $LAG_ROWS, 'lag: the pass was throttled before it was done');

# rows must stop growing while replay is paused: at most one more batch.
# At least 8 samples over at least 2 s, however long a sample takes.
{
	my ($samples, $max_rows, $bad_status, $unthrottled) = (0, $rows0, 0, 0);
	my $t_start = time();
	while ($samples < 8 || time() < $t_start + 2.2)
	{
		my ($rows, $status, $throttle) = split /\|/,
		  sq($node, q{SELECT rows, status, coalesce(throttle, '') FROM backfill_status('lag')});
		$samples++;
		$max_rows = $rows if $rows > $max_rows;
		$bad_status++ if $status ne 'running';
		$unthrottled++ if $throttle !~ /^replication:/;
		usleep(250_000);
	}
	cmp_ok($samples, '>=', 5,
		sprintf('lag: sampled %d times over %.1f s (at least 2 s)', $samples, time() - $t_start));
	cmp_ok($max_rows, '<=', $rows0 + $bs0,
		'lag: rows stopped growing while replay was paused (at most one more batch)');
	is($bad_status, 0, 'lag: the ledger stayed running while held back');
	is($unthrottled, 0, 'lag: the throttle stayed on while replay was paused');
}

$standby->safe_psql('postgres', 'SELECT pg_wal_replay_resume()');
is(wait_pass_end($node, $run, 300), 'completed', 'lag: the pass completed once replay resumed');
exactly_once('tr', $LAG_ROWS, $run, 'lag');
is(sq($node, q{SELECT count(*) FROM backfill_partitions('lag') WHERE throttle IS NOT NULL}),
	'0', 'lag: no partition is left marked as throttled');
like(slurp_file($node->logfile),
	qr/backfill "lag" run $run holds back: replication: a standby's replay is \d+ kB behind/,
	'lag: the server log says the lane holds back for replication');
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT count(*) FILTER (WHERE n = 1) FROM tr'),
	$LAG_ROWS, 'lag: the standby replayed every rewritten row');

$standby->stop;
sq($node, 'ALTER SYSTEM SET backfill.max_replication_lag = -1');
sq($node, 'SELECT pg_reload_conf()');
ok(poll_until($node, 'SHOW backfill.max_replication_lag', '-1', 60),
	'replication lag check switched off for the next cases');

# ------------------------------------------------------------------
# (2a) a session waits on the batch's locks: the lane yields
# ------------------------------------------------------------------
# The "application" procedure keeps updating a row just past the
# checkpoint, i.e. in the batch in flight.  A statement trigger holds two
# lane batches after their UPDATE, with their row locks: the batch of keys
# 1001..1100 until a session waits on its locks (and 0.3 s more, so the
# wait is a real one and the lane's health reading is due), the batch
# after it until the test has seen the lock throttle and opens the gate
# (the throttle stays in backfill_partitions until that batch's checkpoint).
my $LOCK_ROWS = 2000;
sq($node, qq{
	CREATE TABLE tl (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0,
	                 app int NOT NULL DEFAULT 0);
	INSERT INTO tl (id) SELECT g FROM generate_series(1, $LOCK_ROWS) g;
	ANALYZE tl;
	CREATE TABLE tl_gate (open boolean NOT NULL);
	INSERT INTO tl_gate VALUES (false);
	CREATE FUNCTION tl_hold() RETURNS trigger LANGUAGE plpgsql AS \$\$
	DECLARE
	    lo bigint;
	    t_end timestamptz := clock_timestamp() + interval '5 minutes';
	BEGIN
	    IF current_setting('application_name') <> 'pg_backfill lane' THEN
	        RETURN NULL;
	    END IF;
	    SELECT min(id) INTO lo FROM new_rows;
	    IF lo = 1001 THEN
	        -- pg_locks, not pg_stat_activity: that one is read once a transaction
	        WHILE NOT EXISTS (SELECT 1 FROM pg_locks k WHERE NOT k.granted
	                             AND pg_backend_pid() = ANY (pg_blocking_pids(k.pid)))
	              AND clock_timestamp() < t_end LOOP
	            PERFORM pg_sleep(0.02);
	        END LOOP;
	        PERFORM pg_sleep(0.3);
	    ELSIF lo = 1101 THEN
	        WHILE NOT (SELECT open FROM tl_gate) AND clock_timestamp() < t_end LOOP
	            PERFORM pg_sleep(0.05);
	        END LOOP;
	    END IF;
	    RETURN NULL;
	END \$\$;
	CREATE TRIGGER tl_hold AFTER UPDATE ON tl REFERENCING NEW TABLE AS new_rows
	    FOR EACH STATEMENT EXECUTE FUNCTION tl_hold();
	CREATE TABLE app_log (at timestamptz DEFAULT clock_timestamp(), id bigint, waited_ms float8);
	CREATE PROCEDURE app_poke(secs float8) LANGUAGE plpgsql AS \$\$
	DECLARE
	    t_end timestamptz := clock_timestamp() + make_interval(secs => secs);
	    c bigint;
	    t1 timestamptz;
	BEGIN
	    WHILE clock_timestamp() < t_end LOOP
	        EXIT WHEN EXISTS (SELECT 1 FROM backfill.ledger
	                           WHERE declaration = 'locks' AND status <> 'running');
	        SELECT coalesce(p.cursor::bigint, 0) INTO c
	          FROM backfill.partition p JOIN backfill.ledger l USING (run_id)
	         WHERE l.declaration = 'locks' AND p.state = 'running';
	        IF FOUND THEN
	            t1 := clock_timestamp();
	            UPDATE tl SET app = app + 1 WHERE id = c + 5;
	            INSERT INTO app_log (id, waited_ms)
	                 VALUES (c + 5, extract(epoch FROM clock_timestamp() - t1) * 1000);
	        END IF;
	        COMMIT;
	        PERFORM pg_sleep(0.03);
	    END LOOP;
	END \$\$;
});

sq($node, q{
	SELECT backfill_declare(name => 'locks', relation => 'tl', predicate => 'n = 0',
		action => 'UPDATE tl SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 4, batch_timeout => '10 minutes', guard => false);
});
$run = sq($node, q{SELECT backfill_run('locks')});
ok(poll_until($node, q{SELECT partitions_running FROM backfill_status('locks')}, '1', 180),
	'locks: a lane holds the partition');

my $app = $node->background_psql('postgres');
$app->query_until(qr/poking/, "\\echo poking\nCALL app_poke(600);\n");

{
	my $deadline = time() + 300;
	my ($seen, $samples) = ('', 0);
	while (time() < $deadline)
	{
		my ($throttle, $status) = split /\|/,
		  sq($node, q{SELECT coalesce((SELECT string_agg(throttle, '; ') FROM backfill_partitions('locks')), ''),
		             (SELECT status FROM backfill_status('locks'))});
		$samples++;
		if ($throttle =~ /^locks:/) { $seen = $throttle; last; }
		last if $status ne 'running';
		usleep(40_000);
	}
	like($seen, qr/^locks: [1-9]\d* session\(s\) waited on the last batch$/,
		"locks: backfill_partitions shows the lock throttle (after $samples samples)");
}
sq($node, 'UPDATE tl_gate SET open = true');
is(wait_pass_end($node, $run, 300), 'completed', 'locks: the pass completed');
$app->quit;
exactly_once('tl', $LOCK_ROWS, $run, 'locks');
cmp_ok(sq($node, q{SELECT count(*) FROM app_log WHERE waited_ms > 50}), '>=', 1,
	'locks: the application session did wait on the lane at least once');
cmp_ok(sq($node, q{SELECT count(*) FROM tl WHERE app > 0}), '>=', 1,
	"locks: the application session's updates went through");

# ------------------------------------------------------------------
# (2b) a session holds a lock the lane needs: lock_timeout per batch
# ------------------------------------------------------------------
sq($node, qq{
	CREATE TABLE tk (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0,
	                 app int NOT NULL DEFAULT 0);
	INSERT INTO tk (id) SELECT g FROM generate_series(1, $LOCK_ROWS) g;
	ANALYZE tk;
	-- logs the lock_timeout each lane batch runs under, before it takes any
	-- row lock: also for the attempts that then fail
	CREATE FUNCTION tk_timeout() RETURNS trigger LANGUAGE plpgsql AS \$\$
	BEGIN
	    IF current_setting('application_name') = 'pg_backfill lane' THEN
	        RAISE LOG 'tk batch under lock_timeout %', current_setting('lock_timeout');
	    END IF;
	    RETURN NULL;
	END \$\$;
	CREATE TRIGGER tk_timeout BEFORE UPDATE ON tk FOR EACH STATEMENT EXECUTE FUNCTION tk_timeout();
});
sq($node, q{
	SELECT backfill_declare(name => 'lockto', relation => 'tk', predicate => 'n = 0',
		action => 'UPDATE tk SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 20, lock_timeout => '100 ms',
		max_attempts => 100, backoff_base => '100 ms', backoff_cap => '200 ms', guard => false);
});
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN; UPDATE tk SET app = app + 1 WHERE id = 1000;');
my $lockto_log = -s $node->logfile;
$run = sq($node, q{SELECT backfill_run('lockto')});
ok( poll_until($node,
		q{SELECT failures >= 5 FROM backfill_partitions('lockto')}, 't', 180),
	'lockto: the batch that needs the held row keeps failing');
# every attempt, the failed ones included, ran under the declared
# lock_timeout: each waited 100 ms for the held row, not the default 2 s
{
	my @seen = substr(slurp_file($node->logfile), $lockto_log)
	  =~ /tk batch under lock_timeout (\S+)/g;
	my %values = map { $_ => 1 } @seen;
	cmp_ok(scalar(@seen), '>=', 14, 'lockto: the batch attempts logged their lock_timeout ('
		  . scalar(@seen) . ': 9 committed, at least 5 failed)');
	is(join(',', sort keys %values), '100ms',
		'lockto: every attempt waited at most the declared lock_timeout (100ms), not 2 s');
}
is(sq($node, q{SELECT rows, state, cursor, last_error FROM backfill_partitions('lockto')}),
	'900|running|900|canceling statement due to lock timeout',
	'lockto: the checkpoint stops before the held row; the last error is the lock timeout');
is(sq($node, q{SELECT status FROM backfill_status('lockto')}), 'running', 'lockto: the pass is still running');
$holder->query_safe('COMMIT');
$holder->quit;
is(wait_pass_end($node, $run, 180), 'completed', 'lockto: the pass completed once the session committed');
exactly_once('tk', $LOCK_ROWS, $run, 'lockto');
like(slurp_file($node->logfile),
	qr/backfill "lockto" run $run: batch failed \(attempt \d+ of 100\), retrying in \d+ ms\n.*DETAIL:  SQLSTATE 55P03: canceling statement due to lock timeout/,
	'lockto: the server log shows the batch retried after a 55P03 lock timeout');
is(sq($node, q{SELECT failures, last_error IS NULL FROM backfill_partitions('lockto')}),
	'0|t', 'lockto: the failures were cleared by the next committed batch');

# ------------------------------------------------------------------
# (3) adaptive batch size
# ------------------------------------------------------------------
my $AD_ROWS = 200_000;
sq($node, qq{
	CREATE TABLE ta (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO ta (id) SELECT g FROM generate_series(1, $AD_ROWS) g;
	ANALYZE ta;
});
# a target of 2 s: batches of up to 20000 rows are far faster than that
# even on a loaded machine, so each one grows the size (by half, at most);
# the rate keeps the pass going for several seconds (about 22 batches)
sq($node, q{
	SELECT backfill_declare(name => 'grow', relation => 'ta', predicate => 'n = 0',
		action => 'UPDATE ta SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 4, target_batch_time => '2 s',
		min_batch_size => 50, max_batch_size => 20000, guard => false);
});
$run = sq($node, q{SELECT backfill_run('grow')});
{
	my $deadline = time() + 300;
	my ($grown, $max_bs, $min_bs, $samples, $status) = (0, 0, 1e9, 0, 'running');
	while (time() < $deadline)
	{
		my ($bs, $pbs);
		($status, $bs, $pbs) = split /\|/,
		  sq($node, q{SELECT status, coalesce(batch_size, 0),
		             coalesce((SELECT max(batch_size) FROM backfill_partitions('grow')), 0)
		        FROM backfill_status('grow')});
		$samples++;
		for my $v ($bs, $pbs)
		{
			next if $v == 0;
			$max_bs = $v if $v > $max_bs;
			$min_bs = $v if $v < $min_bs;
		}
		$grown = $bs if $bs > 100 && !$grown;
		last if $status ne 'running';
		usleep(30_000);
	}
	cmp_ok($grown, '>', 100,
		"grow: backfill_status.batch_size grew above the declared 100 ($samples samples, max $max_bs)");
	cmp_ok($max_bs, '<=', 20000, 'grow: the batch size never exceeded max_batch_size 20000');
	cmp_ok($min_bs, '>=', 50, 'grow: the batch size never went below min_batch_size 50');
}
is(wait_pass_end($node, $run, 300), 'completed', 'grow: the pass completed');
exactly_once('ta', $AD_ROWS, $run, 'grow');
my ($final_bs, $batches) = split /\|/,
  sq($node, q{SELECT max(batch_size), sum(batches) FROM backfill_partitions('grow')});
cmp_ok($final_bs, '<=', 20000, "grow: last recorded batch size $final_bs is within max_batch_size");
cmp_ok($batches, '<', $AD_ROWS / 100,
	"grow: $batches batches, fewer than the $AD_ROWS/100 a fixed batch size would take");

# a cap the batch size does reach: fast batches of at most 400 rows stay at 400
my $CAP_ROWS = 20_000;
sq($node, qq{
	CREATE TABLE tc (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO tc (id) SELECT g FROM generate_series(1, $CAP_ROWS) g;
	ANALYZE tc;
});
sq($node, q{
	SELECT backfill_declare(name => 'cap', relation => 'tc', predicate => 'n = 0',
		action => 'UPDATE tc SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 5, target_batch_time => '2 s',
		min_batch_size => 50, max_batch_size => 400, guard => false);
});
$run = sq($node, q{SELECT backfill_run('cap')});
# at 5 batches a second the 54 batches take at least 10 s, 9 s of them at the cap
{
	my $deadline = time() + 300;
	my ($max_bs, $at_cap, $samples, $status) = (0, 0, 0, 'running');
	while (time() < $deadline)
	{
		my $bs;
		($status, $bs) = split /\|/,
		  sq($node, q{SELECT status, coalesce(batch_size, 0) FROM backfill_status('cap')});
		$samples++;
		$max_bs = $bs if $bs > $max_bs;
		$at_cap++ if $bs == 400;
		last if $status ne 'running';
		usleep(50_000);
	}
	is($max_bs, 400, "cap: the batch size grew to max_batch_size 400 and never past it ($samples samples)");
	cmp_ok($at_cap, '>=', 2, "cap: seen at the cap $at_cap times");
}
is(wait_pass_end($node, $run, 300), 'completed', 'cap: the pass completed');
exactly_once('tc', $CAP_ROWS, $run, 'cap');
my ($cap_bs, $cap_batches) = split /\|/,
  sq($node, q{SELECT max(batch_size), sum(batches) FROM backfill_partitions('cap')});
is($cap_bs, 400, 'cap: the last recorded batch size is 400');
# 100, 150, 225, 338, then 400s: 20000 rows in 50..60 batches
ok($cap_batches >= 50 && $cap_batches <= 60,
	"cap: $cap_batches batches, as many as a batch size growing from 100 to a cap of 400 takes");

# slow batches shrink it; once fast again the pass finishes
my $SL_ROWS = 20_000;
sq($node, qq{
	CREATE TABLE ts (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO ts (id) SELECT g FROM generate_series(1, $SL_ROWS) g;
	ANALYZE ts;
	CREATE TABLE slow_flag (on_ boolean NOT NULL);
	INSERT INTO slow_flag VALUES (true);
	CREATE FUNCTION slow_batch(lo bigint, hi bigint) RETURNS bigint LANGUAGE plpgsql AS \$\$
	DECLARE k bigint;
	BEGIN
	    UPDATE ts SET n = n + 1 WHERE id BETWEEN lo AND hi;
	    GET DIAGNOSTICS k = ROW_COUNT;
	    IF (SELECT on_ FROM slow_flag) THEN
	        PERFORM pg_sleep(0.2);
	    END IF;
	    RETURN k;
	END \$\$;
});
sq($node, q{
	SELECT backfill_declare(name => 'shrink', relation => 'ts', predicate => 'n = 0',
		action => 'SELECT slow_batch($1, $2)',
		batch_size => 2000, rate => 100, target_batch_time => '50 ms',
		min_batch_size => 10);
});
$run = sq($node, q{SELECT backfill_run('shrink')});
# a slow batch takes at least 0.2 s, 4 times the target: each shrinks the
# size to 3/4, so slow batches alone can never finish the pass (2000 / (1 -
# 3/4) = 8000 rows, then 10 rows at a time)
{
	my $deadline = time() + 180;
	my ($shrunk, $min_bs, $samples, $rows) = (0, 1e9, 0, 0);
	while (time() < $deadline)
	{
		my ($status, $bs);
		($status, $bs, $rows) = split /\|/,
		  sq($node, q{SELECT status, coalesce(batch_size, 0), rows FROM backfill_status('shrink')});
		$samples++;
		$min_bs = $bs if $bs > 0 && $bs < $min_bs;
		if ($bs > 0 && $bs < 2000) { $shrunk = $bs; last; }
		last if $status ne 'running';
		usleep(50_000);
	}
	ok($shrunk > 0 && $shrunk < 2000,
		"shrink: backfill_status.batch_size shrank below the declared 2000 (to $shrunk, at $rows rows)");
	cmp_ok($rows, '<', $SL_ROWS, 'shrink: it shrank before the pass was done');
	# keep slow a little longer: it keeps shrinking, never below 10
	ok(poll_until($node, q{SELECT batch_size <= 500 FROM backfill_status('shrink')}, 't', 180),
		'shrink: slow batches keep shrinking it (<= 500)');
	cmp_ok(sq($node, q{SELECT min(batch_size) FROM backfill_partitions('shrink')}), '>=', 10,
		'shrink: never below min_batch_size 10');
}
sq($node, 'UPDATE slow_flag SET on_ = false');
is(wait_pass_end($node, $run, 600), 'completed', 'shrink: the pass completed once batches were fast again');
exactly_once('ts', $SL_ROWS, $run, 'shrink');

# ------------------------------------------------------------------
# (4) dead tuples
# ------------------------------------------------------------------
sq($node, 'ALTER SYSTEM SET backfill.max_dead_tuples = 1000');
sq($node, 'SELECT pg_reload_conf()');
ok(poll_until($node, 'SHOW backfill.max_dead_tuples', '1000', 60),
	'backfill.max_dead_tuples is 1000 after the reload');
my $DT_ROWS = 50_000;
sq($node, qq{
	CREATE TABLE td (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0)
	  WITH (autovacuum_enabled = false);
	INSERT INTO td (id) SELECT g FROM generate_series(1, $DT_ROWS) g;
	VACUUM ANALYZE td;
});
is(sq($node, q{SELECT pg_stat_get_dead_tuples('td'::regclass)}), '0', 'vacuum: td starts with no dead tuples');
sq($node, q{
	SELECT backfill_declare(name => 'dead', relation => 'td', predicate => 'n = 0',
		action => 'UPDATE td SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 1000, rate => 5, guard => false);
});
$run = sq($node, q{SELECT backfill_run('dead')});
ok( poll_until($node,
		q{SELECT throttle LIKE 'vacuum:%' FROM backfill_status('dead')}, 't', 180),
	'vacuum: backfill_status shows the dead-tuple throttle');
($rows0, $thr) = split /\|/, sq($node, q{SELECT rows, throttle FROM backfill_status('dead')});
note("vacuum: throttled at $rows0 rows: $thr");
like($thr, qr/^vacuum: (public\.)?td has \d+ dead tuples \(backfill\.max_dead_tuples is 1000\)$/,
	'vacuum: the throttle names the table and its dead tuples');
cmp_ok($rows0, '<', $DT_ROWS, 'vacuum: throttled before the pass was done');
{
	my ($max_rows, $unthrottled) = ($rows0, 0);
	my $end = time() + 1.5;
	while (time() < $end)
	{
		my ($rows, $throttle) = split /\|/,
		  sq($node, q{SELECT rows, coalesce(throttle, '') FROM backfill_status('dead')});
		$max_rows = $rows if $rows > $max_rows;
		$unthrottled++ if $throttle !~ /^vacuum:/;
		usleep(250_000);
	}
	cmp_ok($max_rows, '<=', $rows0 + 1000, 'vacuum: rows stopped growing while held back');
	is($unthrottled, 0, 'vacuum: the throttle stayed on until VACUUM');
}
sq($node, 'VACUUM td');
ok( poll_until($node, q{SELECT pg_stat_get_dead_tuples('td'::regclass) < 1000}, 't', 180),
	'vacuum: VACUUM brought the dead tuples under the limit');
ok( poll_until($node, "SELECT rows > $rows0 FROM backfill_status('dead')", 't', 180),
	'vacuum: the lane went on after VACUUM');
{
	my ($vacuums, $status) = (1, 'running');
	my $deadline = time() + 600;
	while (time() < $deadline)
	{
		$status = ledger($node, $run, 'status');
		last if $status ne 'running';
		sq($node, 'VACUUM td');
		$vacuums++;
		usleep(300_000);
	}
	is($status, 'completed', "vacuum: the pass completed ($vacuums VACUUMs)");
}
exactly_once('td', $DT_ROWS, $run, 'vacuum');
like(slurp_file($node->logfile),
	qr/backfill "dead" run $run holds back: vacuum: (public\.)?td has \d+ dead tuples/,
	'vacuum: the server log says the lane holds back for vacuum');

note(sprintf('020_throttle: %.1f s', time() - $t0));
$node->stop;
done_testing();
