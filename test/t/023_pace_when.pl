# 023_pace_when.pl
#
# The user's own condition and time windows (issue 27, points 3 and 4;
# src/engine/condition.c, windows.c, pacing.c, workers/scheduler.c):
#  (1) throttle_when => 'bf_ops.check()', a function whose answer a table
#      row (mode) sets: 'hold' holds the pass's lanes at their batch
#      boundary, rows stop, backfill_status.throttle says 'condition:
#      throttle_when is true', the ledger stays running; 'go' lets them on;
#      it is evaluated at most once a second for the pass (a sequence the
#      function advances, which no rollback takes back, counts the
#      evaluations: an upper bound only);
#  (2) an error holds and is shown ('error'); the hostile ones are bounded
#      and run as run_as, restricted: one that loops is ended by
#      backfill.probe_timeout (57014), so is one that sleeps, one that waits
#      for a lock a session holds is ended by backfill.probe_lock_timeout
#      (55P03), one that reads a table of another
#      role is refused (42501, so it runs as run_as, not as the superuser
#      who declared it), one that creates a temporary table is refused
#      (security-restricted), one that says who it runs as names run_as;
#  (3) a lane killed (SIGKILL) while held by the condition: the lane that
#      takes its partition over holds too; 'go': the pass completes, every
#      row exactly once (n = n + 1);
#  (4) windows => '{"03:00-03:01", "03:03-06:00"}' in UTC, the windows'
#      clock put by backfill.windows_clock_offset (a test's hook, state by
#      construction, no waiting for real hours) inside the first: rows
#      move; put 2 s before it ends: the lanes give their partitions back
#      (no lease held), backfill_status says 'waiting for a window (next at
#      03:03 ...)', nothing is marked failed or paused, rows stay; put 2 s
#      before the second starts: the pass goes on by itself and completes,
#      every row exactly once; the client's progress line (run --wait)
#      shows the wait.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use FindBin;
use IPC::Run;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

# the client, as 030_cli.pl finds it
my $cli = $ENV{PG_BACKFILL_CLI};
if (!defined $cli || $cli eq '')
{
	my $rel = "$FindBin::RealBin/../../cli/pg_backfill";
	$cli = -x $rel ? $rel : '/usr/lib/postgresql/15/bin/pg_backfill';
}

my $node = BackfillTest::node('pace_when', crash_restart => 1,
	extra_conf => "backfill.throttle_delay = 200\n"
	  . "backfill.probe_timeout = 500\n"
	  . "backfill.probe_lock_timeout = 200\n"
	  . "autovacuum = off\n");
$BackfillTest::poll_interval = 0.1;
sq($node, 'CREATE EXTENSION pg_backfill');

sub reload_with
{
	my ($setting, $value) = @_;
	sq($node, "ALTER SYSTEM SET $setting = $value");
	sq($node, 'SELECT pg_reload_conf()');
	return;
}

sub make_table
{
	my ($table, $rows) = @_;
	sq($node, qq{
		CREATE TABLE $table (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO $table (id) SELECT g FROM generate_series(1, $rows) g;
		ANALYZE $table;
		GRANT SELECT, UPDATE ON $table TO lane_r;
	});
	return;
}

# Rows stay where they are for at least 8 samples over at least 2 s while
# the hold is on (it is on by construction); the ledger stays running.
sub rows_hold
{
	my ($name, $pattern, $what) = @_;
	my ($rows0) = sq($node, "SELECT rows FROM backfill_status('$name')");
	my ($samples, $moved, $unheld, $bad_status) = (0, 0, 0, 0);
	my $t_start = time();
	while ($samples < 8 || time() < $t_start + 2.2)
	{
		my ($rows, $status, $throttle) = split /\|/,
		  sq($node, "SELECT rows, status, coalesce(throttle, '') FROM backfill_status('$name')");
		$samples++;
		$moved++ if $rows != $rows0;
		$unheld++ if $throttle !~ $pattern;
		$bad_status++ if $status ne 'running';
		usleep(250_000);
	}
	is($moved, 0, "$what: rows stayed at $rows0 while held ($samples samples)");
	is($unheld, 0, "$what: the throttle stayed on while held");
	is($bad_status, 0, "$what: the ledger stayed running while held");
	return $rows0;
}

sub set_mode
{
	my ($mode) = @_;
	sq($node, "UPDATE bf_ops.mode SET mode = '$mode'");
	return;
}

# the lanes' role, the condition's function, and a table of another role
sq($node, q{
	CREATE ROLE lane_r LOGIN;
	CREATE ROLE other_r;
	CREATE SCHEMA bf_ops;
	GRANT USAGE ON SCHEMA bf_ops TO lane_r;
	CREATE TABLE bf_ops.mode (mode text NOT NULL);
	INSERT INTO bf_ops.mode VALUES ('go');
	GRANT SELECT ON bf_ops.mode TO lane_r;
	CREATE SEQUENCE bf_ops.calls;
	GRANT USAGE ON SEQUENCE bf_ops.calls TO lane_r;
	CREATE TABLE bf_ops.locked (x int);
	GRANT SELECT ON bf_ops.locked TO lane_r;
	CREATE TABLE bf_ops.secret (x int);
	ALTER TABLE bf_ops.secret OWNER TO other_r;
	CREATE FUNCTION bf_ops.check() RETURNS boolean LANGUAGE plpgsql AS $$
	DECLARE
	    m text := (SELECT mode FROM bf_ops.mode);
	BEGIN
	    PERFORM nextval('bf_ops.calls');
	    CASE m
	    WHEN 'hold' THEN RETURN true;
	    WHEN 'error' THEN RAISE EXCEPTION 'ops says no';
	    WHEN 'loop' THEN LOOP PERFORM 1; END LOOP;
	    WHEN 'sleep' THEN PERFORM pg_sleep(30);
	    WHEN 'lock' THEN PERFORM count(*) FROM bf_ops.locked;
	    WHEN 'secret' THEN PERFORM count(*) FROM bf_ops.secret;
	    WHEN 'temp' THEN CREATE TEMP TABLE bf_ops_tmp (i int);
	    WHEN 'whoami' THEN RAISE EXCEPTION 'evaluated as %', current_user;
	    ELSE RETURN false;
	    END CASE;
	    RETURN false;
	END $$;
});

# ------------------------------------------------------------------
# (1) throttle_when holds and lets go
# ------------------------------------------------------------------
make_table('ct', 2000);
sq($node, q{
	SELECT backfill_declare(name => 'cond', relation => 'ct', predicate => 'n = 0',
		action => 'UPDATE ct SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 50, rate => 2, max_parallel => 2, guard => false, run_as => 'lane_r',
		throttle_when => 'bf_ops.check()');
});
my $cond_run = sq($node, q{SELECT backfill_run('cond')});
# at most 100 rows a second: the pass is mid-way for at least 15 s after its first rows,
# and rows move only between the holds
ok(poll_until($node, q{SELECT rows > 0 FROM backfill_status('cond')}, 't', 300),
	'condition: the pass has done rows while the condition is false');
set_mode('hold');
ok(poll_until($node, q{SELECT throttle LIKE 'condition: throttle_when is true (bf_ops.check())%'
		FROM backfill_status('cond')}, 't', 300),
	'condition: backfill_status says the condition holds the lanes');
my $held = rows_hold('cond', qr/^condition: throttle_when is true/, 'condition');
cmp_ok($held, '<', 2000, 'condition: held mid-way');
is(sq($node, qq{SELECT r.paused FROM backfill.run r WHERE r.run_id = $cond_run}), 'f',
	'condition: the run is not marked paused');

# at most once a second for the pass, whatever its lanes (an upper bound)
{
	my ($c0, $t0) = split /\|/, sq($node,
		q{SELECT last_value, extract(epoch FROM clock_timestamp()) FROM bf_ops.calls});
	usleep(4_000_000);
	my ($c1, $t1) = split /\|/, sq($node,
		q{SELECT last_value, extract(epoch FROM clock_timestamp()) FROM bf_ops.calls});
	my $secs = $t1 - $t0;
	note(sprintf('condition: %d evaluations in %.1f s by the pass\'s lanes', $c1 - $c0, $secs));
	cmp_ok($c1 - $c0, '<=', int($secs) + 2,
		'condition: evaluated at most once a second for the pass');
	cmp_ok($c1 - $c0, '>=', 1, 'condition: evaluated again while it holds');
}

set_mode('go');
ok(poll_until($node, q{SELECT throttle IS NULL FROM backfill_status('cond')}, 't', 300),
	'condition: false again, the throttle is gone');
my ($rows_go) = sq($node, q{SELECT rows FROM backfill_status('cond')});
ok(poll_until($node, qq{SELECT rows > $rows_go FROM backfill_status('cond')}, 't', 300),
	'condition: false again, the lanes go on');

# ------------------------------------------------------------------
# (2) an error holds and shows; hostile conditions are bounded, as run_as, restricted
# ------------------------------------------------------------------
my @hostile = (
	[ 'error', qr/^condition: throttle_when failed: ops says no \(SQLSTATE P0001\)/,
		'an error in the condition' ],
	[ 'loop', qr/^condition: throttle_when failed: canceling statement due to statement timeout \(SQLSTATE 57014\)/,
		'a condition that loops (statement timeout)' ],
	[ 'sleep', qr/^condition: throttle_when failed: canceling statement due to statement timeout \(SQLSTATE 57014\)/,
		'a condition that sleeps (statement timeout)' ],
	[ 'lock', qr/^condition: throttle_when failed: canceling statement due to lock timeout \(SQLSTATE 55P03\)/,
		'a condition that waits for a lock a session holds (lock timeout)' ],
	[ 'secret', qr/^condition: throttle_when failed: permission denied for table secret \(SQLSTATE 42501\)/,
		'a condition that reads another role\'s table' ],
	[ 'temp', qr/^condition: throttle_when failed: cannot create temporary table within security-restricted operation/,
		'a condition that creates a temporary table' ],
	[ 'whoami', qr/^condition: throttle_when failed: evaluated as lane_r \(SQLSTATE P0001\)/,
		'a condition that says who evaluates it' ]);
# a session holds bf_ops.locked for the 'lock' condition, all along
my ($lock_in, $lock_out) = ('', '');
my $locker = IPC::Run::start([ $node->installed_command('psql'), '-X', '-A', '-t',
		'-d', $node->connstr('postgres') ], '<', \$lock_in, '>', \$lock_out, '2>', \$lock_out);
$lock_in .= "BEGIN; LOCK TABLE bf_ops.locked; SELECT 'locked';\n";
{
	my $deadline = time() + 60;
	while ($lock_out !~ /locked/ && time() < $deadline)
	{
		$locker->pump_nb;
		usleep(50_000);
	}
	like($lock_out, qr/locked/, 'a session holds bf_ops.locked');
}
for my $h (@hostile)
{
	my ($mode, $pattern, $what) = @$h;
	set_mode($mode);
	my $deadline = time() + 300;
	my $shown = '';
	while (time() < $deadline)
	{
		$shown = sq($node, q{SELECT coalesce(throttle, '') FROM backfill_status('cond')});
		last if $shown =~ $pattern;
		usleep(100_000);
	}
	like($shown, $pattern, "$what: held back, and backfill_status shows why");
	rows_hold('cond', $pattern, $what);
}
is(sq($node, qq{SELECT status FROM backfill.ledger WHERE run_id = $cond_run}), 'running',
	'condition: errors in the condition fail nothing');
$lock_in .= "COMMIT;\n\\q\n";
$locker->finish;

# ------------------------------------------------------------------
# (3) a lane killed while the condition holds it
# ------------------------------------------------------------------
set_mode('hold');
ok(poll_until($node, q{SELECT throttle LIKE 'condition: throttle_when is true%'
		FROM backfill_status('cond')}, 't', 300), 'kill: the condition holds again');
my $victim = sq($node, qq{SELECT holder_pid FROM backfill.partition
	WHERE run_id = $cond_run AND state = 'running' AND holder_pid IS NOT NULL LIMIT 1});
like($victim, qr/^\d+$/, 'kill: a lane holds a partition during the hold');
is(kill('KILL', $victim), 1, 'kill: SIGKILL to the holding lane');
ok(wait_for_server($node, 300), 'kill: the server is back after the crash');
ok(poll_until($node, qq{SELECT count(*) > 0 FROM backfill.partition p
		JOIN pg_stat_activity a ON a.pid = p.holder_pid AND a.backend_start = p.holder_start
		WHERE p.run_id = $cond_run AND p.state = 'running' AND p.holder_pid <> $victim
		  AND p.throttle LIKE 'condition: throttle_when is true%'}, 't', 300),
	'kill: the next lane took a partition over and holds too');
rows_hold('cond', qr/^condition: throttle_when is true/, 'kill: after the crash');
# a faster rate for the rest (tuning, read live; keeps the checksum), then let go
sq($node, q{
	SELECT backfill_declare(name => 'cond', relation => 'ct', predicate => 'n = 0',
		action => 'UPDATE ct SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 50, rate => 20, max_parallel => 2, guard => false, run_as => 'lane_r',
		throttle_when => 'bf_ops.check()');
});
set_mode('go');
is(wait_pass_end($node, $cond_run, 900), 'completed', 'kill: the condition false, the pass completes');
each_row_done_once($node, 'ct', 2000, $cond_run);

# ------------------------------------------------------------------
# (4) a window that closes mid-pass, and the next that opens
# ------------------------------------------------------------------
# the windows' clock put at a UTC time of today: seconds to add to now
sub clock_at
{
	my ($hhmmss) = @_;
	my $offset = sq($node, qq{SELECT floor(extract(epoch FROM
		(date_trunc('day', now() AT TIME ZONE 'UTC') + time '$hhmmss') - (now() AT TIME ZONE 'UTC')))::int});
	reload_with('backfill.windows_clock_offset', $offset);
	ok(poll_until($node, q{SELECT current_setting('backfill.windows_clock_offset')},
			$offset, 60), "window: the windows' clock is at $hhmmss UTC");
	return;
}

make_table('wt', 4000);
clock_at('03:00:00');
sq($node, q{
	SELECT backfill_declare(name => 'win', relation => 'wt', predicate => 'n = 0',
		action => 'UPDATE wt SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 50, rate => 4, max_parallel => 2, guard => false, run_as => 'lane_r',
		windows => '{"03:00-03:01", "03:03-06:00"}', window_time_zone => 'UTC');
});
my $win_run = sq($node, q{SELECT backfill_run('win')});
ok(poll_until($node, q{SELECT rows > 0 FROM backfill_status('win')}, 't', 300),
	'window: inside the first window, the pass does rows');
clock_at('03:00:58');
ok(poll_until($node, q{SELECT throttle FROM backfill_status('win')},
		'window: waiting for a window (next at '
		  . sq($node, q{SELECT (date_trunc('day', now() AT TIME ZONE 'UTC') + time '03:03')
		                       AT TIME ZONE 'UTC'
		                       - current_setting('backfill.windows_clock_offset')::int
		                         * interval '1 second'})
		  . ')', 300),
	'window: the window closed, backfill_status says when the next starts');
ok(poll_until($node, qq{SELECT count(*) FROM backfill.partition
		WHERE run_id = $win_run AND state = 'running'}, '0', 300),
	'window: the lanes gave their partitions back (no lease held)');
ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_backfill lane'},
		'0', 300), 'window: no lane runs outside the windows');
my $waited = rows_hold('win', qr/^window: waiting for a window \(next at /, 'window');
cmp_ok($waited, '<', 4000, 'window: closed mid-pass');
is(sq($node, qq{SELECT l.status, r.paused, l.error_code IS NULL, r.last_error IS NULL
		FROM backfill.ledger l JOIN backfill.run r USING (run_id) WHERE l.run_id = $win_run}),
	'running|f|t|t', 'window: nothing is marked failed or paused');
is(sq($node, qq{SELECT count(*) FROM backfill.partition WHERE run_id = $win_run AND state = 'failed'}),
	'0', 'window: no partition failed');

# declared again as it was (the windows compared, unchanged): still waiting
sq($node, q{
	SELECT backfill_declare(name => 'win', relation => 'wt', predicate => 'n = 0',
		action => 'UPDATE wt SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 50, rate => 4, max_parallel => 2, guard => false, run_as => 'lane_r',
		windows => '{"03:00-03:01", "03:03-06:00"}', window_time_zone => 'UTC');
});
like(sq($node, q{SELECT throttle FROM backfill_status('win')}),
	qr/^window: waiting for a window \(next at /, 'window: declared again, still waiting');

# the client follows the waiting pass: its progress line says why
SKIP:
{
	skip "pg_backfill CLI not found at $cli", 1 unless -x $cli;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ $cli, '-d', $node->connstr('postgres'), 'run', 'win', '--wait' ],
		'<', \undef, '>', \$out, '2>', \$err);
	my $deadline = time() + 300;
	while ($out !~ /throttled: window: waiting for a window \(next at / && time() < $deadline
		&& $h->pumpable)
	{
		$h->pump_nb;
		usleep(200_000);
	}
	like($out, qr/throttled: window: waiting for a window \(next at /,
		"window: the client's progress line says the pass waits for a window");
	$h->kill_kill;
	$h->finish;
}

clock_at('03:02:58');
is(wait_pass_end($node, $win_run, 900), 'completed',
	'window: the next window opened, the pass went on by itself and completed');
each_row_done_once($node, 'wt', 4000, $win_run);
reload_with('backfill.windows_clock_offset', '0');

done_testing();
