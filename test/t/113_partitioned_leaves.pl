# 113_partitioned_leaves.pl
#
# A partitioned table planned per leaf (issue 12, item 4).  PRIMARY KEY
# (tenant_id, id), 8 leaves by RANGE on tenant_id with gaps between them,
# one leaf half the rows, ids with gaps; 2 lanes, a non-idempotent action
# (n = n + 1) on the parent.  While the pass runs a lane is killed with
# SIGKILL three times, the server is shut down with -m immediate once, a
# ninth leaf is attached in a gap between two leaves (no partition of the
# plan reaches its keys) and the last leaf is detached.  What
# must hold:
#   - the plan is per leaf: "per leaf (8 leaves)", every partition names its
#     leaf and keeps inside that leaf's interval, the big leaf split most;
#   - the attached leaf is covered: the end of the pass lists the leaves
#     again and gives it a partition of its own, which a lane works, so the
#     pass completes with each of its rows done once;
#   - the detached leaf does not fail the pass: its partition ends done with
#     what it did (logged); no row of it twice;
#   - every row of the 7 leaves that stay done exactly once; the ledger
#     counts exactly the rows done;
#   - every key scan names the parent and reads at most one leaf, through
#     that leaf's own primary key index: no Append or Merge Append of
#     others, no sequential scan, no sort.
#
# "While the pass runs" is made, not hoped for, with gates: prepared
# transactions (they survive crash restarts) holding the row locks of
# known rows of leaves 60 and 70, on the leaves themselves (not through
# the parent), so a lane's batch that reaches one waits there.  The pass
# cannot end before the test opens them; the leaf 80 is detached while
# the two lanes wait in the middle of leaves 60 and 70 (so leaf 80 has
# all its rows still to do), the detach queued before their batches are
# let go; a third gate, later in leaf 70, keeps a lane at work for the
# immediate shutdown.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('partitioned_leaves', crash_restart => 1,
	extra_conf => "shared_preload_libraries = 'pg_backfill,auto_explain'\n"
	  . "max_prepared_transactions = 5\n");

# tenants 10, 20, ..., 80 in leaves [t, t + 5); tenant 10 holds 42000 rows,
# the others 6000 each
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE leaf_owner LOGIN;
	CREATE TABLE events (tenant_id int, id bigint, n int NOT NULL DEFAULT 0,
	                     PRIMARY KEY (tenant_id, id)) PARTITION BY RANGE (tenant_id);
	DO $$
	BEGIN
	    FOR t IN 1..8 LOOP
	        EXECUTE format('CREATE TABLE events_%s PARTITION OF events FOR VALUES FROM (%s) TO (%s)',
	                       t * 10, t * 10, t * 10 + 5);
	    END LOOP;
	END
	$$;
	INSERT INTO events (tenant_id, id)
	SELECT t * 10, i * 3 + i % 2
	  FROM generate_series(1, 8) t,
	       LATERAL generate_series(1, CASE WHEN t = 1 THEN 42000 ELSE 6000 END) i;
	ANALYZE events;
	-- the leaf to attach: tenant 25, between 20 and 30, its rows still to do
	CREATE TABLE events_25 (LIKE events INCLUDING DEFAULTS);
	ALTER TABLE events_25 ADD PRIMARY KEY (tenant_id, id);
	INSERT INTO events_25 (tenant_id, id) SELECT 25, i * 5 FROM generate_series(1, 2000) i;
	ALTER TABLE events OWNER TO leaf_owner;
	ALTER TABLE events_25 OWNER TO leaf_owner;
	DO $$ BEGIN
	    FOR t IN 1..8 LOOP
	        EXECUTE format('ALTER TABLE events_%s OWNER TO leaf_owner', t * 10);
	    END LOOP;
	END $$;
	ALTER ROLE leaf_owner SET auto_explain.log_min_duration = 0;
});
my $ROWS = $node->safe_psql('postgres', 'SELECT count(*) FROM events');
is($ROWS, 42000 + 7 * 6000, 'eight leaves, one of them half the rows');

$node->safe_psql('postgres', q{
	SET ROLE leaf_owner;
	SELECT backfill_declare(name => 'pl', relation => 'events', predicate => 'n = 0',
		action => 'UPDATE events SET n = n + 1
		            WHERE (tenant_id, id) >= ($1, $2)
		              AND (tenant_id < $3 OR (tenant_id = $3 AND id <= $4)) AND n = 0',
		batch_size => 500, rate => 8, max_parallel => 2,
		lock_timeout => '1 hour', batch_timeout => '1 hour');
});
# the gates, on the leaves: rows 3001 (id 9004) of leaves 60 and 70, row
# 4501 (id 13504) of leaf 70
for my $g ([ 'c60', 60, 9004 ], [ 'c70', 70, 9004 ], [ 'd70', 70, 13504 ])
{
	my ($gid, $leaf, $id) = @$g;
	gate_close($node, $gid, "events_$leaf", "tenant_id = $leaf AND id = $id");
}
my $run = $node->safe_psql('postgres', q{SET ROLE leaf_owner; SELECT backfill_run('pl')});
like($run, qr/^\d+$/, 'backfill_run returned a run id');

# a live lane once the pass has done more than $rows rows
sub lane_after
{
	my ($rows) = @_;
	my $deadline = time() + 300;
	while (time() < $deadline)
	{
		my ($rc, $out) = eval { $node->psql('postgres', qq{
			SELECT (SELECT sum(rows) FROM backfill.partition WHERE run_id = $run),
			       (SELECT min(holder_pid) FROM backfill_partitions('pl') WHERE holder_alive
			           AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = holder_pid
			                        AND a.backend_type = 'pg_backfill lane'))}) };
		if (defined $rc && $rc == 0)
		{
			my ($done, $pid) = split /\|/, $out;
			return ($pid, $done) if $done ne '' && $done > $rows && $pid ne '';
		}
		usleep(100_000);
	}
	return;
}

# the plan, once the first lane has made it
ok(poll_until($node, "SELECT count(*) > 0 FROM backfill.partition WHERE run_id = $run", 't', 180),
	'the pass is planned');
is($node->safe_psql('postgres', "SELECT plan_method FROM backfill.run WHERE run_id = $run"),
	'per leaf (8 leaves)', 'the plan follows the 8 leaves');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill_partitions('pl') WHERE leaf IS NULL}),
	'0', 'every partition names its leaf');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM backfill_partitions('pl') p
	 WHERE p.leaf_range <> format('[%s,%s)', substr(p.leaf::text, 8), substr(p.leaf::text, 8)::int + 5)
	    OR (p.lo IS NOT NULL AND p.lo NOT LIKE '(' || substr(p.leaf::text, 8) || ',%')
	    OR (p.hi IS NOT NULL AND p.hi NOT LIKE '(' || substr(p.leaf::text, 8) || ',%')}),
	'0', "each partition keeps inside its leaf's interval of tenant_id");
cmp_ok($node->safe_psql('postgres',
		q{SELECT count(*) FROM backfill_partitions('pl') WHERE leaf = 'events_10'::regclass}),
	'>', 1, 'the leaf with half the rows is split into several partitions');

for my $share (0.10, 0.25, 0.40)
{
	my ($victim, $done, $sent);
	# (a lane that has just found nothing more to claim may exit between
	# the look and the kill: then the next look finds the other one)
	for my $try (1 .. 5)
	{
		($victim, $done) = lane_after(int($ROWS * $share));
		last unless defined $victim;
		$sent = kill('KILL', $victim);
		last if $sent;
	}
	ok(defined $victim, 'a lane at work after ' . int($ROWS * $share) . ' rows')
	  or BAIL_OUT("no lane at work; log:\n" . slurp_file($node->logfile));
	cmp_ok($done, '<', $ROWS, "the kill comes before the pass ends ($done rows)");
	is($sent, 1, "SIGKILL to lane $victim");
	ok(wait_for_server($node, 120), 'the server accepts connections after the crash');
}

# the leaf attached mid-pass, in the gap between the leaves of tenants 20
# and 30; the leaf detached mid-pass
my ($p1, $done1) = lane_after(int($ROWS * 0.50));
ok(defined $p1, 'a lane at work when the leaf is attached');
$node->safe_psql('postgres',
	q{ALTER TABLE events ATTACH PARTITION events_25 FOR VALUES FROM (25) TO (30)});
# the lanes wait in the middle of leaves 60 and 70: no lane has reached 80
ok(gates_waited_at($node, 'c60,c70', 300), 'the lanes wait at the gates of leaves 60 and 70');
my $left_80 = $node->safe_psql('postgres', q{SELECT count(*) FROM events_80 WHERE n = 0});
cmp_ok($left_80, '>', 0, "the last leaf still has $left_80 rows to do when it is detached");
# the detach waits for the lanes' batches; let them go once it does: their
# next batches queue behind it
my $detach = $node->background_psql('postgres');
$detach->set_query_timer_restart();
$detach->query_until(qr/detaching/, "\\echo detaching\nALTER TABLE events DETACH PARTITION events_80;\n");
ok( poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'ALTER TABLE events DETACH%'
		    AND wait_event_type = 'Lock'}, '1', 180),
	'the detach waits for the lanes');
gate_open($node, 'c60', 'c70');
$detach->query_safe('SELECT 1');
$detach->quit;
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_inherits WHERE inhrelid = 'events_80'::regclass}),
	'0', 'the leaf 80 is detached');
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM events_80 WHERE n = 0}), '>', 0,
	'the detached leaf had rows left to do');

# a lane goes on in leaf 70 to its last gate
ok(gates_waited_at($node, 'd70', 300), 'a lane waits at the last gate, in leaf 70');
my ($p2, $done2) = lane_after(int($ROWS * 0.60));
ok(defined $p2, 'a lane at work before the immediate shutdown');
$node->stop('immediate');
$node->start;
is(ledger($node, $run, 'status'), 'running', 'the pass is still running after the crash');
gate_open($node, 'd70');

ok(pass_ended($node, $run, 600), 'the pass ended');
is(ledger($node, $run, 'status'), 'completed', 'the pass completed');
is($node->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE n = 1) || '/' || count(*) FROM events_25}),
	'2000/2000', 'the attached leaf was covered: each of its rows done once');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill_partitions('pl')
                                   WHERE leaf = 'events_25'::regclass AND state = 'done'}),
	'1', 'the attached leaf got a partition of its own');
is($node->safe_psql('postgres', q{SELECT count(*) FROM events WHERE n > 1}), '0',
	'no row of the table was done twice');
is($node->safe_psql('postgres', q{SELECT count(*) FROM events WHERE n <> 1 AND tenant_id <> 25}),
	'0', 'every row of the seven leaves that stayed was done exactly once');
is($node->safe_psql('postgres', q{SELECT count(*) FROM events_80 WHERE n > 1}), '0',
	'the detached leaf: no row done twice');
is($node->safe_psql('postgres', "SELECT rows FROM backfill.ledger WHERE run_id = $run"),
	$node->safe_psql('postgres', q{SELECT (SELECT count(*) FROM events WHERE n = 1)
	                                    + (SELECT count(*) FROM events_80 WHERE n = 1)}),
	'the ledger counts exactly the rows done, the detached leaf\'s included');

my $log = slurp_file($node->logfile);
is(scalar(() = $log =~ /was terminated by signal 9/g), 3, 'three lanes were killed by signal 9');
like($log, qr/leaf public\.events_25 was attached since the plan; partition \d+ covers it/,
	'the end of the pass found the attached leaf');
like($log, qr/partition \d+ is done; its leaf was detached or dropped while the pass ran/,
	"the detached leaf's partition ended done, logged");

# the key scans, as auto_explain logged them
my @scans;
for my $entry (split /\n(?=\d{4}-\d\d-\d\d )/, $log)
{
	push @scans, $entry
	  if $entry =~ /plan:\n\s*Query Text: SELECT tenant_id, id FROM public\.events WHERE .*\) ORDER BY tenant_id, id LIMIT \$1\n/s;
}
cmp_ok(scalar(@scans), '>=', 40, scalar(@scans) . ' key scans over the parent were explained');
is(scalar(grep { /Seq Scan|Sort|Append/ } @scans), 0,
	'no key scan has a sequential scan, a sort or an append of leaves');
my @leafy = grep { /Index (Only )?Scan using events_\d+_pkey on events_\d+/ } @scans;
is(scalar(grep { my %l = map { $_ => 1 } /on (events_\d+)/g; keys(%l) > 1 } @scans), 0,
	'no key scan reads more than one leaf');
cmp_ok(scalar(@leafy), '>=', scalar(@scans) - 3,
	'every key scan but those of the detached leaf reads its leaf through its own index');
is(scalar(grep { !/Index (Only )?Scan using events_\d+_pkey on events_\d+|One-Time Filter: false/ } @scans),
	0, 'the others are pruned to nothing (the detached leaf\'s interval)');

$node->stop;
done_testing();
