# 001_crash_resume.pl
#
# A pass that is interrupted -- its lane killed with SIGKILL (the postmaster
# then restarts every backend), or the whole server stopped in immediate
# mode -- resumes from its checkpoint and does every row exactly once.
#
# The action is deliberately NOT idempotent: it increments n without
# repeating the predicate, so a batch done twice would leave n = 2 and a
# batch lost would leave n = 0.  Only "each batch's writes and its
# checkpoint commit together" gives n = 1 everywhere.
#
# The passes are declared at a low rate (4 batches of 1000 rows a second:
# at least 50 s for the 200 batches), so the lane is certainly mid-pass
# when it is hit, however slow the machine; once it is hit, the backfill is
# declared again at a high rate (a running pass picks that up at once) and
# the rest of the pass goes fast.
#
# Both passes commit synchronously (async_commit => false), which is what
# promises that a checkpoint once seen survives the crash, so the lane
# resumes at or after it.  With asynchronous commits (the default) a seen
# checkpoint may be lost with its batch and the batch done again:
# 102_async_commit.pl holds those passes to exactly once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $ROWS = 200_000;
# batches a second while the pass is to be hit mid-way (200 batches: >= 50 s)
my $SLOW_RATE = 4;

# Declare backfill $name over $tab (again), at $rate: a running pass picks
# the new rate up at once (same checksum, same batch size).
sub redeclare
{
	my ($node, $name, $tab, $rate) = @_;
	$node->safe_psql('postgres', qq{
		SELECT backfill_declare(name => '$name', relation => '$tab', predicate => 'n = 0',
			action => 'UPDATE $tab SET n = n + 1 WHERE id BETWEEN \$1 AND \$2',
			batch_size => 1000, rate => $rate, async_commit => false, guard => false)});
	return;
}

# a killed lane must make the postmaster restart the backends
my $node = BackfillTest::node('crash_resume', cron => 1, crash_restart => 1);

# Poll until the pass has a live lane and has done more than $min_rows rows;
# returns (lane pid, cursor, rows) read in one snapshot.
sub wait_mid_pass
{
	my ($node, $run_id, $min_rows, $timeout) = @_;
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		my ($rc, $out) = $node->psql('postgres', qq{
			SELECT p.holder_pid, p.cursor, p.rows
			  FROM backfill.partition p
			  JOIN pg_stat_activity a
			    ON a.pid = p.holder_pid AND a.backend_start = p.holder_start
			 WHERE p.run_id = $run_id AND p.state = 'running'
			   AND a.backend_type = 'pg_backfill lane'
			   AND p.rows > $min_rows});
		if ($rc == 0 && $out =~ /^(\d+)\|(\d+)\|(\d+)$/)
		{
			return ($1, $2, $3);
		}
		usleep(100_000);
	}
	return;
}

# The exactly-once invariants of a pass over table $tab after an interruption.
sub check_exactly_once
{
	my ($node, $label, $tab, $name, $run_id, $cursor_before, $rows_before) = @_;

	is( $node->safe_psql('postgres',
			"SELECT count(*), count(*) FILTER (WHERE n = 1), "
			  . "count(*) FILTER (WHERE n = 0), count(*) FILTER (WHERE n > 1) FROM $tab"),
		"$ROWS|$ROWS|0|0",
		"$label: every row of $tab incremented exactly once (none skipped, none twice)");

	is( $node->safe_psql('postgres',
			"SELECT rows, batches, error_code IS NULL FROM backfill.ledger WHERE run_id = $run_id"),
		"$ROWS|" . ($ROWS / 1000) . "|t",
		"$label: ledger counts each row and batch once");

	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM backfill.ledger WHERE ledger_name = '$name'"),
		'1', "$label: the interruption did not start a second pass");

	my ($reclaims, $claims, $pstate, $prows, $cursor_after) = split /\|/,
	  $node->safe_psql('postgres',
		"SELECT sum(reclaims), sum(claims), string_agg(state, ','), sum(rows), max(cursor::bigint)"
		  . " FROM backfill.partition WHERE run_id = $run_id");
	cmp_ok($reclaims, '>=', 1, "$label: the dead lane's partition was reclaimed");
	cmp_ok($claims, '>=', 2, "$label: the partition was claimed again after the interruption");
	is($pstate, 'done', "$label: partition ended done");
	is($prows, $ROWS, "$label: partition checkpoint counts every row once");
	is($cursor_after, $ROWS, "$label: partition cursor reached the last key");

	my ($interruptions, $lane_starts, $phase) = split /\|/,
	  $node->safe_psql('postgres',
		"SELECT interruptions, lane_starts, phase FROM backfill.run WHERE run_id = $run_id");
	cmp_ok($interruptions, '>=', 1, "$label: run records the interruption");
	cmp_ok($lane_starts, '>=', 2, "$label: a new lane was started after the interruption");
	is($phase, 'done', "$label: run phase is done");

	# the new lane resumed from the checkpoint, not from the start
	cmp_ok($cursor_before, '>', 0, "$label: a checkpoint existed before the interruption");
	cmp_ok($rows_before, '>', 0, "$label: rows were done before the interruption");
	my $log = slurp_file($node->logfile);
	my @resumed = $log =~
	  /backfill "$name" run $run_id: resuming partition 0 from its checkpoint after lane \d+ died\n[^\n]*DETAIL:\s+Last key done: (\d+)\./g;
	ok(@resumed >= 1, "$label: server log reports the resume from the checkpoint")
	  or diag("no 'resuming partition' line for run $run_id in the log");
	if (@resumed)
	{
		cmp_ok($resumed[0], '>=', $cursor_before,
			"$label: resumed at or after the checkpoint seen before the interruption");
		cmp_ok($resumed[0], '<', $ROWS,
			"$label: resumed before the end of the key space");
	}
	else
	{
		fail("$label: resumed at or after the checkpoint seen before the interruption");
		fail("$label: resumed before the end of the key space");
	}
	return;
}

$node->safe_psql('postgres', 'CREATE EXTENSION pg_backfill');

for my $tab (qw(t t2))
{
	$node->safe_psql('postgres', qq{
		CREATE TABLE $tab (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO $tab (id) SELECT g FROM generate_series(1, $ROWS) g;
		ANALYZE $tab;
	});
}

# ------------------------------------------------------------------
# Part A: kill -9 of the lane
# ------------------------------------------------------------------
redeclare($node, 'crash_a', 't', $SLOW_RATE);
my $run_a = $node->safe_psql('postgres', q{SELECT backfill_run('crash_a')});
like($run_a, qr/^\d+$/, 'A: backfill_run returns a run id');

# 20 batches done: at least 45 s of the pass are left at this rate
my ($pid_a, $cursor_a, $rows_a) = wait_mid_pass($node, $run_a, 20_000, 180);
ok(defined $pid_a, 'A: pass reached mid-way with a live lane')
  or BAIL_OUT('pass never got going; server log: ' . slurp_file($node->logfile));
note("A: killing lane $pid_a at cursor $cursor_a, rows $rows_a");
cmp_ok($rows_a, '<', $ROWS, 'A: the lane is killed before the pass ends');

is(kill('KILL', $pid_a), 1, 'A: SIGKILL delivered to the lane');

# the postmaster restarts every backend after a crashed worker: wait for it
ok(wait_for_server($node, 180), 'A: server accepts connections again');
# the rest of the pass at full speed
redeclare($node, 'crash_a', 't', 1000);

my $status_a = wait_pass_end($node, $run_a, 300);
is($status_a, 'completed', 'A: pass completed after the lane was killed');
check_exactly_once($node, 'A', 't', 'crash_a', $run_a, $cursor_a, $rows_a);

my $log = slurp_file($node->logfile);
like($log, qr/\(PID $pid_a\) was terminated by signal 9/,
	'A: the postmaster saw the lane die by SIGKILL');

# ------------------------------------------------------------------
# Part B: immediate shutdown of the whole server mid-pass
# ------------------------------------------------------------------
redeclare($node, 'crash_b', 't2', $SLOW_RATE);
my $run_b = $node->safe_psql('postgres', q{SELECT backfill_run('crash_b')});
like($run_b, qr/^\d+$/, 'B: backfill_run returns a run id');

my ($pid_b, $cursor_b, $rows_b) = wait_mid_pass($node, $run_b, 20_000, 180);
ok(defined $pid_b, 'B: pass reached mid-way with a live lane')
  or BAIL_OUT('pass never got going');
note("B: immediate stop at cursor $cursor_b, rows $rows_b (lane $pid_b)");
cmp_ok($rows_b, '<', $ROWS, 'B: the server stops before the pass ends');

$node->stop('immediate');
$node->start;
redeclare($node, 'crash_b', 't2', 1000);

my $status_b = wait_pass_end($node, $run_b, 300);
is($status_b, 'completed', 'B: pass completed after an immediate shutdown');
check_exactly_once($node, 'B', 't2', 'crash_b', $run_b, $cursor_b, $rows_b);

# part A's table was not touched again
is($node->safe_psql('postgres', 'SELECT count(*) FILTER (WHERE n <> 1) FROM t'),
	'0', 'B: the first table still has n = 1 everywhere');

$node->stop;
done_testing();
