# 021_pass_rate.pl
#
# rate is the pass's (issue 24 A): all the lanes of a pass together start
# at most `rate` batches a second, however many there are.  A pass of three
# lanes at rate 3 over many tiny batches: once all three hold a partition,
# the batches the pass commits over a window measured on the server's clock
# stay within rate x window (plus the batches in flight at its start and
# the one a pacer lets start at once).  Only an upper bound: a slow machine
# does fewer batches, never more.  Paced per lane, as before, the three
# lanes did about three times as many.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $RATE = 3;
my $LANES = 3;
my $WINDOW = 8;    # seconds, on the server's clock

my $node = BackfillTest::node('pass_rate');
sq($node, 'CREATE EXTENSION pg_backfill');
sq($node, q{
	CREATE TABLE pr (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO pr (id) SELECT g FROM generate_series(1, 30000) g;
	ANALYZE pr;
});
sq($node, qq{
	SELECT backfill_declare(name => 'pr', relation => 'pr', predicate => 'n = 0',
		action => 'UPDATE pr SET n = n + 1 WHERE id BETWEEN \$1 AND \$2',
		batch_size => 10, rate => $RATE, max_parallel => $LANES, guard => false);
});
my $run = sq($node, q{SELECT backfill_run('pr')});
ok(poll_until($node, q{SELECT live_leases FROM backfill_status('pr')}, $LANES, 120),
	"$LANES lanes hold a partition each");
ok(poll_until($node, qq{SELECT count(*) FILTER (WHERE batches > 0) FROM backfill.partition
	WHERE run_id = $run AND state = 'running'}, $LANES, 120),
	"each of the $LANES lanes has committed a batch");

# the pass's batches, the server's clock and the live lanes, in one statement
my $SAMPLE = qq{
	SELECT sum(p.batches), extract(epoch FROM clock_timestamp()),
	       (SELECT live_leases FROM backfill_status('pr'))
	  FROM backfill.partition p WHERE p.run_id = $run};
my ($b1, $t1, $live1) = split /\|/, sq($node, $SAMPLE);
ok(poll_until($node, "SELECT clock_timestamp() >= to_timestamp($t1) + interval '$WINDOW s'",
		't', 120), "a window of $WINDOW s on the server's clock");
my ($b2, $t2, $live2) = split /\|/, sq($node, $SAMPLE);
my $secs = $t2 - $t1;
my $batches = $b2 - $b1;
is($live1, $LANES, "$LANES live lanes when the window opens");
is($live2, $LANES, "$LANES live lanes when it closes");
# batches started in an interval of L seconds: at most rate x L + 1; those
# committed in the window started in it or up to a batch's time before it
# (one second is generous for 10 rows): rate x (window + 1) + 1
my $bound = $RATE * ($secs + 1) + 1;
cmp_ok($batches, '<=', $bound,
	sprintf('the pass committed %d batches in %.1f s with %d lanes: at most rate %d '
		  . 'for the pass (bound %.1f)', $batches, $secs, $LANES, $RATE, $bound));
note(sprintf('pass-wide: %.2f batches/s (per-lane pacing would allow %d)',
		$batches / $secs, $RATE * $LANES));

# a new rate is the pass's too: lowered to 1, the same three lanes go slower
sq($node, q{
	SELECT backfill_declare(name => 'pr', relation => 'pr', predicate => 'n = 0',
		action => 'UPDATE pr SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 10, rate => 1, max_parallel => 3, guard => false);
});
($b1, $t1) = split /\|/, sq($node, $SAMPLE);
ok(poll_until($node, "SELECT clock_timestamp() >= to_timestamp($t1) + interval '$WINDOW s'",
		't', 120), "another window of $WINDOW s");
($b2, $t2, $live2) = split /\|/, sq($node, $SAMPLE);
$secs = $t2 - $t1;
$batches = $b2 - $b1;
# the old rate may still start the batches due before the lanes read the new one
$bound = 1 * ($secs + 1) + 1 + $LANES;
cmp_ok($batches, '<=', $bound,
	sprintf('re-declared at rate 1: %d batches in %.1f s (bound %.1f)', $batches, $secs, $bound));

sq($node, q{SELECT backfill_cancel('pr')});
is(wait_pass_end($node, $run, 60), 'cancelled', 'the pass is cancelled');
$node->stop;
done_testing();
