# 153_bare_scan.pl -- the key scan that leaves the predicate out (issue 29)
#
# A table's key of one column, a fixed batch_size and the engine's own
# statement (set, delete): while the rows match densely, a batch's key scan
# reads the next batch_size keys without the predicate (from the key's
# index alone) and the statement's own condition picks the rows that
# match; a claim's first batch filters, and a batch whose keys matched less
# than 90% makes the next 16 filter.  What must hold, and could fail:
#   1. dense, sparse, dense again: the batch history shows the bare batch
#      over the sparse region's first 100 keys (5 rows), then filtering
#      batches of 100 matching rows each; every matching row done once, no
#      other row touched, the ledger's rows the rows changed;
#   2. a hand-written action of the same text never scans bare (no batch
#      of 5 rows in the middle), and is done once too;
#   3. a nothing-to-do pass (forced over a done table) does no batch;
#   4. a lane killed with SIGKILL in the middle of a bare pass: the pass
#      resumes from its checkpoint and every row is done once (n = 1);
#   5. delete => true on the bare path deletes exactly the matching rows
#      and counts them.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('bare', crash_restart => 1, extra_conf => 'autovacuum = off');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	-- 1..1000 match, 1001..3000 only every 20th (100 rows), 3001..4000 match
	CREATE TABLE mix (id int PRIMARY KEY, c int, n int NOT NULL DEFAULT 0);
	INSERT INTO mix (id, c) SELECT g, CASE WHEN g BETWEEN 1001 AND 3000 AND g % 20 <> 0 THEN -1 END
	  FROM generate_series(1, 4000) g;
	CREATE TABLE mix2 (LIKE mix INCLUDING ALL);
	INSERT INTO mix2 SELECT * FROM mix;
	VACUUM ANALYZE mix, mix2;
});

# 1. the engine's statement over dense, sparse, dense rows
sq($node, q{
	SELECT backfill_declare(name => 'mix', relation => 'mix', predicate => 'c IS NULL',
		set => 'c = id * 2, n = n + 1', batch_size => 100, rate => 1000)});
my $run = sq($node, q{SELECT backfill_run('mix')});
is(wait_pass_end($node, $run, 180), 'completed', 'mix: the pass completes');
is(sq($node, q{SELECT count(*) FILTER (WHERE n = 1 AND c = id * 2) || '/'
                   || count(*) FILTER (WHERE n <> 0 AND n <> 1) || '/'
                   || count(*) FILTER (WHERE c = -1 AND n = 0) FROM mix}),
	'2100/0/1900', 'mix: the 2,100 matching rows done once, the 1,900 others untouched');
is(ledger($node, $run, 'rows'), '2100', 'mix: the ledger counts the rows changed');
is(sq($node, qq{SELECT first_key || '..' || last_key || ':' || rows FROM backfill_batches('mix', $run)
                 WHERE first_key::int BETWEEN 1001 AND 3000 ORDER BY seq LIMIT 1}),
	'1001..1100:5', 'mix: the first batch past the dense rows covered the next 100 keys, 5 matching');
is(sq($node, qq{SELECT string_agg(rows::text, ',' ORDER BY seq) FROM backfill_batches('mix', $run)}),
	join(',', (100) x 10, 5, (100) x 10, 95),
	'mix: 10 dense batches, the bare one over the sparse start, then filtering batches of 100');
is(sq($node, qq{SELECT first_key || ':' || rows FROM backfill_batches('mix', $run) ORDER BY seq LIMIT 1}),
	'1:100', 'mix: the first batch filtered');

# 2. a hand-written action of the same text: the filtering scan, always
sq($node, q{
	SELECT backfill_declare(name => 'mix2', relation => 'mix2', predicate => 'c IS NULL',
		action => 'UPDATE mix2 SET c = id * 2, n = n + 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
		batch_size => 100, rate => 1000)});
$run = sq($node, q{SELECT backfill_run('mix2')});
is(wait_pass_end($node, $run, 180), 'completed', 'mix2: the pass completes');
is(sq($node, q{SELECT count(*) FILTER (WHERE n = 1) || '/' || count(*) FILTER (WHERE n > 1) FROM mix2}),
	'2100/0', 'mix2: each matching row done once');
is(sq($node, qq{SELECT count(*) || '/' || count(*) FILTER (WHERE rows = 100)
                  FROM backfill_batches('mix2', $run)}),
	'21/21', 'mix2: 21 batches of 100 matching rows: no bare batch');

# 3. nothing to do: a forced pass over the done table does no batch
$run = sq($node, q{SELECT backfill_run('mix', force => true)});
is(wait_pass_end($node, $run, 180), 'completed', 'forced pass over a done table completes');
is(ledger($node, $run, 'batches') . '/' . ledger($node, $run, 'rows'), '0/0',
	'forced pass over a done table: no batch, no row');

# 4. a lane killed in the middle of a bare pass resumes, each row once
$node->safe_psql('postgres', q{
	CREATE TABLE big (id int PRIMARY KEY, c int, n int NOT NULL DEFAULT 0);
	INSERT INTO big (id) SELECT g FROM generate_series(1, 20000) g;
	VACUUM ANALYZE big;
});
sq($node, q{
	SELECT backfill_declare(name => 'big', relation => 'big', predicate => 'c IS NULL',
		set => 'c = id, n = n + 1', batch_size => 100, rate => 10)});
$run = sq($node, q{SELECT backfill_run('big')});
ok(poll_until($node, "SELECT rows >= 2000 FROM backfill_status('big')", 't', 180),
	'big: the pass is under way');
my $lane = sq($node, q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'});
cmp_ok(sq($node, "SELECT rows FROM backfill_status('big')"), '<', 20000,
	'big: the lane is killed before the pass ends (rate 10 batches/s)');
is(kill('KILL', $lane), 1, 'big: SIGKILL delivered to the lane');
ok(wait_for_server($node, 120), 'big: the server is back after the crash restart');
my $status = wait_pass_end($node, $run, 180);
is($status, 'completed', 'big: the pass completes after the crash');
is(sq($node, q{SELECT count(*) FILTER (WHERE n = 1) || '/' || count(*) FILTER (WHERE n <> 1) FROM big}),
	'20000/0', 'big: every row done exactly once through the crash (n = 1)');
is(ledger($node, $run, 'rows'), '20000', 'big: the ledger counts each row once');

# 5. delete => true on the bare path
$node->safe_psql('postgres', q{
	CREATE TABLE del (id int PRIMARY KEY, stale boolean NOT NULL);
	INSERT INTO del SELECT g, g <= 1500 OR g > 1800 FROM generate_series(1, 2000) g;
	VACUUM ANALYZE del;
});
sq($node, q{
	SELECT backfill_declare(name => 'del', relation => 'del', predicate => 'stale', delete => true,
		batch_size => 100, rate => 1000)});
$run = sq($node, q{SELECT backfill_run('del')});
is(wait_pass_end($node, $run, 180), 'completed', 'del: the pass completes');
is(sq($node, q{SELECT count(*) || '/' || count(*) FILTER (WHERE stale) FROM del}), '300/0',
	'del: exactly the 1,700 stale rows deleted');
is(ledger($node, $run, 'rows'), '1700', 'del: the ledger counts the rows deleted');

$node->stop;
done_testing();
