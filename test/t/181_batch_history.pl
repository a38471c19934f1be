# 181_batch_history.pl
#
# The batch history (issue 28 point 3): backfill.batch keeps the last
# backfill.batch_history batches of each pass, written by each batch's own
# transaction, readable as backfill_batches(name).
#  (a) backfill.batch_history = 100, a pass of 20 batches: 20 rows, one per
#      committed checkpoint (as many as the ledger's batches, their rows
#      summing to the ledger's), contiguous key ranges from 1 to 2000, each
#      with its partition, time, WAL and batch size.
#  (b) batch_history = 5, a pass of 20 batches by one lane: backfill_batches
#      shows exactly the last 5 (keys 1501..2000), the table holds at most
#      16 more (a lane prunes every 16th batch); by two lanes: the last 5,
#      at most 16 more per lane in the table, the newest batch among them;
#      the first pass's rows stay as they were.
#  (c) batch_history = 0: a pass writes none.
#  (d) Who reads them: the owner's members, pg_monitor and superusers; a
#      stranger sees no row.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('batch_history');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE ann LOGIN;
	CREATE ROLE annie LOGIN IN ROLE ann;
	CREATE ROLE mon LOGIN IN ROLE pg_monitor;
	CREATE ROLE stranger LOGIN;
	GRANT CREATE ON SCHEMA public TO ann;
	SET ROLE ann;
	CREATE TABLE items (id bigint PRIMARY KEY, a int NOT NULL, c int);
	INSERT INTO items SELECT g, g, NULL FROM generate_series(1, 2000) g;
	SELECT backfill_declare(name => 'fill', relation => 'items', predicate => 'c IS NULL',
		set => 'c = a * 2', batch_size => 100, rate => 1000);
});

# set batch_history for the lanes started from now on
sub history
{
	my ($n) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET backfill.batch_history = $n; SELECT pg_reload_conf()");
	ok(poll_until($node, 'SHOW backfill.batch_history', "$n", 30), "backfill.batch_history = $n");
}

sub run_pass
{
	my ($name, $force) = @_;
	my $run = $node->safe_psql('postgres',
		"SET ROLE ann; SELECT backfill_run('$name', force => $force)");
	is(wait_pass_end($node, $run, 120), 'completed', "$name: run $run completed");
	return $run;
}

# ------------------------------------------------------------------
# (a) every batch of a pass, with its checkpoint
# ------------------------------------------------------------------
history(100);
my $run1 = run_pass('fill', 'false');
is(sq($node, "SELECT count(*), sum(rows) FROM backfill_batches('fill')"),
	ledger($node, $run1, 'batches, rows'),
	'(a) one row per committed batch: as many as the ledger\'s batches, summing to its rows');
is(sq($node, "SELECT count(*) FROM backfill_batches('fill')"), '20', '(a) 20 batches recorded');
is(sq($node, q{
	SELECT bool_and(first_key::bigint = coalesce(prev, 0) + 1) FROM (
	  SELECT first_key, lag(last_key::bigint) OVER (ORDER BY seq) AS prev
	    FROM backfill_batches('fill')) b}), 't',
	'(a) contiguous key ranges, in order');
is(sq($node, q{
	SELECT min(first_key::bigint), max(last_key::bigint), bool_and(part_no = 0),
	       bool_and(ms > 0), bool_and(wal_bytes > 0), bool_and(batch_size = 100),
	       bool_and(rows = 100), bool_and(run_id = } . $run1 . q{)
	  FROM backfill_batches('fill')}), "1|2000|t|t|t|t|t|t",
	'(a) keys 1..2000, partition 0, time, WAL, batch size and rows of each');

# ------------------------------------------------------------------
# (b) bounded: the last N of each pass
# ------------------------------------------------------------------
history(5);
sq($node, q{UPDATE items SET c = NULL});
my $run2 = run_pass('fill', 'true');
is(sq($node, "SELECT string_agg(first_key || '-' || last_key, ',' ORDER BY seq) FROM backfill_batches('fill')"),
	'1501-1600,1601-1700,1701-1800,1801-1900,1901-2000',
	'(b) one lane: exactly the last 5 batches');
is(sq($node, "SELECT count(*) FROM backfill.batch WHERE run_id = $run1"), '20',
	'(b) the first pass keeps its 20 rows (a pass prunes only its own)');
ok(sq($node, "SELECT count(*) FROM backfill.batch WHERE run_id = $run2") <= 5 + 16,
	'(b) the table holds at most 16 more of the second pass (pruned every 16th batch)');

sq($node, q{SET ROLE ann; SELECT backfill_declare(name => 'fill', relation => 'items',
	predicate => 'c IS NULL', set => 'c = a * 2', batch_size => 50, rate => 1000,
	max_parallel => 2)});
sq($node, q{UPDATE items SET c = NULL});
my $run3 = run_pass('fill', 'true');
is(sq($node, "SELECT count(*) FROM backfill_batches('fill')"), '5', '(b) two lanes: the last 5');
my $n3 = sq($node, "SELECT count(*) FROM backfill.batch WHERE run_id = $run3");
ok($n3 >= 5 && $n3 <= 5 + 2 * 16, "(b) the table holds at most 16 more per lane ($n3 rows)");
is(sq($node, qq{SELECT max(seq) = (SELECT max(seq) FROM backfill.batch) FROM backfill_batches('fill', $run3)}),
	't', '(b) the newest batch is among them');

# the CLI's status --batches
my $cli = $ENV{PG_BACKFILL_CLI};
if (!defined $cli || $cli eq '')
{
	my $rel = "$FindBin::RealBin/../../cli/pg_backfill";
	$cli = -x $rel ? $rel : '/usr/lib/postgresql/15/bin/pg_backfill';
}
SKIP:
{
	skip 'no pg_backfill CLI built', 1 unless -x $cli;
	my ($stdout, $stderr) = ('', '');
	IPC::Run::run([ $cli, '-d', $node->connstr('postgres'), 'status', 'fill', '--batches' ],
		'>', \$stdout, '2>', \$stderr);
	like($stdout, qr/^status: +completed\n.*last 5 recorded batches.*FIRST KEY/ms,
		'(b) pg_backfill status --batches prints the status, then the recorded batches')
	  or diag("$stdout\n$stderr");
}

# ------------------------------------------------------------------
# (c) batch_history = 0: none
# ------------------------------------------------------------------
history(0);
sq($node, q{UPDATE items SET c = NULL});
my $run4 = run_pass('fill', 'true');
is(sq($node, "SELECT count(*) FROM backfill.batch WHERE run_id = $run4"), '0',
	'(c) batch_history = 0: the pass recorded no batch');
ok(ledger($node, $run4, 'batches') > 0, '(c) though it did its batches');

# ------------------------------------------------------------------
# (d) who reads them
# ------------------------------------------------------------------
my $q = "SELECT count(*) FROM backfill_batches('fill', $run1)";
is($node->safe_psql('postgres', "SET ROLE ann; $q"), '20', '(d) the owner reads them');
is($node->safe_psql('postgres', "SET ROLE annie; $q"), '20', '(d) a member of the owner');
is($node->safe_psql('postgres', "SET ROLE mon; $q"), '20', '(d) a member of pg_monitor');
is($node->safe_psql('postgres', "SET ROLE stranger; $q"), '0', '(d) a stranger sees none');
is($node->safe_psql('postgres', "SET ROLE stranger; SELECT count(*) FROM backfill.batch"), '0',
	'(d) nor in the table');

$node->stop;
done_testing();
