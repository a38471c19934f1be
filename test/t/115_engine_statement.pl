# 115_engine_statement.pl
#
# The engine writes the batch statement (issue 24): set => declares an
# UPDATE and delete => true a DELETE whose WHERE clause the engine writes,
# the batch's key range in the form that reads only that range (one column;
# a composite key of 2, 3 and 4 columns: a disjunction of bounded index
# ranges, each an index condition of a generic plan, never a sequential
# scan) AND the predicate, on a table and on a partitioned parent.  The
# statement is the declaration's action, which the checksum covers.  A
# DELETE pass is done exactly once through a lane terminated mid-pass (its
# batch waits on a row lock the test holds, so the pass cannot end before
# the kill).  A hand-written UPDATE without the predicate is refused (the
# user's finding: a forced pass overwrote what the application had
# written), unless guard => false.  A predicate over a column added since
# the last ANALYZE is estimated from a sample of the table, within 25% of
# the rows to do, and plan_method and the log say so.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('engine_statement');
sub sq { return BackfillTest::sq($node, @_); }

sq(q{CREATE EXTENSION pg_backfill});

# ---------------------------------------------------------------- set, one key column
sq(q{
	CREATE TABLE items (id bigint PRIMARY KEY, a int NOT NULL, c int);
	INSERT INTO items SELECT g, g % 1000, NULL FROM generate_series(1, 20000) g;
	ANALYZE items;
});
my $sum1 = sq(q{SELECT backfill_declare(name => 'items_c', relation => 'items',
	predicate => 'c IS NULL', set => 'c = a * 2', batch_size => 1000, rate => 1000)});
is(sq(q{SELECT action FROM backfill.declaration WHERE name = 'items_c'}),
	"UPDATE public.items SET\nc = a * 2\nWHERE id BETWEEN \$1 AND \$2\n  AND (\nc IS NULL\n)",
	'set: the engine wrote the UPDATE, the key range AND the predicate, as the action');
is(sq(q{SELECT action_set, action_delete, guard FROM backfill.declaration WHERE name = 'items_c'}),
	'c = a * 2|f|t', 'the declaration keeps set');
my $sum2 = sq(q{SELECT backfill_declare(name => 'items_c', relation => 'items',
	predicate => 'c IS NULL', set => 'c = a * 3', batch_size => 1000, rate => 1000)});
isnt($sum2, $sum1, 'the checksum changes when set changes');
is(sq(q{SELECT backfill_declare(name => 'items_c', relation => 'items',
	predicate => 'c IS NULL', set => 'c = a * 2', batch_size => 1000, rate => 1000)}),
	$sum1, 'the same set gives the same checksum');
sq(q{UPDATE items SET c = -1 WHERE id % 10 = 0});
my $run = sq(q{SELECT backfill_run('items_c')});
is(BackfillTest::wait_pass_end($node, $run, 300), 'completed', 'the set pass completes');
is(sq(q{SELECT count(*) FILTER (WHERE c = a * 2), count(*) FILTER (WHERE c = -1) FROM items}),
	'18000|2000', 'rows that needed work were set, rows that did not were left alone');
is(BackfillTest::ledger($node, $run, 'rows'), '18000', 'the ledger counts the rows set');

# ---------------------------------------------------------------- composite keys, 2 to 4 columns
for my $k (2 .. 4)
{
	my @cols = map { "k$_" } 1 .. $k;
	my $coldefs = join(', ', map { "$_ int NOT NULL" } @cols);
	my $pk = join(', ', @cols);
	# 20 values of k1, 10 of each further column, the last one filling up the rows
	my @vals = ('g % 20');
	push @vals, "(g / 20) % 10" if $k >= 3;
	push @vals, "(g / 200) % 10" if $k >= 4;
	push @vals, "g";
	@vals = @vals[ 0 .. $k - 1 ];
	$vals[-1] = 'g';
	sq(qq{
		CREATE TABLE ck$k ($coldefs, a int NOT NULL, c int, PRIMARY KEY ($pk));
		INSERT INTO ck$k SELECT @{[join(', ', @vals)]}, g % 7, NULL FROM generate_series(1, 40000) g;
		ANALYZE ck$k;
		SELECT backfill_declare(name => 'ck$k', relation => 'ck$k', predicate => 'c IS NULL',
			set => 'c = a + 1', batch_size => 2000, rate => 1000);
	});
	my $action = sq(qq{SELECT action FROM backfill.declaration WHERE name = 'ck$k'});
	my $branches = () = $action =~ /\(k1 /g;
	is($branches, { 2 => 4, 3 => 9, 4 => 16 }->{$k},
		"a key of $k columns: the range is a disjunction of bounded ranges");
	my $types = join(', ', ('int') x (2 * $k));
	my $lo = join(', ', (3) x $k);
	my $hi = join(', ', (3, (5) x ($k - 1)));
	my $plan = sq(qq{
		SET plan_cache_mode = force_generic_plan;
		PREPARE p($types) AS $action;
		EXPLAIN (COSTS OFF) EXECUTE p($lo, $hi);
	});
	like($plan, qr/Index (Only )?Scan|Bitmap Index Scan/,
		"a key of $k columns: the generic plan reads the primary key's index");
	unlike($plan, qr/Seq Scan/, "a key of $k columns: no sequential scan");
	my $r = sq(qq{SELECT backfill_run('ck$k')});
	is(BackfillTest::wait_pass_end($node, $r, 300), 'completed', "a key of $k columns: the pass completes");
	is(sq(qq{SELECT count(*) FILTER (WHERE c = a + 1) FROM ck$k}), '40000',
		"a key of $k columns: every row set");
	is(BackfillTest::ledger($node, $r, 'rows'), '40000', "a key of $k columns: each row counted once");
}

# ---------------------------------------------------------------- a partitioned parent
sq(q{
	CREATE TABLE parts (id int PRIMARY KEY, a int NOT NULL, c int) PARTITION BY RANGE (id);
	CREATE TABLE parts_1 PARTITION OF parts FOR VALUES FROM (0) TO (10000);
	CREATE TABLE parts_2 PARTITION OF parts FOR VALUES FROM (10000) TO (20000);
	INSERT INTO parts SELECT g, g % 5, NULL FROM generate_series(1, 19999) g;
	ANALYZE parts;
	SELECT backfill_declare(name => 'parts', relation => 'parts', predicate => 'c IS NULL',
		set => 'c = a', batch_size => 1000, rate => 1000);
});
like(sq(q{SELECT action FROM backfill.declaration WHERE name = 'parts'}),
	qr/^UPDATE public\.parts SET/, 'a partitioned parent: the statement names the parent');
$run = sq(q{SELECT backfill_run('parts')});
is(BackfillTest::wait_pass_end($node, $run, 300), 'completed', 'a partitioned parent: completed');
is(sq(q{SELECT count(*) FROM parts WHERE c IS DISTINCT FROM a}), '0',
	'a partitioned parent: every row of every leaf set');

# ---------------------------------------------------------------- delete, through a lane terminated mid-pass
sq(q{
	CREATE TABLE events (id bigint PRIMARY KEY, expired boolean NOT NULL);
	INSERT INTO events SELECT g, g % 3 = 0 FROM generate_series(1, 6000) g;
	ANALYZE events;
});
my $sumd = sq(q{SELECT backfill_declare(name => 'purge', relation => 'events',
	predicate => 'expired', delete => true, batch_size => 100, rate => 50,
	lock_timeout => '1 hour', batch_timeout => '1 hour')});
like(sq(q{SELECT action FROM backfill.declaration WHERE name = 'purge'}),
	qr/^DELETE FROM public\.events\nWHERE id BETWEEN \$1 AND \$2\n  AND \(\nexpired\n\)$/,
	'delete: the engine wrote the DELETE of the range AND the predicate');
# the last expired row is locked: the pass cannot end while the test holds it
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN; SELECT id FROM events WHERE id = 6000 FOR UPDATE;');
$run = sq(q{SELECT backfill_run('purge')});
ok( BackfillTest::poll_until($node, q{
		SELECT count(*) > 0 FROM pg_stat_activity
		 WHERE backend_type = 'pg_backfill lane' AND wait_event_type = 'Lock'},
		't', 300),
	'the lane waits on the held row, in its last batch');
my $done_before = sq(q{SELECT 2000 - count(*) FILTER (WHERE expired) FROM events});
cmp_ok($done_before, '>', 0, 'batches before the held row committed');
my $lane = sq(q{SELECT pid FROM pg_stat_activity
	 WHERE backend_type = 'pg_backfill lane' AND wait_event_type = 'Lock'});
sq(qq{SELECT pg_terminate_backend($lane)});
ok(BackfillTest::poll_until($node, "SELECT count(*) FROM pg_stat_activity WHERE pid = $lane", '0', 300),
	'the lane is terminated in its batch');
$holder->query_safe('ROLLBACK');
$holder->quit;
is(BackfillTest::wait_pass_end($node, $run, 300), 'completed', 'the delete pass completes after the kill');
is(sq(q{SELECT count(*) FILTER (WHERE expired), count(*) FILTER (WHERE NOT expired) FROM events}),
	'0|4000', 'delete: the rows matching the predicate are gone, the others kept');
is(BackfillTest::ledger($node, $run, 'rows'), '2000', 'delete: the ledger counts each deleted row once');

# ---------------------------------------------------------------- action, set and delete exclude each other
my ($rc, $out, $err) = $node->psql('postgres', q{
	SELECT backfill_declare(name => 'both', relation => 'items', predicate => 'c IS NULL',
		set => 'c = 1', action => 'UPDATE items SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/BF001: backfill "both" declares more than one of action, set and delete/,
	'set and action together: BF001');
like($err, qr/HINT:.*only one/, 'with a hint');
($rc, $out, $err) = $node->psql('postgres', q{
	SELECT backfill_declare(name => 'both', relation => 'items', predicate => 'c IS NULL',
		set => 'c = 1', delete => true)}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/BF001: backfill "both" declares more than one/, 'set and delete together: BF001');
($rc, $out, $err) = $node->psql('postgres', q{
	SELECT backfill_declare(name => 'both', relation => 'items', predicate => 'c IS NULL',
		set => 'c = 1 WHERE true')}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/BF001: set of backfill "both" is not a list of assignments/,
	'a set with a WHERE of its own: BF001');

# ---------------------------------------------------------------- the guard: the user's 49,991 rows
sq(q{
	CREATE TABLE orders (id bigint PRIMARY KEY, total numeric NOT NULL, total_cents bigint);
	INSERT INTO orders SELECT g, g, NULL FROM generate_series(1, 50000) g;
	ANALYZE orders;
	SELECT backfill_declare(name => 'cents', relation => 'orders', predicate => 'total_cents IS NULL',
		set => 'total_cents = total * 100', batch_size => 5000, rate => 1000);
});
$run = sq(q{SELECT backfill_run('cents')});
is(BackfillTest::wait_pass_end($node, $run, 300), 'completed', 'the first pass completes');
# the application writes its own values to all but 9 rows, then 9 rows are new
sq(q{UPDATE orders SET total_cents = -id WHERE id > 9;
	 UPDATE orders SET total_cents = NULL WHERE id <= 9});
my $unguarded = q{UPDATE orders SET total_cents = total * 100 WHERE id BETWEEN $1 AND $2};
($rc, $out, $err) = $node->psql('postgres', qq{
	SELECT backfill_declare(name => 'cents', relation => 'orders', predicate => 'total_cents IS NULL',
		action => '$unguarded', batch_size => 5000, rate => 1000)},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/BF001: the action of backfill "cents" does not repeat its predicate/,
	'an UPDATE of the relation without the predicate is refused (BF001)');
like($err, qr/DETAIL:  It is an UPDATE of public\.orders whose WHERE clause lacks the predicate/,
	'the detail says what it lacks');
like($err, qr/HINT:  Write \Q$unguarded AND (total_cents IS NULL)\E; or declare set =>/,
	'the hint shows the action with the predicate added, and points to set');
like(sq(q{SELECT action FROM backfill.declaration WHERE name = 'cents'}), qr/^UPDATE public\.orders SET/,
	'the declaration is unchanged');
$run = sq(q{SELECT backfill_run('cents', force => true)});
is(BackfillTest::wait_pass_end($node, $run, 300), 'completed', 'the forced pass completes');
is(BackfillTest::ledger($node, $run, 'rows'), '9', 'the forced pass wrote the 9 rows that needed work');
is(sq(q{SELECT count(*) FROM orders WHERE total_cents = -id}), '49991',
	'and none of the 49,991 values the application wrote');
# the predicate as a conjunct, however written, passes; guard => false declares it on purpose
is(length(sq(q{SELECT backfill_declare(name => 'cents2', relation => 'orders',
	predicate => 'total_cents IS NULL AND total > 0',
	action => 'UPDATE orders o SET total_cents = total * 100
	           WHERE o.total > 0 AND id BETWEEN $1 AND $2 AND ((total_cents is null))')})), 64,
	'each conjunct of the predicate found among the WHERE clause\'s: accepted');
is(length(sq(qq{SELECT backfill_declare(name => 'cents', relation => 'orders',
	predicate => 'total_cents IS NULL', action => '$unguarded', guard => false)})), 64,
	'guard => false: the unguarded UPDATE is accepted');
# a data-modifying WITH: an UPDATE of the relation there must repeat the predicate too
# (a tester's finding: it got past the check and rows were done two to six times)
($rc, $out, $err) = $node->psql('postgres', q{
	SELECT backfill_declare(name => 'cents3', relation => 'orders', predicate => 'total_cents IS NULL',
		action => 'WITH w AS (UPDATE orders SET total_cents = total_cents + 1 RETURNING 1)
		           UPDATE orders SET total_cents = total * 100
		            WHERE id BETWEEN $1 AND $2 AND total_cents IS NULL')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/BF001: the action of backfill "cents3" does not repeat its predicate/,
	'an UPDATE of the relation in the action\'s WITH without the predicate is refused (BF001)');
like($err, qr/DETAIL:  A query of its WITH is an UPDATE of public\.orders/,
	'the detail says the WITH query lacks it');
is(length(sq(q{SELECT backfill_declare(name => 'cents4', relation => 'orders',
	predicate => 'total_cents IS NULL',
	action => 'WITH w AS (UPDATE orders SET total_cents = total * 100
	                       WHERE id BETWEEN $1 AND $2 AND total_cents IS NULL RETURNING id)
	           UPDATE orders SET total_cents = total * 100
	            WHERE id BETWEEN $1 AND $2 AND total_cents IS NULL')})), 64,
	'with the predicate repeated there too: accepted');
is(sq(q{SELECT guarded FROM backfill.declaration WHERE name = 'cents4'}), 't', 'and guarded');
# a WHERE clause with a top-level OR: appending the predicate would bind it to the last operand,
# so the hint says to wrap the clause (attack s34)
($rc, $out, $err) = $node->psql('postgres', q{
	SELECT backfill_declare(name => 'cents5', relation => 'orders', predicate => 'total_cents IS NULL',
		action => 'UPDATE orders SET total_cents = total * 100 WHERE id BETWEEN $1 AND $2 OR id = 5')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/HINT:  Put its WHERE clause in parentheses and add AND \(total_cents IS NULL\) after them/,
	'a top-level OR: the hint says to wrap the WHERE clause, not to append the predicate');
# the engine's statement on a table whose UPDATE a DO INSTEAD rule replaces: refused (attack s34)
sq(q{CREATE TABLE ruled (id int PRIMARY KEY, done boolean);
	 CREATE TABLE ruled_log (id int, n int);
	 CREATE RULE ruled_instead AS ON UPDATE TO ruled DO INSTEAD
	   UPDATE ruled_log SET n = n + 1 WHERE ruled_log.id = old.id});
($rc, $out, $err) = $node->psql('postgres', q{
	SELECT backfill_declare(name => 'ruled', relation => 'ruled', predicate => 'done IS NULL',
		set => 'done = true')}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/BF001: table public\.ruled of backfill "ruled" has a DO INSTEAD rule on UPDATE/,
	'set on a table with a DO INSTEAD rule on UPDATE: refused (BF001)');
like($err, qr/HINT:  Drop the rule, or write the action yourself/, 'the hint says the way out');
($rc, $out, $err) = $node->psql('postgres', q{
	SELECT backfill_declare(name => 'ruled_del', relation => 'ruled', predicate => 'done IS NULL',
		delete => true)});
is($rc, 0, 'delete => true on the same table (its rule is on UPDATE): accepted');
sq(q{CREATE TABLE audit (lo bigint, hi bigint)});
is(length(sq(q{SELECT backfill_declare(name => 'audit', relation => 'orders',
	predicate => 'total_cents IS NULL', action => 'INSERT INTO audit VALUES ($1, $2)')})), 64,
	'an INSERT into another table is not guarded');
is(length(sq(q{SELECT backfill_declare(name => 'audit2', relation => 'orders',
	predicate => 'total_cents IS NULL', action => 'SELECT count(*) FROM orders WHERE id BETWEEN $1 AND $2')})), 64,
	'a SELECT is not guarded');
is(length(sq(q{SELECT backfill_declare(name => 'audit3', relation => 'orders',
	predicate => 'total_cents IS NULL', action => 'MERGE INTO audit t USING (SELECT $1::bigint AS lo, $2::bigint AS hi) s
	  ON t.lo = s.lo WHEN NOT MATCHED THEN INSERT VALUES (s.lo, s.hi)')})), 64,
	'a MERGE is not guarded');

# ---------------------------------------------------------------- estimates after ADD COLUMN, no ANALYZE
sq(q{
	CREATE TABLE big (id bigint PRIMARY KEY, total int NOT NULL) WITH (autovacuum_enabled = false);
	INSERT INTO big SELECT g, g % 1000 FROM generate_series(1, 300000) g;
	ANALYZE big;
	ALTER TABLE big ADD COLUMN total_cents bigint;
	UPDATE big SET total_cents = total * 100 WHERE id % 5 = 0;
	SELECT backfill_declare(name => 'big', relation => 'big', predicate => 'total_cents IS NULL',
		set => 'total_cents = total * 100', batch_size => 100, rate => 0.5);
});
is(sq(q{SELECT count(*) FROM pg_stats WHERE tablename = 'big' AND attname = 'total_cents'}), '0',
	'the new column has no statistics');
my $planner = sq(q{SELECT backfill.estimate_rows('public.big', 'total_cents IS NULL')});
cmp_ok($planner, '<', 24000, "the planner alone says $planner of 240000 (why the sample)");
$run = sq(q{SELECT backfill_run('big')});
ok(BackfillTest::poll_until($node,
		"SELECT estimate IS NOT NULL FROM backfill.run WHERE run_id = $run", 't', 300),
	'the pass is planned');
my ($estimate, $method) = split /\|/, sq(qq{SELECT estimate, plan_method FROM backfill.run WHERE run_id = $run});
cmp_ok(abs($estimate - 240000), '<=', 0.25 * 240000, "the estimate ($estimate) is within 25% of 240000");
like($method, qr/estimate from a [0-9.]+% sample \(column total_cents has no statistics\)/,
	'plan_method says the estimate comes from a sample, and why');
my ($pct) = $method =~ /estimate from a ([0-9.]+)% sample/;
cmp_ok($pct, '<', 100, 'the sample is a sample');
ok($node->log_contains(qr/backfill "big": column total_cents has no statistics; about \d+ rows to do, by a sample/),
	'the log says so');
sq(q{SELECT backfill_cancel('big')});

# ---------------------------------------------------------------- estimates when the statistics predate the changes
# the column has statistics, taken before a migration emptied 80% of it:
# the planner believes the old ones
sq(q{
	CREATE TABLE old_stats (id bigint PRIMARY KEY, total int NOT NULL, total_cents bigint)
		WITH (autovacuum_enabled = false);
	INSERT INTO old_stats SELECT g, g % 1000, (g % 1000) * 100 FROM generate_series(1, 300000) g;
	ANALYZE old_stats;
});
sq(q{UPDATE old_stats SET total_cents = NULL WHERE id % 5 <> 0});
sq(q{SELECT backfill_declare(name => 'old_stats', relation => 'old_stats',
	predicate => 'total_cents IS NULL', set => 'total_cents = total * 100', batch_size => 100, rate => 0.5)});
$planner = sq(q{SELECT backfill.estimate_rows('public.old_stats', 'total_cents IS NULL')});
cmp_ok($planner, '<', 24000, "the planner alone says $planner of 240000 (why the sample)");
$run = sq(q{SELECT backfill_run('old_stats')});
ok(BackfillTest::poll_until($node,
		"SELECT estimate IS NOT NULL FROM backfill.run WHERE run_id = $run", 't', 300),
	'stale statistics: the pass is planned');
($estimate, $method) = split /\|/, sq(qq{SELECT estimate, plan_method FROM backfill.run WHERE run_id = $run});
cmp_ok(abs($estimate - 240000), '<=', 0.25 * 240000,
	"stale statistics: the estimate ($estimate) is within 25% of 240000");
ok($node->log_contains(qr/backfill "old_stats": its statistics predate \d+ changed rows; about \d+ rows to do, by a sample/),
	'the log says the statistics predate the changes, and that it sampled');
sq(q{SELECT backfill_cancel('old_stats')});

done_testing();
