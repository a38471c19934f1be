# 104_database_settings.pl -- a database's settings and the extension's own workers
#
# A database owner (no superuser) may ALTER DATABASE ... SET
# default_transaction_read_only = on, or a tiny statement_timeout.  The
# scheduler and the relay run only the extension's own SQL: they do not
# take those settings, so they go on serving the database.  The lanes run
# the declarer's SQL and keep them: a lane that cannot write ends its pass
# failed with the reason, visible in backfill_status, instead of a pass
# left running with no rows and no error while the scheduler fails every
# look (attacker finding F7).  Nor does any worker take the database's
# SET role or SET session_authorization: the owner's ALTER DATABASE ... SET
# role = itself stopped the scheduler (every look: permission denied) and
# made a superuser's lane run as the owner.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('dbsettings', extra_conf => "backfill.database_names = ''");
$node->safe_psql('postgres', q{
	CREATE ROLE dbo LOGIN;
	CREATE DATABASE dbo_db OWNER dbo;
});
$node->safe_psql('dbo_db', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO t (id) SELECT g FROM generate_series(1, 2000) g;
	ALTER TABLE t OWNER TO dbo;
});
$node->safe_psql('dbo_db', q{
	SELECT backfill_declare('ro', 't', 'n = 0', 'UPDATE t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
	                        batch_size => 200, guard => false);
	SELECT backfill_declare('st', 't', 'n = 0', 'UPDATE t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
	                        batch_size => 200, guard => false);
}, extra_params => [ '-U', 'dbo' ]);

sub dbq { return $node->safe_psql('dbo_db', $_[0], extra_params => [ '-U', 'dbo' ]) }

# poll a query in dbo_db until it answers $expected (a deadline, never a fixed sleep)
sub poll_db
{
	my ($sql, $expected, $timeout) = @_;
	my $deadline = time() + $timeout;
	my $last = '';
	while (time() < $deadline)
	{
		my ($rc, $out) = $node->psql('dbo_db', $sql);
		$last = $out;
		return 1 if $rc == 0 && $out eq $expected;
		select(undef, undef, undef, 0.25);
	}
	diag("poll_db timed out: $sql\n  expected: $expected\n  last: $last");
	return 0;
}

# (a) the owner makes the database read-only; the scheduler starts under it
dbq(q{ALTER DATABASE dbo_db SET default_transaction_read_only = on});
$node->restart;
my $run = dbq(q{SET default_transaction_read_only = off; SELECT backfill_run('ro', wait => false)});
ok(poll_db("SELECT status <> 'running' FROM backfill.ledger WHERE run_id = $run", 't', 90),
	'(a) under a read-only database the pass ends (it is not left running)');
is($node->safe_psql('dbo_db', "SELECT status, error_message ~ 'read-only' FROM backfill.ledger
		WHERE run_id = $run"), 'failed|t', '(a) failed, with the reason');
is($node->safe_psql('dbo_db', 'SELECT count(*) FROM t WHERE n <> 0'), '0',
	'(a) no row was written');
my $log = slurp_file($node->logfile);
unlike($log, qr/scheduler.*\n.*cannot execute UPDATE in a read-only transaction|fail_unbound_passes[^\n]*\n[^\n]*read-only/,
	'(a) the scheduler never failed a look on the read-only setting');

# (b) a tiny statement_timeout for the database: the scheduler's looks still run
dbq(q{SET default_transaction_read_only = off; ALTER DATABASE dbo_db RESET default_transaction_read_only});
dbq(q{ALTER DATABASE dbo_db SET statement_timeout = '1ms'});
$node->restart;
$run = dbq(q{SET statement_timeout = 0; SELECT backfill_run('st', wait => false)});
ok(poll_db("SET statement_timeout = 0; SELECT status <> 'running' FROM backfill.ledger WHERE run_id = $run",
		't', 90),
	'(b) under a 1 ms statement_timeout for the database the pass ends');
my $scheduler_errors = () = slurp_file($node->logfile) =~ /pg_backfill scheduler[^\n]*\n?[^\n]*canceling statement due to statement timeout/g;
is($scheduler_errors, 0, '(b) no look of the scheduler was cancelled by the timeout');

# (c) the owner names itself as everybody's role: the scheduler still serves
# the database as the superuser it is, a superuser's lane still runs as it
dbq(q{SET statement_timeout = 0; ALTER DATABASE dbo_db RESET statement_timeout});
$node->safe_psql('dbo_db', q{
	CREATE TABLE su (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, who text);
	INSERT INTO su (id) SELECT g FROM generate_series(1, 500) g;
	SELECT backfill_declare('su', 'su', 'n = 0',
	    'UPDATE su SET n = n + 1, who = current_user WHERE id BETWEEN $1 AND $2',
	    batch_size => 100, rate => 100, guard => false);
});
dbq(q{SET statement_timeout = 0; ALTER DATABASE dbo_db RESET statement_timeout});
# the test's own superuser sessions take those settings too: undone first
sub suq { return $node->safe_psql('dbo_db', "SET SESSION AUTHORIZATION DEFAULT; SET role = none; $_[0]") }
foreach my $setting ('role', 'session_authorization')
{
	dbq(qq{ALTER DATABASE dbo_db SET $setting = 'dbo'});
	$node->restart;
	suq(q{UPDATE su SET n = 0, who = NULL});
	$run = suq(q{SELECT backfill_run('su', force => true, wait => false)});
	ok(poll_db("SET SESSION AUTHORIZATION DEFAULT; SET role = none;
			SELECT status <> 'running' FROM backfill.ledger WHERE run_id = $run", 't', 90),
		"(c) under SET $setting = dbo for the database the pass ends");
	is(suq("SELECT status FROM backfill.ledger WHERE run_id = $run"),
		'completed', "(c) $setting: the superuser's pass completed");
	is(suq(q{SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1),
			string_agg(DISTINCT who, ',') FROM su}),
		'500|0|postgres', "(c) $setting: every row done once, as the superuser, not as the owner");
	dbq(qq{ALTER DATABASE dbo_db RESET $setting});
}
unlike(slurp_file($node->logfile), qr/permission denied for function fail_unbound_passes/,
	'(c) no look of the scheduler was refused');

$node->stop;
done_testing();
