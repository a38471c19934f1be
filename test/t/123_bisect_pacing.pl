# 123_bisect_pacing.pl
#
# Isolating a poison row keeps the declared pace and stays small until the
# failing batch's keys are behind the cursor (attacker F3 of issue 14).
# 3,000 rows, batch_size 1000, rows 100 and 700 fail alone (a CHECK the
# action's value breaks); the non-idempotent action is n = n + 1.  A
# statement trigger records each committed batch's first and last key (a
# failed attempt rolls back with its record).
#  - every committed batch that starts inside the failing batch's keys
#    (101..1000) ends inside them too: the size does not jump back to
#    1,000 while most of those keys are ahead;
#  - at rate 20, the pass's batches and failed attempts together take at
#    least (all of them - 1) / 20 seconds: the failed attempts are paced
#    like batches (a lower bound only: a slow machine only makes it longer);
#  - the server log has one "trying N rows" line per failing batch, not
#    one per attempt, and one line per isolated row;
#  - every other row is done exactly once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('bisect_pacing');
my $rows = 3000;
my $rate = 20;

$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE br (id int PRIMARY KEY, n int NOT NULL DEFAULT 0,
	                 c int NOT NULL DEFAULT 0 CHECK (c < 100));
	INSERT INTO br (id) SELECT g FROM generate_series(1, $rows) g;
	UPDATE br SET c = 99 WHERE id IN (100, 700);
	CREATE TABLE br_batches (lo int, hi int, n int);
	CREATE FUNCTION br_log() RETURNS trigger LANGUAGE plpgsql AS \$\$
	BEGIN
		INSERT INTO br_batches SELECT min(id), max(id), count(*) FROM nt HAVING count(*) > 0;
		RETURN NULL;
	END \$\$;
	CREATE TRIGGER br_log AFTER UPDATE ON br REFERENCING NEW TABLE AS nt
		FOR EACH STATEMENT EXECUTE FUNCTION br_log();
	ANALYZE br;
	SELECT backfill_declare(name => 'br', relation => 'br', predicate => 'n = 0',
		action => 'UPDATE br SET n = n + 1, c = c + 1 WHERE id BETWEEN \$1 AND \$2',
		batch_size => 1000, rate => $rate, max_failed_rows => 5, max_parallel => 1, guard => false);
});
my $run = $node->safe_psql('postgres', q{SELECT backfill_run('br')});
is(wait_pass_end($node, $run, 300), 'completed_with_failures', 'the pass ends completed_with_failures');
is( $node->safe_psql('postgres', q{SELECT string_agg(key, ',' ORDER BY key::int) FROM backfill_failed_rows('br')}),
	'100,700', 'exactly the two poison rows are recorded');
is($node->safe_psql('postgres', 'SELECT count(*) FROM br WHERE n <> 1'),
	'2', 'every other row is done');
is($node->safe_psql('postgres', 'SELECT count(*) FROM br WHERE n > 1'),
	'0', 'no row was done twice');
is(ledger($node, $run, 'rows'), $rows - 2, 'the ledger counts exactly the rows done');

# the size stays within the failing batch's keys while they are ahead
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM br_batches WHERE lo BETWEEN 101 AND 1000 AND hi > 1000}),
	'0', 'no batch starting among the failing keys reaches past them');
is( $node->safe_psql('postgres', q{SELECT count(*) FROM br_batches WHERE lo > 1000 AND n <> 1000}),
	'0', 'once they are behind the cursor, the batches are full size again');

# paced: batches and failed attempts together, at the declared rate
my $attempts = $node->safe_psql('postgres',
	q{SELECT sum(attempts) FROM backfill.failed_row});
my $batches = ledger($node, $run, 'batches');
my $took = $node->safe_psql('postgres',
	qq{SELECT extract(epoch FROM finished_at - started_at) FROM backfill.ledger WHERE run_id = $run});
my $floor = ($batches + $attempts - 1) / $rate;
cmp_ok($took, '>=', $floor * 0.9,
	"$batches batches and $attempts failed attempts took ${took}s, at least ${floor}s at rate $rate");

# the log: one line per failing batch and per isolated row
my $log = slurp_file($node->logfile);
my $trying = () = $log =~ /trying \d+ rows at a time to isolate it/g;
my $isolated = () = $log =~ /failed alone and is skipped/g;
is($isolated, 2, 'one line per isolated row');
cmp_ok($trying, '<=', 2, "$trying line(s) about isolating: at most one per failing batch");

$node->stop;
done_testing();
