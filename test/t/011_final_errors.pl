# 011_final_errors.pl
#
# How a pass ends when things go wrong, and how it is steered:
#  (a) the declaring role loses UPDATE mid-pass: the pass fails at once with
#      42501, and its lanes never ran as superuser;
#  (b) the table is dropped mid-pass: the pass fails with 42P01;
#  (c) a batch that always fails (not a row's fault, which 120 bisects):
#      retried with backoff, the partition fails
#      after max_attempts, the pass ends failed with BF014; after the cause
#      is fixed, backfill_retry starts a new pass that resumes from the
#      checkpoint (rows done before the failure are not redone);
#  (d) backfill_pause stops the lanes at a batch boundary and releases the
#      leases; backfill_resume lets the pass complete, every row once.
# The passes hit mid-way run at a low rate, so that they are certainly still
# running when they are hit, however slow the machine.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('final_errors');

$node->safe_psql('postgres', 'CREATE EXTENSION pg_backfill');

# ------------------------------------------------------------------
# (a) privilege revoked mid-pass
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE ROLE lane_user LOGIN;
	CREATE TABLE pa (id int PRIMARY KEY, c int NOT NULL DEFAULT 0);
	INSERT INTO pa (id) SELECT g FROM generate_series(1, 10000) g;
	ANALYZE pa;
	GRANT SELECT, UPDATE ON pa TO lane_user;
});
is( $node->safe_psql('postgres',
		q{SELECT rolsuper, (SELECT count(*) FROM pg_class c WHERE c.relowner = r.oid)
		    FROM pg_roles r WHERE rolname = 'lane_user'}),
	'f|0', 'lane_user is no superuser and owns nothing');

# 100 rows per batch, 1 batch/s: at least 100 s
$node->safe_psql('postgres', q{
	SELECT backfill_declare(name => 'priv', relation => 'pa', predicate => 'c = 0',
		action => 'UPDATE pa SET c = c + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 1, guard => false);
}, extra_params => [ '-U', 'lane_user' ]);
my $run_a = $node->safe_psql('postgres', q{SELECT backfill_run('priv')},
	extra_params => [ '-U', 'lane_user' ]);
like($run_a, qr/^\d+$/, '(a) lane_user started a pass');
is(ledger($node, $run_a, 'pg_get_userbyid(owner)'), 'lane_user', '(a) the pass belongs to lane_user');

ok( poll_until($node,
		q{SELECT coalesce(sum(rows), 0) >= 300 FROM backfill_partitions('priv')}, 't', 180),
	'(a) the pass is under way');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(DISTINCT a.usename || ':' || r.rolsuper, ',')
		    FROM pg_stat_activity a JOIN pg_roles r ON r.oid = a.usesysid
		   WHERE a.backend_type = 'pg_backfill lane'}),
	'lane_user:false', '(a) the lane runs as lane_user, not as a superuser');
is( $node->safe_psql('postgres',
		q{SELECT a.usename FROM backfill_partitions('priv') p
		    JOIN pg_stat_activity a ON a.pid = p.holder_pid WHERE p.holder_alive}),
	'lane_user', '(a) the lease holder is a lane_user backend');

$node->safe_psql('postgres', 'REVOKE UPDATE ON pa FROM lane_user');
ok(pass_ended($node, $run_a, 180), '(a) the pass ended after UPDATE was revoked');
is(ledger($node, $run_a, 'status, error_code'), 'failed|42501',
	'(a) the pass failed with insufficient privilege (42501)');
like(ledger($node, $run_a, 'error_message'), qr/permission denied/,
	'(a) the ledger keeps the error message');
my $done_a = $node->safe_psql('postgres', 'SELECT count(*) FROM pa WHERE c = 1');
is(ledger($node, $run_a, 'rows'), $done_a, '(a) ledger rows = the rows the pass committed');
cmp_ok($done_a, '<', 10000, '(a) the pass stopped before the end');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pa WHERE c > 1'),
	'0', '(a) no row was updated twice');
# a privilege problem fails the pass at once: no retry was recorded
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM backfill_partitions('priv') WHERE failures > 0}),
	'0', '(a) no partition recorded a retried failure');
ok( poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'},
		'0', 120),
	'(a) the lanes left');

# ------------------------------------------------------------------
# (b) table dropped mid-pass
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE db (id int PRIMARY KEY, c int NOT NULL DEFAULT 0);
	INSERT INTO db (id) SELECT g FROM generate_series(1, 10000) g;
	ANALYZE db;
	SELECT backfill_declare(name => 'dropped', relation => 'db', predicate => 'c = 0',
		action => 'UPDATE db SET c = c + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 1, guard => false);
});
my $run_b = $node->safe_psql('postgres', q{SELECT backfill_run('dropped')});
ok( poll_until($node,
		q{SELECT coalesce(sum(rows), 0) >= 300 FROM backfill_partitions('dropped')}, 't', 180),
	'(b) the pass is under way');
$node->safe_psql('postgres', 'DROP TABLE db');
ok(pass_ended($node, $run_b, 180), '(b) the pass ended after the table was dropped');
is(ledger($node, $run_b, 'status, error_code'), 'failed|42P01',
	'(b) the pass failed with undefined table (42P01)');
cmp_ok(ledger($node, $run_b, 'rows'), '>=', 300, '(b) the ledger keeps the rows done before the drop');
ok( poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'},
		'0', 120),
	'(b) the lanes left');

# ------------------------------------------------------------------
# (c) a batch that always fails; then backfill_retry
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE ct (id int PRIMARY KEY, c int NOT NULL DEFAULT 0);
	INSERT INTO ct (id) SELECT g FROM generate_series(1, 1000) g;
	ANALYZE ct;
	-- fails for any range that contains key 550, with an error that is not
	-- a row's fault (class 55: retried, never bisected; 120 covers rows)
	CREATE FUNCTION ct_check(lo int, hi int) RETURNS int LANGUAGE plpgsql AS $$
	BEGIN
		IF lo <= 550 AND hi >= 550 THEN
			RAISE EXCEPTION 'ct_check: the range % to % is not ready', lo, hi
			      USING ERRCODE = 'object_not_in_prerequisite_state';
		END IF;
		RETURN 0;
	END $$;
	SELECT backfill_declare(name => 'boom', relation => 'ct', predicate => 'c = 0',
		action => 'UPDATE ct SET c = c + 1 + ct_check($1, $2) WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 50, max_parallel => 1, max_attempts => 2,
		backoff_base => '10 ms', backoff_cap => '20 ms', guard => false);
});
my $run_c = $node->safe_psql('postgres', q{SELECT backfill_run('boom')});
ok(pass_ended($node, $run_c, 180), '(c) the pass ended');
is(ledger($node, $run_c, 'status, error_code'), 'failed|BF014',
	'(c) the pass failed with BATCH_FAILED (BF014)');
like(ledger($node, $run_c, 'error_message'), qr/SQLSTATE 55000: ct_check: the range .* is not ready/,
	'(c) the ledger error names the batch\'s error and its SQLSTATE');
is( $node->safe_psql('postgres',
		q{SELECT count(*), count(*) FILTER (WHERE state = 'failed' AND failures >= 2
		                                     AND last_error LIKE '%is not ready%')
		    FROM backfill_partitions('boom')}),
	'1|1', '(c) one partition (single plan), failed after >= 2 failures, last_error names the error');
is($node->safe_psql('postgres', "SELECT plan_method FROM backfill.run WHERE run_id = $run_c"),
	'single', '(c) max_parallel => 1 plans a single partition');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FILTER (WHERE c = 1), count(*) FILTER (WHERE c = 0),
		         count(*) FILTER (WHERE c > 1) FROM ct}),
	'500|500|0', '(c) rows before the failing batch done once, the rest untouched');
is(ledger($node, $run_c, 'rows'), '500', '(c) the failed pass counts 500 rows');
is($node->safe_psql('postgres', q{SELECT cursor FROM backfill_partitions('boom')}),
	'500', '(c) the checkpoint stopped at key 500');
my $log = slurp_file($node->logfile);
like($log, qr/backfill "boom" run $run_c: batch failed \(attempt 1 of 2\), retrying in \d+ ms/,
	'(c) the first failure was retried after a backoff');
if ($log =~ /backfill "boom" run $run_c: batch failed \(attempt 1 of 2\), retrying in (\d+) ms/)
{
	cmp_ok($1, '<=', 20, '(c) the backoff respects backoff_cap (20 ms)');
	cmp_ok($1, '>=', 5, '(c) the backoff is at least half of backoff_base (10 ms)');
}
else
{
	fail('(c) the backoff respects backoff_cap (20 ms)');
	fail('(c) the backoff is at least half of backoff_base (10 ms)');
}

# fix the cause; retry resumes in a new pass
$node->safe_psql('postgres', q{
	CREATE OR REPLACE FUNCTION ct_check(lo int, hi int) RETURNS int LANGUAGE plpgsql AS $$
	BEGIN
		RETURN 0;
	END $$;
});
is($node->safe_psql('postgres', q{SELECT backfill_retry('boom')}),
	't', '(c) backfill_retry of a failed pass returns true');
my $run_c2 = $node->safe_psql('postgres',
	q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'boom'});
isnt($run_c2, $run_c, '(c) retry wrote a new ledger row');
is(ledger($node, $run_c2, 'previous_run_id'), $run_c, '(c) the new pass points at the failed run');
is(ledger($node, $run_c, 'status, error_code'), 'failed|BF014',
	'(c) the failed ledger row is unchanged');
ok(pass_ended($node, $run_c2, 180), '(c) the retried pass ended');
is(ledger($node, $run_c2, 'status'), 'completed', '(c) the retried pass completed');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FILTER (WHERE c = 1), count(*) FILTER (WHERE c <> 1) FROM ct}),
	'1000|0', '(c) every row done exactly once: the first 500 were not redone');
is(ledger($node, $run_c2, 'rows'), '500', '(c) the retried pass counts only the 500 rows it did');
is($node->safe_psql('postgres', q{SELECT backfill_retry('boom')}),
	'f', '(c) backfill_retry after completion changes nothing');

# ------------------------------------------------------------------
# (d) pause and resume
# ------------------------------------------------------------------
# 200 batches, 2 lanes at 2 batches/s each: at least 50 s; declared again
# at a high rate once paused, so that the resumed pass goes fast
my $decl_pz = q{
	SELECT backfill_declare(name => 'pz', relation => 'pz', predicate => 'c = 0',
		action => 'UPDATE pz SET c = c + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => %s, max_parallel => 2, guard => false);
};
$node->safe_psql('postgres', q{
	CREATE TABLE pz (id int PRIMARY KEY, c int NOT NULL DEFAULT 0);
	INSERT INTO pz (id) SELECT g FROM generate_series(1, 20000) g;
	ANALYZE pz;
} . sprintf($decl_pz, 2));
my $run_d = $node->safe_psql('postgres', q{SELECT backfill_run('pz')});
ok( poll_until($node,
		q{SELECT live_leases = 2 AND rows >= 2000 FROM backfill_status('pz')}, 't', 180),
	'(d) two lanes at work');
is($node->safe_psql('postgres', q{SELECT backfill_pause('pz')}), 't', '(d) pause returns true');
is($node->safe_psql('postgres', q{SELECT backfill_pause('pz')}), 'f',
	'(d) pause again returns false');
is($node->safe_psql('postgres', q{SELECT paused, status FROM backfill_status('pz')}),
	't|running', '(d) status: paused, the pass still running');
ok( poll_until($node,
		q{SELECT partitions_running = 0 AND live_leases = 0
		         AND (SELECT count(*) FROM pg_stat_activity
		               WHERE backend_type = 'pg_backfill lane') = 0
		    FROM backfill_status('pz')}, 't', 120),
	'(d) the lanes left and released their leases');
my $paused_at = $node->safe_psql('postgres',
	q{SELECT rows || '|' || (SELECT count(*) FROM pz WHERE c = 1)
	         || '|' || partitions_running || '|' || live_leases
	    FROM backfill_status('pz')});
my ($rows_paused) = split /\|/, $paused_at;
cmp_ok($rows_paused, '<', 20000, '(d) paused before the end');
is((split /\|/, $paused_at)[1], $rows_paused, '(d) rows counted = rows written at the pause');
# two and a half launcher naptimes: nothing moves, no lane comes back
my $moved = holds_for($node,
	q{SELECT rows || '|' || (SELECT count(*) FROM pz WHERE c = 1)
	         || '|' || partitions_running || '|' || live_leases
	    FROM backfill_status('pz')}, $paused_at, 2.5);
ok(!defined $moved, '(d) while paused the rows stop growing and no lease is taken')
  or diag("paused at $paused_at, became $moved");
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'}),
	'0', '(d) no lane was started while paused');

$node->safe_psql('postgres', sprintf($decl_pz, 1000));
is($node->safe_psql('postgres', q{SELECT paused FROM backfill_status('pz')}), 't',
	'(d) declared again at a higher rate: still paused');
is($node->safe_psql('postgres', q{SELECT backfill_resume('pz')}), 't', '(d) resume returns true');
is($node->safe_psql('postgres', q{SELECT backfill_resume('pz')}), 'f',
	'(d) resume again returns false');
ok(pass_ended($node, $run_d, 180), '(d) the resumed pass ended');
is(ledger($node, $run_d, 'status, rows'), 'completed|20000', '(d) completed with 20000 rows');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FILTER (WHERE c = 1), count(*) FILTER (WHERE c <> 1) FROM pz}),
	'20000|0', '(d) every row exactly once');
is($node->safe_psql('postgres', q{SELECT paused FROM backfill_status('pz')}),
	'f', '(d) no longer paused');
like(slurp_file($node->logfile), qr/backfill "pz" run $run_d paused: lane leaves partition \d+/,
	'(d) the server log shows a lane leaving at its checkpoint');

$node->stop;
done_testing();
