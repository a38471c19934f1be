# 012_no_slots.pl
#
# A scheduler that finds no free background worker slot for a lane logs one
# WARNING with a hint about max_worker_processes, keeps trying without
# flooding the log, never dies, and starts the lane once a slot exists.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

# three slots: the launcher, the database's scheduler and the logical
# replication launcher take them all.  A second named database does not
# exist: the launcher says so once and serves the other.
my $node = BackfillTest::node('no_slots',
	extra_conf => "max_worker_processes = 3\nbackfill.database_names = 'postgres,no_such_db'\n");

sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE ns (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO ns (id) SELECT g FROM generate_series(1, 2000) g;
	SELECT backfill_declare(name => 'ns_fill', relation => 'ns', predicate => 'n = 0',
		action => 'UPDATE ns SET n = n + 1 WHERE id BETWEEN $1 AND $2', batch_size => 500,
		rate => 100, guard => false);
});
ok(poll_until($node,
	q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill scheduler'}, '1', 120),
	'the database\'s scheduler runs');
is(sq($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill launcher'}),
	'1', 'one launcher for the cluster');
my $launcher = sq($node,
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill scheduler'});
my $run = sq($node, q{SELECT backfill_run('ns_fill')});

my $warning = qr/WARNING:  could not start a pg_backfill lane worker/;
my $deadline = time() + 120;
my $log = '';
while (time() < $deadline)
{
	$log = slurp_file($node->logfile);
	last if $log =~ $warning;
	usleep(200_000);
}
like($log, $warning, 'the scheduler warns that it could not start a lane');
like($log, qr/HINT:  Raise max_worker_processes/, 'the warning comes with a hint');

# the scheduler keeps trying (about every second) for five seconds
is(holds_for($node, "SELECT status FROM backfill.ledger WHERE run_id = $run", 'running', 5),
	undef, 'the pass waits, still running, while no slot is free');
my @warnings = (slurp_file($node->logfile) =~ /$warning/g);
is(scalar(@warnings), 1, 'one warning, not one per try');
my @missing = (slurp_file($node->logfile)
	  =~ /WARNING:  database "no_such_db" in backfill.database_names does not exist/g);
is(scalar(@missing), 1, 'the missing database is reported once, in all this time');
unlike(slurp_file($node->logfile), qr/FATAL:  database "no_such_db" does not exist/,
	'and never by a worker failing to connect to it');
unlike(slurp_file($node->logfile), qr/background worker "pg_backfill (launcher|scheduler)" \(PID \d+\) exited/,
	'on this freshly created cluster neither the launcher nor the scheduler ever exited');
is(sq($node, q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill scheduler'}),
	$launcher, 'the same scheduler is still alive');
is(sq($node, "SELECT count(*) FROM backfill.partition p JOIN backfill.ledger l USING (run_id)"
	  . " WHERE l.run_id = $run"), '0', 'no lane ever started: nothing was planned');

# room for lanes: the pass starts and completes
$node->append_conf('postgresql.conf', "max_worker_processes = 8\n");
sq($node, 'CREATE DATABASE no_such_db');
$node->safe_psql('no_such_db', 'CREATE EXTENSION pg_backfill');
$node->restart;
is(wait_pass_end($node, $run, 180), 'completed', 'with free slots the pass completes');
is(sq($node, q{SELECT count(*) FILTER (WHERE n <> 1) FROM ns}), '0', 'every row done once');
ok(poll_until($node,
	q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill scheduler'}, '2', 120),
	'a database created later (with the extension) gets its scheduler');

$node->stop;
done_testing();
