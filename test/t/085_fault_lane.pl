# 085_fault_lane.pl
#
# The fault matrix of issue 10, lanes: a lane held in each phase of its
# pass (planning, a batch in flight, its checkpoint, finishing, counting)
# is hit by kill -9, pg_terminate_backend, pg_cancel_backend, or the whole
# server by pg_ctl -m immediate.  Every case must end in a true state: the
# pass completes, each row done exactly once by the non-idempotent action
# (n = n + 1), backfill_status agreeing with the ledger, and no process
# looping on an error.  The phases are held by locks (test/t/lib/
# FaultMatrix.pm), never by timing.  One node serves every case.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use FaultMatrix;

my $node = BackfillTest::node('fault_lane', crash_restart => 1);
my $fm = FaultMatrix->new($node);

# a cancel outside a batch (preparing, planning, counting, finishing) is a
# passing error: it is retried, and does not fail the pass (issue 10,
# finding 2).  A case that waits for a fix names it here:
# '<phase>/<fault>' => 'issue 10 finding N (who): ...'

my @phases = qw(planning batch checkpoint finishing counting);
my @faults = qw(terminate cancel kill9 immediate);
my %todo = ();

foreach my $phase (@phases)
{
	foreach my $fault (@faults)
	{
		$fm->run_case(
			name => "lane_${phase}_$fault",
			target => 'lane',
			phase => $phase,
			fault => $fault,
			expect => ['completed'],
			todo => $todo{"$phase/$fault"});
	}
}

$fm->print_matrix;
$node->stop;
done_testing();
