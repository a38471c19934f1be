# 121_finalize.pl
#
# CALL backfill_finalize(name, timeout) inside a deploy (issue 14, part 4).
# The action is non-idempotent (n = n + 1) and checks that it runs as the
# declaring role (current_user), never as the caller (postgres).
#  (a) a completed backfill: returns at once, no new pass (also through
#      pg_backfill finalize);
#  (b) a running backfill with lanes: waits for it, runs no batch itself;
#  (c) a never-run backfill, finalized by the superuser: started, and
#      worked by lanes, never in the superuser's session (issue 23: the
#      declarer's SQL does not run in another role's session; this test
#      had the superuser's session work it before); finalized in a session
#      of the declarer (fin_user logged in): worked in that session, every
#      row once, its leases held by that backend;
#  (d) a failed backfill (a row that fails alone, max_failed_rows 0): the
#      pass's code, BF018; in a transaction block: BF015; the timeout
#      passing first: BF019, the pass goes on;
#  (e) max_worker_processes exhausted (no lane can start): the superuser's
#      finalize fails with BF038 (it runs none of fin_user's SQL itself);
#      fin_user's own finalize works the pass in its session, which completes;
#      the superuser's backfill_run of a scoped backfill of fin_user's:
#      BF038 (its scope is evaluated only in a worker logged in as fin_user),
#      fin_user's own run evaluates it in its session;
#  (f) kill -9 of the finalizing session (fin_user's) mid-way: the pass stays running
#      with a dead lease; once lanes can start, one resumes it and every
#      row is done exactly once.
# Where a pass stands when the test acts is made, not hoped for: in (b) and
# (f) a session holds the row lock of id 1501, so the lane's (the
# finalizing session's) batch waits there, and the test acts once it sees
# that wait; in (d) the pass that must outlive a 1 s timeout is paced to
# 100 s at least.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $setup = q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE fin_user LOGIN;
};

# a table of $rows rows and a backfill of it declared by fin_user ($more:
# more declaration arguments)
sub declare_fill
{
	my ($node, $name, $rows, $batch, $rate, $more) = @_;
	$more = defined $more ? ", $more" : '';
	$node->safe_psql('postgres', qq{
		CREATE TABLE $name (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, v int);
		INSERT INTO $name (id) SELECT g FROM generate_series(1, $rows) g;
		ANALYZE $name;
		GRANT SELECT, UPDATE ON $name TO fin_user;
		SET ROLE fin_user;
		SELECT backfill_declare(name => '$name', relation => '$name', predicate => 'v IS NULL',
			action => 'UPDATE $name SET v = 1, n = n + 1 WHERE id BETWEEN \$1 AND \$2'
			       || ' AND current_user = ''fin_user''',
			batch_size => $batch, rate => $rate$more, guard => false);
	});
	return;
}

# a session holding the row lock of $id in $table: (session, its pid)
sub hold_row
{
	my ($node, $table, $id) = @_;
	my $s = $node->background_psql('postgres');
	$s->set_query_timer_restart();
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe("BEGIN; SELECT 1 FROM $table WHERE id = $id FOR UPDATE;");
	return ($s, $pid);
}

# a batch waits on a lock of that session, in a backend of $type
sub waits_on
{
	my ($node, $pid, $type) = @_;
	return poll_until($node,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = '$type'
		   AND $pid = ANY (pg_blocking_pids(pid))", '1', 180);
}

my $wait_long = q{lock_timeout => '1 hour', batch_timeout => '1 hour'};

sub finalize
{
	my ($node, $sql, @role) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		@role ? (extra_params => [ '-U', $role[0] ]) : ());
	return ($rc, $out, $err);
}

my $cli = $ENV{PG_BACKFILL_CLI};
if (!defined $cli || $cli eq '')
{
	my $rel = "$FindBin::RealBin/../../cli/pg_backfill";
	$cli = -x $rel ? $rel : '/usr/lib/postgresql/15/bin/pg_backfill';
}
die "pg_backfill CLI not found at $cli (build it with make -C cli, or set PG_BACKFILL_CLI)"
  unless -x $cli;

# pg_backfill finalize ...: (exit status, stdout, stderr)
sub cli_finalize
{
	my ($node, @args) = @_;
	my ($o, $e) = ('', '');
	IPC::Run::run([ $cli, '-d', $node->connstr('postgres'), 'finalize', @args ],
		'<', \undef, '>', \$o, '2>', \$e,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $o, $e);
}

my $node = BackfillTest::node('finalize');
$node->safe_psql('postgres', $setup);

# ------------------------------------------------------------------
# (a) completed
# ------------------------------------------------------------------
declare_fill($node, 'fa', 2000, 500, 1000);
my $run_a = $node->safe_psql('postgres', q{SET ROLE fin_user; SELECT backfill_run('fa')});
is(wait_pass_end($node, $run_a, 300), 'completed', '(a) the pass completed');
my ($rc, $out, $err) = finalize($node, q{CALL backfill_finalize('fa')});
is($rc, 0, '(a) finalize of a completed backfill succeeds');
like($err, qr/backfill "fa" is complete: run $run_a/, '(a) it names the completed run');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'fa'}),
	'1', '(a) no new pass');
my ($cli_rc, $cli_out, $cli_err) = cli_finalize($node, 'fa', '10 s');
is("$cli_rc|$cli_out", "0|complete\n", '(a) pg_backfill finalize fa: complete, exit 0');

# ------------------------------------------------------------------
# (b) running, with lanes
# ------------------------------------------------------------------
declare_fill($node, 'fb', 3000, 100, 10, $wait_long);
my ($lock_b, $lock_b_pid) = hold_row($node, 'fb', 1501);
my $run_b = $node->safe_psql('postgres', q{SET ROLE fin_user; SELECT backfill_run('fb')});
ok(waits_on($node, $lock_b_pid, 'pg_backfill lane'), '(b) a lane works the pass: its batch waits on a row lock');
is($node->safe_psql('postgres', q{SELECT live_leases > 0 FROM backfill_status('fb')}), 't',
	'(b) a lane works the pass');
my $fin = $node->background_psql('postgres', on_error_stop => 0);
$fin->set_query_timer_restart();
my $pid_b = $fin->query_safe('SELECT pg_backend_pid()');
$fin->query_until(qr/finalizing\n/,
	"\\set VERBOSITY verbose\n\\echo finalizing\nCALL backfill_finalize('fb');\n\\echo finalized\n");
ok( poll_until($node,
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid_b AND state = 'active'
		   AND query LIKE 'CALL backfill_finalize%'", '1', 180),
	'(b) finalize is called while the lane works');
is(ledger($node, $run_b, 'status'), 'running', '(b) the pass is running while finalize waits');
$lock_b->query_safe('COMMIT');
$lock_b->quit;
$fin->query_until(qr/finalized\n/, '');
$err = $fin->{stderr};
$fin->quit;
unlike($err, qr/ERROR/, '(b) finalize of a running backfill returns');
is(ledger($node, $run_b, 'status'), 'completed', '(b) once the pass has completed');
unlike($err, qr/this session works/, '(b) it ran no batch itself: the lane did');
is( $node->safe_psql('postgres',
		qq{SELECT count(*) FROM backfill.partition WHERE run_id = $run_b AND holder_pid = $pid_b}),
	'0', '(b) no partition was held by the finalizing session');
each_row_done_once($node, 'fb', 3000, $run_b);

# ------------------------------------------------------------------
# (c) never run: started; worked by lanes for the superuser, in the
#     session for fin_user
# ------------------------------------------------------------------
declare_fill($node, 'fc', 3000, 250, 1000);
($rc, $out, $err) = finalize($node,
	q{CALL backfill_finalize('fc'); SELECT pg_backend_pid() || '|' || current_user});
is($rc, 0, '(c) the superuser\'s finalize of a never-run backfill succeeds');
unlike($err, qr/this session works/, '(c) the superuser\'s session did not work the pass');
my ($pid_c, $user_c) = split /\|/, $out;
is($user_c, 'postgres', '(c) the session is the caller afterwards');
my $run_c = $node->safe_psql('postgres', q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'fc'});
is(ledger($node, $run_c, 'status'), 'completed', '(c) the pass completed');
is( $node->safe_psql('postgres',
		qq{SELECT count(*) FROM backfill.partition WHERE run_id = $run_c AND holder_pid = $pid_c}),
	'0', '(c) the superuser\'s session held no partition lease: lanes did');
each_row_done_once($node, 'fc', 3000, $run_c);

declare_fill($node, 'fc2', 3000, 250, 1000);
($rc, $out, $err) = finalize($node,
	q{CALL backfill_finalize('fc2'); SELECT pg_backend_pid() || '|' || current_user}, 'fin_user');
is($rc, 0, '(c) fin_user\'s finalize of a never-run backfill succeeds');
like($err, qr/this session works run \d+ itself/, '(c) the declarer\'s own session worked the pass');
my ($pid_c2, $user_c2) = split /\|/, $out;
is($user_c2, 'fin_user', '(c) the session is fin_user\'s');
my $run_c2 = $node->safe_psql('postgres', q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'fc2'});
is(ledger($node, $run_c2, 'status'), 'completed', '(c) the pass completed');
cmp_ok( $node->safe_psql('postgres',
		qq{SELECT count(*) FROM backfill.partition WHERE run_id = $run_c2 AND holder_pid = $pid_c2}),
	'>', 0, '(c) the declarer\'s session held its partition lease');
each_row_done_once($node, 'fc2', 3000, $run_c2);

# ------------------------------------------------------------------
# (d) failed; in a transaction block; the timeout
# ------------------------------------------------------------------
declare_fill($node, 'fd', 2000, 200, 1000);
$node->safe_psql('postgres', q{ALTER TABLE fd ADD CONSTRAINT fd_no CHECK (v IS NULL OR id <> 1500)});
my $run_d = $node->safe_psql('postgres', q{SET ROLE fin_user; SELECT backfill_run('fd')});
is(wait_pass_end($node, $run_d, 300), 'failed', '(d) the pass failed');
($rc, $out, $err) = finalize($node, q{CALL backfill_finalize('fd')});
isnt($rc, 0, '(d) finalize of a failed backfill fails');
like($err, qr/ERROR:  BF018: backfill "fd" is not complete: run $run_d ended failed/,
	'(d) with the pass\'s code, BF018');
like($err, qr/keys 1500/, '(d) the detail names the failed row');
($cli_rc, $cli_out, $cli_err) = cli_finalize($node, 'fd');
is($cli_rc, 1, '(d) pg_backfill finalize fd exits 1');
like($cli_err, qr/SQLSTATE: BF018/, '(d) and prints the SQLSTATE, BF018');
($rc, $out, $err) = finalize($node, q{BEGIN; CALL backfill_finalize('fa'); COMMIT;});
like($err, qr/ERROR:  BF015: backfill_finalize of "fa" must be called with CALL outside/,
	'(d) inside a transaction block: BF015');
# (100 batches at 1 a second: the pass cannot end within the timeout)
declare_fill($node, 'ft', 5000, 50, 1);
($rc, $out, $err) = finalize($node, q{CALL backfill_finalize('ft', '1 second')});
like($err, qr/ERROR:  BF019: backfill "ft" was not complete within 00:00:01/,
	'(d) the timeout passing first: BF019');
my $run_t = $node->safe_psql('postgres', q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'ft'});
is(ledger($node, $run_t, 'status'), 'running', '(d) the pass goes on after BF019');
$node->safe_psql('postgres', q{SELECT backfill_cancel('ft')});

# (d2) the old code still writing: a trigger stands for it, writing a new
# row that matches for each row a pass fills, so every count after a
# completed pass finds rows again; the timeout says so (a new user's finding)
declare_fill($node, 'fw', 20, 100, 100);
$node->safe_psql('postgres', q{
	GRANT INSERT ON fw TO fin_user;
	CREATE FUNCTION fw_old_code() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF NEW.id < 10000000 THEN
			INSERT INTO fw (id) VALUES (NEW.id + 100000) ON CONFLICT DO NOTHING;
		END IF;
		RETURN NULL;
	END $$;
	CREATE TRIGGER fw_old_code AFTER UPDATE OF v ON fw FOR EACH ROW
		WHEN (OLD.v IS NULL AND NEW.v IS NOT NULL) EXECUTE FUNCTION fw_old_code();
});
my $run_w = $node->safe_psql('postgres', q{SET ROLE fin_user; SELECT backfill_run('fw')});
is(wait_pass_end($node, $run_w, 300), 'completed', '(d2) the pass completes');
# (as the lanes' role, whose session counts and works each catch-up pass itself)
($rc, $out, $err) = finalize($node, q{CALL backfill_finalize('fw', '10 seconds')}, 'fin_user');
like($err, qr/ERROR:  BF019: backfill "fw" was not complete within 00:00:10/,
	'(d2) rows keep matching: BF019');
like($err, qr/DETAIL:  \d+ catch-up passes found rows matching its predicate again/,
	'(d2) its detail counts the catch-up passes that found rows');
like($err, qr/HINT:  Code that still writes rows the old way keeps them coming/,
	'(d2) its hint says to deploy the new writers first');
$node->safe_psql('postgres', q{DROP TRIGGER fw_old_code ON fw});

# a reverted backfill is not complete: finalize says so (BF008)
$node->safe_psql('postgres', q{
	CREATE TABLE fr (id int PRIMARY KEY, v int);
	INSERT INTO fr (id) SELECT g FROM generate_series(1, 500) g;
	GRANT SELECT, UPDATE ON fr TO fin_user;
	SET ROLE fin_user;
	SELECT backfill_declare(name => 'fr', relation => 'fr', predicate => 'v IS NULL',
		action => 'UPDATE fr SET v = 1 WHERE id BETWEEN $1 AND $2 AND (v IS NULL)',
		revert => 'UPDATE fr SET v = NULL WHERE id BETWEEN $1 AND $2', rate => 1000, guard => false);
});
my $run_r = $node->safe_psql('postgres', q{SET ROLE fin_user; SELECT backfill_run('fr')});
is(wait_pass_end($node, $run_r, 300), 'completed', '(d) fr completed');
my $rev = $node->safe_psql('postgres', q{SET ROLE fin_user; SELECT backfill_revert('fr')});
is(wait_pass_end($node, $rev, 300), 'completed', '(d) and was reverted');
($rc, $out, $err) = finalize($node, q{CALL backfill_finalize('fr')});
like($err, qr/ERROR:  BF008: backfill "fr" is not complete: its newest pass, run $rev, is a revert/,
	'(d) finalize of a reverted backfill: BF008');
$node->stop;

# ------------------------------------------------------------------
# (e) no worker slot for a lane: the superuser's finalize says so (BF038);
#     the declarer's own session works the pass
# ------------------------------------------------------------------
# the launcher, the logical replication launcher and the scheduler fill it
my $tight = BackfillTest::node('finalize_tight', crash_restart => 1,
	extra_conf => "max_worker_processes = 3\n");
$tight->safe_psql('postgres', $setup);
ok( poll_until($tight,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill scheduler'},
		'1', 180),
	'(e) the scheduler runs, and takes the last worker slot');
declare_fill($tight, 'fe', 3000, 250, 1000);
my $run_e = $tight->safe_psql('postgres', q{SET ROLE fin_user; SELECT backfill_run('fe')});
($rc, $out, $err) = finalize($tight, q{CALL backfill_finalize('fe', '10 minutes')});
isnt($rc, 0, '(e) the superuser\'s finalize fails with every worker slot taken');
like($err, qr/ERROR:  BF038: backfill "fe" cannot be finalized: no background worker slot is free/,
	'(e) with BF038');
like($err, qr/HINT:  Raise max_worker_processes/, '(e) and a hint');
unlike($err, qr/this session works/, '(e) it worked no batch itself');
is(ledger($tight, $run_e, 'status'), 'running', '(e) the pass is still running');
is($tight->safe_psql('postgres', 'SELECT count(*) FROM fe WHERE n > 0'), '0',
	'(e) no row was done');
($rc, $out, $err) = finalize($tight, q{CALL backfill_finalize('fe', '10 minutes'); SELECT pg_backend_pid()},
	'fin_user');
is($rc, 0, '(e) the declarer\'s finalize returns with every worker slot taken');
like($err, qr/this session works run $run_e itself/, '(e) its session worked the pass');
is(ledger($tight, $run_e, 'status'), 'completed', '(e) the pass completed');
is( $tight->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'}),
	'0', '(e) no lane ran');
each_row_done_once($tight, 'fe', 3000, $run_e);

# a scoped backfill of fin_user's run by the superuser: its scope is
# evaluated in a worker logged in as fin_user, for which no slot is free
$tight->safe_psql('postgres', q{
	CREATE TABLE fs (id int PRIMARY KEY, v int);
	GRANT SELECT, UPDATE ON fs TO fin_user;
	SET ROLE fin_user;
	SELECT backfill_declare(name => 'fs', relation => 'fs', predicate => 'v IS NULL',
		action => 'UPDATE fs SET v = 1 WHERE id BETWEEN $1 AND $2',
		input => '{"t": "integer"}', scope => 'input->>''t''', guard => false);
});
($rc, $out, $err) = finalize($tight, q{SELECT backfill_run('fs', input => '{"t": 1}')});
like($err, qr/ERROR:  BF038: the scope of backfill "fs" cannot be evaluated: no background worker slot is free/,
	'(e) the superuser\'s run of a scoped backfill of fin_user\'s: BF038');
is($tight->safe_psql('postgres', q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'fs'}),
	'0', '(e) no pass was enqueued');
($rc, $out, $err) = finalize($tight, q{SELECT backfill_run('fs', input => '{"t": 1}')}, 'fin_user');
is($rc, 0, '(e) fin_user\'s own session evaluates it') or diag($err);
is($tight->safe_psql('postgres', "SELECT ledger_name FROM backfill.ledger WHERE run_id = $out"),
	'fs:1', '(e) as scope fs:1');

# ------------------------------------------------------------------
# (f) kill -9 of the finalizing session mid-way; a lane resumes once
# ------------------------------------------------------------------
declare_fill($tight, 'ff', 3000, 100, 10, $wait_long);
my ($lock_f, $lock_f_pid) = hold_row($tight, 'ff', 1501);
my $run_f = $tight->safe_psql('postgres', q{SET ROLE fin_user; SELECT backfill_run('ff')});
my $caller = $tight->background_psql('postgres', on_error_stop => 0,
	extra_params => [ '-U', 'fin_user' ]);
$caller->set_query_timer_restart();
$caller->query_until(qr/started/, "\\echo started\nCALL backfill_finalize('ff', '30 minutes');\n");
ok(waits_on($tight, $lock_f_pid, 'client backend'),
	'(f) the finalizing session works the pass: its batch waits on a row lock');
cmp_ok($tight->safe_psql('postgres',
		qq{SELECT coalesce(sum(rows), 0) FROM backfill.partition WHERE run_id = $run_f}),
	'>=', 500, '(f) the session is under way');
my $holder = $tight->safe_psql('postgres',
	qq{SELECT p.holder_pid FROM backfill.partition p JOIN pg_stat_activity a
	    ON a.pid = p.holder_pid AND a.backend_start = p.holder_start
	   WHERE p.run_id = $run_f AND p.state = 'running' AND a.backend_type = 'client backend'});
like($holder, qr/^\d+$/, '(f) the finalizing session holds the lease');
is(kill('KILL', $holder), 1, '(f) SIGKILL delivered to the finalizing session');
eval { $caller->quit; };
# (the crash restart ended the lock's session too)
eval { $lock_f->quit; };
ok(wait_for_server($tight, 120), '(f) the server accepts connections again');
is(ledger($tight, $run_f, 'status'), 'running', '(f) the pass is still running');
my $left = $tight->safe_psql('postgres', "SELECT count(*) FROM ff WHERE n = 0");
cmp_ok($left, '>', 0, "(f) $left rows were left to do");
# room for lanes: one resumes the pass from the session's checkpoint
$tight->append_conf('postgresql.conf', "max_worker_processes = 32\n");
$tight->restart;
is(wait_pass_end($tight, $run_f, 300), 'completed', '(f) a lane completed the pass');
cmp_ok($tight->safe_psql('postgres', "SELECT interruptions FROM backfill.run WHERE run_id = $run_f"),
	'>=', 1, '(f) the lane reclaimed the dead session\'s lease');
each_row_done_once($tight, 'ff', 3000, $run_f);
is($tight->safe_psql('postgres', q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'ff'}),
	'1', '(f) one pass');

$tight->stop;
done_testing();
