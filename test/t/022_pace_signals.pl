# 022_pace_signals.pl
#
# Pacing on what DBAs fear (issue 27; src/engine/pacing.c, health.c, shmem.c):
#  (1) a WAL budget: a pass with max_wal_rate => '256kB' (then one under
#      backfill.max_wal_rate = '256kB' alone) writes, over a
#      measured window, no more WAL than the budget allows for that window
#      plus the batches that may be in flight (an upper bound only), and
#      backfill_status.throttle says 'wal: ... of 256 kB/s'; a bad size is
#      refused (BF011);
#  (2) the archiver's backlog: archive_command = 'false' and
#      backfill.max_archive_backlog = 1 with more segments waiting: the lane
#      holds ('archive: N segments waiting, limit 1'), rows stop; the
#      command fixed (a reload): the pass completes;
#  (3) a slot's retained WAL: an inactive physical slot reserving WAL, more
#      WAL written than backfill.max_slot_retained: the lane holds ('slot s1
#      retains ...'), rows stop; the slot dropped: the pass completes;
#  (4) backfill.pause_all = on (a reload): the running pass's lane holds at
#      its batch boundary, rows stop, the ledger says running and the run is
#      not paused; the lane killed (SIGKILL) during the hold: the lane that
#      takes its partition over holds too; off: the pass completes, every row
#      exactly once;
#  (5) backfill_pause_all(role): only that role's backfill holds (the other
#      role's completes), a non-member is refused (BF016), the pause is a row
#      that survives a restart, the client's progress line (run --wait)
#      shows it, backfill_resume_all lets it complete.
# Every action is non-idempotent (n = n + 1). Each hold is made true by
# construction (a failing archive_command, a slot, a setting, a row), and
# polled with deadlines of minutes; no assertion depends on machine speed.
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

my $node = BackfillTest::node('pace_signals', crash_restart => 1,
	init => { allows_streaming => 1 },
	extra_conf => "backfill.throttle_delay = 200\n"
	  . "archive_mode = on\n"
	  . "archive_command = 'true'\n"
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
		CREATE TABLE $table (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0,
			pad text NOT NULL DEFAULT repeat('x', 200));
		INSERT INTO $table (id) SELECT g FROM generate_series(1, $rows) g;
		ANALYZE $table;
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

# ------------------------------------------------------------------
# (1) a WAL budget
# ------------------------------------------------------------------
{
	my ($rc, $out, $err) = $node->psql('postgres', q{
		SELECT backfill_declare(name => 'badwal', relation => 'x', predicate => 'true',
			action => 'SELECT 1', max_wal_rate => 'fast')});
	like($err, qr/max_wal_rate of backfill "badwal" is not a size/, 'a bad max_wal_rate is refused');
	($rc, $out, $err) = $node->psql('postgres', q{
		DO $$ BEGIN PERFORM backfill_declare(name => 'badwal', relation => 'x',
			predicate => 'true', action => 'SELECT 1', max_wal_rate => '10 furlongs');
		EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'sqlstate %', SQLSTATE; END $$});
	like($err, qr/sqlstate BF011/, 'a bad max_wal_rate is BF011');
}

my $BUDGET = 256 * 1024;
make_table('wb', 200_000);
sq($node, q{
	SELECT backfill_declare(name => 'wal', relation => 'wb', predicate => 'n = 0',
		action => 'UPDATE wb SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 200, rate => 100, max_parallel => 2, max_wal_rate => '256kB', guard => false);
});
is(sq($node, q{SELECT max_wal_rate FROM backfill.declaration WHERE name = 'wal'}),
	$BUDGET, 'max_wal_rate is stored in bytes per second');
# Over a window in which the pass did at least 4,000 rows more (some 20
# batches), the server wrote no more WAL than the budget allows for the
# window plus the batches that may be in flight at its ends (two lanes, a
# batch of 200 rows writes well under 128 kB): an upper bound only.
sub wal_within_budget
{
	my ($name, $what) = @_;
	my ($lsn0, $t0, $rows0) = split /\|/, sq($node,
		qq{SELECT pg_current_wal_lsn(), extract(epoch FROM clock_timestamp()), rows
		    FROM backfill_status('$name')});
	ok(poll_until($node, "SELECT rows >= $rows0 + 4000 FROM backfill_status('$name')", 't', 600),
		"$what: the pass goes on under its budget");
	my ($bytes, $secs) = split /\|/, sq($node,
		qq{SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0'),
		          extract(epoch FROM clock_timestamp()) - $t0});
	my $bound = $BUDGET * $secs + 4 * 128 * 1024;
	note(sprintf('%s: %d bytes in %.1f s = %.0f kB/s (budget 256 kB/s)',
		$what, $bytes, $secs, $bytes / $secs / 1024));
	cmp_ok($bytes, '<=', $bound,
		sprintf('%s: the WAL written in the window (%.1f s) stays within the budget', $what, $secs));
	return;
}

my $wal_run = sq($node, q{SELECT backfill_run('wal')});
ok(poll_until($node, q{SELECT throttle LIKE 'wal: % of 256 kB/s (its max_wal_rate)%'
		FROM backfill_status('wal')}, 't', 300),
	'wal: backfill_status shows the WAL budget it waits for');
note('wal: ' . sq($node, q{SELECT throttle FROM backfill_status('wal')}));
wal_within_budget('wal', 'wal');
sq($node, qq{SELECT backfill_cancel('wal')});
pass_ended($node, $wal_run, 120);

# the cluster's budget: a pass with none of its own
reload_with('backfill.max_wal_rate', q{'256kB'});
ok(poll_until($node, 'SHOW backfill.max_wal_rate', '256kB', 60), 'backfill.max_wal_rate is 256kB');
sq($node, q{
	SELECT backfill_declare(name => 'walc', relation => 'wb', predicate => 'n = 0',
		action => 'UPDATE wb SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 200, rate => 100, max_parallel => 2, guard => false);
});
my $walc_run = sq($node, q{SELECT backfill_run('walc')});
ok(poll_until($node, q{SELECT throttle LIKE 'wal: % of 256 kB/s (backfill.max_wal_rate)%'
		FROM backfill_status('walc')}, 't', 300),
	'wal (cluster): backfill_status shows the cluster\'s WAL budget');
wal_within_budget('walc', 'wal (cluster)');
sq($node, qq{SELECT backfill_cancel('walc')});
pass_ended($node, $walc_run, 120);
reload_with('backfill.max_wal_rate', '-1');

# ------------------------------------------------------------------
# (2) the archiver's backlog
# ------------------------------------------------------------------
reload_with('archive_command', q{'false'});
ok(poll_until($node, 'SHOW archive_command', 'false', 60), 'archive_command fails now');
sq($node, 'CREATE TABLE junk (x text)');
for (1 .. 3)
{
	sq($node, q{INSERT INTO junk SELECT repeat('j', 100) FROM generate_series(1, 100)});
	sq($node, 'SELECT pg_switch_wal()');
}
ok(poll_until($node, q{SELECT count(*) >= 2 FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready'},
		't', 120), 'archive: segments wait for the failing archiver');
reload_with('backfill.max_archive_backlog', '1');
ok(poll_until($node, 'SHOW backfill.max_archive_backlog', '1', 60), 'max_archive_backlog is 1');

make_table('ab', 2000);
sq($node, q{
	SELECT backfill_declare(name => 'arch', relation => 'ab', predicate => 'n = 0',
		action => 'UPDATE ab SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 20, guard => false);
});
my $arch_run = sq($node, q{SELECT backfill_run('arch')});
ok(poll_until($node, q{SELECT throttle ~ '^archive: \d+ segments waiting, limit 1'
		FROM backfill_status('arch')}, 't', 300),
	'archive: the lane holds for the archiver\'s backlog');
note('archive: ' . sq($node, q{SELECT throttle FROM backfill_status('arch')}));
rows_hold('arch', qr/^archive:/, 'archive');
reload_with('archive_command', q{'true'});
is(wait_pass_end($node, $arch_run, 600), 'completed', 'archive: the archiver fixed, the pass completes');
each_row_done_once($node, 'ab', 2000, $arch_run);
reload_with('backfill.max_archive_backlog', '-1');

# ------------------------------------------------------------------
# (3) a slot's retained WAL
# ------------------------------------------------------------------
sq($node, q{SELECT pg_create_physical_replication_slot('s1', true)});
reload_with('backfill.max_slot_retained', q{'1MB'});
ok(poll_until($node, 'SHOW backfill.max_slot_retained', '1MB', 60), 'max_slot_retained is 1MB');
sq($node, q{INSERT INTO junk SELECT repeat('j', 1000) FROM generate_series(1, 5000)});
ok(poll_until($node, q{SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) > 1048576
		FROM pg_replication_slots WHERE slot_name = 's1'}, 't', 60),
	'slot: s1 retains more than 1 MB');
make_table('sb', 2000);
sq($node, q{
	SELECT backfill_declare(name => 'slot', relation => 'sb', predicate => 'n = 0',
		action => 'UPDATE sb SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 20, guard => false);
});
my $slot_run = sq($node, q{SELECT backfill_run('slot')});
ok(poll_until($node, q{SELECT throttle ~ '^slot s1 retains [0-9.]+ MB, limit 1 MB'
		FROM backfill_status('slot')}, 't', 300),
	'slot: the lane holds for the slot\'s retained WAL');
note('slot: ' . sq($node, q{SELECT throttle FROM backfill_status('slot')}));
rows_hold('slot', qr/^slot s1 retains/, 'slot');
sq($node, q{SELECT pg_drop_replication_slot('s1')});
is(wait_pass_end($node, $slot_run, 600), 'completed', 'slot: the slot dropped, the pass completes');
each_row_done_once($node, 'sb', 2000, $slot_run);

# ------------------------------------------------------------------
# (4) backfill.pause_all, and a lane killed during the hold
# ------------------------------------------------------------------
make_table('pb', 6000);
sq($node, q{
	SELECT backfill_declare(name => 'pause', relation => 'pb', predicate => 'n = 0',
		action => 'UPDATE pb SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 2, guard => false);
});
my $pause_run = sq($node, q{SELECT backfill_run('pause')});
# at most 200 rows a second: the pass is mid-way for at least 25 s after its first rows
ok(poll_until($node, q{SELECT rows > 0 FROM backfill_status('pause')}, 't', 300),
	'pause_all: the pass has done rows');
reload_with('backfill.pause_all', 'on');
ok(poll_until($node, q{SELECT throttle LIKE 'paused for all%' FROM backfill_status('pause')},
		't', 300), 'pause_all: backfill_status says paused for all');
my $held = rows_hold('pause', qr/^paused for all/, 'pause_all');
cmp_ok($held, '<', 6000, 'pause_all: held mid-way');
is(sq($node, qq{SELECT r.paused FROM backfill.run r WHERE r.run_id = $pause_run}), 'f',
	'pause_all: the run is not marked paused');

my $victim = sq($node, qq{SELECT holder_pid FROM backfill.partition
	WHERE run_id = $pause_run AND state = 'running' AND holder_pid IS NOT NULL LIMIT 1});
like($victim, qr/^\d+$/, 'pause_all: a lane holds a partition during the hold');
is(kill('KILL', $victim), 1, 'pause_all: SIGKILL to the holding lane');
ok(wait_for_server($node, 300), 'pause_all: the server is back after the crash');
ok(poll_until($node, qq{SELECT count(*) > 0 FROM backfill.partition p
		JOIN pg_stat_activity a ON a.pid = p.holder_pid AND a.backend_start = p.holder_start
		WHERE p.run_id = $pause_run AND p.state = 'running' AND p.holder_pid <> $victim
		  AND p.throttle LIKE 'paused for all%'}, 't', 300),
	'pause_all: the next lane took the partition over and holds too');
my $after = rows_hold('pause', qr/^paused for all/, 'pause_all after the kill');
cmp_ok($after, '<', 6000, 'pause_all: still held after the kill');
reload_with('backfill.pause_all', 'off');
is(wait_pass_end($node, $pause_run, 900), 'completed', 'pause_all off: the pass completes');
each_row_done_once($node, 'pb', 6000, $pause_run);

# ------------------------------------------------------------------
# (5) backfill_pause_all(role)
# ------------------------------------------------------------------
for my $r (qw(alice bob))
{
	sq($node, qq{
		CREATE ROLE $r LOGIN;
		CREATE TABLE ${r}_t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO ${r}_t (id) SELECT g FROM generate_series(1, 1000) g;
		ALTER TABLE ${r}_t OWNER TO $r;
		SET ROLE $r;
		SELECT backfill_declare(name => '${r}_fill', relation => '${r}_t', predicate => 'n = 0',
			action => 'UPDATE ${r}_t SET n = n + 1 WHERE id BETWEEN \$1 AND \$2',
			batch_size => 100, rate => 20, guard => false);
	});
}
{
	my ($rc, $out, $err) = $node->psql('postgres', q{SET ROLE bob; SELECT backfill_pause_all('alice')});
	like($err, qr/cannot backfill_pause_all of role "alice": not a member of it/,
		'pause_all(role): a non-member is refused');
}
is(sq($node, q{SET ROLE alice; SELECT backfill_pause_all('alice')}), 't',
	'pause_all(role): a member pauses the role');
is(sq($node, q{SET ROLE alice; SELECT backfill_pause_all('alice')}), 'f',
	'pause_all(role): pausing twice changes nothing');
$node->restart;
is(sq($node, q{SELECT role FROM backfill.paused_role}), 'alice',
	'pause_all(role): the pause survives a restart');
my $alice_run = sq($node, q{SET ROLE alice; SELECT backfill_run('alice_fill')});
my $bob_run = sq($node, q{SET ROLE bob; SELECT backfill_run('bob_fill')});
is(wait_pass_end($node, $bob_run, 600), 'completed', 'pause_all(role): the other role\'s pass completes');
ok(poll_until($node, q{SELECT throttle FROM backfill_status('alice_fill')},
		'paused for all of role alice (backfill_pause_all)', 300),
	'pause_all(role): the role\'s pass holds and says why');
rows_hold('alice_fill', qr/^paused for all of role alice/, 'pause_all(role)');
# the client follows the held pass: its progress line says why it holds
SKIP:
{
	skip "pg_backfill CLI not found at $cli", 1 unless -x $cli;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ $cli, '-d', $node->connstr('postgres'), 'run', 'alice_fill', '--wait' ],
		'<', \undef, '>', \$out, '2>', \$err);
	my $deadline = time() + 300;
	while ($out !~ /throttled: paused for all of role alice/ && time() < $deadline && $h->pumpable)
	{
		$h->pump_nb;
		usleep(200_000);
	}
	like($out, qr/throttled: paused for all of role alice \(backfill_pause_all\)/,
		"pause_all(role): the client's progress line shows why the pass holds");
	$h->kill_kill;
	$h->finish;
}
is(sq($node, q{SELECT backfill_resume_all('alice')}), 't', 'pause_all(role): a superuser lifts it');
is(wait_pass_end($node, $alice_run, 600), 'completed', 'pause_all(role): lifted, the pass completes');
each_row_done_once($node, 'alice_t', 1000, $alice_run);

done_testing();
