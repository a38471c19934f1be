# 123_finalize_session.pl
#
# What an attacker found in CALL backfill_finalize (F1, F2, F3): the
# session that works a pass itself must be the caller again afterwards,
# with nothing of the declarer's SQL left in it.  No lane can start here
# (max_worker_processes is taken by the launcher, the logical replication
# launcher and the scheduler), so every batch runs in the finalizing
# session, which is the declarer's own (fs_user logged in): since issue 23
# no other role's session works a pass (121 (e): a superuser's finalize is
# refused with BF038 here), so this test, whose finalizing sessions were
# the superuser's, now logs in as fs_user.
#  (a) F3: a NULL name (BF012) or a NULL timeout (BF011) is refused, as an
#      unprivileged role, and the server does not crash;
#  (b) F1, F2: an action that sets search_path, statement_timeout, a custom
#      setting, DateStyle and default_transaction_read_only without LOCAL,
#      and takes a session advisory lock: the pass completes (every row
#      once), and afterwards the caller's settings are its own, the lock is
#      gone, the session can write and ROLLBACK is only a warning; the same
#      when the caller holds an advisory lock of its own (kept, once);
#  (c) the same after the CALL is cancelled (pg_cancel_backend) in the
#      middle of the pass, which a later finalize completes;
#  (d) F8: the timeout passing while the session works: BF019 counts the
#      rows the session did; a pause and resume while it works: it says
#      once that it works the pass; a cancelled pass: BF010, whose hint
#      names backfill_run(..., force => true), not backfill_retry.
# Where the pass stands when the test acts is made, not hoped for: a
# session holds the row lock of a known row, the finalizing session's
# batch waits on it, and the test cancels, lets the deadline pass or
# pauses once it sees that wait.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use IPC::Run;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('finalize_session', extra_conf => "max_worker_processes = 3\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE fs_user LOGIN;
	CREATE ROLE fs_nobody LOGIN;
	GRANT CREATE ON SCHEMA public TO fs_user;
	CREATE SCHEMA fs_evil AUTHORIZATION fs_user;
	-- what a caller's unqualified now() would find first on the declarer's search_path
	CREATE FUNCTION fs_evil.now() RETURNS timestamptz LANGUAGE sql AS $$SELECT 'epoch'::timestamptz$$;
	ALTER FUNCTION fs_evil.now() OWNER TO fs_user;
});
ok( poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill scheduler'},
		'1', 180),
	'the scheduler runs, and takes the last worker slot');

# a table of $rows rows and a backfill of it declared by fs_user, whose
# action changes the session's settings and takes an advisory lock
sub declare_evil
{
	my ($name, $rows, $batch, $sleep, $more) = @_;
	$more = defined $more ? ", $more" : '';
	$node->safe_psql('postgres', qq{
		CREATE TABLE $name (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, v int);
		INSERT INTO $name (id) SELECT g FROM generate_series(1, $rows) g;
		ANALYZE $name;
		ALTER TABLE $name OWNER TO fs_user;
		SET ROLE fs_user;
		CREATE FUNCTION fs_evil.${name}_act(lo int, hi int) RETURNS int LANGUAGE plpgsql AS \$f\$
		DECLARE k int;
		BEGIN
			PERFORM set_config('search_path', 'fs_evil, public, pg_catalog', false);
			PERFORM set_config('statement_timeout', '1234', false);
			PERFORM set_config('app.tenant', 'evil', false);
			PERFORM set_config('DateStyle', 'SQL, DMY', false);
			PERFORM set_config('default_transaction_read_only', 'on', false);
			PERFORM pg_advisory_lock(4242);
			PERFORM pg_advisory_lock(78);
			PERFORM pg_sleep($sleep);
			UPDATE public.$name SET v = 1, n = n + 1 WHERE id BETWEEN lo AND hi;
			GET DIAGNOSTICS k = ROW_COUNT;
			RETURN k;
		END \$f\$;
		SELECT backfill_declare(name => '$name', relation => '$name', predicate => 'v IS NULL',
			action => 'SELECT fs_evil.${name}_act(\$1, \$2)', batch_size => $batch, rate => 1000$more);
	});
	return;
}

# batches that wait on a held row lock as long as the test needs
my $wait_long = q{lock_timeout => '1 hour', batch_timeout => '1 hour'};

# the session that holds a row lock a batch of the finalizing session waits on
my $holder = $node->background_psql('postgres');
$holder->set_query_timer_restart();
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');

# hold the row $id of $table until let_go()
sub hold_row
{
	my ($table, $id) = @_;
	$holder->query_safe("BEGIN; SELECT 1 FROM $table WHERE id = $id FOR UPDATE;");
	return;
}

sub let_go
{
	$holder->query_safe('COMMIT');
	return;
}

# the finalizing session's batch waits on the held row
sub session_waits
{
	return poll_until($node,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'
		   AND $holder_pid = ANY (pg_blocking_pids(pid))", '1', 180);
}

# the caller's view of its session after the CALL
my $after = q{
	SELECT 'after|' || current_user || '|' || current_setting('search_path') || '|'
	    || current_setting('statement_timeout') || '|' || current_setting('app.tenant', true) || '|'
	    || current_setting('DateStyle') || '|' || current_setting('default_transaction_read_only')
	    || '|' || (now() > '2000-01-01')
	    || '|' || (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242
	                AND pid = pg_backend_pid())
	    || '|' || (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid IN (77, 78)
	                AND pid = pg_backend_pid());
};
my $caller_state = 'after|fs_user|public, pg_catalog|0|mine|ISO, MDY|off|true';

sub after_line
{
	my ($out) = @_;
	my ($line) = grep { /^after\|/ } split /\n/, $out;
	return $line // '';
}

# ------------------------------------------------------------------
# (a) F3: NULL arguments
# ------------------------------------------------------------------
my $started = $node->safe_psql('postgres', q{SELECT pg_postmaster_start_time()});
my ($rc, $out, $err) = $node->psql('postgres', q{
	\set VERBOSITY verbose
	SET ROLE fs_nobody;
	CALL backfill_finalize('fa', NULL);
	CALL backfill_finalize(NULL);
	CALL backfill_finalize(NULL, NULL);
	SELECT 'still connected';
}, on_error_stop => 0);
like($err, qr/ERROR:  BF011: timeout to finalize backfill "fa" must not be null/,
	'(a) a NULL timeout: BF011');
like($err, qr/ERROR:  BF012: backfill name must not be empty.*ERROR:  BF012: backfill name must not be empty/s,
	'(a) a NULL name (with or without a timeout): BF012');
is($out, 'still connected', '(a) the session survives');
is($node->safe_psql('postgres', q{SELECT pg_postmaster_start_time()}), $started,
	'(a) and the server never restarted (no crash)');

# ------------------------------------------------------------------
# (b) F1, F2: the declarer's settings and locks stay in its transactions
# ------------------------------------------------------------------
declare_evil('fb', 600, 100, 0);
($rc, $out, $err) = $node->psql('postgres', qq{
	\\set VERBOSITY verbose
	SET search_path = public, pg_catalog;
	SET app.tenant = 'mine';
	CALL backfill_finalize('fb', '10 minutes');
	$after
	CREATE TABLE fb_written_after (x int);
	ROLLBACK;
	SELECT 'after|ok';
}, extra_params => [ '-U', 'fs_user' ]);
like($err, qr/this session works run \d+ itself/, '(b) the session worked the pass');
unlike($err, qr/ERROR|FATAL/, '(b) no error') or diag($err);
is(after_line($out), "$caller_state|0|0",
	'(b) afterwards: the caller\'s search_path, statement_timeout, custom setting, DateStyle, '
	  . 'read-write default, its own now(), and no advisory lock left');
like($out, qr/^after\|ok$/m, '(b) the session wrote a table and ROLLBACK was only a warning');
my $run_b = $node->safe_psql('postgres', q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'fb'});
is(ledger($node, $run_b, 'status'), 'completed', '(b) the pass completed');
each_row_done_once($node, 'fb', 600, $run_b);

# the caller holds advisory lock 77 itself: kept (once), the declarer's 4242 and 78
# released (a declarer taking the caller's own lock again would raise its count:
# only the locks the caller did not hold are released)
declare_evil('fc', 300, 100, 0);
($rc, $out, $err) = $node->psql('postgres', qq{
	SET search_path = public, pg_catalog;
	SET app.tenant = 'mine';
	SELECT pg_advisory_lock(77);
	CALL backfill_finalize('fc', '10 minutes');
	$after
	SELECT 'after|unlock ' || pg_advisory_unlock(77) || ' ' || (SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND pid = pg_backend_pid());
}, extra_params => [ '-U', 'fs_user' ]);
unlike($err, qr/ERROR|FATAL/, '(b) no error with a lock of the caller\'s') or diag($err);
is(after_line($out), "$caller_state|0|1",
	'(b) the caller\'s advisory lock is kept, the declarer\'s are released');
like($out, qr/^after\|unlock true 0$/m, '(b) and held once: one unlock frees it');
my $run_c = $node->safe_psql('postgres', q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'fc'});
each_row_done_once($node, 'fc', 300, $run_c);

# ------------------------------------------------------------------
# (c) cancelled mid-way: the same
# ------------------------------------------------------------------
declare_evil('fd', 400, 20, 0.1, $wait_long);
# the batch of rows 201-220 waits on the held row 201
hold_row('fd', 201);
my $script = qq{
	\\set VERBOSITY verbose
	SET search_path = public, pg_catalog;
	SET app.tenant = 'mine';
	CALL backfill_finalize('fd', '2 minutes');
	$after
	CREATE TABLE fd_written_after (x int);
	SELECT 'after|ok';
};
my $script_file = PostgreSQL::Test::Utils::tempdir() . '/fd.sql';
PostgreSQL::Test::Utils::append_to_file($script_file, $script);
($out, $err) = ('', '');
my $h = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-U', 'fs_user', '-f', $script_file ],
	'<', \undef, '>', \$out, '2>', \$err,
	IPC::Run::timeout(4 * $PostgreSQL::Test::Utils::timeout_default));
ok(session_waits(), '(c) the session works the pass: its batch waits on a row lock');
cmp_ok($node->safe_psql('postgres', q{SELECT sum(n) FROM fd}), '>=', 40, '(c) the session did some batches');
is( $node->safe_psql('postgres', q{SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity
		WHERE query LIKE 'CALL backfill_finalize(''fd''%'}),
	'1', '(c) cancel the CALL');
$h->finish;
let_go();
like($err, qr/ERROR:  57014: canceling statement due to user request/, '(c) the CALL was cancelled');
is(after_line($out), "$caller_state|0|0", '(c) afterwards the session is the caller\'s again');
like($out, qr/^after\|ok$/m, '(c) and can write');
my $run_d = $node->safe_psql('postgres', q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'fd'});
is(ledger($node, $run_d, 'status'), 'running', '(c) the pass goes on');
($rc, $out, $err) = $node->psql('postgres', qq{
	SET search_path = public, pg_catalog;
	SET app.tenant = 'mine';
	CALL backfill_finalize('fd', '10 minutes');
	$after
}, extra_params => [ '-U', 'fs_user' ]);
is($rc, 0, '(c) a later finalize completes it') or diag($err);
is(after_line($out), "$caller_state|0|0", '(c) and leaves the session the caller\'s');
each_row_done_once($node, 'fd', 400, $run_d);

# ------------------------------------------------------------------
# (d) F8: what finalize says
# ------------------------------------------------------------------
declare_evil('fe', 400, 10, 0.05, $wait_long);
# the timeout passes while the session's batch of rows 101-110 waits on
# the held row 101 (the deadline is looked at between batches)
hold_row('fe', 101);
$script_file = PostgreSQL::Test::Utils::tempdir() . '/fe1.sql';
PostgreSQL::Test::Utils::append_to_file($script_file, q{
	\set VERBOSITY verbose
	CALL backfill_finalize('fe', '1 second');
});
($out, $err) = ('', '');
$h = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-U', 'fs_user', '-f', $script_file ],
	'<', \undef, '>', \$out, '2>', \$err,
	IPC::Run::timeout(4 * $PostgreSQL::Test::Utils::timeout_default));
ok(session_waits(), '(d) the session works the pass: its batch waits on a row lock');
ok( poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CALL backfill_finalize(''fe''%'
		    AND clock_timestamp() > query_start + interval '2 s'}, '1', 180),
	'(d) the timeout of the CALL has passed');
let_go();
$h->finish;
my ($done) = $err =~ /with (\d+) rows done; it goes on/;
my $run_e = $node->safe_psql('postgres', q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'fe'});
my $parts = $node->safe_psql('postgres', qq{SELECT sum(rows) FROM backfill.partition WHERE run_id = $run_e});
like($err, qr/ERROR:  BF019: backfill "fe" was not complete within 00:00:01/, '(d) BF019');
cmp_ok($parts, '>', 0, '(d) the session did rows before the timeout');
is($done, $parts, '(d) BF019 says how many rows the partitions hold');

# the batch of rows 201-210 waits on the held row 201 while the pass is paused
hold_row('fe', 201);
$script = q{
	CALL backfill_finalize('fe', '10 minutes');
};
$script_file = PostgreSQL::Test::Utils::tempdir() . '/fe.sql';
PostgreSQL::Test::Utils::append_to_file($script_file, $script);
($out, $err) = ('', '');
$h = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-U', 'fs_user', '-f', $script_file ],
	'<', \undef, '>', \$out, '2>', \$err,
	IPC::Run::timeout(4 * $PostgreSQL::Test::Utils::timeout_default));
ok(session_waits(), '(d) the session works the pass again: its batch waits on a row lock');
cmp_ok($node->safe_psql('postgres', qq{SELECT sum(rows) FROM backfill.partition WHERE run_id = $run_e}),
	'>', $parts, '(d) the session did more rows');
is($node->safe_psql('postgres', q{SELECT backfill_pause('fe')}), 't', '(d) the pass is paused while the session works it');
let_go();
ok(poll_until($node, q{SELECT live_leases FROM backfill_status('fe')}, '0', 180),
	'(d) paused: the session gives its partition back');
$node->safe_psql('postgres', q{SELECT backfill_resume('fe')});
$h->finish;
is($?, 0, '(d) finalize completes after the resume') or diag($err);
my @notices = $err =~ /this session works run/g;
is(scalar(@notices), 1, '(d) it said once that it works the pass');
each_row_done_once($node, 'fe', 400, $run_e);

declare_evil('ff', 400, 10, 0.05);
my $run_f = $node->safe_psql('postgres', q{SET ROLE fs_user; SELECT backfill_run('ff')});
$node->safe_psql('postgres', q{SELECT backfill_cancel('ff')});
($rc, $out, $err) = $node->psql('postgres', q{
	\set VERBOSITY verbose
	CALL backfill_finalize('ff');
});
like($err, qr/ERROR:  BF010: backfill "ff" is not complete: run $run_f ended cancelled/,
	'(d) a cancelled pass: BF010');
like($err, qr/HINT:  Run it again with backfill_run\('ff', force => true\)/,
	'(d) whose hint says what works: backfill_run with force');
$holder->quit;

$node->stop;
done_testing();
