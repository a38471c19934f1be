# 110_composite_keys.pl
#
# A multi-tenant table keyed (tenant_id, id), with gaps in id and tenants of
# very different sizes (one holds half the rows), backfilled by 2 lanes
# with a non-idempotent action (n = n + 1).  A lane is killed with SIGKILL
# three times and the server shut down with -m immediate once while the
# pass runs: every row is done exactly once, the ledger counts the table's
# rows, and every partition resumed from its composite cursor.  Planning
# found few distinct tenants and split the big one by id.  auto_explain
# (for the lanes' role only) shows every batch's key scan as an index range
# scan of the primary key, its row comparison an index condition, never a
# sequential scan or a sort, and the action planned on the index too.  A
# scoped pass over one tenant then walks only that tenant's range.
#
# "While the pass runs" is made, not hoped for: a prepared transaction
# (it survives the kills' crash restarts and the immediate shutdown)
# holds the row lock of the table's last key, so the pass cannot end
# before the test lets it go, however fast the lanes or slow the test.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('composite_keys', crash_restart => 1,
	extra_conf => "shared_preload_libraries = 'pg_backfill,auto_explain'\n"
	  . "max_prepared_transactions = 5\n");

# 20 tenants: tenant 1 holds 120000 rows, 2-4 24000 each, the rest 3000;
# ids with gaps (i * 3 + i % 2)
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE tenant_owner LOGIN;
	CREATE TABLE tenants (tenant_id int, id bigint, n int NOT NULL DEFAULT 0,
	                      PRIMARY KEY (tenant_id, id));
	INSERT INTO tenants (tenant_id, id)
	SELECT t, i * 3 + i % 2
	  FROM generate_series(1, 20) t,
	       LATERAL generate_series(1, CASE WHEN t = 1 THEN 120000 WHEN t <= 4 THEN 24000
	                                       ELSE 3000 END) i;
	ANALYZE tenants;
	ALTER TABLE tenants OWNER TO tenant_owner;
	-- the lanes log in as tenant_owner: their plans, and nobody else's
	ALTER ROLE tenant_owner SET auto_explain.log_min_duration = 0;
});
my $ROWS = $node->safe_psql('postgres', 'SELECT count(*) FROM tenants');
is($ROWS, 120000 + 3 * 24000 + 16 * 3000, 'the table holds the skewed tenants');

# 2 lanes x 8 batches/s x 1000 rows: about 15 s undisturbed
$node->safe_psql('postgres', q{
	SET ROLE tenant_owner;
	SELECT backfill_declare(name => 'ck', relation => 'tenants', predicate => 'n = 0',
		action => 'UPDATE tenants SET n = n + 1
		            WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $4)',
		batch_size => 1000, rate => 8, max_parallel => 2,
		lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
});
# the gate on the last key: the batch that reaches it waits until the end
gate_close($node, 'last_key', 'tenants', q{(tenant_id, id) = (SELECT tenant_id, id FROM tenants
	ORDER BY tenant_id DESC, id DESC LIMIT 1)});
is($node->safe_psql('postgres', q{SELECT key_columns FROM backfill.declaration WHERE name = 'ck'}),
	'{tenant_id,id}', 'the primary key (tenant_id, id) is the key');
my $run = $node->safe_psql('postgres', q{SET ROLE tenant_owner; SELECT backfill_run('ck')});
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
			       (SELECT min(holder_pid) FROM backfill_partitions('ck') WHERE holder_alive
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

# three kills of a lane, at about 15%, 30% and 45% of the rows
my $kills = 0;
for my $share (0.15, 0.30, 0.45)
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
	ok(defined $victim, "a lane at work after " . int($ROWS * $share) . " rows")
	  or BAIL_OUT("no lane at work; log:\n" . slurp_file($node->logfile));
	cmp_ok($done, '<', $ROWS, "kill " . ($kills + 1) . " comes before the pass ends ($done rows)");
	is($sent, 1, "SIGKILL to lane $victim");
	$kills++;
	ok(wait_for_server($node, 120), 'the server accepts connections after the crash');
}

# one immediate shutdown at about 60%
my ($pid_before, $done_before) = lane_after(int($ROWS * 0.60));
ok(defined $pid_before, 'a lane at work before the immediate shutdown');
cmp_ok($done_before, '<', $ROWS, "the shutdown comes before the pass ends ($done_before rows)");
$node->stop('immediate');
$node->start;
is(ledger($node, $run, 'status'), 'running', 'the pass is still running after the crash');
gate_open($node, 'last_key');

ok(pass_ended($node, $run, 600), 'the pass ended');
is(ledger($node, $run, 'status'), 'completed', 'the pass completed after 3 kills and a crash');
each_row_done_once($node, 'tenants', $ROWS, $run);
is($node->safe_psql('postgres', "SELECT sum(rows) FROM backfill.partition WHERE run_id = $run"),
	$ROWS, "the partitions' checkpoints count exactly $ROWS rows");
cmp_ok($node->safe_psql('postgres', "SELECT interruptions FROM backfill.run WHERE run_id = $run"),
	'>=', 4, 'the run counts an interruption for each kill and the crash');
cmp_ok($node->safe_psql('postgres', q{SELECT sum(reclaims) FROM backfill_partitions('ck')}),
	'>=', 4, 'dead leases were reclaimed');

# the plan and the row literals
is($node->safe_psql('postgres', q{SELECT plan_method, partitions FROM backfill_status('ck')}),
	'few_values|' . $node->safe_psql('postgres',
		q{SELECT count(*) FROM backfill_partitions('ck')}),
	"20 tenants: planned from the leading column's few values");
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM backfill_partitions('ck')
	 WHERE hi LIKE '(1,%'}), '>=', 2,
	'tenant 1, half the rows, is split by id into several partitions');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill_partitions('ck') p
	 WHERE NOT EXISTS (SELECT 1 FROM tenants t WHERE ROW(t.tenant_id, t.id)::text = p.cursor)
	    OR (p.hi IS NOT NULL AND NOT EXISTS (SELECT 1 FROM tenants t
	                                         WHERE ROW(t.tenant_id, t.id)::text = p.hi))}),
	'0', 'every cursor and bound is a key of the table, written as a row literal');
is($node->safe_psql('postgres', q{SELECT cursor FROM backfill_partitions('ck')
	 ORDER BY part_no DESC LIMIT 1}),
	$node->safe_psql('postgres', q{SELECT ROW(tenant_id, id)::text FROM tenants
	 ORDER BY tenant_id DESC, id DESC LIMIT 1}),
	'the last partition ends at the last key');

my $log = slurp_file($node->logfile);
is(scalar(() = $log =~ /was terminated by signal 9/g), 3, 'the log shows three lanes killed by signal 9');
like($log, qr/backfill "ck" run $run: resuming partition \d+ from its checkpoint after lane \d+ died\n[^\n]*DETAIL:  Last key done: \(\d+,\d+\)\./,
	'a partition resumed from its composite cursor, "Last key done: (tenant_id,id)"');

# ---- the plans of the batches, as auto_explain logged them
# one log entry per statement: split where a line starts with a timestamp
sub plans_of
{
	my ($prefix) = @_;
	my @plans;
	for my $entry (split /\n(?=\d{4}-\d\d-\d\d )/, slurp_file($node->logfile))
	{
		next unless $entry =~ /plan:\n\s*Query Text: \Q$prefix\E/;
		push @plans, $entry;
	}
	return @plans;
}
my @scans = grep { !/backfill_input/ }
  plans_of('SELECT tenant_id, id FROM public.tenants WHERE ROW(tenant_id, id) OPERATOR(pg_catalog.>)');
cmp_ok(scalar(@scans), '>=', 50, scalar(@scans) . ' key scans of batches were explained');
is(scalar(grep { !/Index (Only )?Scan using tenants_pkey on tenants/ } @scans), 0,
	'every key scan is an index scan of the primary key');
is(scalar(grep { !/Index Cond: \(\(?ROW\(tenant_id, id\) > ROW\(/ } @scans), 0,
	'the row comparison is the index condition of every key scan');
is(scalar(grep { /Seq Scan|Sort/ } @scans), 0, 'no key scan has a sequential scan or a sort');
my @actions = plans_of('UPDATE tenants SET n = n + 1');
cmp_ok(scalar(@actions), '>=', 50, scalar(@actions) . ' actions were explained');
is(scalar(grep { /Seq Scan/ } @actions), 0,
	'no action scans the table: the generic plan uses the index, even inside tenant 1');

# ---- a scoped pass over tenant 3 walks only tenant 3's rows
$node->safe_psql('postgres', q{
	SET ROLE tenant_owner;
	SELECT backfill_declare(name => 'ck_tenant', relation => 'tenants',
		predicate => 'tenant_id = (backfill_input()->>''tenant'')::int AND n = 1',
		action => 'UPDATE tenants SET n = n + 1
		            WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $4) AND n = 1',
		input => '{"tenant": "integer"}', scope => 'input->>''tenant''',
		batch_size => 1000, rate => 50, max_parallel => 2, guard => false);
});
my $scoped = $node->safe_psql('postgres',
	q{SET ROLE tenant_owner; SELECT backfill_run('ck_tenant', input => '{"tenant": 3}')});
is(wait_pass_end($node, $scoped, 300), 'completed', 'the scoped pass over tenant 3 completed');
is($node->safe_psql('postgres', q{SELECT string_agg(DISTINCT tenant_id::text || ':' || n, ',')
	 FROM tenants WHERE n <> 1 OR tenant_id = 3}),
	'3:2', 'tenant 3 done once more, every other tenant untouched');
is(ledger($node, $scoped, 'rows'), 24000, 'the scoped ledger counts tenant 3\'s rows');
my @tenant_scans = grep { /backfill_input/ } plans_of('SELECT tenant_id, id FROM public.tenants WHERE ');
cmp_ok(scalar(@tenant_scans), '>=', 10, 'the scoped key scans were explained');
is(scalar(grep { !/Index Cond: .*tenant_id = .*ROW\(tenant_id, id\)|Index Cond: .*ROW\(tenant_id, id\).*tenant_id = / } @tenant_scans),
	0, 'the tenant of the predicate bounds the index scan with the row comparison: only its range is read');

$node->stop;
done_testing();
