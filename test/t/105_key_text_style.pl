# 105_key_text_style.pl -- cursors read back as they were written
#
# A cursor is its key's text, written by one lane (or a finalizing
# session) and read by the next.  Under the declaring role's DateStyle
# 'SQL, DMY' the 8th of January was written "08/01/2026"; a lane started
# after the role's DateStyle became 'SQL, MDY' (or a caller's session
# with another style) read it as the 1st of August and skipped the
# batches in between (attacker finding F5).  Lanes and finalizing
# sessions now write and read key text under one style (DateStyle ISO,
# IntervalStyle postgres, extra_float_digits 3): the pass is paused
# under one style and resumed under another, and every row is done once.
# An action that sets DateStyle itself, for its session (set_config(...,
# false)) or its transaction, cannot change how the cursors are written:
# each key's text is made under the fixed style for that call alone, so
# the action keeps what it set (attacker finding N1: a reclaiming lane
# skipped 178 rows).
#
# Each pass is paused mid-way by construction, not by timing: a session
# holds the row lock of a known row, the lane's batch waits on it, the
# pause is called, and only then is the row let go; the lane ends that
# batch and stops, so the cursor it leaves is a known, ambiguous date
# (day at most 12) for the next lane to read under the other style.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('key_text_style');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE dk_owner LOGIN;
	CREATE TABLE dk (d date PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO dk (d) SELECT DATE '2026-01-01' + g FROM generate_series(0, 199) g;
	ALTER TABLE dk OWNER TO dk_owner;
	ALTER ROLE dk_owner SET DateStyle = 'SQL, DMY';
});
$node->safe_psql('postgres', q{
	SELECT backfill_declare('dk', 'dk', 'n = 0', 'UPDATE dk SET n = n + 1 WHERE d BETWEEN $1 AND $2',
	                        batch_size => 5, rate => 20,
	                        lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
}, extra_params => [ '-U', 'dk_owner' ]);

# the session whose row lock holds a batch of the lane
my $holder = $node->background_psql('postgres');
$holder->set_query_timer_restart();
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');

# hold the row of $table that is $nth in $order (the first of a batch of
# 5), start the pass, wait for its lane's batch to wait on that row, pause
# the pass, let the row go: the lane ends that batch and stops, its cursor
# the last row of it.  Returns the run id.
sub pause_at
{
	my ($name, $table, $order, $nth, $case) = @_;
	# (a subquery: FOR UPDATE with OFFSET would lock the rows skipped too)
	$holder->query_safe("BEGIN; SELECT 1 FROM $table WHERE ($order) = (SELECT $order FROM $table"
		  . " ORDER BY $order OFFSET " . ($nth - 1) . " LIMIT 1) FOR UPDATE;");
	my $run = sq($node, qq{SELECT backfill_run('$name', wait => false)});
	ok( poll_until($node,
			"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
			   AND $holder_pid = ANY (pg_blocking_pids(pid))", '1', 180),
		"$case the lane's batch waits on row $nth");
	is(sq($node, qq{SELECT rows FROM backfill_status('$name')}), $nth - 1,
		"$case the pass is under way: " . ($nth - 1) . ' rows done');
	is(sq($node, qq{SELECT backfill_pause('$name')}), 't', "$case paused mid-pass");
	$holder->query_safe('COMMIT');
	ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'},
			'0', 180), "$case paused: its lane left");
	is(sq($node, qq{SELECT rows FROM backfill_status('$name')}), $nth + 4,
		"$case the lane stopped after the batch it was in: " . ($nth + 4) . ' rows done');
	return $run;
}

# rows 61-65 are the 2nd to the 6th of March: the cursor the lane leaves,
# 2026-03-06, reads 06/03/2026 under SQL, DMY, the 3rd of June under MDY
my $run = pause_at('dk', 'dk', 'd', 61, '(a)');
my $cursor = sq($node, q{SELECT cursor FROM backfill_partitions('dk') WHERE cursor IS NOT NULL LIMIT 1});
is($cursor, '2026-03-06', "the cursor is stored in ISO form ($cursor)");

# the next lane logs in under another DateStyle
sq($node, q{ALTER ROLE dk_owner SET DateStyle = 'SQL, MDY'});
sq($node, q{SELECT backfill_resume('dk')});
is(wait_pass_end($node, $run, 300), 'completed', 'resumed under DateStyle SQL, MDY, the pass completes');
is(sq($node, q{SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM dk}),
	'200|0', 'every row done exactly once: none skipped, none twice');
is(sq($node, "SELECT rows FROM backfill.ledger WHERE run_id = $run"), '200',
	'the ledger counts every row once');

# (b) an action that sets DateStyle SQL, DMY for its session; (c) one that
# sets it for its transaction only, on a composite (date, int) key: the
# cursor is written after the action, in the same transaction
$node->safe_psql('postgres', q{
	CREATE TABLE dk2 (d date PRIMARY KEY, n int NOT NULL DEFAULT 0, style text);
	INSERT INTO dk2 (d) SELECT DATE '2026-03-01' + g FROM generate_series(0, 199) g;
	CREATE TABLE dk3 (d date, i int, n int NOT NULL DEFAULT 0, PRIMARY KEY (d, i));
	INSERT INTO dk3 (d, i) SELECT DATE '2026-03-01' + g / 2, g % 2 FROM generate_series(0, 199) g;
	ALTER TABLE dk2 OWNER TO dk_owner;
	ALTER TABLE dk3 OWNER TO dk_owner;
	ALTER ROLE dk_owner RESET DateStyle;
	CREATE FUNCTION restyle(local boolean) RETURNS boolean LANGUAGE sql VOLATILE AS
	  $f$ SELECT pg_catalog.set_config('DateStyle', 'SQL, DMY', local) IS NOT NULL $f$;
});
$node->safe_psql('postgres', q{
	SELECT backfill_declare('dk2', 'dk2', 'n = 0',
		'UPDATE dk2 SET n = n + 1, style = pg_catalog.current_setting(''DateStyle'')
		  WHERE d BETWEEN $1 AND $2 AND public.restyle(false)',
		batch_size => 5, rate => 20, lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
	SELECT backfill_declare('dk3', 'dk3', 'n = 0',
		'UPDATE dk3 SET n = n + 1 WHERE (d, i) BETWEEN ($1, $2) AND ($3, $4) AND public.restyle(true)',
		batch_size => 5, rate => 20, lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
}, extra_params => [ '-U', 'dk_owner' ]);
# paused after 70 rows: dk2's cursor 2026-05-09 (09/05/2026 under SQL, DMY),
# dk3's (2026-04-04,1)
foreach my $t ([ 'b', 'dk2', 'd' ], [ 'c', 'dk3', 'd, i' ])
{
	my ($case, $name, $order) = @$t;
	# (its action setting DateStyle SQL, DMY)
	$run = pause_at($name, $name, $order, 66, "($case)");
	$cursor = sq($node, qq{SELECT cursor FROM backfill_partitions('$name') WHERE cursor IS NOT NULL LIMIT 1});
	like($cursor, qr/^\(?2026-\d\d-\d\d(,\d)?\)?$/, "($case) the cursor is still written in ISO form ($cursor)");
	sq($node, qq{SELECT backfill_resume('$name')});
	is(wait_pass_end($node, $run, 300), 'completed', "($case) resumed by a new lane, the pass completes");
	is(sq($node, qq{SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM $name}),
		'200|0', "($case) every row done exactly once");
	is(sq($node, "SELECT rows FROM backfill.ledger WHERE run_id = $run"), '200',
		"($case) the ledger counts every row once");
}
# the action kept its own setting: after its first batch in a lane it saw SQL, DMY
cmp_ok(sq($node, q{SELECT count(*) FROM dk2 WHERE style = 'SQL, DMY'}), '>', 0,
	'(b) the action kept the DateStyle it set for its session');
$holder->quit;

$node->stop;
done_testing();
