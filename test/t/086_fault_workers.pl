# 086_fault_workers.pl
#
# The fault matrix of issue 10, the supervising workers: the database's
# scheduler is hit by kill -9, pg_terminate_backend and pg_cancel_backend
# while a pass is held in each phase (queued, planning, a batch in flight,
# its checkpoint, finishing, counting), and the server by pg_ctl -m
# immediate while the pass is queued.  The launcher's cases are in
# 083_fault_launcher.pl, the relay's in 084_fault_relay.pl (three files so
# that they run at once).  A supervisor's fault
# must not change the pass: it completes, each row done exactly once
# (n = n + 1), backfill_status agreeing with the ledger; the relay
# delivers each message exactly once (a function sink); nothing keeps
# restarting.  Phases are held by locks (test/t/lib/FaultMatrix.pm).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use FaultMatrix;

my $node = BackfillTest::node('fault_workers', crash_restart => 1);
my $fm = FaultMatrix->new($node);

my @phases = qw(queued planning batch checkpoint finishing counting);
my %todo = ();
# A case that waits for a fix names it here ('<target>/<phase>/<fault>').
# (A launcher started again after it was terminated used to start a second
# scheduler beside the one still running: issue 10, finding 9.)

foreach my $target (qw(scheduler))
{
	foreach my $phase (@phases)
	{
		foreach my $fault (qw(terminate cancel kill9))
		{
			$fm->run_case(
				name => "${target}_${phase}_$fault",
				target => $target,
				phase => $phase,
				fault => $fault,
				expect => ['completed'],
				todo => $todo{"$target/$phase/$fault"});
		}
	}
}

# the server stopped at once while the pass waits, queued (the other phases: 085)
$fm->run_case(
	name => 'server_queued_immediate',
	target => 'scheduler',
	phase => 'queued',
	fault => 'immediate',
	expect => ['completed']);

$fm->print_matrix;
$node->stop;
done_testing();
