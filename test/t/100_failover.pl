# 100_failover.pl -- a pass survives the loss of its primary.
#
# A primary and a streaming standby on loopback.  A pass with a
# non-idempotent action (n = n + 1) runs on the primary; the primary is
# killed with SIGKILL mid-pass and the standby promoted.  "Mid-pass" is
# made, not hoped for: a prepared transaction holds the row lock of the
# last row, so the pass cannot end, and the primary is killed once a lane
# waits on that lock inside a batch, holding a lease the standby has seen.
# (A prepared transaction, not a session: a session of the killed primary
# would end and let the orphaned lane finish the pass before it noticed
# the postmaster gone, its walsender still streaming.)  The standby has
# the prepared transaction too; once promoted, the test rolls it back and
# the new primary's lanes take the dead primary's leases.  The checkpoints
# the standby received came with the batches they belong to (one WAL
# record stream, one transaction each), so the new primary resumes from
# them: every row ends at n = 1 and the ledger holds one completed pass.
# Done with asynchronous and with synchronous replication.
#
# While the standby is still a standby, the reports work read-only, and
# everything that would write is refused with BF026 and a hint, not with a
# bare "read-only transaction" error; no pg_backfill process runs or logs
# errors there.  After promotion the launcher starts without a restart.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

# the metrics queries (metrics/queries.yaml), each a "query: |" block
sub metrics_queries
{
	my $yaml = slurp_file("$FindBin::RealBin/../../metrics/queries.yaml");
	my (%q, $family, $in);
	for my $line (split /\n/, $yaml)
	{
		if ($line =~ /^([a-z_]+):\s*$/) { $family = $1; $in = 0; next; }
		if ($line =~ /^  query: \|/) { $in = 1; $q{$family} = ''; next; }
		if ($in && $line =~ /^    (.*)$/) { $q{$family} .= "$1\n"; next; }
		$in = 0 if $line =~ /^  \S/;
	}
	return %q;
}

# a primary and a streaming standby of it, pg_backfill preloaded on both
sub pair
{
	my ($name, $sync) = @_;
	my $primary = BackfillTest::node("${name}_primary",
		init => { allows_streaming => 1 }, extra_conf => 'max_prepared_transactions = 5');
	$primary->safe_psql('postgres', 'CREATE EXTENSION pg_backfill');
	$primary->backup("${name}_backup");
	my $standby = PostgreSQL::Test::Cluster->new("${name}_standby");
	$standby->init_from_backup($primary, "${name}_backup", has_streaming => 1);
	$standby->start;
	if ($sync)
	{
		# only now: with no standby, every commit would wait
		$primary->safe_psql('postgres', q{ALTER SYSTEM SET synchronous_standby_names = '*'});
		$primary->reload;
		poll_until($primary, q{SELECT sync_state FROM pg_stat_replication}, 'sync', 120);
	}
	return ($primary, $standby);
}

# declare and start a pass over $rows rows; returns its run id.  A
# prepared transaction ('gate') holds the row lock of the last row (id =
# $rows) from before the pass starts: a batch over that row waits on it
# (lock_timeout and batch_timeout far beyond the test), so the pass cannot
# end while it is held, whatever the speed of the machine
sub start_pass
{
	my ($node, $rows) = @_;
	$node->safe_psql('postgres', qq{
		CREATE TABLE t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0, done bool NOT NULL DEFAULT false);
		INSERT INTO t (id) SELECT g FROM generate_series(1, $rows) g;
		ANALYZE t;
		SELECT backfill_declare('fill_t', 't', 'NOT done',
			'UPDATE t SET n = n + 1, done = true WHERE id BETWEEN \$1 AND \$2',
			batch_size => 1000, rate => 100000, max_parallel => 2,
			lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
	});
	$node->safe_psql('postgres', qq{BEGIN; SELECT id FROM t WHERE id = $rows FOR UPDATE;
		PREPARE TRANSACTION 'gate';});
	return $node->safe_psql('postgres', q{SELECT backfill_run('fill_t')});
}

# once the pass is well under way (the standby has checkpoints of it) and a
# lane waits on the gate inside a batch (its lease on the standby too),
# kill the primary, promote the standby, open the gate there, and check the
# pass ends there exactly once
sub fail_over
{
	my ($label, $primary, $standby, $run_id, $rows) = @_;

	ok( poll_until($standby,
			"SELECT coalesce(sum(rows), 0) >= $rows / 5 FROM backfill.partition WHERE run_id = $run_id",
			't', 300),
		"$label: the standby received checkpoints of the running pass");
	# (a prepared transaction blocks as pid 0)
	my $gated = q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		AND 0 = ANY (pg_blocking_pids(pid))};
	ok(poll_until($primary, "SELECT count(*) FROM ($gated) g", '1', 300),
		"$label: a lane waits inside a batch on the gate's row lock");
	my $lane_pid = $primary->safe_psql('postgres', $gated);
	ok( poll_until($standby,
			"SELECT count(*) FROM backfill.partition WHERE run_id = $run_id
			   AND state = 'running' AND holder_pid = " . ($lane_pid || 0), '1', 300),
		"$label: the standby has the waiting lane's lease");
	my $done_before = $primary->safe_psql('postgres',
		"SELECT count(*) FROM t WHERE done");
	cmp_ok($done_before, '<', $rows, "$label: the primary is killed mid-pass ($done_before of $rows done)");
	$primary->kill9;

	$standby->promote;
	ok( poll_until($standby, 'SELECT pg_is_in_recovery()', 'f', 120),
		"$label: the standby was promoted");
	is($standby->safe_psql('postgres', q{SELECT gid FROM pg_prepared_xacts}), 'gate',
		"$label: the promoted standby has the gate");
	$standby->safe_psql('postgres', q{ROLLBACK PREPARED 'gate'});
	is(wait_pass_end($standby, $run_id, 600), 'completed',
		"$label: the pass completed on the new primary");
	is( sq($standby, 'SELECT count(*), count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM t'),
		"$rows|$rows|0", "$label: every row was done exactly once across the failover");
	is( sq($standby, "SELECT rows = $rows, error_code IS NULL FROM backfill.ledger WHERE run_id = $run_id"),
		't|t', "$label: the ledger counts every row once");
	is(sq($standby, q{SELECT count(*) FROM backfill.ledger WHERE ledger_name = 'fill_t'}),
		'1', "$label: one pass, no second one started by the failover");
	cmp_ok(sq($standby, "SELECT sum(reclaims) FROM backfill.partition WHERE run_id = $run_id"),
		'>=', 1, "$label: the new primary's lanes reclaimed the dead primary's leases");
	return;
}

# ---- asynchronous replication; the standby's read-only face on the way
my ($primary, $standby) = pair('async', 0);
# (100,000 rows: the gate, not the size of the table, keeps the pass
# running through the checks below)
my $ROWS = 100_000;
my $run_id = start_pass($primary, $ROWS);
ok(poll_until($standby, "SELECT count(*) FROM backfill.ledger WHERE run_id = $run_id", '1', 120),
	'async: the standby has the ledger row of the running pass');

# reports work on the hot standby
my ($rc, $out, $err) = $standby->psql('postgres',
	q{SELECT status, phase IS NOT NULL FROM backfill_status('fill_t')});
is($rc, 0, 'standby: backfill_status works read-only') or diag($err);
($rc, $out, $err) = $standby->psql('postgres', q{SELECT name, state FROM backfill_pending()});
is($out, 'fill_t|running', 'standby: backfill_pending works read-only') or diag($err);
($rc, $out, $err) = $standby->psql('postgres', q{SELECT count(*) > 0 FROM backfill_partitions('fill_t')});
is($out, 't', 'standby: backfill_partitions works read-only') or diag($err);
($rc, $out, $err) = $standby->psql('postgres', q{SELECT status FROM backfill_ledger});
is($out, 'running', 'standby: the ledger view works read-only') or diag($err);
my %metrics = metrics_queries();
ok(scalar(keys %metrics) >= 2, 'metrics/queries.yaml has queries');
for my $family (sort keys %metrics)
{
	($rc, $out, $err) = $standby->psql('postgres', $metrics{$family});
	is($rc, 0, "standby: metrics query $family works read-only") or diag($err);
}

# what would write is refused with its own SQLSTATE and a hint: the
# backfills' controls and every writer of the outbox
for my $call (
	q{SELECT backfill_run('fill_t')},
	q{SELECT backfill_run('fill_t', force => true)},
	q{SELECT backfill_pause('fill_t')},
	q{SELECT backfill_resume('fill_t')},
	q{SELECT backfill_cancel('fill_t')},
	q{SELECT backfill_retry('fill_t')},
	q{SELECT backfill_drop('fill_t')},
	q{SELECT backfill_declare('fill_t2', 't', 'NOT done', 'UPDATE t SET done = true WHERE id BETWEEN $1 AND $2 AND (NOT done)')},
	q{SELECT backfill_outbox_emit('topic', 'k', '{}')},
	q{SELECT backfill_outbox_sink('topic', 'notify', 'chan')},
	q{SELECT backfill_outbox_grant('topic', 'postgres')},
	q{SELECT backfill_outbox_revoke('topic', 'postgres')},
	q{SELECT backfill_outbox_requeue(1)})
{
	($rc, $out, $err) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\n$call");
	like($err, qr/ERROR:\s+BF026: .*standby/, "standby refuses with BF026: $call");
	like($err, qr/HINT:\s+.*primary/, "standby's refusal hints at the primary: $call");
}

fail_over('async', $primary, $standby, $run_id, $ROWS);

my $log = slurp_file($standby->logfile);
my ($before_promote) = split /received promote request/, $log;
unlike($before_promote, qr/pg_backfill launcher started|background worker "pg_backfill/,
	'standby: no pg_backfill worker started, exited or failed while in recovery');
like($log, qr/received promote request.*pg_backfill launcher started/s,
	'standby: the launcher started after promotion, without a restart');
$standby->stop;

# ---- synchronous replication
($primary, $standby) = pair('sync', 1);
is(sq($primary, q{SELECT sync_state FROM pg_stat_replication}), 'sync',
	'sync: the standby is synchronous');
$ROWS = 100_000;
$run_id = start_pass($primary, $ROWS);
fail_over('sync', $primary, $standby, $run_id, $ROWS);
$standby->stop;

done_testing();
