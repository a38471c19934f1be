# 122_failed_rows_end.pl
#
# A pass that ends with BF018 (more rows failed alone than max_failed_rows)
# ends for every lane, as a cancel does (attacker F2 of issue 14).  Four
# lanes work a table with eight poison rows, one in each eighth, and
# max_failed_rows => 3: the lane that records the fourth row fails the
# pass while the other three are in the middle of their partitions.  Then:
#  - no partition is left 'running' once the lanes are gone (the others
#    are stopped with the pass: cancelled, the one at fault failed);
#  - no partition's checkpoint is later than the ledger's end;
#  - the ledger's rows are exactly the rows the non-idempotent action
#    (n = n + 1) committed, and no row was done twice;
#  - backfill_status shows no partition running;
#  - backfill_retry resumes the pass from the checkpoints: with the rows
#    fixed, every row ends done exactly once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('failed_rows_end');
my $rows = 16_000;

$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE bq (id int PRIMARY KEY, n int NOT NULL DEFAULT 0,
	                 c int NOT NULL DEFAULT 0 CHECK (c < 100));
	INSERT INTO bq (id) SELECT g FROM generate_series(1, $rows) g;
	UPDATE bq SET c = 99 WHERE id IN (100, 2100, 4100, 6100, 8100, 10100, 12100, 14100);
	ANALYZE bq;
	SELECT backfill_declare(name => 'bq', relation => 'bq', predicate => 'n = 0',
		action => 'UPDATE bq SET n = n + 1, c = c + 1 WHERE id BETWEEN \$1 AND \$2',
		batch_size => 100, rate => 20, max_failed_rows => 3, max_parallel => 4, guard => false);
});
my $run = $node->safe_psql('postgres', q{SELECT backfill_run('bq')});
is(wait_pass_end($node, $run, 300), 'failed', 'the pass fails');
is(ledger($node, $run, 'error_code'), 'BF018', 'with BF018');

ok( poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'},
		'0', 180),
	'the lanes are gone');
is( $node->safe_psql('postgres',
		qq{SELECT count(*) FROM backfill.partition WHERE run_id = $run
		    AND state IN ('pending', 'running')}),
	'0', 'no partition is left open after the pass ended');
is( $node->safe_psql('postgres',
		qq{SELECT count(*) FROM backfill.partition p JOIN backfill.ledger l USING (run_id)
		    WHERE p.run_id = $run AND p.renewed_at > l.finished_at}),
	'0', 'no checkpoint committed after the ledger ended the pass');
my $done = $node->safe_psql('postgres', 'SELECT count(*) FROM bq WHERE n = 1');
cmp_ok($done, '>', 0, 'some rows were done');
is(ledger($node, $run, 'rows'), $done, 'the ledger counts exactly the rows committed');
is( $node->safe_psql('postgres',
		qq{SELECT sum(rows) FROM backfill.partition WHERE run_id = $run}),
	$done, 'so do the partitions');
is($node->safe_psql('postgres', 'SELECT count(*) FROM bq WHERE n > 1'),
	'0', 'no row was done twice');
is($node->safe_psql('postgres', q{SELECT partitions_running FROM backfill_status('bq')}),
	'0', 'backfill_status shows no partition running');
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM backfill_failed_rows('bq')}),
	'>=', 4, 'the rows that failed alone are recorded');

# fixed: the retry resumes from the checkpoints and tries the recorded rows
$node->safe_psql('postgres', q{UPDATE bq SET c = 0 WHERE c = 99});
is($node->safe_psql('postgres', q{SELECT backfill_retry('bq')}), 't', 'backfill_retry starts a pass');
my $next = $node->safe_psql('postgres', q{SELECT max(run_id) FROM backfill.ledger});
is(wait_pass_end($node, $next, 300), 'completed', 'the retry completes');
is($node->safe_psql('postgres', 'SELECT count(*) FROM bq WHERE n <> 1'),
	'0', 'every row is done exactly once in all');
is(ledger($node, $next, 'rows'), $rows - $done, 'the retry did exactly the rest');

$node->stop;
done_testing();
