# 111_partitioned.pl
#
# A declaratively partitioned table, PRIMARY KEY (tenant_id, id), 8 leaves by
# tenant (one leaf holds half the rows, ids with gaps), backfilled through
# its parent by 2 lanes with a non-idempotent action (n = n + 1).  While the
# pass runs a lane is killed with SIGKILL three times, the server is shut
# down with -m immediate once, a ninth leaf is attached (its rows need work,
# its keys fall between leaves the pass may already have walked) and one
# leaf is detached.  What must hold:
#   - every row of the 7 leaves that stay is done exactly once;
#   - the attached leaf is never skipped silently: either the pass covered
#     its rows (each once) and completed, or the convergence count found
#     them and the pass failed STALLED (BF006) with exactly those rows left;
#     a retry then does them, each once;
#   - the detached leaf does not fail the pass: its rows leave the table;
#     those the pass reached before the detach are done once, none twice;
#   - the key scans over the parent are index scans of the leaves (a Merge
#     Append in key order), never a sequential scan or a sort.
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

my $node = BackfillTest::node('partitioned', crash_restart => 1,
	extra_conf => "shared_preload_libraries = 'pg_backfill,auto_explain'\n"
	  . "max_prepared_transactions = 5\n");

# tenants 10, 20, ..., 80, one leaf each; tenant 10 holds 80000 rows, the
# others 12000; ids with gaps
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE part_owner LOGIN;
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
	       LATERAL generate_series(1, CASE WHEN t = 1 THEN 80000 ELSE 12000 END) i;
	ANALYZE events;
	-- the leaf to attach: tenant 45, between 40 and 50, its rows still to do
	CREATE TABLE events_45 (LIKE events INCLUDING DEFAULTS);
	ALTER TABLE events_45 ADD PRIMARY KEY (tenant_id, id);
	INSERT INTO events_45 (tenant_id, id) SELECT 45, i * 5 FROM generate_series(1, 3000) i;
	ALTER TABLE events OWNER TO part_owner;
	ALTER TABLE events_45 OWNER TO part_owner;
	DO $$ BEGIN
	    FOR t IN 1..8 LOOP
	        EXECUTE format('ALTER TABLE events_%s OWNER TO part_owner', t * 10);
	    END LOOP;
	END $$;
	ALTER ROLE part_owner SET auto_explain.log_min_duration = 0;
});
my $ROWS = $node->safe_psql('postgres', 'SELECT count(*) FROM events');
is($ROWS, 80000 + 7 * 12000, 'eight leaves, one of them half the rows');

$node->safe_psql('postgres', q{
	SET ROLE part_owner;
	SELECT backfill_declare(name => 'pt', relation => 'events', predicate => 'n = 0',
		action => 'UPDATE events SET n = n + 1
		            WHERE (tenant_id, id) >= ($1, $2)
		              AND (tenant_id < $3 OR (tenant_id = $3 AND id <= $4)) AND n = 0',
		batch_size => 1000, rate => 6, max_parallel => 2,
		lock_timeout => '1 hour', batch_timeout => '1 hour');
});
# the gates, on the leaves: rows 6001 (id 18004) of leaves 60 and 70, row
# 9001 (id 27004) of leaf 70
for my $g ([ 'c60', 60, 18004 ], [ 'c70', 70, 18004 ], [ 'd70', 70, 27004 ])
{
	my ($gid, $leaf, $id) = @$g;
	gate_close($node, $gid, "events_$leaf", "tenant_id = $leaf AND id = $id");
}
is($node->safe_psql('postgres', q{SELECT key_columns FROM backfill.declaration WHERE name = 'pt'}),
	'{tenant_id,id}', 'the partitioned primary key (tenant_id, id) is the key');
my $run = $node->safe_psql('postgres', q{SET ROLE part_owner; SELECT backfill_run('pt')});
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
			       (SELECT min(holder_pid) FROM backfill_partitions('pt') WHERE holder_alive
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

# the leaf attached mid-pass, the leaf detached mid-pass
my ($p1, $done1) = lane_after(int($ROWS * 0.50));
ok(defined $p1, 'a lane at work when the leaf is attached');
$node->safe_psql('postgres',
	q{ALTER TABLE events ATTACH PARTITION events_45 FOR VALUES FROM (45) TO (50)});
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
my $status = ledger($node, $run, 'status');
my $attached_left = $node->safe_psql('postgres', q{SELECT count(*) FROM events_45 WHERE n = 0});
note("pass $status; the attached leaf has $attached_left rows left");
if ($status eq 'completed')
{
	is($attached_left, '0', 'completed: the attached leaf was covered, every one of its rows done');
}
else
{
	is(ledger($node, $run, 'error_code'), 'BF006',
		'not covered: the convergence count found the attached leaf and the pass stalled (BF006)');
	is($node->safe_psql('postgres', "SELECT remaining FROM backfill.run WHERE run_id = $run"),
		$attached_left, "the run says exactly the attached leaf's $attached_left rows are left");
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM events WHERE n > 1}), '0',
	'no row of the table was done twice');
is($node->safe_psql('postgres', q{SELECT count(*) FROM events WHERE n <> 1 AND tenant_id <> 45}),
	'0', 'every row of the seven leaves that stayed was done exactly once');
is($node->safe_psql('postgres', q{SELECT count(*) FROM events_80 WHERE n > 1}), '0',
	'the detached leaf: no row done twice');
is($node->safe_psql('postgres', "SELECT rows FROM backfill.ledger WHERE run_id = $run"),
	$node->safe_psql('postgres', q{SELECT (SELECT count(*) FROM events WHERE n = 1)
	                                    + (SELECT count(*) FROM events_80 WHERE n = 1)}),
	'the ledger counts exactly the rows done, the detached leaf\'s included');

# the attached leaf, if the pass stalled on it, is done by a new pass, once
if ($status ne 'completed')
{
	my $again = $node->safe_psql('postgres',
		q{SET ROLE part_owner; SELECT backfill_run('pt', force => true)});
	is(wait_pass_end($node, $again, 300), 'completed', 'a forced re-run completes');
	is($node->safe_psql('postgres', q{SELECT count(*) FROM events WHERE n <> 1}), '0',
		'after it every row of the table, the attached leaf\'s too, was done exactly once');
	is(ledger($node, $again, 'rows'), $attached_left, 'the re-run did just the rows left');
}

my $log = slurp_file($node->logfile);
is(scalar(() = $log =~ /was terminated by signal 9/g), 3, 'three lanes were killed by signal 9');

# the key scans over the parent, as auto_explain logged them
my @scans;
for my $entry (split /\n(?=\d{4}-\d\d-\d\d )/, $log)
{
	push @scans, $entry
	  if $entry =~ /plan:\n\s*Query Text: SELECT tenant_id, id FROM public\.events WHERE ROW\(tenant_id, id\) OPERATOR\(pg_catalog\.>\)/;
}
cmp_ok(scalar(@scans), '>=', 20, scalar(@scans) . ' key scans over the parent were explained');
is(scalar(grep { /Seq Scan|Sort/ } @scans), 0, 'no key scan has a sequential scan or a sort');
is(scalar(grep { !/Index (Only )?Scan using events_\d+_pkey on events_\d+/ } @scans), 0,
	'every key scan reads the leaves through their own primary key indexes');

$node->stop;
done_testing();
