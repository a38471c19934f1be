# 084_fault_relay.pl
#
# The fault matrix of issue 10, the outbox relay: it is hit by kill -9,
# pg_terminate_backend, pg_cancel_backend and pg_ctl -m immediate while it
# is selecting, delivering and marking a message.  The relay delivers each
# message exactly once (a function sink) and does not keep exiting.  Phases
# are held by locks (test/t/lib/FaultMatrix.pm).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use FaultMatrix;

my $node = BackfillTest::node('fault_relay', crash_restart => 1);
my $fm = FaultMatrix->new($node);

foreach my $phase (qw(selecting delivering marking))
{
	foreach my $fault (qw(terminate cancel kill9 immediate))
	{
		$fm->relay_case(name => "relay_${phase}_$fault", phase => $phase, fault => $fault);
	}
}

$fm->print_matrix;
$node->stop;
done_testing();
