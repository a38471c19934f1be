# 003_transactional_run.pl
#
# backfill_run is transactional: a run enqueued in a transaction that rolls
# back never starts, one that commits does.  A pass whose action does not
# fix every row it is given ends as failed with STALLED (BF006), and no
# completed row is written.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('transactional_run', cron => 1);

$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE tx (id bigint PRIMARY KEY, v int);
	INSERT INTO tx (id) SELECT g FROM generate_series(1, 2000) g;
	CREATE TABLE st (id bigint PRIMARY KEY, c int);
	INSERT INTO st (id) SELECT g FROM generate_series(1, 1000) g;
	ANALYZE tx, st;
	SELECT backfill_declare(name => 'tx_fill', relation => 'tx', predicate => 'v IS NULL',
		action => 'UPDATE tx SET v = id * 3 WHERE id BETWEEN $1 AND $2 AND v IS NULL',
		batch_size => 200, rate => 50);
	SELECT backfill_declare(name => 'stall_fill', relation => 'st', predicate => 'c IS NULL',
		action => 'UPDATE st SET c = 1 WHERE id BETWEEN $1 AND $2 AND id % 2 = 0 AND (c IS NULL)',
		batch_size => 100, rate => 50);
});

# ------------------------------------------------------------------
# A run in a transaction that rolls back never starts
# ------------------------------------------------------------------
my $rolled = $node->safe_psql('postgres', q{
	BEGIN;
	SELECT backfill_run('tx_fill');
	ROLLBACK;
});
like($rolled, qr/^\d+$/, 'backfill_run inside a rolled-back transaction returned a run id');

my $changed = holds_for($node, q{
	SELECT (SELECT count(*) FROM backfill.ledger WHERE ledger_name = 'tx_fill')
	     || ',' || (SELECT count(*) FROM backfill.run WHERE run_id = } . $rolled . q{)
	     || ',' || (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane')
	     || ',' || (SELECT count(*) FROM tx WHERE v IS NOT NULL)},
	'0,0,0,0', 5);
ok(!defined $changed,
	'rolled-back run: no ledger row, no run row, no lane, no row written for 5 s (several naptimes)')
  or diag("ledger,run,lanes,rows became: $changed");

is($node->safe_psql('postgres', q{SELECT status FROM backfill_status('tx_fill')}),
	'never run', 'rolled-back run: backfill_status says never run');

# ------------------------------------------------------------------
# The same call in a transaction that commits runs to completion
# ------------------------------------------------------------------
my $committed = $node->safe_psql('postgres', q{
	BEGIN;
	SELECT backfill_run('tx_fill');
	COMMIT;
});
like($committed, qr/^\d+$/, 'committed backfill_run returned a run id');
isnt($committed, $rolled, 'the committed run is a new run, not the rolled-back one');

is($node->safe_psql('postgres', "SELECT backfill_wait($committed, '180 s')"),
	'completed', 'committed run completes');
is( $node->safe_psql('postgres',
		q{SELECT count(*), count(*) FILTER (WHERE v = id * 3) FROM tx}),
	'2000|2000', 'committed run rewrote every row');
is( $node->safe_psql('postgres',
		q{SELECT count(*), min(run_id), sum(rows) FROM backfill.ledger WHERE ledger_name = 'tx_fill'}),
	"1|$committed|2000", 'exactly one ledger row for tx_fill, the committed run, 2000 rows');

# ------------------------------------------------------------------
# An action that does not satisfy the predicate: STALLED
# ------------------------------------------------------------------
my $stall = $node->safe_psql('postgres', q{SELECT backfill_run('stall_fill')});
like($stall, qr/^\d+$/, 'stall_fill run id');
is($node->safe_psql('postgres', "SELECT backfill_wait($stall, '180 s')"),
	'failed', 'a pass that leaves rows matching the predicate fails');
my ($code, $message, $rows) = split /\|/, $node->safe_psql('postgres',
	"SELECT error_code, error_message, rows FROM backfill.ledger WHERE run_id = $stall");
is($code, 'BF006', 'the failure is STALLED (BF006)');
like($message, qr/\b500\b/, 'the error names the 500 rows still matching')
  or diag("error_message: $message");
like($message, qr/stall_fill/, 'the error names the backfill');
is($node->safe_psql('postgres', "SELECT phase, remaining FROM backfill.run WHERE run_id = $stall"),
	'done|500', 'run records 500 rows remaining');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FILTER (WHERE status = 'completed'), count(*)
		    FROM backfill.ledger WHERE ledger_name = 'stall_fill'}),
	'0|1', 'no completed ledger row for the stalled backfill');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FILTER (WHERE c IS NULL), count(*) FILTER (WHERE c = 1) FROM st}),
	'500|500', 'the action did what it could: even ids set, odd ids left');
is($node->safe_psql('postgres', q{SELECT state FROM backfill_pending() WHERE name = 'stall_fill'}),
	'stalled', 'backfill_pending reports the backfill as stalled');
like(slurp_file($node->logfile), qr/backfill "stall_fill" stalled: 500 rows still match/,
	'the server log reports the stall');

$node->stop;
done_testing();
