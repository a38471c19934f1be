# 150_foreground_throttle.pl -- a lane backs off while the foreground is busy
#
# Issue 13, item 2.  Every batch samples how many client sessions are at
# work (running a statement on a core, or waiting for a lock, an LWLock, a
# buffer pin or I/O).  While they are as many as half the cores (at least
# one), the lane halves the share of its time it works, down to 1/64, and
# says so in backfill_status.throttle; once they are fewer it wins an eighth
# back per sample.  backfill.foreground_throttle = off turns it off.
#
# The foreground here is synthetic: sessions running a CPU loop (more of
# them than half the cores) until a flag row tells them to stop.  No timing
# is asserted, only what the lane says and that the pass moves and ends:
#   - with the load: the throttle reason appears and the lane's share falls
#     to 1/8 or less (its wait after each batch rises), and rows are still
#     done meanwhile;
#   - after the load: the reason clears and the pass completes, every row
#     done exactly once;
#   - with backfill.foreground_throttle = off, the same load never shows
#     the reason, and the pass completes;
#   - sessions of an ordinary role queued on an advisory lock (using no
#     core, no I/O) never show the reason: any role could park them there
#     to hold every lane back (attacker F4).
# Where the pass stands is made, not hoped for: in (1) a session holds the
# row lock of row 501, so the lane waits there while the load starts (the
# pass certainly mid-way, the throttle still as the quiet server left it),
# and another holds row 12,000, the last, so the pass cannot end under the
# load, however slow the machine.  The sessions live as long as the test
# needs (their timers: an hour).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $ROWS = 12_000;

my $cores = `nproc 2>/dev/null` || 1;
chomp $cores;
$cores = 1 unless $cores =~ /^\d+$/ && $cores > 0;
my $LOAD = int($cores / 2) + 2;    # more client sessions at work than half the cores

my $node = BackfillTest::node('fgthrottle', extra_conf => 'autovacuum = off');

$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE load_ctl (stop boolean NOT NULL);
	INSERT INTO load_ctl VALUES (false);
	CREATE FUNCTION busy() RETURNS bigint LANGUAGE plpgsql AS \$\$
	DECLARE rounds bigint := 0;
	BEGIN
		LOOP
			EXIT WHEN (SELECT stop FROM load_ctl);
			PERFORM pg_catalog.count(*) FROM pg_catalog.generate_series(1, 20000);
			rounds := rounds + 1;
		END LOOP;
		RETURN rounds;
	END \$\$;
	CREATE TABLE t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO t (id) SELECT g FROM generate_series(1, $ROWS) g;
	CREATE TABLE t2 (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO t2 (id) SELECT g FROM generate_series(1, $ROWS) g;
	ANALYZE t; ANALYZE t2;
	SELECT backfill_declare(name => 'fg', relation => 't', predicate => 'n = 0',
		action => \$\$UPDATE t SET n = n + 1 WHERE id BETWEEN \$1 AND \$2\$\$,
		batch_size => 50, rate => 20, lock_timeout => '1 hour', batch_timeout => '1 hour',
		guard => false);
	SELECT backfill_declare(name => 'fg_off', relation => 't2', predicate => 'n = 0',
		action => \$\$UPDATE t2 SET n = n + 1 WHERE id BETWEEN \$1 AND \$2\$\$,
		batch_size => 50, rate => 20, guard => false);
});

# $LOAD sessions running busy() until load_ctl.stop
sub start_load
{
	sq($node, 'UPDATE load_ctl SET stop = false');
	my @sessions;
	for my $i (1 .. $LOAD)
	{
		my $s = $node->background_psql('postgres', timeout => 3600);
		$s->query_until(qr/loading/, "\\echo loading\nSELECT busy();\n");
		push @sessions, $s;
	}
	ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity
	                        WHERE state = 'active' AND query = 'SELECT busy();'}, "$LOAD", 180),
		"$LOAD client sessions at work ($cores cores)");
	return @sessions;
}

sub stop_load
{
	sq($node, 'UPDATE load_ctl SET stop = true');
	$_->quit for @_;
	ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT busy();'
	                         AND state = 'active'}, '0', 180), 'the load stopped');
}

my $throttle = q{SELECT coalesce(throttle, '') FROM backfill_status('fg')};

# a session holding the row lock of $id in t: (session, its pid)
sub hold_row
{
	my ($id) = @_;
	my $h = $node->background_psql('postgres', timeout => 3600);
	my $hpid = $h->query_safe('SELECT pg_backend_pid()');
	$h->query_safe("BEGIN; SELECT 1 FROM t WHERE id = $id FOR UPDATE;");
	return ($h, $hpid);
}

# ------------------------------------------------------------------
# (1) the throttle engages under load, holds the lane back, clears after
# ------------------------------------------------------------------
my ($gate, $gate_pid) = hold_row(501);
my ($last, $last_pid) = hold_row($ROWS);
my $run = sq($node, q{SELECT backfill_run('fg')});
ok( poll_until($node,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND $gate_pid = ANY (pg_blocking_pids(pid))", '1', 180),
	'fg: the pass is under way (500 rows done, its batch waits on row 501)');
is(sq($node, $throttle), '', 'fg: no throttle while the server is quiet');

my @load = start_load();
# the lane goes on, under the load
$gate->query_safe('COMMIT');
$gate->quit;
my $seen = '';
{
	my $deadline = time() + 180;
	while (time() < $deadline)
	{
		$seen = sq($node, $throttle);
		last if $seen =~ m{the lane works 1/(\d+) } && $1 >= 8;
		select(undef, undef, undef, 0.1);
	}
}
like($seen, qr{^foreground: [\d.]+ client sessions at work on $cores cores: the lane works 1/\d+ of the time$},
	"fg: backfill_status.throttle says why the lane holds back ($seen)");
ok($seen =~ m{1/(\d+) } && $1 >= 8, 'fg: the lane works 1/8 of its time or less: its wait after each batch rose');
my $rows_held = sq($node, q{SELECT rows FROM backfill_status('fg')});
ok(poll_until($node, "SELECT rows > $rows_held FROM backfill_status('fg')", 't', 180),
	"fg: the held-back lane still does rows (more than $rows_held)");
isnt(sq($node, q{SELECT status FROM backfill_status('fg')}), 'completed',
	'fg: the pass had not ended under the load');

stop_load(@load);
$last->query_safe('COMMIT');
$last->quit;
ok(poll_until($node, $throttle, '', 180), 'fg: the throttle clears once the load is gone');
is(wait_pass_end($node, $run, 300), 'completed', 'fg: the pass completed');
each_row_done_once($node, 't', $ROWS, $run);

# ------------------------------------------------------------------
# (2) backfill.foreground_throttle = off: the same load, no throttle
# ------------------------------------------------------------------
sq($node, q{ALTER SYSTEM SET backfill.foreground_throttle = off; SELECT pg_reload_conf();});
@load = start_load();
$run = sq($node, q{SELECT backfill_run('fg_off')});
ok(poll_until($node, q{SELECT rows > 0 FROM backfill_status('fg_off')}, 't', 180),
	'fg_off: the pass is under way beside the load');
is(holds_for($node, q{SELECT coalesce(throttle, '') !~ '^foreground' FROM backfill_status('fg_off')},
		't', 4),
	undef, 'fg_off: with backfill.foreground_throttle off the lane never says foreground');
stop_load(@load);
is(wait_pass_end($node, $run, 300), 'completed', 'fg_off: the pass completed');
each_row_done_once($node, 't2', $ROWS, $run);

# ------------------------------------------------------------------
# (3) sessions waiting for a heavyweight lock are no foreground
# ------------------------------------------------------------------
sq($node, q{ALTER SYSTEM RESET backfill.foreground_throttle; SELECT pg_reload_conf();
	CREATE ROLE parker LOGIN;
	CREATE TABLE t3 (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO t3 (id) SELECT g FROM generate_series(1, 12000) g;
	ANALYZE t3;
	SELECT backfill_declare(name => 'fg_lock', relation => 't3', predicate => 'n = 0',
		action => $$UPDATE t3 SET n = n + 1 WHERE id BETWEEN $1 AND $2$$,
		batch_size => 50, rate => 20, guard => false);});
my $holder = $node->background_psql('postgres', extra_params => [ '-U', 'parker' ], timeout => 3600);
$holder->query_safe('SELECT pg_advisory_lock(4242)');
my @parked;
for my $i (1 .. $LOAD)
{
	my $s = $node->background_psql('postgres', extra_params => [ '-U', 'parker' ], timeout => 3600);
	$s->query_until(qr/parked/, "\\echo parked\nSELECT pg_advisory_lock(4242);\n");
	push @parked, $s;
}
ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity
                        WHERE usename = 'parker' AND wait_event_type = 'Lock'}, "$LOAD", 180),
	"fg_lock: $LOAD sessions of an ordinary role wait for its advisory lock");
$run = sq($node, q{SELECT backfill_run('fg_lock')});
ok(poll_until($node, q{SELECT rows > 0 FROM backfill_status('fg_lock')}, 't', 180),
	'fg_lock: the pass is under way beside them');
is(holds_for($node, q{SELECT coalesce(throttle, '') !~ '^foreground' FROM backfill_status('fg_lock')},
		't', 4),
	undef, 'fg_lock: sessions parked on a lock never make the lane say foreground');
$holder->query_safe('SELECT pg_advisory_unlock(4242)');
$holder->quit;
$_->quit for @parked;
is(wait_pass_end($node, $run, 300), 'completed', 'fg_lock: the pass completed');
each_row_done_once($node, 't3', 12000, $run);

$node->stop;
done_testing();
