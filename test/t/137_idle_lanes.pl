# 137_idle_lanes.pl
#
# Issue 23, the fresh-context attacker's F4: a lane whose pass is paced
# slowly (rate 0.001: a batch every 1,000 s) sleeps between batches, and
# kept its lane while another role's pass waited for one: the fair share
# takes a lane back only from a role holding more than its share.  Now a
# lane whose next batch is more than 5 s away, while a pass waits for a
# lane, gives its partition back at the batch boundary and leaves; the
# scheduler gives a free lane to such an idle pass only after every other
# waiting pass.  By construction: backfill.max_workers = 1; pa's pass
# 'slow' has done its first batch (100 rows) and waits 1,000 s for its
# next; pb's pass 'quick' (1,000 rows, a batch a second) is run.
#  (a) slow's lane gives its partition back: the partition is pending, its
#      throttle (backfill_partitions) says the lane was given back and why,
#      backfill_status shows slow running with no live lease; pb's pass has
#      the lane meanwhile;
#  (b) pb's pass completes, every row once;
#  (c) then slow, alone, gets the free lane again, its throttle cleared; its
#      first batch's 100 rows are done once, no row more.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('idle_lanes', extra_conf => "backfill.max_workers = 1\n");
sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE pa LOGIN;
	CREATE ROLE pb LOGIN;
	GRANT CREATE ON SCHEMA public TO pa, pb;
});

sub declare_fill
{
	my ($role, $name, $rate) = @_;
	$node->safe_psql('postgres', qq{
		CREATE TABLE public.$name (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO public.$name (id) SELECT g FROM generate_series(1, 1000) g;
		SELECT backfill_declare(name => '$name', relation => '$name', predicate => 'n = 0',
			action => 'UPDATE $name SET n = n + 1 WHERE id BETWEEN \$1 AND \$2',
			batch_size => 100, rate => $rate, max_parallel => 1, guard => false);
	}, extra_params => [ '-U', $role ]);
	return;
}
declare_fill('pa', 'slow', 0.001);
declare_fill('pb', 'quick', 1);

my $slow = $node->safe_psql('postgres', q{SELECT backfill_run('slow')}, extra_params => [ '-U', 'pa' ]);
ok( poll_until($node, q{SELECT count(*) FROM public.slow WHERE n = 1}, '100', 60),
	'slow\'s first batch is done; its next is 1,000 s away');
ok( poll_until($node, q{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'pg_backfill lane' AND usename = 'pa'}, '1', 30),
	'and its lane holds the one lane, sleeping');

my $quick = $node->safe_psql('postgres', q{SELECT backfill_run('quick')}, extra_params => [ '-U', 'pb' ]);
ok( poll_until($node, q{SELECT string_agg(state || ': ' || coalesce(throttle, '-'), ', ')
		~ '^pending: lane given back: the next batch is \\d+ s away \\(its rate\\) while another pass waits for a lane$'
		FROM backfill_partitions('slow')}, 't', 60),
	'(a) slow\'s partition is pending, its throttle says the lane was given back and why');
ok( poll_until($node, q{SELECT status || ' ' || live_leases || ' ' || partitions_running
		FROM backfill_status('slow')}, 'running 0 0', 30),
	'(a) backfill_status: slow still running, no live lease, no partition running');
like(slurp_file($node->logfile), qr/backfill "slow" run $slow: lane leaves partition \d+ at its checkpoint/,
	'(a) the lane says it left its partition at its checkpoint');
ok( poll_until($node, q{SELECT string_agg(usename::text, ',') FROM pg_stat_activity
		WHERE backend_type = 'pg_backfill lane'}, 'pb', 30),
	'(a) pb\'s pass has the one lane');

is(wait_pass_end($node, $quick, 90), 'completed', '(b) pb\'s pass completes');
each_row_done_once($node, 'public.quick', 1000, $quick);

ok( poll_until($node, q{SELECT string_agg(state || ':' || coalesce(throttle, '-'), ', ')
		FROM backfill_partitions('slow')}, 'running:-', 30),
	'(c) slow gets the free lane again, its throttle cleared');
is(sq($node, q{SELECT count(*) FILTER (WHERE n = 1) || ' ' || count(*) FILTER (WHERE n > 1) FROM public.slow}),
	'100 0', '(c) slow\'s first batch: 100 rows, each once');
is(ledger($node, $slow, 'status'), 'running', '(c) slow\'s pass is still running');

$node->stop;
done_testing();
