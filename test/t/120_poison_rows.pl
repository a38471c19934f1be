# 120_poison_rows.pl
#
# Poison rows never block the rest (issue 14, part 1).  A table of 200,000
# rows with three rows the action cannot do: one whose cast fails (22P02),
# one that violates a CHECK the action's value breaks (23514), one that a
# trigger refuses (P0001).  The non-idempotent action is n = n + 1.
#  (a) max_failed_rows => 3, run with the CLI: the failing batches are halved down to those
#      three rows, recorded and skipped; every other row is done exactly
#      once; the pass ends completed_with_failures (never completed, never
#      stalled), in the ledger, backfill_status and backfill_pending; the
#      batch size recovers after each isolation (the batches stay near
#      rows / batch_size, and the last batch of each partition is full size);
#      pg_backfill run --wait lists the three rows and exits 1;
#  (b) the rows are fixed; backfill_retry runs a new pass over exactly
#      those three rows, which completes: every row done once in all;
#  (c) max_failed_rows => 0: the first isolated row fails the pass with
#      BF018, naming the count and the key, and the row is recorded;
#  (d) a failure that is not the row's fault (a lock timeout on a row held
#      by another session) is not bisected: it is retried with backoff and
#      no row is recorded; once the lock is released the pass completes.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $cli = $ENV{PG_BACKFILL_CLI};
if (!defined $cli || $cli eq '')
{
	my $rel = "$FindBin::RealBin/../../cli/pg_backfill";
	$cli = -x $rel ? $rel : '/usr/lib/postgresql/15/bin/pg_backfill';
}
die "pg_backfill CLI not found at $cli (build it with make -C cli, or set PG_BACKFILL_CLI)"
  unless -x $cli;

my $node = BackfillTest::node('poison_rows');
my $rows = 200_000;
my ($cast_key, $check_key, $trigger_key) = (31_337, 123_457, 199_001);

$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE pr (id int PRIMARY KEY, src text NOT NULL, n int NOT NULL DEFAULT 0,
	                 v int CHECK (v IS NULL OR v >= 0));
	INSERT INTO pr (id, src) SELECT g, g::text FROM generate_series(1, $rows) g;
	UPDATE pr SET src = 'x' || id WHERE id = $cast_key;       -- src::int fails
	UPDATE pr SET src = '-' || id WHERE id = $check_key;      -- v >= 0 fails
	CREATE FUNCTION pr_refuse() RETURNS trigger LANGUAGE plpgsql AS \$\$
	BEGIN
		IF NEW.id = $trigger_key AND NEW.v IS NOT NULL THEN
			RAISE EXCEPTION 'row % is refused', NEW.id;
		END IF;
		RETURN NEW;
	END \$\$;
	CREATE TRIGGER pr_refuse BEFORE UPDATE ON pr FOR EACH ROW EXECUTE FUNCTION pr_refuse();
	ANALYZE pr;
});

# ------------------------------------------------------------------
# (a) three poison rows, tolerated
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	SELECT backfill_declare(name => 'pr', relation => 'pr', predicate => 'v IS NULL',
		action => 'UPDATE pr SET v = src::int, n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 1000, rate => 1000, max_parallel => 2, max_failed_rows => 3, guard => false);
});
# run through the CLI, which follows the pass and lists the rows it skipped
my ($cli_rc, $cli_out, $cli_err) = ('', '', '');
IPC::Run::run([ $cli, '-d', $node->connstr('postgres'), 'run', 'pr', '--wait', '--plain' ],
	'<', \undef, '>', \$cli_out, '2>', \$cli_err,
	IPC::Run::timeout(4 * $PostgreSQL::Test::Utils::timeout_default));
$cli_rc = $? >> 8;
my ($run) = $cli_out =~ /\A(\d+)\n/;
ok(defined $run, '(a) pg_backfill run printed the run id');
is(wait_pass_end($node, $run, 600), 'completed_with_failures',
	'(a) the pass ends completed_with_failures, not completed');
is($cli_rc, 1, '(a) pg_backfill run --wait exits 1: not every row is done');
like($cli_out, qr/^completed_with_failures: run $run, 199,997 rows/m,
	'(a) the CLI says how the pass ended');
like($cli_out, qr/3 row\(s\) failed alone and were skipped.*\n.*KEY.*\n$cast_key +22P02.*\n$check_key +23514.*\n$trigger_key +P0001/s,
	'(a) the CLI lists the three failed rows with their SQLSTATEs');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(key || ':' || sqlstate, ',' ORDER BY key::int)
		    FROM backfill_failed_rows('pr')}),
	"$cast_key:22P02,$check_key:23514,$trigger_key:P0001",
	'(a) exactly the three poison keys are recorded, each with its SQLSTATE');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM backfill.failed_row WHERE attempts < 1 OR message = ''}),
	'0', '(a) each recorded row has its message and failed attempts');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pr WHERE n <> 1'),
	'3', '(a) all rows but three were done');
is( $node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM pr WHERE n = 0'),
	"$cast_key,$check_key,$trigger_key", '(a) the three not done are the poison rows');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pr WHERE n > 1'),
	'0', '(a) no row was done twice by the non-idempotent action');
is(ledger($node, $run, 'rows'), $rows - 3, '(a) the ledger counts exactly the rows done');
is(ledger($node, $run, "coalesce(error_code, 'none')"), 'none',
	'(a) no error code: not a false STALLED (BF006)');
like(ledger($node, $run, 'error_message'), qr/3 row\(s\) failed alone/,
	'(a) the ledger says how many rows failed');
is( $node->safe_psql('postgres', q{SELECT remaining FROM backfill.run WHERE run_id = } . $run),
	'0', '(a) the convergence count left the recorded rows out');
is( $node->safe_psql('postgres',
		q{SELECT status || '|' || failed_rows FROM backfill_status('pr')}),
	'completed_with_failures|3', '(a) backfill_status shows the result and the failed rows');
is( $node->safe_psql('postgres', q{SELECT state FROM backfill_pending() WHERE name = 'pr'}),
	'completed_with_failures', '(a) backfill_pending shows it');

# the batch size recovers: about rows / 1000 batches, not thousands of tiny ones
my $batches = ledger($node, $run, 'batches');
cmp_ok($batches, '<=', $rows / 1000 + 3 * 2 * 11 + 16,
	"(a) $batches batches: the batch size recovered after each isolation");
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM backfill_partitions('pr') WHERE batch_size <> 1000}),
	'0', '(a) every partition ended at the declared batch size of 1000');

# ------------------------------------------------------------------
# (b) fix the rows, retry exactly them
# ------------------------------------------------------------------
$node->safe_psql('postgres', qq{
	UPDATE pr SET src = id::text WHERE id IN ($cast_key, $check_key);
	DROP TRIGGER pr_refuse ON pr;
});
is($node->safe_psql('postgres', q{SELECT backfill_retry('pr')}), 't', '(b) backfill_retry starts a pass');
my $retry = $node->safe_psql('postgres', q{SELECT max(run_id) FROM backfill.ledger});
cmp_ok($retry, '>', $run, '(b) the retry is a new ledger row');
is(ledger($node, $retry, 'previous_run_id'), $run, '(b) it follows the first pass');
my $first_parts = $node->safe_psql('postgres',
	qq{SELECT max(part_no) FROM backfill.partition WHERE run_id = $run});
is( $node->safe_psql('postgres',
		qq{SELECT string_agg(hi, ',' ORDER BY hi::int) FROM backfill.partition
		    WHERE run_id = $retry AND part_no > $first_parts}),
	"$cast_key,$check_key,$trigger_key",
	'(b) the retry adds one partition per recorded row, ending at its key');
is( $node->safe_psql('postgres',
		qq{SELECT count(*) FROM backfill.partition p JOIN backfill.partition o
		    ON o.run_id = $run AND o.part_no = p.part_no
		    WHERE p.run_id = $retry AND (o.state <> 'done' OR p.state <> 'done')}),
	'0', '(b) the partitions of the first pass are copied done: nothing else is redone');
is(wait_pass_end($node, $retry, 300), 'completed', '(b) the retry completes');
is(ledger($node, $retry, 'rows'), '3', '(b) it did exactly the three rows');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pr WHERE n <> 1'),
	'0', '(b) every row is now done exactly once');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill_failed_rows('pr')}),
	'0', '(b) the retry recorded no failed row');

# ------------------------------------------------------------------
# (c) max_failed_rows 0: the first isolated row fails the pass, BF018
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE p0 (id int PRIMARY KEY, src text NOT NULL, n int NOT NULL DEFAULT 0, v int);
	INSERT INTO p0 (id, src) SELECT g, g::text FROM generate_series(1, 5000) g;
	UPDATE p0 SET src = 'bad' WHERE id = 2500;
	ANALYZE p0;
	SELECT backfill_declare(name => 'p0', relation => 'p0', predicate => 'v IS NULL',
		action => 'UPDATE p0 SET v = src::int, n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 500, rate => 1000, guard => false);
});
my $run0 = $node->safe_psql('postgres', q{SELECT backfill_run('p0')});
is(wait_pass_end($node, $run0, 300), 'failed', '(c) the pass fails');
is(ledger($node, $run0, 'error_code'), 'BF018', '(c) with BF018');
like(ledger($node, $run0, 'error_message'),
	qr/1 row\(s\) that failed alone, more than max_failed_rows \(0\): keys 2500/,
	'(c) the message names the count and the key');
is($node->safe_psql('postgres', q{SELECT key || ':' || sqlstate FROM backfill_failed_rows('p0')}),
	'2500:22P02', '(c) the row is recorded');
is($node->safe_psql('postgres', 'SELECT count(*) FROM p0 WHERE n > 1'),
	'0', '(c) no row was done twice');
is($node->safe_psql('postgres', q{SELECT state FROM backfill_pending() WHERE name = 'p0'}),
	'failed', '(c) backfill_pending says failed');

# ------------------------------------------------------------------
# (d) a lock timeout is not the row's fault: retried, never bisected
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE pl (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, v int);
	INSERT INTO pl (id) SELECT g FROM generate_series(1, 2000) g;
	ANALYZE pl;
	SELECT backfill_declare(name => 'pl', relation => 'pl', predicate => 'v IS NULL',
		action => 'UPDATE pl SET v = 1, n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 500, rate => 1000, lock_timeout => '100ms', max_attempts => 100,
		backoff_base => '200ms', backoff_cap => '200ms', guard => false);
});
my $locker = $node->background_psql('postgres');
$locker->set_query_timer_restart();
$locker->query_safe('BEGIN; SELECT 1 FROM pl WHERE id = 1200 FOR UPDATE;');
my $runl = $node->safe_psql('postgres', q{SELECT backfill_run('pl')});
ok( poll_until($node,
		q{SELECT max(failures) >= 3 FROM backfill_partitions('pl')}, 't', 180),
	'(d) the locked batch fails again and again (lock timeout)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill_failed_rows('pl')}),
	'0', '(d) no row is recorded as failed');
like( $node->safe_psql('postgres', q{SELECT string_agg(last_error, ' ') FROM backfill_partitions('pl')}),
	qr/lock timeout/, '(d) the partition says why its batch is retried');
$locker->query_safe('COMMIT');
$locker->quit;
is(wait_pass_end($node, $runl, 300), 'completed', '(d) released, the pass completes');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pl WHERE n <> 1'),
	'0', '(d) every row done exactly once');

$node->stop;
done_testing();
