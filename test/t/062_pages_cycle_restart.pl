# 062_pages_cycle_restart.pl
#
# A pages source's cycle across a lane that starts again (issue 23, point
# 2; doc/reference.md: the pages option, its bounds and limits).  The cursors a lane
# remembers are its own: a lane that resumes a partition from its
# checkpoint knows the cursors from its start on.  The walk
#     start -> A -> B -> C -> A
# has its lane wait, in page 4 (cursor C), for an advisory lock the test
# holds, and the test terminates that lane: pages start, A and B were done.
# The next lane resumes the partition at C with a walk that knows no cursor
# of before: it does C (next A, which it never asked for), then A again
# (next B, also new to it), and B's next, C, is one it asked for: the pass
# fails with BF001 naming page 6 and page 4.  So the pass still ends, and
# what was done again is at most one turn of the cycle (page A), as the
# README says.  (A pause and resume is the same: a claim starts a new walk.)
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('pages_cycle_restart');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE walk (cursor text PRIMARY KEY, page text, next text);
	INSERT INTO walk VALUES ('^', 'start', 'A'), ('A', 'A', 'B'), ('B', 'B', 'C'), ('C', 'C', 'A');
	CREATE TABLE done (page text);
	-- asked for C, a page waits while the test holds advisory lock 4242
	CREATE FUNCTION pages(cursor text, input jsonb) RETURNS jsonb LANGUAGE plpgsql VOLATILE AS $$
	DECLARE
		w walk;
	BEGIN
		IF cursor = 'C' THEN
			PERFORM pg_advisory_xact_lock_shared(4242);
		END IF;
		SELECT * INTO w FROM walk WHERE walk.cursor = coalesce($1, '^');
		RETURN jsonb_build_object('rows', jsonb_build_array(jsonb_build_object('page', w.page)),
		                          'next', w.next);
	END $$;
	SELECT backfill_declare(name => 'cyc', pages => 'pages',
		action => 'INSERT INTO done SELECT r->>''page'' FROM jsonb_array_elements($1) r',
		rate => 1000);
});
my $gate = $node->background_psql('postgres', on_error_stop => 0);
$gate->query_safe('SELECT pg_advisory_lock(4242)');
my $run = sq($node, q{SELECT backfill_run('cyc')});
my $waiting = q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
	AND wait_event_type = 'Lock' AND wait_event = 'advisory'};
ok(poll_until($node, "SELECT count(*) FROM ($waiting) w", '1', 60), 'the lane waits in page 4 (cursor C)');
is(sq($node, qq{SELECT cursor, rows FROM backfill.partition WHERE run_id = $run}), 'C|3',
	'its checkpoint: cursor C, three pages done (start, A, B)');
my $lane = sq($node, $waiting);
is(sq($node, "SELECT pg_terminate_backend($lane)"), 't', 'the lane is terminated');
ok(poll_until($node, "SELECT count(*) FROM pg_stat_activity WHERE pid = $lane", '0', 60), 'and gone');
$gate->query_safe('SELECT pg_advisory_unlock(4242)');
is(wait_pass_end($node, $run, 120), 'failed', 'the next lane ends the pass, failed');
like(slurp_file($node->logfile), qr/backfill "cyc" run $run: resuming partition 0 from its checkpoint/,
	'a second lane resumed the partition from its checkpoint');
is(ledger($node, $run, 'error_code, error_message'),
	'BF001|pages function of backfill "cyc" goes round in a cycle: page 6 leads back to cursor "C" of page 4',
	'BF001: page 6 leads back to cursor C, which the second lane asked for at page 4');
is(sq($node, q{SELECT string_agg(page || ' ' || n, ', ' ORDER BY page)
		FROM (SELECT page, count(*) AS n FROM done GROUP BY page) d}),
	'A 2, B 1, C 1, start 1',
	'pages done: A twice (asked for before the lane ended, unknown to the next one), the rest once');
is(ledger($node, $run, 'rows'), '5', 'the ledger counts the five pages committed');

$gate->quit;
$node->stop;
done_testing();
