# 152_lane_nice.pl -- a lane lowers its CPU priority to backfill.lane_nice
#
# Issue 29, point 5.  A lane (a rehearsal, a probe) sets its own nice value
# to backfill.lane_nice as it starts; 0, the default, leaves it at the
# server's priority (a niced lane made the half-loaded bench's p99 worse).
# It only ever lowers its priority: a server started nicer than the setting
# keeps its own.  The nice value is read from /proc/<pid>/stat of the lane
# while it is held at a row lock (made, not hoped for), then the lock is
# let go and the pass completes with every row done once (a counter column).
#   - the default: the lane runs at the postmaster's own nice value;
#   - backfill.lane_nice = 19 after a reload: the next lane at 19;
#   - backfill.lane_nice = 10: the next lane at 10 (a rehearsal at 15);
#   - no role can SET it in a session (a reload setting), and a
#     declaration's settings cannot carry it either.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

if (!-r "/proc/$$/stat")
{
	print "SKIP: 152_lane_nice: no /proc/<pid>/stat on this system\n";
	plan skip_all => 'no /proc/<pid>/stat';
}

# the nice value of a process (field 19 of /proc/<pid>/stat, counted after the command's ")")
sub nice_of
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return undef;
	my $line = <$fh>;
	close $fh;
	$line =~ s/^.*\)\s+//s;
	my @f = split /\s+/, $line;
	return $f[16];    # fields 3.. after the command: 19 is index 16
}

my $node = BackfillTest::node('lanenice', extra_conf => 'autovacuum = off');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE t (id int PRIMARY KEY, c int, done int NOT NULL DEFAULT 0);
	INSERT INTO t (id) SELECT g FROM generate_series(1, 300) g;
	CREATE ROLE filler LOGIN;
	GRANT USAGE ON SCHEMA backfill TO filler;
	GRANT SELECT, UPDATE ON t TO filler;
});
# the pid of the one worker of this type waiting for a lock, once it is there (a test of its own)
sub waiting_at_lock
{
	my ($type, $label) = @_;
	my $sql = "SELECT %s FROM pg_stat_activity"
	  . " WHERE backend_type = '$type' AND wait_event_type = 'Lock'";
	ok(poll_until($node, sprintf($sql, 'count(*)'), '1', 180), $label);
	return $node->safe_psql('postgres', sprintf($sql, 'pid'));
}

my $pm_nice = nice_of($node->safe_psql('postgres', 'SELECT pg_backend_pid()')) // 0;

# One pass: rows 1..100 of a fresh round, a session holding row 50 so the
# lane waits there; the lane's nice read while it waits; then the lock let go
# and the pass completes, each row of the round done once.
my $round = 0;
sub lane_nice_for_a_pass
{
	my ($label) = @_;
	$round++;
	my $lo = ($round - 1) * 100 + 1;
	my $hi = $round * 100;
	my $name = "nice_$round";
	$node->safe_psql('postgres', qq{
		SELECT backfill_declare(name => '$name', relation => 't',
			predicate => 'c IS NULL AND id BETWEEN $lo AND $hi',
			set => 'c = id * 2, done = done + 1', batch_size => 10, rate => 1000,
			lock_timeout => '10 min', batch_timeout => '20 min')});
	my $holder = $node->background_psql('postgres');
	$holder->query_safe("BEGIN; SELECT 1 FROM t WHERE id = " . ($lo + 49) . " FOR UPDATE;");
	my $run = $node->safe_psql('postgres', "SELECT backfill_run('$name')");
	my $nice = nice_of(waiting_at_lock('pg_backfill lane', "$label: the lane waits at the held row"));
	$holder->query_safe('ROLLBACK');
	$holder->quit;
	is($node->safe_psql('postgres', "SELECT backfill_wait($run, '3 min')"),
		'completed', "$label: the pass completes once the row is let go");
	is( $node->safe_psql('postgres',
			"SELECT count(*) FILTER (WHERE done = 1 AND c = id * 2) || '/' || count(*)
			   FROM t WHERE id BETWEEN $lo AND $hi"),
		'100/100', "$label: each row of the round done once");
	return $nice;
}

my $max = sub { $_[0] > $_[1] ? $_[0] : $_[1] };

is(lane_nice_for_a_pass('default'), $pm_nice, 'the default: the lane keeps the server\'s priority');

$node->safe_psql('postgres',
	"ALTER SYSTEM SET backfill.lane_nice = 19; SELECT pg_reload_conf();");
poll_until($node, 'SHOW backfill.lane_nice', '19', 60);
is(lane_nice_for_a_pass('19'), $max->(19, $pm_nice), 'backfill.lane_nice = 19: the next lane at 19');

$node->safe_psql('postgres',
	"ALTER SYSTEM SET backfill.lane_nice = 10; SELECT pg_reload_conf();");
poll_until($node, 'SHOW backfill.lane_nice', '10', 60);
is(lane_nice_for_a_pass('10'), $max->(10, $pm_nice), 'backfill.lane_nice = 10: the next lane at 10');

# a rehearsal worker runs the declarer's batches too: it lowers itself the same way
$node->safe_psql('postgres',
	"ALTER SYSTEM SET backfill.lane_nice = 15; SELECT pg_reload_conf();");
poll_until($node, 'SHOW backfill.lane_nice', '15', 60);
$node->safe_psql('postgres', q{
	UPDATE t SET c = NULL, done = 0 WHERE id <= 100;
	SELECT backfill_declare(name => 'nice_rehearsal', relation => 't', predicate => 'c IS NULL',
		set => 'c = id * 2', batch_size => 10, lock_timeout => '10 min', batch_timeout => '20 min')});
{
	my $holder = $node->background_psql('postgres');
	$holder->query_safe("BEGIN; SELECT 1 FROM t WHERE id = 5 FOR UPDATE;");
	my $caller = $node->background_psql('postgres');
	$caller->query_until(qr/started/, q{\echo started
SELECT count(*) FROM backfill_rehearse('nice_rehearsal');
});
	is(nice_of(waiting_at_lock('pg_backfill rehearsal', 'rehearsal: its worker waits at the held row')), $max->(15, $pm_nice), 'rehearsal: its worker runs at backfill.lane_nice');
	$holder->query_safe('ROLLBACK');
	$holder->quit;
	$caller->quit;
}

# a session cannot change it, superuser or not
my ($rc, $out, $err) = $node->psql('postgres', 'SET backfill.lane_nice = 0', extra_params => ['-U', 'filler']);
like($err, qr/cannot be changed now/, 'a role cannot SET backfill.lane_nice in its session');
($rc, $out, $err) = $node->psql('postgres', 'SET backfill.lane_nice = 0');
like($err, qr/cannot be changed now/, 'nor can a superuser, outside the configuration');
# nor can a declaration carry it in its settings
($rc, $out, $err) = $node->psql('postgres', q{
	SELECT backfill_declare(name => 'nice_settings', relation => 't', predicate => 'c IS NULL',
		set => 'c = id * 2', settings => '{"backfill.lane_nice": "0"}')}, extra_params => ['-U', 'filler']);
isnt($rc, 0, 'a declaration cannot carry backfill.lane_nice in its settings');
note("refused with: $err");

$node->stop;
done_testing();
