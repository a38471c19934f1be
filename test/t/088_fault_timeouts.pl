# 088_fault_timeouts.pl
#
# The fault matrix of issue 10, timeouts: lock_timeout, statement_timeout
# and idle_in_transaction_session_timeout set very low for the declaring
# role (ALTER ROLE ... SET) and for the whole server (ALTER SYSTEM), while
# a pass is held in planning (its table locked), a batch (the action
# waits) or finishing (its ledger row locked).  A batch runs under the
# declaration's own lock and batch timeouts; a timeout outside a batch is
# a passing error.  Every case must end completed, each row done exactly
# once (n = n + 1), backfill_status agreeing with the ledger, no process
# looping.  The test's own sessions keep the defaults (PGOPTIONS).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use FaultMatrix;

$ENV{PGOPTIONS} = '-c lock_timeout=0 -c statement_timeout=0 -c idle_in_transaction_session_timeout=0';
my $node = BackfillTest::node('fault_timeouts', crash_restart => 1);
my $fm = FaultMatrix->new($node);

my %value = (
	lock_timeout => '1ms',
	statement_timeout => '1ms',
	idle_in_transaction_session_timeout => '1ms');
# a lock wait outside a batch that times out is retried like a batch
# (issue 10, finding 2).  A case that waits for a fix names it here:
# '<scope>/<setting>/<phase>' => 'issue 10 finding N (who): ...'
my %todo = ();

my $n = 0;
foreach my $scope (qw(role global))
{
	foreach my $setting (sort keys %value)
	{
		foreach my $phase (qw(planning batch finishing))
		{
			my $name = sprintf('to_%s_%s_%s', $scope, $setting =~ s/_timeout$//r =~ s/_session//r,
				$phase);
			my $role = 'fm_to_' . (++$n);
			sq($node, "CREATE ROLE $role LOGIN");
			if ($scope eq 'role')
			{
				sq($node, "ALTER ROLE $role SET $setting = '$value{$setting}'");
			}
			else
			{
				sq($node, "ALTER SYSTEM SET $setting = '$value{$setting}'; SELECT pg_reload_conf()");
			}
			$fm->{timeout_since} = $fm->log_pos;
			$fm->run_case(
				name => $name,
				target => 'lane',
				phase => $phase,
				fault => 'none',
				label => "$scope $setting=$value{$setting} / $phase",
				case => { role => $role },
				expect => ['completed'],
				todo => $todo{"$scope/$setting/$phase"});
			delete $fm->{timeout_since};
			sq($node, "ALTER SYSTEM RESET $setting; SELECT pg_reload_conf()") if $scope eq 'global';
		}
	}
}

$fm->print_matrix;
$node->stop;
done_testing();
