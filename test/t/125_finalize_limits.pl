# 125_finalize_limits.pl
#
# What bounds CALL backfill_finalize while it works a pass in the calling
# session (verifier N2), and what it leaves when it stops.  One lane may run
# at a time (backfill.max_workers = 1) and a slow pass of the same role
# holds it, so every other pass is worked by the finalizing session (a
# session of the declarer, fl_user), which stays connected afterwards.  The actions are non-idempotent (n = n + 1)
# and sleep only in the finalizing session, so the lanes that finish the passes
# at the end run fast.
#  (a) the caller's statement_timeout (2 s) ends the CALL with 57014 after
#      batches of the session's own, long before the pass could end; the
#      live session then holds no lease;
#  (b) finalize's own timeout shorter than statement_timeout: BF019, the
#      timeout that passes first ends the call; statement_timeout also ends
#      a finalize that only waits for a lane (57014);
#  (c) pg_cancel_backend of the finalizing session mid-way: 57014, and the
#      session, still connected, holds no lease;
#  (d) the caller holds advisory lock 77 twice: an action that calls
#      pg_advisory_unlock_all() stops the finalize with BF032, 77 taken back
#      twice; an action that takes pg_advisory_lock(77) and a lock of its
#      own completes, and the caller holds 77 exactly twice, and nothing
#      else;
#  (e) once the slow pass is cancelled, lanes take up every pass the
#      sessions left and complete each, every row done exactly once;
#  (f) a predicate probed for drift is evaluated in a probe worker, never
#      in the caller's session (issue 23): backfill_probe of one that takes
#      lock 999 and of one that calls pg_advisory_unlock_all() leave the
#      session holding 77 only, and so does backfill_pending, which
#      evaluates no predicate at all.
# Where the passes stand is made, not hoped for: the slow pass's lane waits
# inside its first batch on a row lock a session holds until (e), so it
# holds the one lane however long the test takes; in (a) and (c) the
# finalizing session's batch waits on a held row lock, so the session has
# done rows and is at work when it is timed out or cancelled.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('finalize_limits', extra_conf => "backfill.max_workers = 1\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE fl_user LOGIN;
	GRANT CREATE ON SCHEMA public TO fl_user;
});

# a table of $rows rows owned by fl_user and its backfill, whose action runs
# $before (PL/pgSQL) first; in the finalizing session (logged in as postgres,
# not as fl_user as a lane is) it also sleeps $sleep s a batch
sub declare_fill
{
	my ($name, $rows, $batch, $sleep, $before, %opts) = @_;
	my $rate = $opts{rate} // 1000;
	# a batch that meets a held row lock waits as long as the test needs
	my $wait = $opts{wait_long} ? q{, lock_timeout => '1 hour', batch_timeout => '1 hour'} : '';
	$node->safe_psql('postgres', qq{
		SET ROLE fl_user;
		CREATE TABLE $name (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, v int);
		INSERT INTO $name (id) SELECT g FROM generate_series(1, $rows) g;
		ANALYZE $name;
		CREATE FUNCTION ${name}_act(lo int, hi int) RETURNS int LANGUAGE plpgsql AS \$f\$
		DECLARE k int;
		BEGIN
			$before
			IF session_user <> current_user THEN
				PERFORM pg_sleep($sleep);
			END IF;
			UPDATE $name SET v = 1, n = n + 1 WHERE id BETWEEN lo AND hi;
			GET DIAGNOSTICS k = ROW_COUNT;
			RETURN k;
		END \$f\$;
		SELECT backfill_declare(name => '$name', relation => '$name', predicate => 'v IS NULL',
			action => 'SELECT ${name}_act(\$1, \$2)', batch_size => $batch, rate => $rate$wait);
	});
	return;
}

sub run_of
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT max(run_id) FROM backfill.ledger WHERE declaration = '$name'");
}

# the leases a backend holds
sub leases_of
{
	my ($pid) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM backfill.partition WHERE holder_pid = $pid AND state = 'running'");
}

# run $sql in the caller's session; its stderr, cleared for the next
sub in_session
{
	my ($s, $sql) = @_;
	$s->{stderr} = '';
	my $out = $s->query($sql);
	# PostgreSQL 16's BackgroundPsql can leave the output's trailing
	# newline after an error (17 and later remove it): the same value
	$out =~ s/\r?\n\z// if defined $out;
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($out, $err);
}

# a session holding the row lock of $id in $table: (session, its pid)
sub hold_row
{
	my ($table, $id) = @_;
	my $h = $node->background_psql('postgres');
	$h->set_query_timer_restart();
	my $hpid = $h->query_safe('SELECT pg_backend_pid()');
	$h->query_safe("BEGIN; SELECT 1 FROM $table WHERE id = $id FOR UPDATE;");
	return ($h, $hpid);
}

# a backend of $type waits on a lock of the session $hpid
sub waits_on
{
	my ($hpid, $type) = @_;
	return poll_until($node,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = '$type'
		   AND $hpid = ANY (pg_blocking_pids(pid))", '1', 180);
}

# ------------------------------------------------------------------
# the slow pass that holds the one lane: its first batch waits on row 1
# ------------------------------------------------------------------
declare_fill('fl_hog', 100, 10, 0, '', rate => 0.05, wait_long => 1);
my ($hog_lock, $hog_lock_pid) = hold_row('fl_hog', 1);
my $run_hog = $node->safe_psql('postgres', q{SET ROLE fl_user; SELECT backfill_run('fl_hog')});
ok(waits_on($hog_lock_pid, 'pg_backfill lane'), 'a lane works the slow pass (its batch waits on a row lock)');
is($node->safe_psql('postgres', q{SELECT live_leases FROM backfill_status('fl_hog')}), '1',
	'a lane works the slow pass, and takes the only lane');

# the declarer's own session (fl_user logged in): since issue 23 only such a
# session works a pass itself (this test's finalizing session was the
# superuser's before; a superuser's finalize now only waits for the lanes)
my $s = $node->background_psql('postgres', on_error_stop => 0,
	extra_params => [ '-U', 'fl_user' ]);
$s->set_query_timer_restart();
my $pid = $s->query_safe('SELECT pg_backend_pid()');
$s->query_safe('\set VERBOSITY verbose');

# ------------------------------------------------------------------
# (a) the caller's statement_timeout
# ------------------------------------------------------------------
# (its third batch waits on row 41 until the statement_timeout: 20 s, for
# the session to plan the pass and do two batches on a loaded box; 100
# batches of 0.2 s could not end the pass within it anyway)
declare_fill('fl_a', 2000, 20, 0.2, '', wait_long => 1);
my ($gate, $gate_pid) = hold_row('fl_a', 41);
my ($out, $err) = in_session($s,
	q{SET statement_timeout = '20s'; CALL backfill_finalize('fl_a', '5 minutes')});
$gate->query_safe('COMMIT');
$gate->quit;
like($err, qr/this session works run \d+ itself/, '(a) the session worked the pass');
like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
	'(a) the caller\'s statement_timeout ends the CALL with 57014');
my $run_a = run_of('fl_a');
is(ledger($node, $run_a, 'status'), 'running', '(a) the pass goes on');
my $done_a = $node->safe_psql('postgres', 'SELECT count(*) FROM fl_a WHERE n > 0');
cmp_ok($done_a, '>', 0, "(a) the session did $done_a rows first");
cmp_ok($done_a, '<', 2000, '(a) and stopped long before the end');
is(leases_of($pid), '0', '(a) the session, still connected, holds no lease');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM backfill.partition
		WHERE run_id = $run_a AND state = 'running'}),
	'0', '(a) no partition of the pass is left running');
($out, $err) = in_session($s, q{SHOW statement_timeout});
is($out, '20s', '(a) the caller\'s statement_timeout is its own');

# ------------------------------------------------------------------
# (b) which timeout ends the call: the first to pass
# ------------------------------------------------------------------
($out, $err) = in_session($s,
	q{SET statement_timeout = '1min'; CALL backfill_finalize('fl_a', '1 second')});
like($err, qr/ERROR:  BF019: backfill "fl_a" was not complete within 00:00:01/,
	'(b) finalize\'s timeout first: BF019');
is(leases_of($pid), '0', '(b) and no lease held');
($out, $err) = in_session($s,
	q{SET statement_timeout = '1s'; CALL backfill_finalize('fl_hog', '5 minutes')});
like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
	'(b) statement_timeout ends a finalize that waits for a lane too');
unlike($err, qr/this session works run/, '(b) (it only waited)');
in_session($s, q{RESET statement_timeout});

# ------------------------------------------------------------------
# (c) pg_cancel_backend of the finalizing session
# ------------------------------------------------------------------
declare_fill('fl_c', 2000, 20, 0.2, '', wait_long => 1);
($gate, $gate_pid) = hold_row('fl_c', 61);
$s->{stderr} = '';
$s->query_until(qr/started/, "\\echo started\nCALL backfill_finalize('fl_c', '5 minutes');\n");
ok(waits_on($gate_pid, 'client backend'), '(c) the session works the pass: its batch waits on a row lock');
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM fl_c WHERE n > 0}), '>=', 60,
	'(c) the session is under way');
is(leases_of($pid), '1', '(c) it holds the lease while it works');
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"), 't', '(c) cancel it');
($out, $err) = in_session($s, q{SELECT 'after'});
$gate->query_safe('COMMIT');
$gate->quit;
like($err, qr/ERROR:  57014: canceling statement due to user request/, '(c) 57014');
is($out, 'after', '(c) the session is still connected');
is(leases_of($pid), '0', '(c) and holds no lease');
my $run_c = run_of('fl_c');
is(ledger($node, $run_c, 'status'), 'running', '(c) the pass goes on');

# ------------------------------------------------------------------
# (d) the caller's advisory lock 77, held twice
# ------------------------------------------------------------------
my $lock77 = q{SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 77
	AND pid = pg_backend_pid()};
in_session($s, q{SELECT pg_advisory_lock(77), pg_advisory_lock(77)});
declare_fill('fl_d', 300, 50, 0, 'PERFORM pg_advisory_unlock_all();');
($out, $err) = in_session($s, qq{CALL backfill_finalize('fl_d', '5 minutes'); $lock77});
like($err,
	qr/ERROR:  BF032: backfill "fl_d" released an advisory lock of the session that finalizes it/,
	'(d) pg_advisory_unlock_all() in the action: BF032');
like($err, qr/DETAIL:  Its SQL released advisory lock 77, which the calling session held 2 times, .*\(0 left\)\. The session holds it again as often as before\./,
	'(d) the detail names the lock, its count, and that the session holds it again');
like($err, qr/HINT:  .*pg_advisory_xact_lock/, '(d) the hint says what to use instead');
is($out, '1', '(d) the caller holds lock 77 again');
cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM fl_d WHERE n > 0'), '<', 300,
	'(d) finalize stopped at the batch that released it');
is(leases_of($pid), '0', '(d) no lease held');

# an action that takes the caller's key again, and one of its own: the pass
# completes here, and the caller holds 77 twice, as before, and nothing else
declare_fill('fl_e', 300, 50, 0, 'PERFORM pg_advisory_lock(77); PERFORM pg_advisory_lock(4242);');
($out, $err) = in_session($s, qq{CALL backfill_finalize('fl_e', '5 minutes')});
unlike($err, qr/ERROR/, '(d) an action taking the caller\'s key again: no error') or diag($err);
is(ledger($node, run_of('fl_e'), 'status'), 'completed', '(d) and the pass completed here');
each_row_done_once($node, 'fl_e', 300, run_of('fl_e'));
($out, $err) = in_session($s, q{SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
	AND pid = pg_backend_pid() AND objid = 4242});
is($out, '0', '(d) the declarer\'s own lock is gone');
($out, $err) = in_session($s, q{SELECT pg_advisory_unlock(77)::text || ' ' || pg_advisory_unlock(77)::text
	|| ' ' || pg_advisory_unlock(77)::text});
is($out, 'true true false', '(d) the caller held 77 exactly twice: two unlocks free it');
is(ledger($node, run_of('fl_d'), 'status'), 'running', '(d) the pass of fl_d goes on');
$s->quit;

# two backfills whose predicates take a lock of their own, or release every
# lock: the lanes run them in (e); (f) probes them from a session of its own
for my $t (['fl_p1', 'PERFORM pg_advisory_lock(999);'], ['fl_p2', 'PERFORM pg_advisory_unlock_all();'])
{
	my ($name, $body) = @$t;
	$node->safe_psql('postgres', qq{
		SET ROLE fl_user;
		CREATE TABLE $name (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, v int);
		INSERT INTO $name (id) SELECT g FROM generate_series(1, 200) g;
		CREATE FUNCTION public.${name}_pred(x int) RETURNS boolean LANGUAGE plpgsql STABLE AS
			\$f\$ BEGIN $body RETURN x IS NULL; END \$f\$;
		SELECT backfill_declare(name => '$name', relation => '$name',
			predicate => 'public.${name}_pred(v)',
			action => 'UPDATE $name SET v = 1, n = n + 1 WHERE id BETWEEN \$1 AND \$2',
			batch_size => 50, rate => 1000, guard => false);
		SELECT backfill_run('$name');
	});
}

# ------------------------------------------------------------------
# (e) the lanes take up what the sessions left
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{SELECT backfill_cancel('fl_hog')});
$hog_lock->query_safe('COMMIT');
$hog_lock->quit;
is(wait_pass_end($node, $run_hog, 300), 'cancelled', '(e) the slow pass is cancelled');
for my $t (['fl_a', 2000], ['fl_c', 2000], ['fl_d', 300], ['fl_p1', 200], ['fl_p2', 200])
{
	my ($name, $rows) = @$t;
	my $run = run_of($name);
	is(wait_pass_end($node, $run, 300), 'completed', "(e) a lane completed $name");
	each_row_done_once($node, $name, $rows, $run);
}

# ------------------------------------------------------------------
# (f) a declarer's predicate probed from a session: in a probe worker, so
#     nothing of it reaches the session's advisory locks
# ------------------------------------------------------------------
my $locks = q{SELECT 'held|' || coalesce(string_agg(objid::text, ',' ORDER BY objid), '')
	FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()};
my ($rc);
($rc, $out, $err) = $node->psql('postgres', qq{
	SELECT pg_advisory_lock(77);
	SELECT 'probe|' || backfill_probe('fl_p1');
	$locks;
	SELECT 'probe|' || backfill_probe('fl_p2');
	$locks;
	SELECT 'pending|' || count(*) FROM backfill_pending();
	$locks;
}, on_error_stop => 1);
is($rc, 0, '(f) both probes and backfill_pending succeed') or diag($err);
like($out, qr/^probe\|0\nheld\|77\nprobe\|0\nheld\|77\npending\|\d+\nheld\|77$/m,
	'(f) the probes read 0 rows; the session holds its lock 77 throughout, never 999, '
	  . 'and no predicate released it (they ran in a probe worker)');

$node->stop;
done_testing();
