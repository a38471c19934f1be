# 141_discovery.pl -- no restart to serve a new database (issue 16, item 5).
#
# With backfill.database_names empty the launcher serves every database
# where pg_backfill is installed: CREATE EXTENSION and a backfill_run in a
# database created after the server started run the pass, with no restart
# and no setting changed.  A database without the extension costs only
# short checks, paced (never a resident scheduler); templates and
# databases that refuse connections are never served, and backfill_run
# there is BF013.  DROP EXTENSION stops the database's scheduler (and
# CREATE EXTENSION serves it again); DROP DATABASE, ALTER DATABASE ...
# RENAME and CREATE DATABASE ... TEMPLATE are not held up by it.
#
# Nothing rests on the machine's speed: "never a resident scheduler" is
# every scheduler seen in such a database leaving by itself, not one
# younger than 2 s; the pacing of the checks is bounded by the time that
# actually passed, not by a fixed window.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = BackfillTest::node('discovery',
	extra_conf => "backfill.database_names = ''\nlog_min_messages = debug1\n");

sub schedulers_in
{
	my ($db, $older_than) = @_;
	my $age = defined $older_than ? " AND backend_start < now() - interval '$older_than'" : '';
	return qq{SELECT count(*) FROM pg_stat_activity
	           WHERE backend_type = 'pg_backfill scheduler' AND datname = '$db'$age};
}

sub in_db
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $sql);
}

# the ledger status of $run in $db once it is no longer running (or at the deadline)
sub pass_end_in
{
	my ($db, $run, $timeout) = @_;
	my $deadline = time() + $timeout;
	my $status;
	do
	{
		$status = in_db($db, "SELECT status FROM backfill.ledger WHERE run_id = $run");
		return $status if $status ne 'running';
		select(undef, undef, undef, 0.2);
	} while (time() < $deadline);
	return $status;
}

like(slurp_file($node->logfile),
	qr/pg_backfill launcher started for every database where pg_backfill is installed/,
	'the launcher serves every database when backfill.database_names is empty');

# databases created after the server started
my $created = time();
sq($node, q{CREATE DATABASE app; CREATE DATABASE quiet; CREATE DATABASE tmpl;
	CREATE DATABASE noconn});

# --- a database without the extension: short checks, never a resident worker
ok(poll_until($node, q{SELECT count(*) > 0 FROM pg_database WHERE datname = 'quiet'}, 't', 60),
	'database quiet exists');
# every scheduler seen there for 6 s leaves by itself (a resident one would not)
my %seen;
my $watch_end = time() + 6;
while (time() < $watch_end)
{
	$seen{$_} = 1 for split /,/, sq($node, q{SELECT string_agg(pid::text, ',') FROM pg_stat_activity
		WHERE backend_type = 'pg_backfill scheduler' AND datname = 'quiet'});
	usleep(200_000);
}
my $seen_pids = join(',', sort keys %seen) || '0';
ok(poll_until($node, "SELECT count(*) FROM pg_stat_activity WHERE pid IN ($seen_pids)", '0', 120),
	'no scheduler stays in a database without pg_backfill (' . scalar(keys %seen) . ' seen, each left)');
my $check_line = qr/scheduler for database "quiet" stops: the extension is not installed/;
my $log_deadline = time() + 120;
usleep(200_000) while slurp_file($node->logfile) !~ $check_line && time() < $log_deadline;
my $checks = () = slurp_file($node->logfile) =~ /$check_line/g;
my $elapsed = time() - $created;
cmp_ok($checks, '>=', 1, "a database without pg_backfill was checked ($checks times)");
# naptime 1 s, doubling: checks at 0, 1, 3, 7, 15 s... at the soonest, so
# in T seconds at most log2(T + 1) + 1 of them (one more allowed)
my $most = int(log($elapsed + 1) / log(2)) + 2;
cmp_ok($checks, '<=', $most,
	sprintf('the checks are paced (doubling delays): at most %d in %.1f s', $most, $elapsed));

# --- CREATE EXTENSION and a run in a new database: served without a restart
in_db('app', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE items (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO items (id) SELECT g FROM generate_series(1, 200) g;
	SELECT backfill_declare(name => 'fill', relation => 'items', predicate => 'n = 0',
	    action => 'UPDATE items SET n = n + 1 WHERE id BETWEEN $1 AND $2',
	    batch_size => 50, rate => 100, guard => false);
});
my $run = in_db('app', q{SELECT backfill_run('fill')});
is(pass_end_in('app', $run, 300), 'completed',
	'a pass in a database created after the start completes, no restart');
is(in_db('app', q{SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM items}),
	'200|0', 'every row done exactly once');
is(in_db('app', "SELECT rows FROM backfill.ledger WHERE run_id = $run"), '200',
	'the ledger counts the 200 rows');
ok(poll_until($node, schedulers_in('app'), '1', 120), 'app has one resident scheduler');

# --- templates and databases that refuse connections are never served
in_db('tmpl', q{CREATE EXTENSION pg_backfill; CREATE TABLE t (id int PRIMARY KEY, c int);
	SELECT backfill_declare(name => 'tfill', relation => 't', predicate => 'c IS NULL',
	    action => 'UPDATE t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')});
in_db('noconn', q{CREATE EXTENSION pg_backfill; CREATE TABLE t (id int PRIMARY KEY, c int);
	SELECT backfill_declare(name => 'nfill', relation => 't', predicate => 'c IS NULL',
	    action => 'UPDATE t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')});
# both served first (a run wakes the launcher for its database): the
# ALTERs below then meet a resident scheduler, which must go
in_db('tmpl', q{SELECT backfill_run('tfill')});
in_db('noconn', q{SELECT backfill_run('nfill')});
ok(poll_until($node, schedulers_in('tmpl'), '1', 120), 'tmpl is served before it is a template');
ok(poll_until($node, schedulers_in('noconn'), '1', 120), 'noconn is served before it refuses connections');
my $before_alter = -s $node->logfile;
sq($node, q{ALTER DATABASE tmpl IS_TEMPLATE true; ALTER DATABASE noconn ALLOW_CONNECTIONS false});
ok( poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity
		   WHERE backend_type = 'pg_backfill scheduler' AND datname IN ('tmpl', 'noconn')},
		'0', 120),
	'the schedulers of tmpl and noconn stop');
like(substr(slurp_file($node->logfile), $before_alter),
	qr/scheduler for database "tmpl" stops: the database is now a template/,
	'the scheduler of tmpl says why it stopped');
like(substr(slurp_file($node->logfile), $before_alter),
	qr/scheduler for database "noconn" stops: the database no longer allows connections/,
	'the scheduler of noconn says why it stopped');
my $since_alter = -s $node->logfile;
my ($rc, $out, $err) = $node->psql('tmpl', "\\set VERBOSITY verbose\nSELECT backfill_run('tfill')");
like($err, qr/ERROR:\s+BF013: backfill "tfill" cannot run in database "tmpl"/,
	'backfill_run in a template is BF013');
like($err, qr/DETAIL:\s+The database is a template/, 'its detail says why');
like($err, qr/HINT:\s+Run it in a database created from the template/, 'its hint says what to do');
my $moved = holds_for($node,
	q{SELECT count(*) FROM pg_stat_activity
	   WHERE backend_type = 'pg_backfill scheduler' AND datname IN ('tmpl', 'noconn')},
	'0', 3);
ok(!defined $moved, 'no scheduler in a template or a database that refuses connections');
unlike(substr(slurp_file($node->logfile), $since_alter),
	qr/scheduler for database "(tmpl|noconn)" stops|FATAL:.*"noconn"/,
	'not even a check there since');

# --- DROP EXTENSION stops the scheduler; CREATE EXTENSION serves it again
in_db('app', q{DROP EXTENSION pg_backfill});
ok(poll_until($node, schedulers_in('app'), '0', 120), 'DROP EXTENSION stops the scheduler');
like(slurp_file($node->logfile),
	qr/scheduler for database "app" stops: the extension was dropped/,
	'the scheduler says why it stopped');
in_db('app', q{
	CREATE EXTENSION pg_backfill;
	UPDATE items SET n = 0;
	SELECT backfill_declare(name => 'fill', relation => 'items', predicate => 'n = 0',
	    action => 'UPDATE items SET n = n + 1 WHERE id BETWEEN $1 AND $2',
	    batch_size => 50, rate => 100, guard => false);
});
$run = in_db('app', q{SELECT backfill_run('fill')});
is(pass_end_in('app', $run, 300), 'completed', 'after CREATE EXTENSION again, a pass completes');
is(in_db('app', q{SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM items}),
	'200|0', 'every row done exactly once again');

# --- RENAME and CREATE DATABASE ... TEMPLATE of a served database: not held
# up by its idle scheduler ("being accessed by other users"), served again after
ok(poll_until($node, schedulers_in('app'), '1', 120), 'app is served before the rename');
($rc, $out, $err) = $node->psql('postgres', 'ALTER DATABASE app RENAME TO app2');
is($rc, 0, 'ALTER DATABASE ... RENAME of a served database succeeds') or diag($err);
($rc, $out, $err) = $node->psql('postgres', 'CREATE DATABASE appcopy TEMPLATE app2');
is($rc, 0, 'CREATE DATABASE ... TEMPLATE of a served database succeeds') or diag($err);
is($node->safe_psql('appcopy', q{SELECT count(*) FROM backfill.declaration WHERE name = 'fill'}), '1',
	'the copy has the declaration');
($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE appcopy');
is($rc, 0, 'and the copy is dropped') or diag($err);
($rc, $out, $err) = $node->psql('postgres', 'ALTER DATABASE app2 RENAME TO app');
is($rc, 0, 'renamed back') or diag($err);
in_db('app', q{UPDATE items SET n = 0});
$run = in_db('app', q{SELECT backfill_run('fill', force => true)});
is(pass_end_in('app', $run, 300), 'completed', 'a pass in the renamed database completes');
is(in_db('app', q{SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM items}),
	'200|0', 'every row done exactly once there');

# --- DROP DATABASE with its scheduler resident: not held up, nothing restarts
ok(poll_until($node, schedulers_in('app'), '1', 120), 'app is served');
($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE app');
is($rc, 0, 'DROP DATABASE of a served database succeeds without FORCE') or diag($err);
# (the short checks of the two databases without pg_backfill, quiet and
# postgres, go on at their doubling delays: they are not served ones)
$moved = holds_for($node,
	q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill scheduler'
	    AND datname NOT IN ('quiet', 'postgres')},
	'0', 3);
ok(!defined $moved, 'no scheduler is left or started again');
# errors of workers (not of this test's sessions), but the scheduler that
# DROP DATABASE asked to stop
my @errors = grep {
	/\b(ERROR|FATAL|PANIC):/ && !/141_discovery\.pl/
	  && !/terminating background worker "pg_backfill scheduler" due to administrator command/
} split /\n/, slurp_file($node->logfile);
is(join("\n", @errors), '', 'no worker logged an error (but the scheduler DROP DATABASE stopped)');
like(slurp_file($node->logfile),
	qr/terminating background worker "pg_backfill scheduler" due to administrator command/,
	'DROP DATABASE stopped the scheduler');

$node->stop;

# --- backfill.database_names set: an allow-list
my $listed = BackfillTest::node('discovery_listed');
sq($listed, q{CREATE DATABASE other});
$listed->safe_psql('other', q{CREATE EXTENSION pg_backfill; CREATE TABLE t (id int PRIMARY KEY, c int);
	SELECT backfill_declare(name => 'ofill', relation => 't', predicate => 'c IS NULL',
	    action => 'UPDATE t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)')});
($rc, $out, $err) = $listed->psql('other', "\\set VERBOSITY verbose\nSELECT backfill_run('ofill')");
like($err, qr/ERROR:\s+BF013: backfill "ofill" cannot run in database "other"/,
	'allow-list: backfill_run in a database it does not name is BF013');
like($err, qr/DETAIL:\s+backfill.database_names is "postgres"/, 'its detail names the setting');
like($err, qr/HINT:\s+Add the database to backfill.database_names, or empty the setting/,
	'its hint says both ways out');
is( holds_for($listed,
		q{SELECT count(*) FROM pg_stat_activity
		   WHERE backend_type = 'pg_backfill scheduler' AND datname = 'other'}, '0', 3),
	undef, 'allow-list: no scheduler in a database it does not name');
$listed->stop;
done_testing();
