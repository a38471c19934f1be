# 132_watch_backoff.pl
#
# Catch-up passes back off (issue 23, point 3).  The attacker's finding: a
# predicate true only in the session that probes it (then the scheduler's,
# now a probe worker's: current_setting('application_name') =
# 'pg_backfill probe') with watch => '1 ms' made 319 catch-up passes in
# 25 s, each healing no row.
# Now a catch-up pass that heals no row doubles the watch's interval in
# force (up to a day), shown by backfill_status.watch_interval; a pass that
# heals rows, or a re-declaration, sets it back to the declared one.
#  (a) the hostile predicate, watch => '10 ms': once eight catch-up passes
#      have completed, they are at most log2(window / 10 ms + 1) + 1 over
#      the window since the run (before: eight came within a second); every
#      catch-up pass started at least the interval in force after the
#      previous one ended; the interval shown doubles with each;
#  (b) the hostile part switched off (a table the predicate reads), 50 rows
#      that really need the backfill: the catch-up pass heals them and the
#      interval is the declared one again;
#  (c) switched on again until the interval has grown, then off: declaring
#      the backfill again sets the interval back to the declared one.
# Every wait polls a state (the interval reached, no pass running, a pass
# that healed rows); the assertions are on the ledger's own timestamps.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use POSIX qw(floor);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('watch_backoff');
my $declare = q{
	SELECT backfill_declare(name => 'hx', relation => 'h',
		predicate => 'c IS NULL OR (pg_catalog.current_setting(''application_name'')
		              = ''pg_backfill probe'' AND EXISTS (SELECT 1 FROM public.hostile_on))',
		action => 'UPDATE h SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 500, rate => 1000, watch => '10 ms', guard => false);
};
$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE h (id bigserial PRIMARY KEY, c int);
	INSERT INTO h (c) SELECT NULL FROM generate_series(1, 1000);
	CREATE TABLE hostile_on (x int);
	INSERT INTO hostile_on VALUES (1);
	ANALYZE h;
	$declare
});

# the empty catch-up passes in a row now, and the interval status shows
my $empty_in_a_row = q{
	SELECT count(*) FROM backfill.ledger l
	 WHERE l.ledger_name = 'hx' AND l.watch AND l.status = 'completed' AND l.rows = 0
	   AND l.started_at >= (SELECT updated_at FROM backfill.declaration WHERE name = 'hx')
	   AND l.run_id > coalesce((SELECT max(run_id) FROM backfill.ledger
	                             WHERE ledger_name = 'hx' AND watch AND rows > 0), 0)};
my $interval_ms = q{SELECT (extract(epoch FROM watch_interval) * 1000)::bigint FROM backfill_status('hx')};
my $no_pass_running = q{SELECT NOT EXISTS (SELECT 1 FROM backfill.ledger WHERE ledger_name = 'hx' AND status = 'running')};

# every catch-up pass started at least the interval in force after the one
# before it ended: 10 ms after the first pass, then doubled after each
# catch-up pass that healed nothing, back to 10 ms after one that healed rows
sub spacing_violations
{
	my $rows = sq($node, q{
		SELECT l.run_id, l.watch, l.rows,
		       extract(epoch FROM l.started_at) * 1000,
		       extract(epoch FROM l.finished_at) * 1000
		  FROM backfill.ledger l WHERE l.ledger_name = 'hx' AND l.status = 'completed'
		 ORDER BY l.run_id});
	my ($interval, $prev_end, @bad) = (10, undef);
	for my $line (split /\n/, $rows)
	{
		my ($run, $watch, $nrows, $start, $end) = split /\|/, $line;
		if ($watch eq 't' && defined $prev_end && $start - $prev_end < $interval)
		{
			push @bad, sprintf('run %d started %.1f ms after the previous pass ended (interval %d ms)',
				$run, $start - $prev_end, $interval);
		}
		$interval = ($watch eq 't' && $nrows == 0) ? ($interval * 2 > 86400000 ? 86400000 : $interval * 2) : 10;
		$prev_end = $end;
	}
	return @bad;
}

# ------------------------------------------------------------------
# (a) the hostile predicate: the interval doubles, the passes thin out
# ------------------------------------------------------------------
my $t0 = time();
my $first = sq($node, q{SELECT backfill_run('hx')});
is(wait_pass_end($node, $first, 60), 'completed', '(a) the first pass completed (1,000 rows)');
ok(poll_until($node, q{SELECT count(*) >= 8 FROM backfill.ledger
		WHERE ledger_name = 'hx' AND watch AND status = 'completed'}, 't', 120),
	'(a) eight catch-up passes completed');
my $t1 = time();
my $passes = sq($node, q{SELECT count(*) FROM backfill.ledger WHERE ledger_name = 'hx' AND watch});
my $healed = sq($node, q{SELECT coalesce(sum(rows), 0) FROM backfill.ledger WHERE ledger_name = 'hx' AND watch});
is($healed, '0', "(a) the $passes catch-up passes healed no row");
my $window_ms = ($t1 - $t0) * 1000;
my $bound = floor(log($window_ms / 10 + 1) / log(2)) + 1;
cmp_ok($passes, '<=', $bound,
	sprintf('(a) %d catch-up passes in %.1f s: at most log2(window / 10 ms + 1) + 1 = %d',
		$passes, $window_ms / 1000, $bound));
is_deeply([ spacing_violations() ], [],
	'(a) every catch-up pass started at least the interval in force after the previous pass ended');
is(sq($node, "SELECT ($interval_ms) = 10 * 2 ^ ($empty_in_a_row)"), 't',
	'(a) the interval shown is 10 ms doubled once per empty catch-up pass so far (one snapshot)');
ok(poll_until($node, "SELECT ($interval_ms) >= 2560", 't', 120),
	'(a) the interval in force grows to 2.56 s');

# switch the hostile part off, and let the pass that may be running end
sq($node, q{DELETE FROM hostile_on});
ok(poll_until($node, $no_pass_running, 't', 120), '(a) switched off: no catch-up pass left running');
my $k = sq($node, $empty_in_a_row);
cmp_ok($k, '>=', 8, "(a) $k empty catch-up passes in a row");
is(sq($node, $interval_ms), 10 * 2**$k, "(a) backfill_status shows 10 ms doubled $k times");
is(sq($node, q{SELECT backfill.watch_interval_ms('hx')}), 10 * 2**$k,
	'(a) the interval the scheduler probes at is the one shown');

# ------------------------------------------------------------------
# (b) a pass that heals rows sets the interval back
# ------------------------------------------------------------------
sq($node, q{INSERT INTO h (c) SELECT NULL FROM generate_series(1, 50)});
ok(poll_until($node, q{SELECT EXISTS (SELECT 1 FROM backfill.ledger WHERE ledger_name = 'hx'
		AND watch AND status = 'completed' AND rows = 50)}, 't', 120),
	'(b) 50 rows that need the backfill: a catch-up pass healed them');
ok(poll_until($node, $no_pass_running, 't', 60), '(b) no pass left running');
is(sq($node, q{SELECT watch_interval, healed_rows FROM backfill_status('hx')}), '00:00:00.01|50',
	'(b) the interval in force is the declared 10 ms again; 50 healed rows');
is(sq($node, q{SELECT count(*) FROM h WHERE c IS NULL}), '0', '(b) every row done');

# ------------------------------------------------------------------
# (c) a re-declaration sets it back too
# ------------------------------------------------------------------
sq($node, q{INSERT INTO hostile_on VALUES (1)});
ok(poll_until($node, "SELECT ($interval_ms) >= 160", 't', 120),
	'(c) hostile again: the interval in force grows to 160 ms');
sq($node, q{DELETE FROM hostile_on});
ok(poll_until($node, $no_pass_running, 't', 120), '(c) switched off: no catch-up pass running');
cmp_ok(sq($node, $interval_ms), '>=', 160, '(c) the interval stays grown while nothing happens');
$node->safe_psql('postgres', $declare);
is(sq($node, q{SELECT watch_interval FROM backfill_status('hx')}), '00:00:00.01',
	'(c) declared again: the interval in force is the declared 10 ms');
is_deeply([ spacing_violations() ], [],
	'(c) and no catch-up pass ever came sooner than the interval in force');

$node->stop;
done_testing();
