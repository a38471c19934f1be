# 126_cursor_unreadable.pl -- a cursor that no longer reads as a key
#
# A partition's cursor and bounds are kept as their key's text and read
# back by every lane that claims the partition.  A type changed under a
# paused pass can make that text unreadable: a CHECK added NOT VALID to
# the key's domain that the cursor fails, an enum label renamed.  Each
# lane then died in its claim with the input error, before its first
# batch; the scheduler started another for ever, the log line did not
# name the backfill, and backfill_status showed running with no last
# error (attacker findings t19, t22).  Now the read-back is an attempt of
# the partition: recorded on it (failures, last_error) like a failed
# batch, retried with backoff, and after max_attempts the pass fails with
# BF033 naming the backfill, the partition and the text, with a hint; one
# lane does all of it.  Once the type reads the text again,
# backfill_retry resumes from the checkpoints and every row is done once.
# A composite key whose unique index is dropped under a paused pass
# killed its lanes the same way, while loading the pass: it now fails the
# pass with BF001 at once; a key column renamed (of a composite key: it
# killed them there too; of a one-column key) fails it with 42703.
#
# And a pass in a database no scheduler serves (attacker findings t06,
# t23): backfill_resume and backfill_retry there returned true and left
# the pass running with no lane and no reason.  They are refused with
# BF013, as backfill_run is: in a database backfill.database_names leaves
# out, and in one that became a template.  A database that becomes a
# template mid-pass: its scheduler pauses the pass, with the reason in
# its last_error, before it stops; the lane leaves at its checkpoint.
# Once the database is no template, backfill_resume finishes the pass,
# every row once.
#
# Each pass is paused (or found by its scheduler) mid-way by construction,
# not by timing: a session holds the row lock of the first row of a known
# batch, the lane's batch waits on it (lock_timeout far beyond the test),
# the pass is paused (the database made a template), and only then is the
# row let go: the lane ends that batch and stops at a known cursor.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('cursor_unreadable',
	extra_conf => "backfill.database_names = 'postgres,tpl'\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE DOMAIN posint AS int CHECK (VALUE > 0);
	CREATE TABLE dk (id posint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO dk (id) SELECT generate_series(1, 300);
	CREATE TYPE lbl AS ENUM ('a', 'b', 'c', 'd', 'e', 'f');
	CREATE TABLE en (l lbl, i int, n int NOT NULL DEFAULT 0, PRIMARY KEY (l, i));
	INSERT INTO en (l, i) SELECT l, g FROM unnest(enum_range(NULL::lbl)) l, generate_series(1, 50) g;
	CREATE TABLE ck (a int, b int, n int NOT NULL DEFAULT 0, CONSTRAINT ck_pk PRIMARY KEY (a, b));
	INSERT INTO ck (a, b) SELECT g / 10, g % 10 FROM generate_series(1, 300) g;
	SELECT backfill_declare('dk', 'dk', 'n = 0',
		'UPDATE dk SET n = n + 1 WHERE id BETWEEN $1 AND $2 AND n = 0',
		batch_size => 7, rate => 20, max_attempts => 3, backoff_base => '50 ms',
		backoff_cap => '100 ms', lock_timeout => '1 hour', batch_timeout => '1 hour');
	SELECT backfill_declare('en', 'en', 'n = 0',
		'UPDATE en SET n = n + 1 WHERE (l, i) BETWEEN ($1, $2) AND ($3, $4) AND n = 0',
		batch_size => 10, rate => 20, max_attempts => 3, backoff_base => '50 ms',
		backoff_cap => '100 ms', lock_timeout => '1 hour', batch_timeout => '1 hour');
	SELECT backfill_declare('ck', 'ck', 'n = 0',
		'UPDATE ck SET n = n + 1 WHERE (a, b) BETWEEN ($1, $2) AND ($3, $4) AND n = 0',
		batch_size => 10, rate => 20, max_attempts => 3, backoff_base => '50 ms',
		backoff_cap => '100 ms', lock_timeout => '1 hour', batch_timeout => '1 hour');
});

# a session holding the row lock of a row in $db: (session, its pid)
sub hold_row
{
	my ($db, $table, $order, $nth) = @_;
	my $h = $node->background_psql($db);
	$h->set_query_timer_restart();
	my $hpid = $h->query_safe('SELECT pg_backend_pid()');
	# the $nth row in key order ($order); a subquery: FOR UPDATE with
	# OFFSET would lock the rows skipped too
	$h->query_safe("BEGIN; SELECT 1 FROM $table WHERE ($order) = (SELECT $order FROM $table"
		  . " ORDER BY $order OFFSET " . ($nth - 1) . " LIMIT 1) FOR UPDATE;");
	return ($h, $hpid);
}

# a lane's batch waits on a lock of the session $hpid
sub lane_waits_on
{
	my ($hpid) = @_;
	return poll_until($node,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND $hpid = ANY (pg_blocking_pids(pid))", '1', 180);
}

# run; once the lane's batch that starts at the $nth row (in key order
# $order) waits on that row's lock, pause; let the row go, and the lane
# ends that batch of $batch rows and leaves; the cursor
sub run_and_pause
{
	my ($name, $order, $nth, $batch) = @_;
	my ($h, $hpid) = hold_row('postgres', $name, $order, $nth);
	my $run = sq($node, qq{SELECT backfill_run('$name', wait => false)});
	ok(lane_waits_on($hpid), "$name: the lane's batch waits on row $nth");
	is(sq($node, qq{SELECT rows FROM backfill_status('$name')}), $nth - 1,
		"$name: the pass is under way");
	is(sq($node, qq{SELECT backfill_pause('$name')}), 't', "$name: paused mid-pass");
	$h->query_safe('COMMIT');
	$h->quit;
	ok(poll_until($node,
			q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'},
			'0', 180), "$name: paused, its lane left");
	is(sq($node, qq{SELECT rows FROM backfill_status('$name')}), $nth - 1 + $batch,
		"$name: the lane stopped after the batch it was in");
	my $cursor = sq($node, qq{SELECT cursor FROM backfill_partitions('$name')
		WHERE cursor IS NOT NULL AND state <> 'done' LIMIT 1});
	isnt($cursor, '', "$name: paused at cursor $cursor");
	return ($run, $cursor);
}

# resume a pass whose cursor no longer reads: it fails with BF033, by one lane
sub resume_to_bf033
{
	my ($name, $run, $cursor) = @_;
	my $starts = sq($node, "SELECT lane_starts FROM backfill.run WHERE run_id = $run");
	my $log_offset = -s $node->logfile;
	sq($node, qq{SELECT backfill_resume('$name')});
	is(wait_pass_end($node, $run, 300), 'failed', "$name: the pass fails");
	my ($code, $message) = split /\|/, ledger($node, $run, 'error_code, error_message'), 2;
	is($code, 'BF033', "$name: with BF033");
	like($message, qr/backfill "$name" cannot read "\Q$cursor\E" of partition \d+ as its key/,
		"$name: the error names the backfill, the partition and the unreadable text");
	like($message, qr/\(3 attempts\)\. The key's type changed under the pass: .*backfill_retry\('$name'\)/,
		"$name: after max_attempts, with the hint");
	like(sq($node, qq{SELECT last_error FROM backfill_status('$name')}), qr/^BF033: backfill "$name"/,
		"$name: backfill_status shows it");
	is(sq($node, qq{SELECT failures, last_error LIKE '%cannot read "$cursor"%'
		FROM backfill_partitions('$name') WHERE cursor = '$cursor'}), '3|t',
		"$name: each attempt is a failure of the partition, with its last error");
	is(sq($node, "SELECT lane_starts FROM backfill.run WHERE run_id = $run"), $starts + 1,
		"$name: one lane did all of it: no lane died and was started again");
	my $log = slurp_file($node->logfile, $log_offset);
	unlike($log, qr/"pg_backfill lane".*exited with exit code 1/,
		"$name: no lane exited with an error");
	like($log, qr/backfill "$name" run $run: reading a partition's keys failed \(attempt 1 of 3\)/,
		"$name: the log line of each attempt names the backfill");
	return;
}

# retried once the text reads again: resumed from the checkpoints, each row once
sub retry_completes
{
	my ($name, $rows) = @_;
	sq($node, qq{SELECT backfill_retry('$name')});
	my $run = sq($node, qq{SELECT run_id FROM backfill.ledger WHERE declaration = '$name'
		ORDER BY run_id DESC LIMIT 1});
	is(wait_pass_end($node, $run, 300), 'completed', "$name: retried, the pass completes");
	is(sq($node, "SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM $name"),
		"$rows|0", "$name: every row done exactly once (n = n + 1)");
	return;
}

# (a) a domain key: a CHECK added NOT VALID that the stored cursor fails
my ($run, $cursor) = run_and_pause('dk', 'id', 50, 7);
sq($node, "ALTER DOMAIN posint ADD CONSTRAINT not_cursor CHECK (VALUE <> $cursor) NOT VALID");
resume_to_bf033('dk', $run, $cursor);
sq($node, 'ALTER DOMAIN posint DROP CONSTRAINT not_cursor');
retry_completes('dk', 300);

# (b) an enum in a composite key: the cursor's label renamed
($run, $cursor) = run_and_pause('en', 'l, i', 61, 10);
my ($label) = $cursor =~ /^\((\w+),/;
sq($node, "ALTER TYPE lbl RENAME VALUE '$label' TO '${label}_renamed'");
resume_to_bf033('en', $run, $cursor);
sq($node, "ALTER TYPE lbl RENAME VALUE '${label}_renamed' TO '$label'");
retry_completes('en', 300);

# (c) a composite key's unique index dropped under the paused pass
($run, $cursor) = run_and_pause('ck', 'a, b', 51, 10);
my $starts = sq($node, "SELECT lane_starts FROM backfill.run WHERE run_id = $run");
my $log_offset = -s $node->logfile;
sq($node, 'ALTER TABLE ck DROP CONSTRAINT ck_pk');
sq($node, q{SELECT backfill_resume('ck')});
is(wait_pass_end($node, $run, 300), 'failed', 'ck: the pass fails');
is(ledger($node, $run, 'error_code'), 'BF001', 'ck: with BF001');
like(sq($node, q{SELECT last_error FROM backfill_status('ck')}),
	qr/^BF001: the key of backfill "ck" has no unique index any more/,
	'ck: backfill_status says the unique index is gone');
is(sq($node, "SELECT lane_starts FROM backfill.run WHERE run_id = $run"), $starts + 1,
	'ck: one lane failed it: none died and was started again');
unlike(slurp_file($node->logfile, $log_offset), qr/"pg_backfill lane".*exited with exit code 1/,
	'ck: no lane exited with an error');

# (c2) a key column renamed under the paused pass (one column, and one of a composite key)
$node->safe_psql('postgres', q{
	CREATE TABLE sk (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO sk (id) SELECT generate_series(1, 300);
	SELECT backfill_declare('sk', 'sk', 'n = 0', 'UPDATE sk SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 10, rate => 20, lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
	CREATE TABLE ck2 (a int, b int, n int NOT NULL DEFAULT 0, PRIMARY KEY (a, b));
	INSERT INTO ck2 (a, b) SELECT g / 10, g % 10 FROM generate_series(1, 300) g;
	SELECT backfill_declare('ck2', 'ck2', 'n = 0',
		'UPDATE ck2 SET n = n + 1 WHERE (a, b) BETWEEN ($1, $2) AND ($3, $4)',
		batch_size => 10, rate => 20, lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
});
foreach my $t ([ 'sk', 'id', 'id' ], [ 'ck2', 'b', 'a, b' ])
{
	my ($name, $column, $order) = @$t;
	($run, $cursor) = run_and_pause($name, $order, 51, 10);
	$starts = sq($node, "SELECT lane_starts FROM backfill.run WHERE run_id = $run");
	$log_offset = -s $node->logfile;
	sq($node, "ALTER TABLE $name RENAME COLUMN $column TO ${column}_renamed");
	sq($node, qq{SELECT backfill_resume('$name')});
	is(wait_pass_end($node, $run, 300), 'failed', "$name: a key column renamed, the pass fails");
	is(ledger($node, $run, 'error_code'), '42703', "$name: with undefined_column, at once");
	is(sq($node, "SELECT lane_starts FROM backfill.run WHERE run_id = $run"), $starts + 1,
		"$name: one lane failed it: none died and was started again");
	unlike(slurp_file($node->logfile, $log_offset), qr/"pg_backfill lane".*exited with exit code 1/,
		"$name: no lane exited with an error");
}

# (d) a database backfill.database_names leaves out: resume and retry refused
$node->safe_psql('postgres', 'CREATE DATABASE unlisted');
$node->safe_psql('unlisted', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE u (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	SELECT backfill_declare('u', 'u', 'n = 0', 'UPDATE u SET n = n + 1 WHERE id BETWEEN $1 AND $2', guard => false);
});
foreach my $control ('backfill_resume', 'backfill_retry')
{
	my ($rc, $out, $err) = $node->psql('unlisted', "SELECT $control('u')");
	like($err, qr/ERROR:  backfill "u" cannot run in database "unlisted"/,
		"(was true) $control in a database no scheduler serves is refused");
	($rc, $out, $err) = $node->psql('unlisted', "SELECT $control('u')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/BF013/, "$control: with BF013");
}

# (e) a database that becomes a template mid-pass
$node->safe_psql('postgres', 'CREATE DATABASE tpl');
$node->safe_psql('tpl', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO t (id) SELECT generate_series(1, 1000);
	SELECT backfill_declare('t', 't', 'n = 0', 'UPDATE t SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 10, rate => 20, lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
});
# the lane's batch of rows 501-510 waits on row 501 while the database
# becomes a template and its scheduler pauses the pass
my ($tpl_lock, $tpl_lock_pid) = hold_row('tpl', 't', 'id', 501);
$run = $node->safe_psql('tpl', q{SELECT backfill_run('t', wait => false)});
ok(lane_waits_on($tpl_lock_pid), 'tpl: the pass is under way (its batch waits on row 501)');
$node->safe_psql('postgres', 'ALTER DATABASE tpl IS_TEMPLATE true');
ok(poll_db('tpl', q{SELECT paused FROM backfill_status('t')}, 't', 180),
	'tpl: once the database is a template, its scheduler pauses the pass');
$tpl_lock->query_safe('COMMIT');
$tpl_lock->quit;
ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity
		WHERE datname = 'tpl' AND backend_type LIKE 'pg_backfill%'}, '0', 180),
	'tpl: the lane left at its checkpoint and the scheduler stopped');
like($node->safe_psql('tpl', q{SELECT status || ' ' || last_error FROM backfill_status('t')}),
	qr/^running paused by its scheduler: the database is now a template, and no scheduler serves it; ALTER DATABASE tpl IS_TEMPLATE false/,
	'tpl: backfill_status says why it is paused and what to do');
my $rows = $node->safe_psql('tpl', q{SELECT rows FROM backfill_status('t')});
cmp_ok($rows, '<', 1000, "tpl: the pass stopped part way ($rows of 1000 rows)");
foreach my $control ('backfill_resume', 'backfill_retry')
{
	my ($rc, $out, $err) = $node->psql('tpl', "SELECT $control('t')");
	like($err, qr/ERROR:  backfill "t" cannot run in database "tpl"\nDETAIL:  The database is a template/,
		"tpl: (was true, and nothing ran) $control in a template is refused");
}
is($node->safe_psql('tpl', q{SELECT paused FROM backfill_status('t')}), 't',
	'tpl: the pass is still paused');
$node->safe_psql('postgres', 'ALTER DATABASE tpl IS_TEMPLATE false');
is($node->safe_psql('tpl', q{SELECT backfill_resume('t')}), 't',
	'tpl: no template any more, backfill_resume resumes it');
is(wait_pass_end_in($node, 'tpl', $run, 300), 'completed', 'tpl: the pass completes');
is($node->safe_psql('tpl', q{SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM t}),
	'1000|0', 'tpl: every row done exactly once (n = n + 1)');
is($node->safe_psql('tpl', q{SELECT coalesce(last_error, 'none') FROM backfill_status('t')}), 'none',
	'tpl: the pause\'s reason is gone with the pause');

$node->stop;
done_testing();

# poll_until in another database: $sql until it returns $expected, up to $timeout s
sub poll_db
{
	my ($db, $sql, $expected, $timeout) = @_;
	my $deadline = time() + $timeout;
	my $last = '';
	while (time() < $deadline)
	{
		my ($rc, $out) = $node->psql($db, $sql);
		$last = $out;
		return 1 if $rc == 0 && $out eq $expected;
		select(undef, undef, undef, 0.2);
	}
	diag("poll_db timed out after ${timeout}s in $db: $sql\n  expected: $expected\n  last: $last");
	return 0;
}

# wait_pass_end in another database
sub wait_pass_end_in
{
	my ($node, $db, $run_id, $timeout) = @_;
	poll_db($db, "SELECT status <> 'running' FROM backfill.ledger WHERE run_id = $run_id",
		't', $timeout);
	return $node->safe_psql($db, "SELECT status FROM backfill.ledger WHERE run_id = $run_id");
}
