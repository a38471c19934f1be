# 103_drop_extension.pl -- the catalogs dropped under running lanes
#
# DROP EXTENSION pg_backfill CASCADE while a pass runs, then CREATE
# EXTENSION again (at the newest version, or at an old one whose catalogs
# this library does not start passes on): the lanes of the dropped pass
# find their run gone and end, with an error at most.  No worker of the
# extension may crash the server (a crash restarts every backend of the
# cluster, the foreground's too), whatever moment the drop hits: the
# test drops at many different moments of a paced pass.  A lane that was
# woken while waiting out its rate once read the answer of a catalog
# statement that had none, and died of SIGSEGV.
#
# Every round makes its lane provably at work before the drop, whatever
# the speed of the machine: a session holds the row lock of the pass's
# first row, the round waits until the lane's first batch waits on it
# (the lane has planned its pass and holds its lease), lets it go, and
# drops a random moment later (within a batch, its commit, or the wait
# of the rate between two batches).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $ROUNDS = 30;

my $node = BackfillTest::node('drop_extension', extra_conf => 'restart_after_crash = on');
$node->safe_psql('postgres', q{
	CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO t (id) SELECT g FROM generate_series(1, 20000) g;
});

# the statement that does it, tried again when it meets a lane's locks (deadlock)
sub until_done
{
	my ($sql) = @_;
	for my $try (1 .. 50)
	{
		my ($rc, $out, $err) = $node->psql('postgres', $sql);
		return 1 if $rc == 0;
		usleep(100_000);
	}
	return 0;
}

# the session whose row lock the lane's first batch of each round waits on
my $holder = $node->background_psql('postgres');
$holder->set_query_timer_restart();
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');

my $dropped = 0;
my $working = 0;
for my $round (1 .. $ROUNDS)
{
	my $version = $round % 2 ? "VERSION '0.2'" : '';
	until_done(q{SET client_min_messages = warning;
		DROP EXTENSION IF EXISTS pg_backfill CASCADE; CREATE EXTENSION pg_backfill});
	# (lock_timeout and batch_timeout: the first batch waits for the
	# holder however long the round takes to see it)
	$node->safe_psql('postgres', q{
		UPDATE t SET n = 0;
		SELECT backfill_declare('d', 't', 'n = 0', 'UPDATE t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		                        batch_size => 100, rate => 20,
		                        lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
	});
	$holder->query_safe('BEGIN; SELECT id FROM t WHERE id = 1 FOR UPDATE;');
	$node->safe_psql('postgres', q{SELECT backfill_run('d', wait => false)});
	# the lane has planned its pass and is inside its first batch
	$working += poll_until($node,
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND $holder_pid = ANY (pg_blocking_pids(pid))", 't', 180);
	$holder->query_safe('COMMIT');
	# the drop at a moment of the round's own, early in the pass: the
	# first batch finishing, or the lane waiting out its rate (50 ms)
	# before the next
	usleep(int(rand(100_000)));
	$dropped += until_done("SET client_min_messages = warning;
		DROP EXTENSION pg_backfill CASCADE; CREATE EXTENSION pg_backfill $version");
	usleep(int(rand(200_000)));
}
$holder->quit;
is($dropped, $ROUNDS, 'each drop and create again went through');
is($working, $ROUNDS, 'in every round a lane was inside a batch of its pass before the drop');

# the lanes of the last round end too
ok(BackfillTest::poll_until($node,
	q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'}, '0', 180),
	'no lane is left once its catalogs are gone');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminating any other active server processes/,
	'the server never went through crash recovery');
my $hit = () = $log =~ /backfill "d" run \d+ started/g;
cmp_ok($hit, '>=', $ROUNDS, "lanes had started their pass before the drop in every round ($hit of $ROUNDS)");
my @crashes = $log =~ /(terminated by signal \d+[^\n]*)/g;
is(scalar(@crashes), 0, 'no worker died of a signal') or diag(join("\n", @crashes));

# and the extension works again afterwards
until_done(q{SET client_min_messages = warning;
	DROP EXTENSION IF EXISTS pg_backfill CASCADE; CREATE EXTENSION pg_backfill});
$node->safe_psql('postgres', q{UPDATE t SET n = 0;
	SELECT backfill_declare('d', 't', 'n = 0', 'UPDATE t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
	                        batch_size => 5000, guard => false)});
my $run = $node->safe_psql('postgres', q{SELECT backfill_run('d', wait => false)});
is($node->safe_psql('postgres', qq{SELECT backfill_wait($run, '600 s')}),
	'completed', 'after the last drop a new pass completes');
is($node->safe_psql('postgres', 'SELECT count(*) FILTER (WHERE n = 1), count(*) FROM t'),
	'20000|20000', 'every row done exactly once by it');

$node->stop;
done_testing();
