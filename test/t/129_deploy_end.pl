# 129_deploy_end.pl
#
# Issue 24, points 3 to 5: finalize leaves no row behind, a deploy check
# inside a migration's transaction, and the end of a backfill's life.
#  (a) finalize after drift, in the superuser's session: rows inserted
#      after the pass beyond its bound, and rows changed back to match
#      within it; finalize (which used to say complete at once) counts in a
#      probe worker, enqueues a catch-up pass (ledger: forced, watch, after
#      the completed pass), waits for it, counts again and returns; a count
#      finds no row; every row done once per time it matched (the action
#      is non-idempotent, n = n + 1); the count is recorded (kind finalize).
#  (b) the same in a session of the declaring role: it counts and works the
#      catch-up pass itself.
#  (c) the timeout bounds it: a drifted row locked by another session, a
#      2 s timeout: BF019; released, finalize completes.
#  (d) backfill_ensure_complete inside BEGIN ... ROLLBACK: never run
#      (BF044), running (BF044), drifted as a probe recorded (BF006, hint
#      CALL backfill_finalize), complete after finalize (a text, no
#      transaction id assigned: nothing written); a member of pg_monitor may
#      check, another role may not (BF016).
#  (e) backfill_retire: refused for a backfill that never completed (BF044,
#      hint backfill_drop), while a pass runs (BF008), by a non-member
#      (BF016); after the predicate's column is dropped and a forced run
#      failed (42703), retire succeeds; the ledger stays; run, forced run,
#      retry, revert, re-declaration and probe refused with BF041; finalize
#      and ensure_complete take it as complete; backfill_pending shows
#      retired and the CLI's pending gate exits 0.
#  (g) declared again since its pass: ensure_complete BF007, retire BF044;
#      a reverted backfill: retire BF044, hint backfill_drop.
#  (f) a retired backfill's watch stops: no probe and no catch-up pass
#      while its predicate matches new rows.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('deploy_end');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE dep_user LOGIN;
	CREATE ROLE dep_other LOGIN;
	CREATE ROLE dep_mon LOGIN IN ROLE pg_monitor;
});

# a table of $rows rows and a backfill of it declared by dep_user
sub declare_fill
{
	my ($name, $rows, $more) = @_;
	$more = defined $more ? ", $more" : '';
	$node->safe_psql('postgres', qq{
		CREATE TABLE $name (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, v int);
		INSERT INTO $name (id) SELECT g FROM generate_series(1, $rows) g;
		ANALYZE $name;
		GRANT SELECT, UPDATE, INSERT ON $name TO dep_user;
		SET ROLE dep_user;
		SELECT backfill_declare(name => '$name', relation => '$name', predicate => 'v IS NULL',
			action => 'UPDATE $name SET v = 1, n = n + 1 WHERE id BETWEEN \$1 AND \$2 AND v IS NULL',
			batch_size => 200, rate => 1000$more);
	});
	return;
}

sub psql_verbose
{
	my ($sql, @role) = @_;
	return $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		@role ? (extra_params => [ '-U', $role[0] ]) : ());
}

sub run_and_complete
{
	my ($name) = @_;
	my $run = $node->safe_psql('postgres', "SET ROLE dep_user; SELECT backfill_run('$name')");
	is(wait_pass_end($node, $run, 300), 'completed', "$name: run $run completed");
	return $run;
}

my $cli = $ENV{PG_BACKFILL_CLI};
if (!defined $cli || $cli eq '')
{
	my $rel = "$FindBin::RealBin/../../cli/pg_backfill";
	$cli = -x $rel ? $rel : '/usr/lib/postgresql/15/bin/pg_backfill';
}
die "pg_backfill CLI not found at $cli" unless -x $cli;

# ------------------------------------------------------------------
# (a) finalize after drift, the superuser's session
# ------------------------------------------------------------------
declare_fill('fd', 2000, q{lock_timeout => '1 hour', batch_timeout => '1 hour', max_attempts => 1});
my $run_a = run_and_complete('fd');
$node->safe_psql('postgres', q{
	INSERT INTO fd (id) SELECT g FROM generate_series(3001, 3300) g;
	UPDATE fd SET v = NULL WHERE id <= 50;
});
is($node->safe_psql('postgres', q{SELECT state FROM backfill_pending() WHERE name = 'fd'}),
	'completed', '(a) before any count, pending still says completed');
my ($rc, $out, $err) = psql_verbose(q{CALL backfill_finalize('fd', '5 minutes')});
is($rc, 0, '(a) finalize returns');
like($err, qr/350 rows match its predicate again since run $run_a completed; catch-up pass run (\d+)/,
	'(a) it says it found 350 rows and enqueued a catch-up pass');
my ($catch_a) = $err =~ /catch-up pass run (\d+)/;
like($err, qr/backfill "fd" is complete: run $catch_a/, '(a) complete with the catch-up pass');
is(ledger($node, $catch_a, q{status || '|' || forced || '|' || watch || '|' || previous_run_id || '|' || rows}),
	"completed|true|true|$run_a|350", '(a) ledger: the catch-up pass, forced, watch, after the completed pass, 350 rows');
is($node->safe_psql('postgres', q{SELECT count(*) FROM fd WHERE v IS NULL}), '0',
	'(a) a count finds no row left');
is($node->safe_psql('postgres',
		q{SELECT count(*) FILTER (WHERE n <> CASE WHEN id <= 50 THEN 2 ELSE 1 END) FROM fd}),
	'0', '(a) every row done once per time it matched');
is($node->safe_psql('postgres', q{SELECT kind || '|' || found || '|' || run_id FROM backfill.probe WHERE declaration = 'fd'}),
	"finalize|0|$catch_a", '(a) the count is recorded (kind finalize, none found, after the catch-up pass)');
is($node->safe_psql('postgres', q{SELECT state FROM backfill_pending() WHERE name = 'fd'}),
	'completed', '(a) pending: completed');

# ------------------------------------------------------------------
# (b) the declarer's own session counts and works the catch-up pass
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{INSERT INTO fd (id) SELECT g FROM generate_series(4001, 4100) g});
($rc, $out, $err) = psql_verbose(q{CALL backfill_finalize('fd', '5 minutes')}, 'dep_user');
is($rc, 0, '(b) dep_user\'s finalize returns');
my ($catch_b) = $err =~ /100 rows match its predicate again since run $catch_a completed; catch-up pass run (\d+)/;
ok(defined $catch_b, '(b) a catch-up pass for the 100 new rows');
is(ledger($node, $catch_b // 0, q{status || '|' || watch || '|' || rows}), 'completed|true|100',
	'(b) it completed with the 100 rows');
is($node->safe_psql('postgres', q{SELECT count(*) FROM fd WHERE v IS NULL OR n = 0}), '0',
	'(b) no row left');

# ------------------------------------------------------------------
# (c) the timeout bounds the catch-up
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{INSERT INTO fd (id) VALUES (5001)});
my $lock = $node->background_psql('postgres');
$lock->query_safe(q{BEGIN; SELECT 1 FROM fd WHERE id = 5001 FOR UPDATE});
($rc, $out, $err) = psql_verbose(q{CALL backfill_finalize('fd', '2 s')});
like($err, qr/BF019/, '(c) a catch-up pass held by a lock: BF019 at the timeout');
$lock->query_safe('ROLLBACK');
$lock->quit;
($rc, $out, $err) = psql_verbose(q{CALL backfill_finalize('fd', '5 minutes')});
is($rc, 0, '(c) released: finalize returns');
is($node->safe_psql('postgres', q{SELECT count(*) FROM fd WHERE v IS NULL}), '0', '(c) no row left');

# ------------------------------------------------------------------
# (d) backfill_ensure_complete inside a transaction
# ------------------------------------------------------------------
declare_fill('fe', 100);
($rc, $out, $err) = psql_verbose(q{BEGIN; CREATE TABLE mig1 (); SELECT backfill_ensure_complete('fe'); ROLLBACK;});
like($err, qr/BF044.*never run/s, '(d) never run: BF044');
like($err, qr/CALL backfill_finalize\('fe'\) outside a transaction/, '(d) the hint: finalize outside');

declare_fill('fr', 3000, q{lock_timeout => '1 hour', batch_timeout => '1 hour', max_parallel => 1});
my $hold = $node->background_psql('postgres');
$hold->query_safe(q{BEGIN; SELECT 1 FROM fr WHERE id = 1 FOR UPDATE});
my $run_r = $node->safe_psql('postgres', q{SET ROLE dep_user; SELECT backfill_run('fr')});
($rc, $out, $err) = psql_verbose(q{BEGIN; SELECT backfill_ensure_complete('fr'); ROLLBACK;});
like($err, qr/BF044.*run $run_r is running/s, '(d) running: BF044 with the run');

$out = $node->safe_psql('postgres', q{
	BEGIN;
	SELECT backfill_ensure_complete('fd');
	SELECT coalesce(txid_current_if_assigned()::text, 'no xid');
	ROLLBACK;});
like($out, qr/^backfill "fd" is complete: run \d+, and a finalize probe at .* found no row left\nno xid$/,
	'(d) complete after finalize: a text, and no transaction id assigned (nothing written)');
is($node->psql('postgres', q{SELECT backfill_ensure_complete('fd')}, extra_params => [ '-U', 'dep_mon' ]),
	0, '(d) a member of pg_monitor may check');
($rc, $out, $err) = psql_verbose(q{SELECT backfill_ensure_complete('fd')}, 'dep_other');
like($err, qr/BF016/, '(d) another role may not (BF016)');

$node->safe_psql('postgres', q{INSERT INTO fd (id) SELECT g FROM generate_series(6001, 6020) g});
is($node->safe_psql('postgres', q{SELECT backfill_probe('fd')}), '20', '(d) a probe records 20 drifted rows');
($rc, $out, $err) = psql_verbose(q{BEGIN; SELECT backfill_ensure_complete('fd'); ROLLBACK;});
like($err, qr/BF006.*20 rows match its predicate again/s, '(d) drifted: BF006 with the rows');
like($err, qr/asked probe/, '(d) it names the count it relies on');
($rc, $out, $err) = psql_verbose(q{CALL backfill_finalize('fd', '5 minutes')});
is($rc, 0, '(d) finalize works the drift');
is($node->safe_psql('postgres', q{SELECT backfill_ensure_complete('fd') LIKE '%found no row left'}), 't',
	'(d) then the check passes');

# ------------------------------------------------------------------
# (e) backfill_retire
# ------------------------------------------------------------------
($rc, $out, $err) = psql_verbose(q{SET ROLE dep_user; SELECT backfill_retire('fe')});
like($err, qr/BF044.*never completed/s, '(e) never completed: BF044');
like($err, qr/backfill_drop\('fe'\)/, '(e) the hint: backfill_drop');
($rc, $out, $err) = psql_verbose(q{SELECT backfill_retire('fr')});
like($err, qr/BF008.*while run $run_r is running/s, '(e) a running pass: BF008');
$node->safe_psql('postgres', q{SELECT backfill_cancel('fr')});
is(wait_pass_end($node, $run_r, 120), 'cancelled', '(e) fr cancelled');
$hold->query_safe('ROLLBACK');
$hold->quit;
($rc, $out, $err) = psql_verbose(q{SET ROLE dep_other; SELECT backfill_retire('fd')});
like($err, qr/BF016/, '(e) a non-member: BF016');

my $last_fd = $node->safe_psql('postgres',
	q{SELECT max(run_id) FROM backfill.ledger WHERE declaration = 'fd' AND status = 'completed'});
$node->safe_psql('postgres', q{ALTER TABLE fd DROP COLUMN v});
my $forced = $node->safe_psql('postgres', q{SET ROLE dep_user; SELECT backfill_run('fd', force => true)});
is(wait_pass_end($node, $forced, 120), 'failed', '(e) a forced run after the column drop fails');
is(ledger($node, $forced, 'error_code'), '42703', '(e) with 42703');
is($node->safe_psql('postgres', q{SELECT state FROM backfill_pending() WHERE name = 'fd'}), 'failed',
	'(e) pending: failed');
my $ledger_rows = $node->safe_psql('postgres', q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'fd'});
is($node->safe_psql('postgres', q{SET ROLE dep_user; SELECT backfill_retire('fd')}), $last_fd,
	'(e) retire succeeds after the column is gone, keeping the last completed run');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'fd'}),
	$ledger_rows, '(e) the ledger stays');
is($node->safe_psql('postgres', q{SELECT backfill_retire('fd')}), $last_fd, '(e) retiring twice answers the first');
for my $call (q{SELECT backfill_run('fd')}, q{SELECT backfill_run('fd', force => true)},
	q{SELECT backfill_retry('fd')}, q{SELECT backfill_revert('fd')}, q{SELECT backfill_probe('fd')},
	q{SELECT backfill_declare(name => 'fd', relation => 'fd', predicate => 'n = 0',
		action => 'UPDATE fd SET n = 1 WHERE id BETWEEN $1 AND $2 AND n = 0')})
{
	($rc, $out, $err) = psql_verbose("SET ROLE dep_user; $call");
	like($err, qr/BF041.*is retired/s, "(e) refused with BF041: $call");
	like($err, qr/HINT:.*new name/, "(e) with a hint: $call");
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'fd'}),
	$ledger_rows, '(e) no pass was added');
($rc, $out, $err) = psql_verbose(q{CALL backfill_finalize('fd')});
is($rc, 0, '(e) finalize of a retired backfill returns');
like($err, qr/is retired/, '(e) saying it is retired');
like($node->safe_psql('postgres', q{BEGIN; SELECT backfill_ensure_complete('fd'); ROLLBACK}),
	qr/is retired/, '(e) ensure_complete passes for it');
is($node->safe_psql('postgres', q{SELECT state FROM backfill_pending() WHERE name = 'fd'}), 'retired',
	'(e) pending: retired');

# the gate: fe never ran (dropped), fr wrote no row (dropped), fd retired
$node->safe_psql('postgres', q{SELECT backfill_drop('fe'), backfill_drop('fr')});
my ($co, $ce) = ('', '');
IPC::Run::run([ $cli, '-d', $node->connstr('postgres'), 'pending' ],
	'<', \undef, '>', \$co, '2>', \$ce, IPC::Run::timeout(60));
is($? >> 8, 0, '(e) the CLI pending gate exits 0');
like($co, qr/^fd\s+retired\s/m, '(e) pending lists fd as retired');

# ------------------------------------------------------------------
# (g) declared again since its pass: ensure_complete BF007, retire BF044;
#     reverted: retire BF044 (hint: drop)
# ------------------------------------------------------------------
declare_fill('fc', 100);
run_and_complete('fc');
$node->safe_psql('postgres', q{SET ROLE dep_user;
	SELECT backfill_declare(name => 'fc', relation => 'fc', predicate => 'v IS NULL',
		action => 'UPDATE fc SET v = 2 WHERE id BETWEEN $1 AND $2 AND v IS NULL')});
($rc, $out, $err) = psql_verbose(q{BEGIN; SELECT backfill_ensure_complete('fc'); ROLLBACK;});
like($err, qr/BF007.*declared again since run/s, '(g) declared again: ensure_complete BF007');
($rc, $out, $err) = psql_verbose(q{SET ROLE dep_user; SELECT backfill_retire('fc')});
like($err, qr/BF044.*never completed/s, '(g) declared again: retire BF044');

declare_fill('fv', 100, q{revert => 'UPDATE fv SET v = NULL WHERE id BETWEEN $1 AND $2 AND v IS NOT NULL',
	revert_predicate => 'v IS NOT NULL'});
run_and_complete('fv');
my $rev = $node->safe_psql('postgres', q{SET ROLE dep_user; SELECT backfill_revert('fv')});
is(wait_pass_end($node, $rev, 120), 'completed', '(g) fv reverted');
($rc, $out, $err) = psql_verbose(q{SET ROLE dep_user; SELECT backfill_retire('fv')});
like($err, qr/BF044.*run $rev reverted it/s, '(g) reverted: retire BF044');
like($err, qr/backfill_drop\('fv'\)/, '(g) the hint: drop it');

# ------------------------------------------------------------------
# (f) a retired backfill's watch stops
# ------------------------------------------------------------------
declare_fill('fw', 200, q{watch => '1 s'});
run_and_complete('fw');
ok(poll_until($node, q{SELECT probes > 0 FROM backfill.watch WHERE declaration = 'fw'}, 't', 120),
	'(f) the watch probes it');
$node->safe_psql('postgres', q{SET ROLE dep_user; SELECT backfill_retire('fw')});
# a probe that loaded the watch before the retire committed may still record: wait until
# no probe worker runs (one started later finds nothing to probe)
ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill probe'},
	'0', 60), '(f) no probe worker runs');
my $probes = $node->safe_psql('postgres', q{SELECT probes FROM backfill.watch WHERE declaration = 'fw'});
$node->safe_psql('postgres', q{INSERT INTO fw (id) SELECT g FROM generate_series(1001, 1010) g});
my $changed = holds_for($node,
	q{SELECT probes || '|' || (SELECT count(*) FROM backfill.ledger WHERE declaration = 'fw')
	    FROM backfill.watch WHERE declaration = 'fw'},
	"$probes|1", 4);
ok(!defined $changed, '(f) no probe and no catch-up pass for 4 s (interval 1 s) while rows match')
  or diag("changed to: $changed");

done_testing();
