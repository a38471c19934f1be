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
# pass with BF001 at once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('cursor_unreadable');
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
		backoff_cap => '100 ms');
	SELECT backfill_declare('en', 'en', 'n = 0',
		'UPDATE en SET n = n + 1 WHERE (l, i) BETWEEN ($1, $2) AND ($3, $4) AND n = 0',
		batch_size => 10, rate => 20, max_attempts => 3, backoff_base => '50 ms',
		backoff_cap => '100 ms');
	SELECT backfill_declare('ck', 'ck', 'n = 0',
		'UPDATE ck SET n = n + 1 WHERE (a, b) BETWEEN ($1, $2) AND ($3, $4) AND n = 0',
		batch_size => 10, rate => 20, max_attempts => 3, backoff_base => '50 ms',
		backoff_cap => '100 ms');
});

# run, pause once it has done $rows rows and its lane has left; the cursor
sub run_and_pause
{
	my ($name, $rows) = @_;
	my $run = sq($node, qq{SELECT backfill_run('$name', wait => false)});
	ok(poll_until($node, qq{SELECT rows >= $rows FROM backfill_status('$name')}, 't', 60),
		"$name: the pass is under way");
	sq($node, qq{SELECT backfill_pause('$name')});
	ok(poll_until($node,
			q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'},
			'0', 60), "$name: paused, its lane left");
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
	is(wait_pass_end($node, $run, 60), 'failed', "$name: the pass fails");
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
	is(wait_pass_end($node, $run, 60), 'completed', "$name: retried, the pass completes");
	is(sq($node, "SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM $name"),
		"$rows|0", "$name: every row done exactly once (n = n + 1)");
	return;
}

# (a) a domain key: a CHECK added NOT VALID that the stored cursor fails
my ($run, $cursor) = run_and_pause('dk', 50);
sq($node, "ALTER DOMAIN posint ADD CONSTRAINT not_cursor CHECK (VALUE <> $cursor) NOT VALID");
resume_to_bf033('dk', $run, $cursor);
sq($node, 'ALTER DOMAIN posint DROP CONSTRAINT not_cursor');
retry_completes('dk', 300);

# (b) an enum in a composite key: the cursor's label renamed
($run, $cursor) = run_and_pause('en', 60);
my ($label) = $cursor =~ /^\((\w+),/;
sq($node, "ALTER TYPE lbl RENAME VALUE '$label' TO '${label}_renamed'");
resume_to_bf033('en', $run, $cursor);
sq($node, "ALTER TYPE lbl RENAME VALUE '${label}_renamed' TO '$label'");
retry_completes('en', 300);

# (c) a composite key's unique index dropped under the paused pass
($run, $cursor) = run_and_pause('ck', 50);
my $starts = sq($node, "SELECT lane_starts FROM backfill.run WHERE run_id = $run");
my $log_offset = -s $node->logfile;
sq($node, 'ALTER TABLE ck DROP CONSTRAINT ck_pk');
sq($node, q{SELECT backfill_resume('ck')});
is(wait_pass_end($node, $run, 60), 'failed', 'ck: the pass fails');
is(ledger($node, $run, 'error_code'), 'BF001', 'ck: with BF001');
like(sq($node, q{SELECT last_error FROM backfill_status('ck')}),
	qr/^BF001: the key of backfill "ck" has no unique index any more/,
	'ck: backfill_status says the unique index is gone');
is(sq($node, "SELECT lane_starts FROM backfill.run WHERE run_id = $run"), $starts + 1,
	'ck: one lane failed it: none died and was started again');
unlike(slurp_file($node->logfile, $log_offset), qr/"pg_backfill lane".*exited with exit code 1/,
	'ck: no lane exited with an error');

$node->stop;
done_testing();
