# 081_login_states.pl
#
# A pass whose lanes can no longer log in ends failed with BF016 and the
# reason, which backfill_status shows, instead of staying running forever
# while every lane started for it dies at connect (issue 10):
#  (a) the declaring role is made NOLOGIN mid-pass and its lane ends;
#  (b) the role loses CONNECT on the database while the pass is paused;
#  (c) the role is dropped while the pass is paused.
# The scheduler finds it before it starts a lane: no lane dies at connect.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('login_states');
sq($node, 'CREATE EXTENSION pg_backfill');
sq($node, q{
	CREATE TABLE lg (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO lg (id) SELECT g FROM generate_series(1, 3000) g;
	ANALYZE lg;
});

# a backfill of lg declared by (and running as) a role of its own
sub declare_as
{
	my ($role, $rate) = @_;
	sq($node, qq{
		CREATE ROLE $role LOGIN;
		GRANT SELECT, UPDATE ON lg TO $role;
		SET ROLE $role;
		SELECT backfill_declare(name => '$role', relation => 'lg', predicate => 'n = 0',
			action => 'UPDATE lg SET n = n + 1 WHERE id BETWEEN \$1 AND \$2',
			batch_size => 10, rate => $rate, max_parallel => 1, guard => false);
	});
}

# the pass ended failed with BF016 and $reason, shown by backfill_status
sub ended_bf016
{
	my ($tag, $name, $run, $reason) = @_;
	ok(pass_ended($node, $run, 120), "$tag the pass ended");
	is(ledger($node, $run, 'status || \'|\' || error_code'), 'failed|BF016',
		"$tag it failed with BF016");
	like(ledger($node, $run, 'error_message'), qr/^$reason/, "$tag the ledger says why");
	like(sq($node, "SELECT status || '|' || last_error FROM backfill_status('$name')"),
		qr/^failed\|BF016: $reason/, "$tag backfill_status shows it");
	is(sq($node, "SELECT phase || '|' || paused FROM backfill.run WHERE run_id = $run"),
		'done|false', "$tag the run is done, not paused");
}

# ------------------------------------------------------------------
# (a) NOLOGIN mid-pass
# ------------------------------------------------------------------
# 300 batches at 2 a second: the pass is certainly still running when hit
declare_as('lg_nologin', 2);
my $run_a = sq($node, q{SET ROLE lg_nologin; SELECT backfill_run('lg_nologin')});
ok( poll_until($node, q{SELECT rows >= 20 AND live_leases = 1 FROM backfill_status('lg_nologin')},
		't', 180),
	'(a) the pass is under way');
sq($node, 'ALTER ROLE lg_nologin NOLOGIN');
sq($node, q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE backend_type = 'pg_backfill lane'});
ended_bf016('(a)', 'lg_nologin', $run_a,
	qr/lanes cannot connect: role "lg_nologin" that its lanes log in as cannot log in \(NOLOGIN\)/);
unlike(slurp_file($node->logfile), qr/role "lg_nologin" is not permitted to log in/,
	'(a) no lane was started to die at connect');
cmp_ok(ledger($node, $run_a, 'rows'), '<', 3000, '(a) the pass stopped before the end');
is(sq($node, 'SELECT count(*) FROM lg WHERE n > 1'), '0', '(a) no row was done twice');
is(ledger($node, $run_a, 'rows'), sq($node, 'SELECT count(*) FROM lg WHERE n = 1'),
	'(a) the ledger counts the rows done');

# once the role may log in again, backfill_retry resumes the pass
sq($node, 'ALTER ROLE lg_nologin LOGIN');
sq($node, q{SET ROLE lg_nologin; SELECT backfill_declare(name => 'lg_nologin', relation => 'lg',
	predicate => 'n = 0', action => 'UPDATE lg SET n = n + 1 WHERE id BETWEEN $1 AND $2',
	batch_size => 1000, rate => 100, max_parallel => 1, guard => false)});
is(sq($node, q{SET ROLE lg_nologin; SELECT backfill_run('lg_nologin', force => true) > 0}), 't',
	'(a) a new pass runs once the role may log in');
my $run_a2 = sq($node, q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'lg_nologin'});
is(wait_pass_end($node, $run_a2, 180), 'completed', '(a) and completes');
is(sq($node, 'SELECT count(*) FILTER (WHERE n = 1) || \'|\' || count(*) FILTER (WHERE n <> 1) FROM lg'),
	'3000|0', '(a) every row done exactly once over both passes');

# ------------------------------------------------------------------
# (b) CONNECT revoked, (c) role dropped, while the pass is paused
# ------------------------------------------------------------------
sq($node, 'UPDATE lg SET n = 0');
my %change = (
	lg_noconnect => [
		'REVOKE CONNECT ON DATABASE postgres FROM PUBLIC',
		qr/lanes cannot connect: role "lg_noconnect" that its lanes log in as has no CONNECT privilege on database "postgres"/
	],
	lg_dropped => [
		'REVOKE ALL ON lg FROM lg_dropped; DROP ROLE lg_dropped',
		# the check that the declaration still names its roles (identity.c) may
		# find it first
		qr/(lanes cannot connect: the role with OID \d+ that its lanes log in as no longer exists|the owner of backfill "lg_dropped" is no longer role "lg_dropped")/
	]);
for my $role ('lg_noconnect', 'lg_dropped')
{
	my $tag = $role eq 'lg_noconnect' ? '(b)' : '(c)';
	declare_as($role, 1000);
	# enqueued paused: no lane starts until it is resumed
	my ($run, $paused) = split /\n/, sq($node,
		qq{SET ROLE $role; BEGIN; SELECT backfill_run('$role');
		   SELECT backfill_pause('$role'); COMMIT;});
	is($paused, 't', "$tag pause in the enqueueing transaction returns true");
	is(sq($node, "SELECT status || '|' || paused FROM backfill_status('$role')"), 'running|true',
		"$tag the pass is enqueued, paused");
	sq($node, $change{$role}[0]);
	is(sq($node, "SELECT backfill_resume('$role')"), 't', "$tag it is resumed");
	ended_bf016($tag, $role, $run, $change{$role}[1]);
	is(sq($node, 'SELECT count(*) FROM lg WHERE n <> 0'), '0', "$tag no row was touched");
	sq($node, 'GRANT CONNECT ON DATABASE postgres TO PUBLIC') if $role eq 'lg_noconnect';
}
unlike(slurp_file($node->logfile),
	qr/permission denied for database "postgres"|role with OID \d+ does not exist/,
	'(b, c) no lane was started to die at connect');

$node->stop;
done_testing();
