# 089_fault_controls.pl
#
# The fault matrix of issue 10, controls racing each other: two sessions
# at the same isolation level (READ COMMITTED, REPEATABLE READ,
# SERIALIZABLE) each call a control of one backfill (run, cancel, pause,
# resume, retry); the second call waits for the first's lock on the
# declaration and goes on when it commits.  Both sessions took their
# snapshot before either call.  Whatever each call answers (a value, a
# NOTICE, or an error such as a serialization failure), the backfill must
# end in a true state: never two running passes, the newest pass ending
# as the controls say, backfill_status agreeing with the ledger and not
# left paused, and every row done exactly once (n = n + 1) by the passes
# that the ledger credits with it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use FaultMatrix;

my $node = BackfillTest::node('fault_controls');
my $fm = FaultMatrix->new($node);
sq($node, q{
	CREATE TABLE fm_flag (name text PRIMARY KEY, fail boolean NOT NULL);
	-- fails the batch, with an error no retry fixes, while the flag is set
	CREATE FUNCTION fm_ok(name text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
	BEGIN
		IF (SELECT f.fail FROM public.fm_flag f WHERE f.name = fm_ok.name) THEN
			RAISE EXCEPTION 'fm: failing on purpose' USING ERRCODE = '42501';
		END IF;
		RETURN true;
	END $$;
});

# initial state, first control, second control; the newest pass's end,
# and its end when the second call failed (a serialization failure);
# whether the pass is paused once both committed (undef: either); levels
# at which a finding keeps the case from its true end (none left: issue
# 10's finding 1 made a second running pass impossible, and a stale
# snapshot is refused)
my @pairs = (
	[ 'idle', 'run', 'run', 'completed', 'completed', undef, {} ],
	# two retries of one failed pass made two passes even in READ COMMITTED
	[ 'failed', 'retry', 'retry', 'completed', 'completed', undef, {} ],
	[ 'running', 'cancel', 'run', 'completed', 'cancelled', undef, {} ],
	[ 'running', 'run', 'cancel', 'cancelled', 'completed', undef, {} ],
	[ 'running', 'cancel', 'cancel', 'cancelled', 'cancelled', undef, {} ],
	[ 'running', 'pause', 'cancel', 'cancelled', 'completed', undef, {} ],
	[ 'running', 'cancel', 'retry', 'cancelled', 'cancelled', undef, {} ],
	[ 'running', 'pause', 'resume', 'completed', 'completed', 'f', {} ],
	[ 'running', 'retry', 'pause', 'completed', 'completed', 't', {} ],
);
my %level = (rc => 'READ COMMITTED', rr => 'REPEATABLE READ', ser => 'SERIALIZABLE');

# a session in a transaction at $lvl with its snapshot taken
sub begin_at
{
	my ($lvl) = @_;
	my $s = $fm->session;
	FaultMatrix::sess_do($s, "SET client_min_messages = warning; \\set VERBOSITY verbose\n"
		  . "BEGIN ISOLATION LEVEL $level{$lvl}; SELECT 1;");
	return $s;
}

sub control_sql
{
	my ($ctl, $name) = @_;
	return "SELECT backfill_$ctl('$name')";
}

# what a session's call answered: its output, or the SQLSTATE of its error
sub answer
{
	my ($out, $err) = @_;
	return "ERROR $1" if $err =~ /ERROR:  ([0-9A-Z]{5}):/;
	$out =~ s/\s+$//;
	return $out eq '' ? '(none)' : $out;
}

foreach my $lvl (qw(rc rr ser))
{
	foreach my $p (@pairs)
	{
		my ($init, $ca, $cb, $want_ok, $want_err, $paused_after, $todo) = @$p;
		my $name = "ctl_${lvl}_${init}_${ca}_$cb";
		my $label = "$level{$lvl}: $init, $ca + $cb";
		my $c = $fm->new_case($name, action_extra => " AND fm_ok(''$name'')");
		sq($node, "INSERT INTO fm_flag VALUES ('$name', " . ($init eq 'failed' ? 'true' : 'false') . ')');
		my $logpos = $fm->log_pos;
		my $gate;

		if ($init eq 'failed')
		{
			my $r = sq($node, "SELECT backfill_run('$name')");
			is(wait_pass_end($node, $r, 180), 'failed', "$label: the first pass failed");
			sq($node, "UPDATE fm_flag SET fail = false WHERE name = '$name'");
		}
		# the batches wait at the gate while the controls race
		$gate = $fm->session;
		FaultMatrix::sess_do($gate, "SELECT pg_advisory_lock($c->{key})");
		if ($init eq 'running')
		{
			my $r = sq($node, "SELECT backfill_run('$name')");
			ok(defined $fm->lane_blocked_by($gate, 'the gate'), "$label: a pass is running");
		}

		my $a = begin_at($lvl);
		my $b = begin_at($lvl);
		my ($out_a, $err_a) = FaultMatrix::quietly(sub { $a->{psql}->query(control_sql($ca, $name)) });
		my $ans_a = answer($out_a, $a->{psql}->{stderr});
		$a->{psql}->{stderr} = '';
		# the second call waits for the first's lock on the declaration
		$b->{psql}->{stdin} .= control_sql($cb, $name) . ";\n";
		$b->{psql}->{run}->pump_nb;
		ok(poll_until($node, "SELECT count(*) FROM pg_stat_activity WHERE pid = $b->{pid}"
			  . " AND (wait_event_type = 'Lock' OR state <> 'active')", '1', 120),
			"$label: the second call waits for the first, or is done");
		FaultMatrix::quietly(sub { $a->{psql}->query('COMMIT') });
		my $err_commit_a = $a->{psql}->{stderr};
		my ($out_b) = FaultMatrix::quietly(sub { $b->{psql}->query('COMMIT') });
		my $ans_b = answer($out_b, $b->{psql}->{stderr});
		$ans_a = answer('', $err_commit_a) if $err_commit_a ne '';
		note("$label: first answered $ans_a, second $ans_b");
		eval { FaultMatrix::quietly(sub { $_->{psql}->quit }) } foreach ($a, $b);

		# an error refuses a transaction whose snapshot is too old to act
		# on (a serialization failure, or BF020 once issue 10's finding 1
		# is fixed), never anything else
		foreach my $ans ($ans_a, $ans_b)
		{
			like($ans, $lvl eq 'rc' ? qr/^(?!ERROR)/ : qr/^(?!ERROR)|^ERROR (40001|BF020)$/,
				"$label: answered $ans");
		}
		my $want = $ans_b =~ /^ERROR/ ? $want_err : $want_ok;

		my $running = "SELECT count(*) FROM backfill.ledger WHERE declaration = '$name'"
		  . " AND status = 'running'";
		my $max = sq($node, $running);
		my $paused = sq($node, "SELECT paused FROM backfill_status('$name')");
		if (defined $paused_after && $ans_a !~ /^ERROR/ && $ans_b !~ /^ERROR/)
		{
			local $TODO = $todo->{$lvl};
			is($paused, $paused_after, "$label: paused is $paused_after, as the answers say");
		}
		eval { FaultMatrix::quietly(sub { $gate->{psql}->quit }) };

		# a pass left paused is the controls' answer: resume it to see it end
		my $newest = "SELECT max(run_id) FROM backfill.ledger WHERE declaration = '$name'";
		if ($paused eq 't')
		{
			note("$label: the pass is paused; resuming it");
			sq($node, "SELECT backfill_resume('$name')");
		}
		my $deadline = time() + 240;
		while (time() < $deadline)
		{
			my $now = sq($node, $running);
			$max = $now if $now > $max;
			last if $now == 0;
			usleep(100_000);
		}
		my $run = sq($node, $newest);
		my $passes = sq($node, "SELECT count(*) FROM backfill.ledger WHERE declaration = '$name'");
		my ($status, $code, $credited) = split /\|/, sq($node,
			"SELECT (SELECT status FROM backfill.ledger WHERE run_id = $run),"
			  . " (SELECT coalesce(error_code, '') FROM backfill.ledger WHERE run_id = $run),"
			  . " (SELECT coalesce(sum(rows), 0) FROM backfill.ledger WHERE declaration = '$name')");
		my ($done, $over, $total) = split /\|/, sq($node,
			"SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n > 1), count(*)"
			  . " FROM $c->{table}");
		push @{ $fm->matrix },
		  [ "$label ($ans_a / $ans_b)", $status, $code || '-', "$done/$total",
			($over == 0 && $done == $credited) ? 'yes' : 'no', $todo->{$lvl} // '' ];
		TODO:
		{
			local $TODO = $todo->{$lvl};
			cmp_ok($max, '<=', 1, "$label: never two running passes ($max)");
			is($status, $want, "$label: the newest pass ended $want");
			is($credited, $done, "$label: the ledger credits exactly the rows done ($done)");
			is($over, 0, "$label: no row was done twice");
			is($done, $total, "$label: a completed pass leaves every row done")
			  if $status eq 'completed';
		}
		is(sq($node, "SELECT status, paused FROM backfill_status('$name')"), "$status|f",
			"$label: backfill_status says $status and not paused");
		$fm->no_loop($c, $run, $label, $logpos);
		sq($node, "DELETE FROM fm_flag WHERE name = '$name'");
	}
}

$fm->print_matrix;
$node->stop;
done_testing();
