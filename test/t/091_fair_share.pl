# 091_fair_share.pl
#
# One role cannot take the whole cluster (issue 9, finding 7):
#  (1) fair share: alice's four backfills, whose batches sleep, hold all
#      backfill.max_workers = 4 lanes; bob's pass must not stay queued: a
#      lane of alice's gives its place up after its batch, bob's pass gets
#      it and completes while alice's four still run;
#  (2) backfill_cancel interrupts a batch in flight: a batch that sleeps
#      300 s is cancelled at once and rolls back; the ledger counts exactly
#      the batches that committed.
# Every action is non-idempotent (n = n + 1): rows are done exactly once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('fair_share', extra_conf => "backfill.max_workers = 4\n");
$BackfillTest::poll_interval = 0.1;

sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN;
	GRANT USAGE ON SCHEMA public TO alice, bob;
});

my $LANES = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'};
my $LANES_OF = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
	AND usename = '%s'};

# ------------------------------------------------------------------
# (1) fair share
# ------------------------------------------------------------------
my @alice_runs;
for my $i (1 .. 4)
{
	sq($node, qq{
		CREATE TABLE a$i (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO a$i (id) SELECT g FROM generate_series(1, 1000) g;
		ALTER TABLE a$i OWNER TO alice;
	});
	$node->safe_psql('postgres', qq{
		SET ROLE alice;
		SELECT backfill_declare(name => 'a$i', relation => 'a$i', predicate => 'n = 0',
			action => 'UPDATE a$i SET n = n + 1 + 0 * (SELECT count(*) FROM pg_sleep(0.5))'
			       || ' WHERE id BETWEEN \$1 AND \$2',
			batch_size => 1, rate => 100, guard => false);
	});
	push @alice_runs, $node->safe_psql('postgres', "SET ROLE alice; SELECT backfill_run('a$i')");
}
ok(poll_until($node, sprintf($LANES_OF, 'alice'), '4', 120),
	"alice's four backfills hold all four lanes");

sq($node, q{
	CREATE TABLE b1 (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO b1 (id) SELECT g FROM generate_series(1, 20) g;
	ALTER TABLE b1 OWNER TO bob;
});
$node->safe_psql('postgres', q{
	SET ROLE bob;
	SELECT backfill_declare(name => 'b1', relation => 'b1', predicate => 'n = 0',
		action => 'UPDATE b1 SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 5, rate => 100, guard => false);
});
my $rb = $node->safe_psql('postgres', q{SET ROLE bob; SELECT backfill_run('b1')});
is(wait_pass_end($node, $rb, 180), 'completed', "bob's pass gets a lane and completes");
is(sq($node, 'SELECT count(*) FILTER (WHERE n = 1), sum(n) FROM b1'), '20|20',
	"bob's rows done exactly once");
is(sq($node, "SELECT count(*) FROM backfill.ledger WHERE run_id IN ("
	  . join(',', @alice_runs) . ") AND status = 'running'"),
	'4', "alice's four passes are still running meanwhile");
ok($node->log_contains('gives its place to a waiting pass'),
	'the scheduler said which lane gave its place');
ok(poll_until($node, sprintf($LANES_OF, 'alice'), '4', 120),
	'with bob done, alice has all four lanes again');

for my $i (1 .. 4)
{
	$node->safe_psql('postgres', "SET ROLE alice; SELECT backfill_cancel('a$i')");
}
ok(poll_until($node, $LANES, '0', 120), "alice's passes cancelled: every lane exits");
for my $i (1 .. 4)
{
	is(sq($node, "SELECT (SELECT rows FROM backfill.ledger WHERE run_id = $alice_runs[$i-1])"
		  . " = sum(n) AND count(*) FILTER (WHERE n > 1) = 0 FROM a$i"),
		't', "a$i: the ledger counts exactly the rows done (yields and cancel included), each once");
}

# ------------------------------------------------------------------
# (2) cancel interrupts a batch in flight
# ------------------------------------------------------------------
sq($node, q{
	CREATE TABLE c1 (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO c1 (id) SELECT g FROM generate_series(1, 30) g;
	SELECT backfill_declare(name => 'c1', relation => 'c1', predicate => 'n = 0',
		action => 'UPDATE c1 SET n = n + 1'
		       || ' + 0 * (SELECT count(*) FROM pg_sleep(CASE WHEN $1 > 10 THEN 300 ELSE 0 END))'
		       || ' WHERE id BETWEEN $1 AND $2',
		batch_size => 10, rate => 100, batch_timeout => '10 minutes', guard => false);
});
my $rc = sq($node, q{SELECT backfill_run('c1')});
ok(poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND wait_event = 'PgSleep'}, '1', 120),
	'the second batch of c1 is in flight, sleeping 300 s');
is(sq($node, q{SELECT backfill_cancel('c1')}), 't', 'backfill_cancel answers true');
ok(poll_until($node, $LANES, '0', 120), 'the batch in flight is interrupted and the lane exits');
is(ledger($node, $rc, 'status, rows, batches'), 'cancelled|10|1',
	'the ledger: cancelled, the one batch that committed');
is(sq($node, 'SELECT count(*) FILTER (WHERE n = 1), sum(n) FROM c1'), '10|10',
	'the interrupted batch rolled back: only the first 10 rows were done, once');
ok($node->log_contains('the batch in flight on partition 0 rolled back'),
	'the lane says its batch rolled back');

$node->stop;
done_testing();
