# 083_fault_launcher.pl
#
# The fault matrix of issue 10, the cluster's launcher: it is hit by kill -9,
# pg_terminate_backend and pg_cancel_backend while a pass is held in each
# phase (queued, planning, a batch in flight, its checkpoint, finishing,
# counting).  A supervisor's fault must not change the pass: it completes,
# each row done exactly once (n = n + 1), backfill_status agreeing with the
# ledger; nothing keeps restarting, and no second scheduler starts beside
# the one still running.  Phases are held by locks (test/t/lib/FaultMatrix.pm).
# The scheduler's cases are in 086_fault_workers.pl, the relay's in
# 084_fault_relay.pl.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use FaultMatrix;

my $node = BackfillTest::node('fault_launcher', crash_restart => 1);
my $fm = FaultMatrix->new($node);

# (A launcher started again after it was terminated used to start a second
# scheduler beside the one still running: issue 10, finding 9.)
foreach my $phase (qw(queued planning batch checkpoint finishing counting))
{
	foreach my $fault (qw(terminate cancel kill9))
	{
		$fm->run_case(
			name => "launcher_${phase}_$fault",
			target => 'launcher',
			phase => $phase,
			fault => $fault,
			expect => ['completed']);
	}
}

$fm->print_matrix;
$node->stop;
done_testing();
