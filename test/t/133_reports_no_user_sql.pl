# 133_reports_no_user_sql.pl
#
# Reports evaluate no declarer's SQL; probes run in probe workers, bounded
# (issue 23 points 2, 4 and 6).
#  (a) Finding 2: mallory's predicate FETCHes from a cursor named "loot" and
#      counts what it read in a sequence (not rolled back).  A superuser
#      with a WITH HOLD cursor "loot" over pg_authid open calls
#      backfill_pending() and every query of metrics/queries.yaml: the
#      sequence is never advanced, and the cursor still holds every row.
#  (b) Finding 6: backfill_pending() costs the same whatever the table's
#      size: an honest completed backfill over 300,000 rows with no index
#      on its predicate, and backfill_pending() called three times in one
#      transaction reads no tuple of it (pg_stat_xact_user_tables).  A
#      predicate that sleeps (an hour, once a flag is set): backfill_pending
#      returns (under a statement_timeout of five minutes, which the old
#      probe would have run into); backfill_probe with a 1 s timeout says
#      BF039 (no answer in time), and the probe worker, bounded by
#      backfill.probe_timeout (3 s here), records its statement timeout.
#  (c) Finding 4: mallory holds LOCK TABLE on her watched table, and on the
#      migrations table (hers) that her queued pass requires.  Her watch
#      probes time out on the lock (backfill.probe_lock_timeout) and record
#      55P03; backfill_probe says BF039 with it; backfill_pending (under a
#      statement_timeout) returns; and alice's new pass starts and completes
#      while both locks are still held (the scheduler's look reads neither
#      table: her migration is read by a probe worker); hers stays queued.
#  (d) backfill_probe records its answer with its time (kind asked), and
#      backfill_pending shows it with drift_probed_at.
#  (e) No background worker slot free (a second cluster whose
#      max_worker_processes = 3 holds the logical replication launcher,
#      pg_backfill's launcher and its scheduler): backfill_probe says BF038,
#      with its hint, and starts nothing.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('reports_no_user_sql',
	extra_conf => "backfill.probe_timeout = '3s'\nbackfill.probe_lock_timeout = '1s'\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE mallory LOGIN;
	CREATE ROLE alice LOGIN;
	GRANT CREATE ON SCHEMA public TO mallory, alice;
});

# the queries of metrics/queries.yaml
my @metric_queries;
{
	my $yaml = $ENV{PG_BACKFILL_METRICS} // "$FindBin::RealBin/../../metrics/queries.yaml";
	open my $fh, '<', $yaml or die "$yaml: $!";
	my $q;
	while (my $line = <$fh>)
	{
		if (defined $q)
		{
			if ($line =~ /^    (.*)$/ || $line =~ /^\s*$/)
			{
				$q .= ($1 // '') . "\n";
				next;
			}
			push @metric_queries, $q;
			undef $q;
		}
		$q = '' if $line =~ /^  query:\s*\|\s*$/;
	}
	push @metric_queries, $q if defined $q;
	close $fh;
}
cmp_ok(scalar(@metric_queries), '>=', 4, 'the metrics queries were read');

# ------------------------------------------------------------------
# (a) finding 2: the superuser's cursor stays out of mallory's reach
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	SET ROLE mallory;
	CREATE TABLE m (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 1);
	INSERT INTO m (id) SELECT g FROM generate_series(1, 100) g;
	CREATE SEQUENCE m_loot;
	-- reads a row of whoever's cursor "loot" is in reach, and keeps a count
	CREATE FUNCTION m_peek() RETURNS boolean LANGUAGE plpgsql STABLE AS $$
	DECLARE
	    c refcursor := 'loot';
	    r record;
	BEGIN
	    FETCH c INTO r;
	    IF FOUND THEN
	        PERFORM setval('m_loot', nextval('m_loot'));
	    END IF;
	    RETURN true;
	EXCEPTION WHEN OTHERS THEN
	    RETURN false;
	END
	$$;
	SELECT backfill_declare(name => 'mal', relation => 'm', predicate => 'n = 0 AND m_peek()',
		action => 'UPDATE m SET n = 1 WHERE id BETWEEN $1 AND $2', rate => 100, guard => false);
});
my $mrun = sq($node, q{SET ROLE mallory; SELECT backfill_run('mal')});
is(wait_pass_end($node, $mrun, 300), 'completed', '(a) mallory\'s backfill completed');
$node->safe_psql('postgres', q{UPDATE m SET n = 0 WHERE id <= 10});

my $script = "BEGIN;\nDECLARE loot CURSOR WITH HOLD FOR SELECT rolname, rolpassword FROM pg_authid;\n"
  . "COMMIT;\n"
  . "SELECT count(*) FROM backfill_pending();\n"
  . join('', map { "SELECT count(*) FROM (\n$_) q;\n" } @metric_queries)
  . "SELECT count(*) FROM backfill_pending();\n"
  . "MOVE FORWARD ALL IN loot;\n"
  . "SELECT 'rows left in the cursor';\n";
my ($rc, $out, $err) = $node->psql('postgres', $script, on_error_stop => 1);
is($rc, 0, '(a) backfill_pending and every metrics query ran beside the superuser\'s cursor')
  or diag($err);
is(sq($node, q{SELECT is_called FROM m_loot}), 'f',
	'(a) mallory\'s predicate read nothing of the superuser\'s cursor (her sequence never moved)');
is(sq($node, q{SELECT state FROM backfill_pending() WHERE name = 'mal'}), 'completed',
	'(a) and backfill_pending evaluated no predicate: no probe, no drift yet');

# ------------------------------------------------------------------
# (b) finding 6: cost independent of the table; a sleeping predicate
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE big (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO big (id) SELECT g FROM generate_series(1, 300000) g;
	ANALYZE big;
	SELECT backfill_declare(name => 'big', relation => 'big', predicate => 'n = 0',
		action => 'UPDATE big SET n = 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 20000, rate => 100, guard => false);
});
my $brun = sq($node, q{SELECT backfill_run('big')});
is(wait_pass_end($node, $brun, 600), 'completed', '(b) the big backfill completed');
is(sq($node, q{
	BEGIN;
	SELECT count(*) > 0 FROM backfill_pending();
	SELECT count(*) > 0 FROM backfill_pending();
	SELECT count(*) > 0 FROM backfill_pending();
	SELECT seq_scan, seq_tup_read, idx_scan FROM pg_stat_xact_user_tables WHERE relname = 'big';
	COMMIT;
}), "t\nt\nt\n0|0|0",
	'(b) three backfill_pending() calls read no tuple of the 300,000-row table');

$node->safe_psql('postgres', q{
	SET ROLE mallory;
	CREATE TABLE slow_flag (on_ boolean);
	CREATE TABLE s (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO s (id) SELECT g FROM generate_series(1, 100) g;
	CREATE FUNCTION s_slow() RETURNS boolean LANGUAGE sql STABLE AS
	    $$SELECT CASE WHEN EXISTS (SELECT 1 FROM slow_flag) THEN pg_sleep(3600) IS NULL
	                  ELSE true END$$;
	SELECT backfill_declare(name => 'slow', relation => 's', predicate => 'n = 0 AND s_slow()',
		action => 'UPDATE s SET n = 1 WHERE id BETWEEN $1 AND $2', rate => 100, guard => false);
});
my $srun = sq($node, q{SET ROLE mallory; SELECT backfill_run('slow')});
is(wait_pass_end($node, $srun, 300), 'completed', '(b) the sleeping backfill completed (before it sleeps)');
$node->safe_psql('postgres', q{SET ROLE mallory; INSERT INTO slow_flag VALUES (true)});
($rc, $out, $err) = $node->psql('postgres',
	q{SET statement_timeout = '5min'; SELECT count(*) FROM backfill_pending()});
is($rc, 0, '(b) backfill_pending returns although a predicate now sleeps an hour') or diag($err);
($rc, $out, $err) = $node->psql('postgres', q{SELECT backfill_probe('slow', timeout => '1 s')});
like($err, qr/probe of backfill "slow" did not answer in time/,
	'(b) backfill_probe waits no longer than its timeout (BF039)');
ok(poll_until($node, q{SELECT error_code FROM backfill.probe WHERE declaration = 'slow'},
		'57014', 300),
	'(b) the probe worker ends at backfill.probe_timeout and records the statement timeout');
is(sq($node, q{SELECT state, probe_error LIKE '57014:%' FROM backfill_pending() WHERE name = 'slow'}),
	'completed|t', '(b) backfill_pending shows the probe\'s error');

# ------------------------------------------------------------------
# (c) finding 4: mallory's lock on her watched table
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	SET ROLE mallory;
	CREATE TABLE mw (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO mw (id) SELECT g FROM generate_series(1, 100) g;
	SELECT backfill_declare(name => 'mw', relation => 'mw', predicate => 'n = 0',
		action => 'UPDATE mw SET n = 1 WHERE id BETWEEN $1 AND $2', rate => 100,
		watch => '1 s', guard => false);
	RESET ROLE;
	SET ROLE alice;
	CREATE TABLE a (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO a (id) SELECT g FROM generate_series(1, 100) g;
	SELECT backfill_declare(name => 'al', relation => 'a', predicate => 'n = 0',
		action => 'UPDATE a SET n = n + 1 WHERE id BETWEEN $1 AND $2', rate => 100, guard => false);
});
my $mwrun = sq($node, q{SET ROLE mallory; SELECT backfill_run('mw')});
is(wait_pass_end($node, $mwrun, 300), 'completed', '(c) mallory\'s watched backfill completed');
$node->safe_psql('postgres', q{
	SET ROLE mallory;
	CREATE TABLE public.schema_migrations (version text PRIMARY KEY);
	CREATE TABLE mr (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO mr (id) SELECT g FROM generate_series(1, 10) g;
	SELECT backfill_declare(name => 'mreq', relation => 'mr', predicate => 'n = 0',
		action => 'UPDATE mr SET n = 1 WHERE id BETWEEN $1 AND $2', requires => 'v1', guard => false);
});
my $mreq = sq($node, q{SET ROLE mallory; SELECT backfill_run('mreq')});

my $holder = $node->background_psql('postgres');
$holder->query_safe(q{SET ROLE mallory; BEGIN; LOCK TABLE mw IN ACCESS EXCLUSIVE MODE;
	LOCK TABLE public.schema_migrations IN ACCESS EXCLUSIVE MODE;});
my $lock_at = sq($node, q{SELECT clock_timestamp()});
my $held = q{SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
	WHERE c.relname IN ('mw', 'schema_migrations') AND l.mode = 'AccessExclusiveLock' AND l.granted};
is(sq($node, $held), '2', '(c) mallory holds LOCK TABLE on her watched table and her migrations table');
ok(poll_until($node, qq{SELECT error_code FROM backfill.probe
		WHERE declaration = 'mw' AND kind = 'watch' AND taken_at > '$lock_at'}, '55P03', 300),
	'(c) her watch\'s probe times out on the lock and records 55P03');
($rc, $out, $err) = $node->psql('postgres', q{SET ROLE mallory; SELECT backfill_probe('mw')});
like($err, qr/probe of backfill "mw" failed.*55P03/s, '(c) backfill_probe says so: BF039 with 55P03');
($rc, $out, $err) = $node->psql('postgres',
	q{SET statement_timeout = '5min'; SELECT count(*) FROM backfill_pending()});
is($rc, 0, '(c) backfill_pending returns while the lock is held') or diag($err);

my $arun = sq($node, q{SET ROLE alice; SELECT backfill_run('al')});
ok(pass_ended($node, $arun, 600), '(c) alice\'s pass ended while the lock is held');
is(ledger($node, $arun, 'status'), 'completed', '(c) alice\'s pass completed');
is(sq($node, $held), '2', '(c) the locks were held all along (the same transaction still holds them)');
is(sq($node, qq{SELECT phase FROM backfill.run WHERE run_id = $mreq}), 'queued',
	'(c) mallory\'s pass that requires the migration stays queued');
is(sq($node, q{SELECT count(*) FILTER (WHERE n = 1), count(*) FROM a}), '100|100',
	'(c) every row of alice\'s table done exactly once');
$holder->query_safe('COMMIT;');
$holder->quit;

# ------------------------------------------------------------------
# (d) backfill_probe records its answer and its time
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{INSERT INTO big (id) SELECT g FROM generate_series(300001, 300042) g});
my $before = sq($node, q{SELECT clock_timestamp()});
is(sq($node, q{SELECT backfill_probe('big')}), '42', '(d) backfill_probe finds the 42 new rows');
is(sq($node, qq{SELECT kind, found, taken_at > '$before', error_code IS NULL
		FROM backfill.probe WHERE declaration = 'big'}), 'asked|42|t|t',
	'(d) recorded in backfill.probe with its time');
is(sq($node, qq{SELECT state, drift, drift_probed_at > '$before'
		FROM backfill_pending() WHERE name = 'big'}), 'drifted|42 rows|t',
	'(d) backfill_pending shows it, with when it was probed');
($rc, $out, $err) = $node->psql('postgres', q{SET ROLE alice; SELECT backfill_probe('big')});
like($err, qr/permission denied for backfill "big"/, '(d) only a member of its owner may probe it');
$node->stop;

# ------------------------------------------------------------------
# (e) no worker slot: BF038
# ------------------------------------------------------------------
my $full = BackfillTest::node('reports_no_slot', extra_conf => "max_worker_processes = 3
");
$full->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE f (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	SELECT backfill_declare(name => 'f', relation => 'f', predicate => 'n = 0',
		action => 'UPDATE f SET n = 1 WHERE id BETWEEN $1 AND $2', guard => false);
});
ok(poll_until($full, q{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type IN ('logical replication launcher', 'pg_backfill launcher',
		                       'pg_backfill scheduler')}, '3', 300),
	'(e) every background worker slot is taken (3 of 3)');
($rc, $out, $err) = $full->psql('postgres', q{\set VERBOSITY verbose
	SELECT backfill_probe('f')});
like($err, qr/BF038: no background worker slot is free to probe backfill "f"/,
	'(e) backfill_probe: BF038');
like($err, qr/HINT:  .*max_worker_processes/, '(e) with a hint to raise max_worker_processes');
is($full->safe_psql('postgres', q{SELECT count(*) FROM backfill.probe}), '0', '(e) nothing was probed');
$full->stop;

done_testing();
