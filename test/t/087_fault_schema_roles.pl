# 087_fault_schema_roles.pl
#
# The fault matrix of issue 10, changes under a running pass: while a
# batch is in flight its table is dropped or renamed, its key column
# renamed or retyped, its role made NOLOGIN, dropped, or stripped of its
# grants; a served database is dropped and created again; the lanes are
# capped by backfill.max_workers.  Each case ends in a state the ledger
# records truly and backfill_status explains, each row done exactly once
# (n = n + 1) or not at all, with no process looping on the error.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use FaultMatrix;

my $node = BackfillTest::node('fault_schema',
	extra_conf => "backfill.database_names = 'postgres,fm_db'\n");
my $fm = FaultMatrix->new($node);

# roles that declare backfills: each case gets its own
foreach my $r (qw(fm_nologin fm_dropped fm_revoked))
{
	sq($node, "CREATE ROLE $r LOGIN");
}

my @cases = (
	# dropped outright: undefined_table, whichever process finds out first
	{ name => 'table_dropped', change => 'DROP TABLE {t}', table => undef,
	  done => $FaultMatrix::BATCH, expect => ['failed', '42P01'] },
	{ name => 'table_renamed', change => 'ALTER TABLE {t} RENAME TO {t}_moved',
	  table => 'fm_table_renamed_moved', expect => ['failed', 'BF001'] },
	{ name => 'key_renamed', change => 'ALTER TABLE {t} RENAME COLUMN id TO id_moved',
	  expect => ['failed', '42703'] },
	{ name => 'key_retyped', change => 'ALTER TABLE {t} ALTER COLUMN id TYPE integer',
	  expect => ['completed'] },
	{ name => 'role_nologin', case => { role => 'fm_nologin' },
	  change => 'ALTER ROLE fm_nologin NOLOGIN', restart => 1,
	  expect => ['failed', 'BF016'] },
	{ name => 'role_dropped', case => { role => 'fm_dropped' },
	  change => 'DROP OWNED BY fm_dropped; DROP ROLE fm_dropped',
	  restart => 1, expect => ['failed', 'BF016'] },
	{ name => 'role_revoked', case => { role => 'fm_revoked' },
	  change => 'REVOKE UPDATE ON {t} FROM fm_revoked', expect => ['failed', '42501'] },
);

foreach my $c (@cases)
{
	$fm->change_case(%$c, label => "change / $c->{name}");
}

# ------------------------------------------------------------------
# No free lane: backfill.max_workers = 1 while one pass holds the lane.
# The other waits queued; a fault of the working lane lets either go on;
# both complete, never two lanes at once.
# ------------------------------------------------------------------
{
	# a restart, not a reload: the scheduler has certainly read the setting
	# before either pass is enqueued
	sq($node, 'ALTER SYSTEM SET backfill.max_workers = 1');
	$node->restart;
	is(sq($node, 'SHOW backfill.max_workers'), '1', 'slots: backfill.max_workers is 1');
	my $a = $fm->new_case('slots_a');
	my $b = $fm->new_case('slots_b');
	my $logpos = $fm->log_pos;
	my $h = $fm->hold($a, 'batch');
	ok(defined $h->{lane}, 'slots: the first pass holds the only lane');
	my $run_b = sq($node, "SELECT backfill_run('slots_b')");
	my $lanes = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'};
	is(holds_for($node, "SELECT phase, ($lanes) FROM backfill.run WHERE run_id = $run_b",
			'queued|1', 2),
		undef, 'slots: the second pass stays queued while the only lane is taken');
	ok($fm->inject('terminate', $h->{lane}), 'slots: the working lane is terminated');
	$fm->release($a, $h);
	my $max = 0;
	my $deadline = time() + 240;
	while (time() < $deadline)
	{
		my ($l, $open) = split /\|/, sq($node, "SELECT ($lanes), count(*) FILTER (WHERE status = 'running')"
			  . " FROM backfill.ledger WHERE run_id IN ($h->{run}, $run_b)");
		$max = $l if $l > $max;
		last if $open == 0;
		usleep(50_000);
	}
	cmp_ok($max, '<=', 1, 'slots: never more than backfill.max_workers lanes at once');
	$fm->check($a, $h->{run}, 'slots / first pass', ['completed'], $logpos);
	$fm->check($b, $run_b, 'slots / second pass', ['completed'], $logpos);
	sq($node, 'ALTER SYSTEM RESET backfill.max_workers; SELECT pg_reload_conf()');
}

# ------------------------------------------------------------------
# A served database dropped (with its scheduler and a lane at work) and
# created again: the launcher reports it missing once, does not loop, and
# serves the new database, whose pass completes.
# ------------------------------------------------------------------
{
	my $sched = q{SELECT count(*) FROM pg_stat_activity
	               WHERE backend_type = 'pg_backfill scheduler' AND datname = 'fm_db'};
	my $setup = q{
		CREATE EXTENSION pg_backfill;
		CREATE FUNCTION fm_gate(k int) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
		BEGIN PERFORM pg_advisory_xact_lock_shared(k); RETURN true; END $$;
		CREATE TABLE fm_db_t (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO fm_db_t (id) SELECT g FROM generate_series(1, 600) g;
		SELECT backfill_declare(name => 'fm_db_fill', relation => 'fm_db_t', predicate => 'n = 0',
			action => 'UPDATE fm_db_t SET n = n + 1 WHERE id BETWEEN $1 AND $2 AND fm_gate(7)',
			batch_size => 200, rate => 100, guard => false);
	};
	sq($node, 'CREATE DATABASE fm_db');
	$node->safe_psql('fm_db', $setup);
	ok(poll_until($node, $sched, '1', 120), 'database: fm_db gets its scheduler');
	# advisory locks are per database: the gate is taken in fm_db
	my $gate = $node->background_psql('fm_db');
	$gate->query_safe('SELECT pg_advisory_lock(7)');
	my $run = $node->safe_psql('fm_db', q{SELECT backfill_run('fm_db_fill')});
	ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'pg_backfill lane' AND datname = 'fm_db' AND wait_event = 'advisory'},
		'1', 120), 'database: a lane of fm_db is in a batch');
	my $logpos = $fm->log_pos;
	sq($node, 'DROP DATABASE fm_db WITH (FORCE)');
	$gate->quit;
	is(holds_for($node, $sched, '0', 3), undef, 'database: no scheduler for the dropped database');
	sq($node, 'CREATE DATABASE fm_db');
	$node->safe_psql('fm_db', $setup);
	ok(poll_until($node, $sched, '1', 120), 'database: the new fm_db gets a scheduler');
	$run = $node->safe_psql('fm_db', q{SELECT backfill_run('fm_db_fill')});
	my $st = '';
	my $deadline = time() + 180;
	while (time() < $deadline)
	{
		$st = $node->safe_psql('fm_db', "SELECT status FROM backfill.ledger WHERE run_id = $run");
		last if $st ne 'running';
		usleep(200_000);
	}
	is($st, 'completed', 'database: the pass in the new fm_db completes');
	my $rows = $node->safe_psql('fm_db',
		'SELECT count(*) FILTER (WHERE n <> 1), count(*) FROM fm_db_t');
	is($rows, '0|600', 'database: every row of the new fm_db done exactly once');
	push @{ $fm->matrix },
	  [ 'database dropped, created again', $st, '-', $rows eq '0|600' ? '600/600' : $rows,
		$rows eq '0|600' ? 'yes' : 'no', '' ];
	my $log = $fm->log_since($logpos);
	my @missing = ($log =~ /database "fm_db" in backfill.database_names does not exist/g);
	cmp_ok(scalar(@missing), '<=', 1, 'database: the missing database is reported at most once');
	my @starts = ($log =~ /pg_backfill scheduler started for database "fm_db"/g);
	cmp_ok(scalar(@starts), '<=', 2, 'database: the scheduler of fm_db was not restarted in a loop');
}

$fm->print_matrix;
$node->stop;
done_testing();
