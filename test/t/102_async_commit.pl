# 102_async_commit.pl -- batches commit asynchronously, and nothing is done twice
#
# A batch and its checkpoint commit in one transaction, so a lane need not
# wait for that commit to reach disk: a crash loses the batch together with
# its checkpoint, and the batch is simply done again.  Lanes therefore run
# their batches with synchronous_commit = off (declaration option
# async_commit, default on).  What stays synchronous: the transaction that
# ends a pass (its ledger row), and every transaction that emitted outbox
# messages (a relay must never deliver what a crash can still take back).
#
# "Not on disk yet" is made certain rather than likely: the test stops the
# WAL writer (SIGSTOP), so an asynchronous commit stays in WAL buffers until
# a crash throws them away, while a synchronous one flushes WAL itself.
# Where the pass stands is made certain too, whatever the speed of the
# machine: one lane walks the keys in order, and prepared transactions
# (they survive every crash) hold the row locks of gates at known keys: the
# lane's batch at a gate waits there until the test opens it (ROLLBACK
# PREPARED), so the test knows how many rows are done, that the pass is
# still running and that a lane is at work when it stops the WAL writer,
# crashes the server or kills the lane.
# After each crash the server comes back first with no database served
# (lanes held off), and the test compares what survived:
#   - rows done (n = 1) == rows the surviving checkpoints count, and fewer
#     than were visible before the crash: batches were lost with their
#     checkpoints, to be redone;
#   - then lanes resume; at the end every row was done exactly once by the
#     non-idempotent action, the ledger counts every row once.
# Also: kill -9 of a lane under asynchronous commits; the ending ledger row,
# emitting transactions and a control's answer survive a crash with the WAL
# writer stopped, also when the role's own synchronous_commit is off (from
# part 2 on: every session and lane of the test's role); async_commit =>
# false makes batches synchronous under that role setting too.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $ROWS = 200_000;

# WAL stays in shared buffers unless the WAL writer writes it: large
# buffers, no background writer, no checkpoint, no autovacuum
my $node = BackfillTest::node(
	'async_commit',
	crash_restart => 1,
	extra_conf    => join("\n",
		'wal_buffers = 64MB',
		'bgwriter_lru_maxpages = 0',
		'checkpoint_timeout = 1h',
		'max_wal_size = 4GB',
		'autovacuum = off',
		'max_prepared_transactions = 10'));

$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0, sc text);
	INSERT INTO t (id) SELECT g FROM generate_series(1, $ROWS) g;
	ANALYZE t;
	SELECT backfill_declare(name => 'ac', relation => 't', predicate => 'n = 0',
		action => \$\$UPDATE t SET n = n + 1, sc = pg_catalog.current_setting('synchronous_commit')
		            WHERE id BETWEEN \$1 AND \$2\$\$,
		batch_size => 200, rate => 100, max_parallel => 1,
		lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
});

# a gate: a prepared transaction holding the row lock of $id in $table; the
# batch that reaches it waits there, across crash restarts
sub gate
{
	my ($name, $table, $id) = @_;
	$node->safe_psql('postgres', qq{BEGIN; SELECT id FROM $table WHERE id = $id FOR UPDATE;
		PREPARE TRANSACTION '$name';});
	return;
}

sub open_gate
{
	my ($name) = @_;
	$node->safe_psql('postgres', qq{ROLLBACK PREPARED '$name'});
	return;
}

# wait until the lane waits inside a batch on a gate; then the visible rows
# done in $table
sub at_gate
{
	my ($table, $what) = @_;
	BackfillTest::poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		    AND 0 = ANY (pg_blocking_pids(pid))}, '1', 300)
	  or BAIL_OUT("$what: no lane reached the gate in 300 s; server log:\n"
		  . slurp_file($node->logfile));
	return $node->safe_psql('postgres', "SELECT count(*) FROM $table WHERE n > 0");
}

sub walwriter_pid
{
	my $pid;
	BackfillTest::poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walwriter'}, '1', 120);
	$pid = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'});
	return $pid;
}

sub done_rows { return $node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE n > 0'); }

# a restart with no database served: no lane runs while the test looks
sub start_held
{
	$node->append_conf('postgresql.conf', "backfill.database_names = 'nosuchdb'\n");
	$node->start;
}

sub start_serving
{
	$node->append_conf('postgresql.conf', "backfill.database_names = 'postgres'\n");
	$node->restart;
}

# the WAL writer stopped; $go: what may happen meanwhile; then an immediate
# shutdown, and the server back with no lane
sub crash_with_wal_unwritten
{
	my ($go) = @_;
	my $ww = walwriter_pid();
	is(kill('STOP', $ww), 1, 'the WAL writer is stopped');
	my $seen = $go->();
	# the postmaster SIGKILLs a child that does not exit on SIGQUIT
	$node->stop('immediate');
	kill('CONT', $ww);
	start_held();
	return $seen;
}

# the gates of the pass: the lane stops before rows 10,001, 20,001,
# 50,001 and 180,001 (the first key of a batch of 200)
gate('g10k', 't', 10_001);
gate('g20k', 't', 20_001);
gate('g50k', 't', 50_001);
gate('g180k', 't', $ROWS - 20_000 + 1);

my $run = $node->safe_psql('postgres', q{SELECT backfill_run('ac')});
like($run, qr/^\d+$/, 'backfill_run returned a run id');

# ------------------------------------------------------------------
# 1. immediate shutdown with asynchronous commits not yet on disk
# ------------------------------------------------------------------
is(at_gate('t', 'first stretch'), '10000', 'the first stretch: 10000 rows done, the lane at a gate');
my $before = crash_with_wal_unwritten(
	sub {
		# (ROLLBACK PREPARED flushes WAL: what was done before it is on disk)
		open_gate('g10k');
		# 50 batches of 200 rows commit while no WAL is written
		return at_gate('t', 'with the WAL writer stopped');
	});
is($before, '20000', '50 batches committed while the WAL writer was stopped');
my $after = done_rows();
my $checkpointed = $node->safe_psql('postgres',
	"SELECT coalesce(sum(rows), 0) FROM backfill.partition WHERE run_id = $run");
note("rows visible before the crash: $before; after recovery: $after; checkpointed: $checkpointed");
cmp_ok($after, '<', $before, 'commits not yet on disk were lost: batches will be redone');
is($checkpointed, $after, 'the surviving checkpoints count exactly the surviving rows');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE n > 1'),
	'0', 'no row was done twice before the crash');
is($node->safe_psql('postgres', "SELECT status FROM backfill.ledger WHERE run_id = $run"),
	'running', 'the pass is still running after the crash');

is($node->safe_psql('postgres',
		q{SELECT count(*) FROM t WHERE n > 0 AND sc IS DISTINCT FROM 'off'}),
	'0', 'every batch ran with synchronous_commit = off');

# a control's answer is durable, whatever its session's synchronous_commit:
# paused with no lane running and the WAL writer stopped, then a crash
crash_with_wal_unwritten(
	sub {
		is($node->safe_psql('postgres',
				q{SET synchronous_commit = off; SELECT backfill_pause('ac')}),
			't', 'backfill_pause answered true (its session\'s synchronous_commit off)');
		return 0;
	});
is($node->safe_psql('postgres', "SELECT paused FROM backfill.run WHERE run_id = $run"),
	't', 'the answered pause survived the crash');
start_serving();
is($node->safe_psql('postgres', q{SELECT backfill_resume('ac')}), 't', 'the pass is resumed');

# ------------------------------------------------------------------
# 2. kill -9 of a lane, asynchronous commits; from here on the role's own
#    synchronous_commit is off (lanes started after the crash read it)
# ------------------------------------------------------------------
$node->safe_psql('postgres', 'ALTER ROLE postgres SET synchronous_commit = off');
# the lane redid the lost batches and waits at the gate of 20,001
is(at_gate('t', 'after the restart'), '20000', 'the lost batches were redone up to the next gate');
open_gate('g20k');
my $at = at_gate('t', 'after the restart');
cmp_ok($at, '>=', $after + 30_000, "$at rows done, 30000 more than survived the crash");
my $lane = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane' LIMIT 1});
like($lane, qr/^\d+$/, 'a lane is running (inside a batch, at the gate of 50,001)');
is(kill('KILL', $lane), 1, 'SIGKILL delivered to a lane');
ok(wait_for_server($node, 120), 'server accepts connections again after the crash');

# ------------------------------------------------------------------
# 3. the transaction that ends the pass is synchronous: the WAL writer
#    stopped before the end, the ledger's completed row survives a crash
# ------------------------------------------------------------------
at_gate('t', 'after the lane was killed');
open_gate('g50k');
is(at_gate('t', 'near the end'), $ROWS - 20_000, 'near the end: the lane at the last gate');
crash_with_wal_unwritten(
	sub {
		is(ledger($node, $run, 'status'), 'running', 'the pass is running when the WAL writer stops');
		open_gate('g180k');
		ok(pass_ended($node, $run, 300), 'the pass ended with the WAL writer stopped');
		return 0;
	});
is($node->safe_psql('postgres', "SELECT status FROM backfill.ledger WHERE run_id = $run"),
	'completed', 'the completed ledger row survived a crash right after it');
each_row_done_once($node, 't', $ROWS, $run);
my $log = slurp_file($node->logfile);
like($log, qr/\(PID $lane\) was terminated by signal 9/, 'the server log shows the lane killed');
like($log, qr/backfill "ac" run $run: resuming partition \d+ from its checkpoint/,
	'the server log shows partitions resumed from their checkpoints');
start_serving();

# ------------------------------------------------------------------
# 4. a transaction that emitted outbox messages is synchronous
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE e (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO e (id) SELECT g FROM generate_series(1, 20000) g;
	ANALYZE e;
	SELECT backfill_declare(name => 'emits', relation => 'e', predicate => 'n = 0',
		action => $$WITH u AS (UPDATE e SET n = n + 1 WHERE id BETWEEN $1 AND $2 RETURNING id)
		           SELECT backfill_outbox_emit('e.done', u.id::text, '{}') FROM u$$,
		batch_size => 100, rate => 50, max_parallel => 1,
		lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
});
# gates before rows 1,001 and 3,001
gate('e1k', 'e', 1_001);
gate('e3k', 'e', 3_001);
my $run2 = $node->safe_psql('postgres', q{SELECT backfill_run('emits')});
is(at_gate('e', 'the emitting pass'), '1000', 'the emitting pass started: 1000 rows, the lane at a gate');
my $emitted = crash_with_wal_unwritten(
	sub {
		open_gate('e1k');
		is(at_gate('e', 'the emitting pass, the WAL writer stopped'), '3000',
			'2000 rows emitted while the WAL writer was stopped');
		return $node->safe_psql('postgres', q{SELECT count(*) FROM backfill.outbox WHERE topic = 'e.done'});
	});

my $kept = $node->safe_psql('postgres', q{SELECT count(*) FROM backfill.outbox WHERE topic = 'e.done'});
note("messages visible before the crash: $emitted; after recovery: $kept");
cmp_ok($emitted, '>=', 3000, 'messages were emitted while the WAL writer was stopped');
cmp_ok($kept, '>=', $emitted, 'every message seen before the crash survived it');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM e WHERE n > 0} ),
	$node->safe_psql('postgres',
		"SELECT coalesce(sum(rows), 0) FROM backfill.partition WHERE run_id = $run2"),
	'the emitting pass\'s rows and checkpoints agree');
start_serving();
open_gate('e3k');
ok(pass_ended($node, $run2, 300), 'the emitting pass ended');
is($node->safe_psql('postgres', 'SELECT count(*) FROM e WHERE n <> 1'), '0',
	'every row of the emitting pass was done exactly once');
is($node->safe_psql('postgres',
		q{SELECT count(*), count(DISTINCT key) FROM backfill.outbox WHERE topic = 'e.done'}),
	'20000|20000', 'one message per row, none lost and none twice');

# ------------------------------------------------------------------
# 5. async_commit => false: batches commit synchronously
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE s (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0, sc text);
	INSERT INTO s (id) SELECT g FROM generate_series(1, 2000) g;
	SELECT backfill_declare(name => 'sync', relation => 's', predicate => 'n = 0',
		action => $$UPDATE s SET n = n + 1, sc = pg_catalog.current_setting('synchronous_commit')
		           WHERE id BETWEEN $1 AND $2$$,
		batch_size => 100, rate => 100, async_commit => false, guard => false);
});
my $run3 = $node->safe_psql('postgres', q{SELECT backfill_run('sync')});
ok(pass_ended($node, $run3, 300), 'the synchronous pass ended');
is($node->safe_psql('postgres', q{SELECT count(*) FROM s WHERE n = 1 AND sc = 'on'}),
	'2000', 'with async_commit => false every batch ran with synchronous_commit = on, '
	  . 'though the role\'s is off');
is($node->safe_psql('postgres',
		q{SELECT async_commit FROM backfill.declaration WHERE name = 'sync'}),
	'f', 'the declaration shows async_commit = false');

$node->safe_psql('postgres', 'ALTER ROLE postgres RESET synchronous_commit');
$node->stop;
done_testing();
