# 151_scale.pl -- a batch costs the same late in a partition as early in it
#
# Issue 13, item 4.  Every checkpoint writes a new version of its
# partition's row.  While something holds back the xmin horizon (here a
# REPEATABLE READ transaction kept open for the whole pass, as a long
# backfill_wait or autovacuum analyzing a big table does), pruning cannot
# remove the old versions, and a lookup of the row by its key walks all of
# them: the n-th batch paid for the n-1 before it.  A lane now writes its
# checkpoint at the version its last checkpoint left (a TID scan), so the
# primary key of backfill.partition is not used once per batch.
#
# Measured without timing:
#   - the partition's row kept thousands of versions (the table grew), so
#     the walk would have been there to pay;
#   - the index scans of backfill.partition's primary key during the pass
#     are far fewer than the batches (each batch did one before);
#   - the lane's memory contexts (pg_log_backend_memory_contexts) and its
#     private memory (RssAnon) are the same at batch 300 and at batch 1,500;
#   - the lane runs with jit off (a compiled convergence count of a big
#     table stayed in the lane's memory: RssAnon 5.8 -> 15 MB at the end);
#   - every row done exactly once.
# The two measurements are taken at states made, not hoped for: sessions
# hold the row locks of rows 3,001 and 15,001, so the lane waits inside its
# 301st and its 1,501st batch, the same statement at the same point, while
# its memory is read; the pass cannot end before.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $ROWS  = 30_000;
my $BATCH = 10;

my $node = BackfillTest::node('scale', extra_conf => 'autovacuum = off');

$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0, j text);
	INSERT INTO t (id) SELECT g FROM generate_series(1, $ROWS) g;
	ANALYZE t;
	ALTER DATABASE postgres SET jit = on;
	SELECT backfill_declare(name => 'sc', relation => 't', predicate => 'n = 0',
		action => \$\$UPDATE t SET n = n + 1, j = pg_catalog.current_setting('jit')
		            WHERE id BETWEEN \$1 AND \$2\$\$,
		batch_size => $BATCH, rate => 150, max_parallel => 1,
		lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
});

# the gates: sessions holding the row locks of the first rows of batches
# 301 and 1,501
sub hold_row
{
	my ($id) = @_;
	my $h = $node->background_psql('postgres');
	$h->set_query_timer_restart();
	my $hpid = $h->query_safe('SELECT pg_backend_pid()');
	$h->query_safe("BEGIN; SELECT 1 FROM t WHERE id = $id FOR UPDATE;");
	return ($h, $hpid);
}
my ($gate1, $gate1_pid) = hold_row(300 * $BATCH + 1);
my ($gate2, $gate2_pid) = hold_row(1_500 * $BATCH + 1);

# the xmin horizon held back for the whole pass
my $holder = $node->background_psql('postgres');
$holder->set_query_timer_restart();
$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$holder->query_safe('SELECT count(*) FROM t');

my $pkey_scans = q{SELECT idx_scan FROM pg_stat_all_indexes
                    WHERE indexrelid = 'backfill.partition_pkey'::regclass};
my $scans0 = sq($node, $pkey_scans);
my $size0  = sq($node, q{SELECT pg_relation_size('backfill.partition')});

my $run = sq($node, q{SELECT backfill_run('sc')});

# the lane waits at the gate of session $gpid, $at rows done (progress from
# the table itself: polling must not scan backfill.partition)
sub wait_done_rows
{
	my ($gpid, $at) = @_;
	return poll_until($node,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND $gpid = ANY (pg_blocking_pids(pid))", '1', 300)
	  && sq($node, "SELECT count(*) FROM t WHERE n > 0") == $at;
}

# the lane's memory contexts, as it logs them, and its private memory
sub lane_memory
{
	my ($pid) = @_;
	my $offset = -s $node->logfile;
	sq($node, "SELECT pg_log_backend_memory_contexts($pid)");
	my $total;
	my $deadline = time() + 120;
	while (time() < $deadline)
	{
		my $log = slurp_file($node->logfile, $offset);
		if ($log =~ /\[$pid\][^\n]*Grand total: (\d+) bytes/)
		{
			$total = $1;
			last;
		}
		select(undef, undef, undef, 0.1);
	}
	my $anon;
	if (open(my $fh, '<', "/proc/$pid/status"))
	{
		while (<$fh>) { $anon = $1 if /^RssAnon:\s+(\d+)/; }
		close $fh;
	}
	return ($total, $anon);
}

ok(wait_done_rows($gate1_pid, 300 * $BATCH), 'sc: 300 batches done (the lane waits inside the next)');
my $lane = sq($node, q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'});
like($lane, qr/^\d+$/, 'sc: one lane');
my ($total1, $anon1) = lane_memory($lane);
ok(defined $total1, "sc: the lane logged its memory contexts at batch 300 ($total1 bytes)");
$gate1->query_safe('COMMIT');
$gate1->quit;

ok(wait_done_rows($gate2_pid, 1_500 * $BATCH), 'sc: 1,500 batches done (the lane waits inside the next)');
is(sq($node, q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'}),
	$lane, 'sc: the same lane');
my ($total2, $anon2) = lane_memory($lane);
ok(defined $total2, "sc: the lane logged its memory contexts at batch 1,500 ($total2 bytes)");
cmp_ok(abs($total2 - $total1), '<=', 256 * 1024,
	"sc: the lane's memory contexts hold the same at batch 1,500 as at batch 300 ($total1 -> $total2 bytes)");
SKIP:
{
	skip 'no /proc/PID/status', 1 unless defined $anon1 && defined $anon2;
	cmp_ok($anon2 - $anon1, '<=', 1024,
		"sc: the lane's private memory (RssAnon) is flat: $anon1 -> $anon2 kB");
}

$gate2->query_safe('COMMIT');
$gate2->quit;
is(wait_pass_end($node, $run, 300), 'completed', 'sc: the pass completed');
each_row_done_once($node, 't', $ROWS, $run);
is(sq($node, q{SELECT string_agg(DISTINCT j, ',') FROM t}), 'off',
	'sc: the lane ran with jit off (the database says on)');

# the lane's statistics reach the cumulative ones when it exits
ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'},
		'0', 180), 'sc: the lane exited');
my $batches = BackfillTest::ledger($node, $run, 'batches');
is($batches, $ROWS / $BATCH, "sc: $batches batches");
my $size1 = sq($node, q{SELECT pg_relation_size('backfill.partition')});
cmp_ok($size1 - $size0, '>=', 30 * 8192,
	"sc: the partition's row kept its versions (backfill.partition grew $size0 -> $size1 bytes): the horizon was held");
my $scans = sq($node, $pkey_scans) - $scans0;
cmp_ok($scans, '<', $batches / 10,
	"sc: $scans index scans of backfill.partition's key for $batches batches: checkpoints go to the row's version, not through the key");

$holder->query_safe('COMMIT');
$holder->quit;
$node->stop;
done_testing();
