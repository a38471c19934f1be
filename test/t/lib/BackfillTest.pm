# BackfillTest.pm -- helpers shared by the pg_backfill TAP tests (test/t/*.pl).
#
# Load it from a test with
#     use FindBin;
#     use lib "$FindBin::RealBin/lib";
#     use BackfillTest;
#
# It offers:
#   BackfillTest::node($name, %opts)  a started PostgreSQL::Test::Cluster node
#       with pg_backfill preloaded (backfill.database_names = 'postgres',
#       backfill.naptime = 1, max_worker_processes = 32).  Options:
#         cron => 1           also preload pg_cron (cron.database_name =
#                             'postgres', background workers) when this
#                             server has it (have_pg_cron())
#         crash_restart => 1  restart_after_crash = on (Cluster.pm turns it
#                             off; a killed worker must make the postmaster
#                             restart the backends, as it does in production)
#         extra_conf => '...' more postgresql.conf lines
#         init => { ... }     options for $node->init (allows_streaming => 1)
#         install_path => dir another PostgreSQL installation (dir/bin/...)
#                             than the one on PATH (pg_upgrade's new server)
#         start => 0          configured but not started
#   BackfillTest::have_pg_cron()  true when pg_cron is installed for the
#       server on PATH (a hand-built PostgreSQL may lack it).
#   Exported by default:
#   poll_until($node, $sql, $expected, $timeout)  run $sql until its output
#       equals $expected; true on success, false (with a diag) after $timeout
#       seconds.  A failing psql (the server restarting after a crash) just
#       means "not yet".  Polls every $BackfillTest::poll_interval seconds.
#   holds_for($node, $sql, $expected, $seconds)  the opposite: $sql must keep
#       returning $expected for $seconds; returns the first output that
#       differs, or undef when it held the whole time.
#   wait_for_server($node, $timeout)  true once the server accepts
#       connections again (after a crash restart).
#   sq($node, $sql)  $node->safe_psql('postgres', $sql).
#   pass_ended($node, $run_id, $timeout)  true once the ledger row of
#       $run_id is no longer 'running'.
#   wait_pass_end($node, $run_id, $timeout)  waits as pass_ended does, then
#       returns the ledger status of $run_id.
#   ledger($node, $run_id, $cols)  "SELECT $cols FROM backfill.ledger" for
#       $run_id.
#   Gates: a prepared transaction holding row locks, so that a batch that
#   reaches those rows waits there until the test opens it; it outlives a
#   crash of the server, an immediate shutdown and a kill of its waiter
#   (the node needs max_prepared_transactions > 0).
#   gate_close($node, $gid, $table, $where)  the gate $gid on $node: the
#       rows of $table WHERE $where locked FOR UPDATE, then PREPARE
#       TRANSACTION '$gid'.
#   gate_open($node, @gids)  ROLLBACK PREPARED each of them.
#   gates_waited_at($node, $expected, $timeout)  poll_until the gates the
#       waiting sessions wait at, one name a waiter, sorted and joined by
#       commas ('c60,c70': one waits at c60, one at c70), are $expected.
#   gate_holds($node, $timeout)  poll_until some session of $node waits
#       on a prepared transaction (blocked by pid 0).
package BackfillTest;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

our @EXPORT = qw(poll_until holds_for wait_for_server sq pass_ended wait_pass_end ledger
  each_row_done_once gate_close gate_open gates_waited_at gate_holds);
our @EXPORT_OK = qw(node);

# seconds between two polls of poll_until; a test may set it
our $poll_interval = 0.2;

sub have_pg_cron
{
	my $libdir = `pg_config --pkglibdir`;
	chomp $libdir;
	return -f "$libdir/pg_cron.so";
}

sub node
{
	my ($name, %opts) = @_;
	$opts{cron} = 0 if $opts{cron} && !have_pg_cron();
	my $node = PostgreSQL::Test::Cluster->new($name,
		defined $opts{install_path} ? (install_path => $opts{install_path}) : ());
	$node->init(%{ $opts{init} // {} });
	my $conf =
	    "shared_preload_libraries = '"
	  . ($opts{cron} ? 'pg_cron,pg_backfill' : 'pg_backfill') . "'\n"
	  . "backfill.database_names = 'postgres'\n"
	  . "backfill.naptime = 1\n"
	  . "max_worker_processes = 32\n";
	$conf .= "cron.database_name = 'postgres'\n"
	  . "cron.use_background_workers = on\n"
	  if $opts{cron};
	$conf .= "restart_after_crash = on\n" if $opts{crash_restart};
	if (defined $opts{extra_conf})
	{
		$conf .= $opts{extra_conf};
		$conf .= "\n" unless $conf =~ /\n\z/;
	}
	$node->append_conf('postgresql.conf', $conf);
	$node->start unless defined $opts{start} && !$opts{start};
	return $node;
}

sub poll_until
{
	my ($node, $sql, $expected, $timeout) = @_;
	my $deadline = time() + $timeout;
	my $last = '';
	while (time() < $deadline)
	{
		# a server restarting after a crash can close psql's stdin before
		# IPC::Run has written the query: a broken pipe is "not yet" too
		my ($rc, $out, $err) = eval { $node->psql('postgres', $sql) };
		($rc, $err) = (-1, $@) unless defined $rc;
		if ($rc == 0)
		{
			$last = $out;
			return 1 if $out eq $expected;
		}
		else
		{
			$last = "(psql exit $rc) $err";
		}
		usleep(int($poll_interval * 1_000_000));
	}
	diag("poll_until timed out after ${timeout}s: $sql\n  expected: $expected\n  last: $last");
	return 0;
}

sub holds_for
{
	my ($node, $sql, $expected, $seconds) = @_;
	my $end = time() + $seconds;
	while (time() < $end)
	{
		my $out = $node->safe_psql('postgres', $sql);
		return $out if $out ne $expected;
		usleep(250_000);
	}
	return undef;
}

sub wait_for_server
{
	my ($node, $timeout) = @_;
	return poll_until($node, 'SELECT 1', '1', $timeout);
}

sub sq
{
	my ($node, $sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

sub pass_ended
{
	my ($node, $run_id, $timeout) = @_;
	return poll_until($node,
		"SELECT status <> 'running' FROM backfill.ledger WHERE run_id = $run_id",
		't', $timeout);
}

sub wait_pass_end
{
	my ($node, $run_id, $timeout) = @_;
	pass_ended($node, $run_id, $timeout);
	return ledger($node, $run_id, 'status');
}

# The checks of a pass whose non-idempotent action is n = n + 1 on $table
# ($rows rows): every row has n = 1, and the ledger counts each once.
sub each_row_done_once
{
	my ($node, $table, $rows, $run_id) = @_;
	Test::More::is($node->safe_psql('postgres', "SELECT count(*) FROM $table WHERE n <> 1"),
		'0', 'every row was updated exactly once by the non-idempotent action (n = 1)');
	Test::More::is($node->safe_psql('postgres', "SELECT count(*), sum(n) FROM $table"),
		"$rows|$rows", "$rows rows, n sums to $rows");
	Test::More::is(ledger($node, $run_id, 'rows'), $rows,
		"the ledger counts exactly $rows rows");
	return;
}

sub gate_close
{
	my ($node, $gid, $table, $where) = @_;
	$node->safe_psql('postgres', qq{BEGIN;
		SELECT 1 FROM $table WHERE $where FOR UPDATE;
		PREPARE TRANSACTION '$gid';});
	return;
}

sub gate_open
{
	my ($node, @gids) = @_;
	$node->safe_psql('postgres', join('', map { "ROLLBACK PREPARED '$_';" } @gids));
	return;
}

sub gates_waited_at
{
	my ($node, $expected, $timeout) = @_;
	return poll_until($node,
		q{SELECT coalesce(string_agg(p.gid, ',' ORDER BY p.gid), '')
		    FROM pg_locks l JOIN pg_prepared_xacts p ON l.locktype = 'transactionid'
		     AND l.transactionid = p.transaction WHERE NOT l.granted},
		$expected, $timeout);
}

sub gate_holds
{
	my ($node, $timeout) = @_;
	return poll_until($node,
		q{SELECT count(*) > 0 FROM pg_stat_activity WHERE 0 = ANY (pg_blocking_pids(pid))},
		't', $timeout);
}

sub ledger
{
	my ($node, $run_id, $cols) = @_;
	return $node->safe_psql('postgres',
		"SELECT $cols FROM backfill.ledger WHERE run_id = $run_id");
}

1;
