# 128_preempt.pl
#
# Issue 23, finding 7: long batches of one role must not starve another
# role's pass.  backfill.max_workers = 2; role pa's two passes hold both
# lanes with batches that cannot end (each waits on a row lock the test
# holds, lock_timeout and batch_timeout an hour); role pb's pass is queued.
# Giving the lane up after the batch would take as long as the test holds
# the lock.  Instead, once the over-share batch that has run longest has
# run longer than backfill.preempt_after (3 s here), the scheduler cancels
# it:
#  - pb's pass gets the lane and completes while the lock is still held;
#  - the cancelled batch rolled back: none of its rows written (the rows it
#    had updated before the locked one have n = 0), its partition given
#    back at its checkpoint (cursor and rows as before), no failure counted
#    and no error recorded;
#  - the log says it ran longer than the bound;
#  - once the lock is let go, both of pa's passes complete, every row done
#    once (n = n + 1), no partition with a failure.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('preempt',
	extra_conf => "backfill.max_workers = 2\nbackfill.preempt_after = '3s'\n");

sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE pa LOGIN;
	CREATE ROLE pb LOGIN;
});

# a table of 1000 rows owned by $role, and a backfill of it by $role
sub declare_fill
{
	my ($role, $name) = @_;
	sq($node, qq{
		CREATE TABLE $name (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO $name (id) SELECT g FROM generate_series(1, 1000) g;
		ALTER TABLE $name OWNER TO $role;
	});
	$node->safe_psql('postgres', qq{
		SET ROLE $role;
		SELECT backfill_declare(name => '$name', relation => '$name', predicate => 'n = 0',
			action => 'UPDATE $name SET n = n + 1 WHERE id BETWEEN \$1 AND \$2',
			batch_size => 100, rate => 1000, max_parallel => 1,
			lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
	});
	return;
}

declare_fill('pa', 'pa1');
declare_fill('pa', 'pa2');
declare_fill('pb', 'pb1');

# row 50 of each of pa's tables is held: each first batch updates rows
# 1-49, then waits
my $holder = $node->background_psql('postgres');
$holder->set_query_timer_restart();
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
$holder->query_safe(q{BEGIN; SELECT 1 FROM pa1 WHERE id = 50 FOR UPDATE;
	SELECT 1 FROM pa2 WHERE id = 50 FOR UPDATE;});

my %run;
$run{$_} = sq($node, "SET ROLE pa; SELECT backfill_run('$_')") for qw(pa1 pa2);
ok( poll_until($node,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND usename = 'pa' AND $holder_pid = ANY (pg_blocking_pids(pid))", '2', 180),
	'pa\'s two passes hold both lanes, each batch waiting on a held row');

my $parts = q{SELECT string_agg(l.declaration || ':' || coalesce(p.cursor, '-') || ':' || p.rows
	|| ':' || p.failures || ':' || coalesce(p.last_error, '-'), ',' ORDER BY l.declaration, p.part_no)
	FROM backfill.partition p JOIN backfill.ledger l USING (run_id)
	WHERE l.declaration IN ('pa1', 'pa2')};
my $before = sq($node, $parts);

$run{pb1} = sq($node, "SET ROLE pb; SELECT backfill_run('pb1')");
is(wait_pass_end($node, $run{pb1}, 300), 'completed',
	'pb\'s pass got a lane and completed while pa\'s batches still wait on the lock');
is(sq($node, 'SELECT count(*) FROM pb1 WHERE n <> 1'), '0', 'pb1: every row once');
is(sq($node, q{SELECT count(*) FROM backfill.ledger WHERE declaration IN ('pa1', 'pa2')
	AND status = 'running'}), '2', 'pa\'s two passes are still running');

# what the cancelled batch left
my $log = slurp_file($node->logfile);
my @cancelled = $log =~ /the batch on partition \d+ was cancelled after (\d+) ms for another role's pass and rolled back/g;
is(scalar(@cancelled), 1, 'one batch of pa\'s was cancelled');
cmp_ok($cancelled[0] // 0, '>=', 3000, 'after it had run longer than backfill.preempt_after');
like($log, qr/the batch of a lane of run \d+ is cancelled for a waiting pass of another role/,
	'the scheduler says why');
is(sq($node, q{SELECT (SELECT count(*) FROM pa1 WHERE n <> 0) + (SELECT count(*) FROM pa2 WHERE n <> 0)}),
	'0', 'no row of the cancelled batch was written (rows 1-49 rolled back)');
is(sq($node, $parts), $before, 'the checkpoints are as they were, no failure counted');

$holder->query_safe('COMMIT');
$holder->quit;
for my $name (qw(pa1 pa2))
{
	is(wait_pass_end($node, $run{$name}, 300), 'completed', "$name completed once the lock was let go");
	each_row_done_once($node, $name, 1000, $run{$name});
}
is(sq($node, q{SELECT coalesce(sum(failures), 0) FROM backfill.partition p JOIN backfill.ledger l
	USING (run_id) WHERE l.declaration IN ('pa1', 'pa2')}),
	'0', 'the cancel was never counted as a failed attempt');

$node->stop;
done_testing();
