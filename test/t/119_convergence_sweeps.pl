# 119_convergence_sweeps.pl
#
# A pass is bounded by the largest key when planned; rows the application
# writes behind the lanes' cursors but within that bound (with a composite
# key (tenant_id, id), nearly every new row of an existing tenant) are found
# by the convergence count.  A pass whose action is guarded sweeps its
# partitions again instead of failing STALLED (issue 31):
#  (a) rows inserted behind every cursor while the pass runs: the pass
#      completes after one sweep, every row done exactly once by a
#      hand-written guarded non-idempotent action (n = n + 1), the ledger
#      counting each once;
#  (b) an action that never fixes its rows (set => 'c = NULL'): STALLED
#      after one sweep, naming the probe key, and finalize's hint says the
#      action is at fault;
#  (c) a stalled pass (a trigger puts c back while a flag is on: the
#      action's rows are not fixed) retried once the cause is gone: the
#      retry sweeps the table again and does every row; an unguarded
#      action's stalled pass: the retry is refused (BF006) with the hint to
#      run with force;
#  (d) kill -9 of the lane in the middle of a sweep: the next lane resumes
#      the sweep from its checkpoint; every row exactly once.
# Where the pass stands when the test acts is made, not hoped for: a
# session holds the row lock of a key, the lane's batch waits there, and
# the test acts once it sees that wait (and, for (a), once
# backfill_partitions shows every open cursor past the keys it inserts).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('sweeps', crash_restart => 1);
sq($node, 'CREATE EXTENSION pg_backfill');

my $wait_long = q{lock_timeout => '1 hour', batch_timeout => '1 hour'};

# a table of $rows rows, (g % 10, g), c NULL, n 0
sub make_table
{
	my ($name, $rows) = @_;
	sq($node, qq{
		CREATE TABLE $name (tenant_id int, id bigint, c int, n int NOT NULL DEFAULT 0,
		                    PRIMARY KEY (tenant_id, id));
		INSERT INTO $name (tenant_id, id) SELECT g % 10, g FROM generate_series(1, $rows) g;
		ANALYZE $name;});
	return;
}

# the hand-written guarded non-idempotent action over a composite key
sub guarded_action
{
	my ($name) = @_;
	return "UPDATE $name SET c = 1, n = n + 1"
	  . " WHERE (tenant_id, id) BETWEEN (\$1, \$2) AND (\$3, \$4) AND c IS NULL";
}

# a session holding the row lock of ($tenant, $id): the session
sub hold_key
{
	my ($table, $tenant, $id) = @_;
	my $s = $node->background_psql('postgres');
	$s->query_safe("BEGIN; SELECT 1 FROM $table WHERE tenant_id = $tenant AND id = $id FOR UPDATE;");
	return $s;
}

# a lane's batch waits on a lock of session $s
sub lane_waits_on
{
	my ($s) = @_;
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	return poll_until($node,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND $pid = ANY (pg_blocking_pids(pid))", '1', 180);
}

# every partition still open has its cursor (or its lower bound) past ($t, $i)
sub cursors_past
{
	my ($name, $t, $i) = @_;
	return poll_until($node, qq{
		SELECT count(*) FROM backfill_partitions('$name')
		 WHERE state <> 'done'
		   AND NOT coalesce((split_part(btrim(coalesce(cursor, lo), '()'), ',', 1)::int,
		                     split_part(btrim(coalesce(cursor, lo), '()'), ',', 2)::bigint)
		                    > ($t, $i), false)}, '0', 180);
}

sub run_of
{
	my ($name) = @_;
	return sq($node, "SELECT backfill_run('$name')");
}

# ------------------------------------------------------------------
# (a) rows inserted behind the cursors within the bound: one sweep
# ------------------------------------------------------------------
make_table('sa', 2000);
my $gate = hold_key('sa', 9, 1999);    # the largest key: the pass's bound
sq($node, qq{SELECT backfill_declare(name => 'sa', relation => 'sa', predicate => 'c IS NULL',
	action => '${\ guarded_action('sa')}', batch_size => 100, rate => 50, $wait_long)});
my $run_a = run_of('sa');
ok(lane_waits_on($gate), '(a) the lane waits at the last key of the pass');
ok(cursors_past('sa', 5, 5002), '(a) every open cursor is past the keys to insert');
sq($node, q{INSERT INTO sa (tenant_id, id) VALUES (0, 5000), (3, 5001), (5, 5002)});
is(sq($node, q{SELECT bound FROM backfill_status('sa')}), '(9,1999)',
	'(a) the inserted keys lie within the bound');
$gate->query_safe('COMMIT');
$gate->quit;
is(wait_pass_end($node, $run_a, 180), 'completed', '(a) the pass completed');
is(sq($node, q{SELECT sweep, beyond_bound FROM backfill_status('sa')}), '1|0',
	'(a) after one sweep, nothing left beyond the bound');
is(sq($node, q{SELECT count(DISTINCT sweep) || ':' || min(sweep) FROM backfill_partitions('sa')}),
	'1:1', '(a) backfill_partitions shows the sweep');
each_row_done_once($node, 'sa', 2003, $run_a);
is(sq($node, q{SELECT count(*) FROM sa WHERE c IS NULL}), '0', '(a) no row left');
like(slurp_file($node->logfile), qr/backfill "sa" run $run_a: 3 rows match within its bound behind the lanes' cursors; sweep 1 from key \(0,5000\)/,
	'(a) the server log names the sweep and its probe key');

# ------------------------------------------------------------------
# (b) an action that never fixes its rows: STALLED after one sweep
# ------------------------------------------------------------------
make_table('sb', 50);
sq($node, q{SELECT backfill_declare(name => 'sb', relation => 'sb', predicate => 'c IS NULL',
	set => 'c = NULL', batch_size => 20, rate => 100)});
my $run_b = run_of('sb');
is(wait_pass_end($node, $run_b, 180), 'failed', '(b) the pass failed');
is(ledger($node, $run_b, 'error_code'), 'BF006', '(b) stalled: BF006');
like(ledger($node, $run_b, 'error_message'),
	qr/stalled: 50 rows still match the predicate after sweep 1; the row of key \(0,10\) was given to the action and still matches \(the action does not fix it\)/,
	'(b) the message names the probe key and says the action does not fix it');
is(sq($node, q{SELECT sweep FROM backfill_status('sb')}), '1', '(b) within one sweep');
my ($rc, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nCALL backfill_finalize('sb', timeout => '10 s')");
like($err, qr/BF006/, '(b) finalize raises BF006');
like($err, qr/The action does not fix the rows it is given: fix it.*force => true/,
	'(b) its hint: fix the action and run with force');

# ------------------------------------------------------------------
# (c) retry of a stalled pass
# ------------------------------------------------------------------
# a trigger undoes the action while the flag is on: the action's rows stay
sub make_undone
{
	my ($name) = @_;
	make_table($name, 50);
	sq($node, qq{
		CREATE TABLE ${name}_flag (undo boolean);
		INSERT INTO ${name}_flag VALUES (true);
		CREATE FUNCTION ${name}_undo() RETURNS trigger LANGUAGE plpgsql AS \$\$
		BEGIN
			IF (SELECT undo FROM ${name}_flag) THEN NEW.c := NULL; END IF;
			RETURN NEW;
		END \$\$;
		CREATE TRIGGER undo BEFORE UPDATE ON $name FOR EACH ROW EXECUTE FUNCTION ${name}_undo();});
	return;
}

make_undone('sc');
sq($node, qq{SELECT backfill_declare(name => 'sc', relation => 'sc', predicate => 'c IS NULL',
	action => '${\ guarded_action('sc')}', batch_size => 20, rate => 100)});
my $run_c = run_of('sc');
is(wait_pass_end($node, $run_c, 180), 'failed', '(c) the pass stalled while the rows were undone');
like(ledger($node, $run_c, 'error_message'), qr/the row of key \(0,10\) was given to the action and still matches/,
	'(c) naming the probe key');
# the cause gone: the flag off, n set back for the count of the retry
sq($node, q{UPDATE sc_flag SET undo = false; UPDATE sc SET n = 0;});
($rc, $out, $err) = $node->psql('postgres', q{SELECT backfill_retry('sc')});
is($rc, 0, '(c) backfill_retry of the stalled pass is accepted');
like($err, qr/backfill "sc" sweeps stalled run $run_c again as run (\d+)/,
	'(c) it sweeps the stalled pass again');
my $run_c2 = sq($node, q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'sc'});
is(wait_pass_end($node, $run_c2, 180), 'completed', '(c) the retry completed');
each_row_done_once($node, 'sc', 50, $run_c2);

# an unguarded action: no sweep, and its retry is refused
make_undone('su');
sq($node, q{SELECT backfill_declare(name => 'su', relation => 'su', predicate => 'c IS NULL',
	action => 'UPDATE su SET c = 1, n = n + 1 WHERE (tenant_id, id) BETWEEN ($1, $2) AND ($3, $4)',
	guard => false, batch_size => 20, rate => 100)});
my $run_u = run_of('su');
is(wait_pass_end($node, $run_u, 180), 'failed', '(c) the unguarded pass stalled');
like(ledger($node, $run_u, 'error_message'), qr/50 rows still match the predicate after its lanes walked every partition/,
	'(c) at once, without a sweep');
is(sq($node, q{SELECT sweep FROM backfill_status('su')}), '0', '(c) no sweep');
($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\nSELECT backfill_retry('su')");
like($err, qr/ERROR:  BF006: backfill "su" cannot retry stalled run $run_u/,
	'(c) the retry of the unguarded stalled pass is refused with BF006');
like($err, qr/HINT:  Once the writers stop, start a new pass with backfill_run\('su', force => true\)/,
	'(c) its hint: run with force');

# ------------------------------------------------------------------
# (d) kill -9 of the lane during a sweep
# ------------------------------------------------------------------
make_table('sd', 2000);
$gate = hold_key('sd', 9, 1999);
sq($node, qq{SELECT backfill_declare(name => 'sd', relation => 'sd', predicate => 'c IS NULL',
	action => '${\ guarded_action('sd')}', batch_size => 100, rate => 50, $wait_long)});
my $run_d = run_of('sd');
ok(lane_waits_on($gate), '(d) the lane waits at the last key of the pass');
ok(cursors_past('sd', 3, 6000), '(d) every open cursor is past the keys to insert');
# 150 rows behind the cursors: the sweep checkpoints a batch of them, then
# waits at (3, 6000), held by a second session
sq($node, q{INSERT INTO sd (tenant_id, id) SELECT 0, g FROM generate_series(5000, 5149) g;
	INSERT INTO sd (tenant_id, id) VALUES (3, 6000);});
my $gate2 = hold_key('sd', 3, 6000);
$gate->query_safe('COMMIT');
$gate->quit;
ok(lane_waits_on($gate2), '(d) the sweep waits at (3, 6000)');
is(sq($node, q{SELECT sweep FROM backfill_status('sd')}), '1', '(d) in sweep 1');
ok(poll_until($node, q{SELECT sum(rows) FROM backfill_partitions('sd')}, '2100', 60),
	'(d) the sweep checkpointed its first batch (2,000 rows, then 100)');
my $lane = sq($node, q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'});
is(kill('KILL', $lane), 1, '(d) SIGKILL delivered to the lane');
# the crash restart ends the holding session too: the next lane goes on
ok(wait_for_server($node, 120), '(d) the server is back');
eval { $gate2->quit };
is(wait_pass_end($node, $run_d, 180), 'completed', '(d) the pass completed');
is(sq($node, q{SELECT sweep FROM backfill_status('sd')}), '1', '(d) after one sweep');
each_row_done_once($node, 'sd', 2151, $run_d);

done_testing();
