# 052_attacks.pl -- what an attacker found after the trust fixes, kept as
# tests (each failed on the code before its fix).
#
#  (a) a squatted migrations table: an ordinary role creates
#      public.schema_migrations before the application does, as a view over
#      its own function (or a table whose row-level security policy calls
#      one).  A superuser's backfill that requires a migration reads it: the
#      function would run with the superuser's privileges, in the
#      superuser's session and in the scheduler.  A relation whose owner the
#      reading role does not trust must be a plain table without row-level
#      security: the view and the policy are refused (the backfill stays
#      blocked, saying why) and the function never runs.  A plain table of
#      that role is read, since reading it runs no code.
#  (b) a predicate that closes the key scan's parenthesis
#      ('NOT done) OR (NOT done') parses once wrapped, but would escape the
#      partition's bounds: refused with BF001.
#  (c) the CLI prints text that other roles wrote (an action's error
#      message) with its terminal control characters made harmless.
#  (d) a function sink must be a function whose owner has the sink role's
#      privileges: another role's function, which that role could CREATE OR
#      REPLACE with a new body under the same oid, is refused.
#  (e) a declaring role whose sessions are read-only
#      (default_transaction_read_only) ends its pass failed with BF016 and
#      the reason, once, instead of lanes dying at every start.
#  (f) the key scan's comparisons are the key type's own btree operators,
#      spelled with their schema: an exact-match public.>(varchar, varchar)
#      of another role, which would win over the built-in text operator
#      reached by a cast, never runs in a superuser's lane.
#  (g) a name another role declared, ran and dropped before: its completed
#      pass does not make the new owner's runs skips.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = BackfillTest::node('attacks');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE mallory LOGIN;
	GRANT CREATE ON SCHEMA public TO mallory;
	CREATE TABLE su_items (id bigint PRIMARY KEY, c int);
	INSERT INTO su_items SELECT g FROM generate_series(1, 100) g;
});

sub as_mallory
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql, extra_params => [ '-U', 'mallory' ]);
}

# ---- (a) the squatted migrations table
# every run of mallory's function counts on a sequence: nextval is not
# rolled back with the subtransaction the read runs in
as_mallory(q{
	CREATE SEQUENCE public.mig_ran;
	GRANT USAGE ON SEQUENCE public.mig_ran TO PUBLIC;
	CREATE FUNCTION public.mig_rows() RETURNS SETOF text LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_catalog.nextval('public.mig_ran');
		BEGIN
			EXECUTE 'ALTER ROLE mallory SUPERUSER';
		EXCEPTION WHEN OTHERS THEN NULL;
		END;
		RETURN NEXT 'v2';
	END $$;
	CREATE VIEW public.schema_migrations AS SELECT v AS version FROM public.mig_rows() v;
	GRANT SELECT ON public.schema_migrations TO PUBLIC;
});
$node->safe_psql('postgres', q{
	SELECT backfill_declare(name => 'su_requires', relation => 'su_items',
		predicate => 'c IS NULL',
		action => 'UPDATE su_items SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		requires => 'v2', rate => 1000, guard => false);
});
# backfill_pending reads no migrations table: a probe (a worker) records what it found
$node->safe_psql('postgres', q{SELECT backfill_probe('su_requires')});
my $pending = $node->safe_psql('postgres',
	q{SELECT state || ' | ' || coalesce(blocked_by, '') FROM backfill_pending() WHERE name = 'su_requires'});
like($pending, qr/^blocked \| .*not a table/,
	'(a) a view of another role as the migrations table: the backfill is blocked, saying why');
like($pending, qr/public\.schema_migrations is a view, not a table, and its owner mallory/,
	'(a) the reason names the relation and its kind (issue 23, F6)');
my ($rc, $out, $err, $run);
($rc, $run, $err) = $node->psql('postgres', q{SELECT backfill_run('su_requires')});
like($err, qr/is blocked: .*not a table/, '(a) a run of it waits, blocked, saying why');
is(sq($node, "SELECT phase FROM backfill.run WHERE run_id = $run"), 'queued',
	'(a) its pass is queued, not started');
# the scheduler checks requirements too, every naptime (1 s here)
is(holds_for($node, q{SELECT is_called FROM public.mig_ran}, 'f', 3), undef,
	'(a) mallory\'s function never ran: not for pending, run, nor the scheduler');
is(sq($node, q{SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'}), 'f',
	'(a) mallory is no superuser');

# a table with a policy that calls mallory's function: refused the same way
# (one transaction: the scheduler looks every second, and must never see the
# plain table with its row before the policy is on)
as_mallory(q{
	BEGIN;
	DROP VIEW public.schema_migrations;
	CREATE FUNCTION public.mig_seen() RETURNS boolean LANGUAGE sql AS
		$$ SELECT pg_catalog.nextval('public.mig_ran') > 0 $$;
	CREATE TABLE public.schema_migrations (version text);
	INSERT INTO public.schema_migrations VALUES ('v2');
	ALTER TABLE public.schema_migrations ENABLE ROW LEVEL SECURITY;
	ALTER TABLE public.schema_migrations FORCE ROW LEVEL SECURITY;
	CREATE POLICY seen ON public.schema_migrations USING (public.mig_seen());
	GRANT SELECT ON public.schema_migrations TO PUBLIC;
	COMMIT;
});
$node->safe_psql('postgres', q{SELECT backfill_probe('su_requires')});
$pending = $node->safe_psql('postgres',
	q{SELECT state || ' | ' || coalesce(blocked_by, '') FROM backfill_pending() WHERE name = 'su_requires'});
like($pending, qr/^blocked \| .*row-level security/,
	'(a) a table of another role with row-level security: blocked, saying why');
is(sq($node, q{SELECT is_called FROM public.mig_ran}), 'f',
	'(a) its policy\'s function never ran');

# a plain table of mallory's: data only, read
as_mallory(q{ALTER TABLE public.schema_migrations DISABLE ROW LEVEL SECURITY;
	ALTER TABLE public.schema_migrations NO FORCE ROW LEVEL SECURITY});
is(wait_pass_end($node, $run, 180), 'completed',
	'(a) a plain table of another role is read: the migration counts as applied, the pass runs');
is(sq($node, q{SELECT is_called FROM public.mig_ran}), 'f', '(a) still no function of mallory ran');

# ---- (b) a predicate that closes the scan's parenthesis
$node->safe_psql('postgres', q{
	CREATE TABLE inj (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0, done boolean NOT NULL DEFAULT false, b text);
	INSERT INTO inj (id) SELECT g FROM generate_series(1, 1000) g;
});
for my $pred ('NOT done) OR (NOT done', 'NOT done)) OR ((NOT done', 'NOT done] OR [NOT done')
{
	($rc, $out, $err) = $node->psql('postgres', qq{
		SELECT backfill_declare(name => 'inj', relation => 'inj', predicate => \$p\$$pred\$p\$,
			action => 'UPDATE inj SET n = n + 1, done = true WHERE id BETWEEN \$1 AND \$2 AND NOT done', guard => false)},
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/BF001/, "(b) predicate '$pred' is refused with BF001");
}
is(sq($node, q{SELECT count(*) FROM backfill.declaration WHERE name = 'inj'}), '0',
	'(b) nothing was stored');
($rc, $out, $err) = $node->psql('postgres', q{
	SELECT length(backfill_declare(name => 'inj', relation => 'inj',
		predicate => $p$(NOT done) AND (b IS NULL OR b <> ')(' /* ) */)$p$,
		action => 'UPDATE inj SET n = n + 1, done = true WHERE id BETWEEN $1 AND $2 AND NOT done',
		guard => false))});
is($out, '64', '(b) parentheses inside strings and comments do not count') or diag($err);

# ---- (c) the CLI and another role's terminal escapes
my $cli = "$FindBin::RealBin/../../cli/pg_backfill";
SKIP:
{
	skip 'the CLI is not built (make -C cli)', 4 unless -x $cli;
	as_mallory(q{
		CREATE TABLE public.m_esc (id bigint PRIMARY KEY, c int);
		INSERT INTO public.m_esc SELECT g FROM generate_series(1, 10) g;
		CREATE FUNCTION public.m_fail(a bigint, b bigint) RETURNS int LANGUAGE plpgsql AS $f$
		BEGIN
			RAISE EXCEPTION USING ERRCODE = '22012',
				MESSAGE = E'\x1b[2J\x1b[H\x1b]0;owned\x07\rcompleted: all good \x1b[8m \u009b2J \u202e';
		END $f$;
		SELECT backfill_declare(name => 'm_esc', relation => 'public.m_esc',
			predicate => 'c IS NULL', action => 'SELECT public.m_fail($1, $2)',
			max_attempts => 1, rate => 1000);
	});
	my $mrun = as_mallory(q{SELECT backfill_run('m_esc')});
	is(wait_pass_end($node, $mrun, 180), 'failed', '(c) mallory\'s pass failed with its message');
	my ($stdout, $stderr) = ('', '');
	IPC::Run::run([ $cli, '-d', $node->connstr('postgres'), 'status', 'm_esc' ],
		'>', \$stdout, '2>', \$stderr);
	like($stdout, qr/completed: all good/, '(c) the status shows the message');
	unlike($stdout . $stderr, qr/[\x00-\x08\x0b-\x1f\x7f]/,
		'(c) with no terminal control character left in it');
	unlike($stdout . $stderr, qr/\xc2[\x80-\x9f]|\xe2\x80[\xa8-\xae]|\xe2\x81[\xa6-\xa9]/,
		'(c) nor a C1 control (CSI) or a bidirectional override in UTF-8');
}

# ---- (d) a function sink of another role
as_mallory(q{
	CREATE FUNCTION public.audit_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE sql AS $$ SELECT NULL::void $$;
});
($rc, $out, $err) = $node->psql('postgres',
	q{SELECT backfill_outbox_sink('ops.audit', 'function', 'audit_sink')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/BF016: .*belongs to role mallory/,
	'(d) a sink on a function of another role is refused with BF016');
like($err, qr/HINT:.*owned by your role/, '(d) with a hint');
is(sq($node, q{SELECT count(*) FROM backfill.outbox_sink WHERE topic = 'ops.audit'}), '0',
	'(d) no sink was set');

# ---- (e) a role whose sessions are read-only
$node->safe_psql('postgres', q{
	CREATE ROLE ro_alice LOGIN;
	CREATE TABLE ro_items (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0, done boolean NOT NULL DEFAULT false);
	INSERT INTO ro_items (id) SELECT g FROM generate_series(1, 100) g;
	GRANT SELECT, UPDATE ON ro_items TO ro_alice;
});
$node->safe_psql('postgres', q{
	SELECT backfill_declare(name => 'ro_fill', relation => 'public.ro_items', predicate => 'NOT done',
		action => 'UPDATE public.ro_items SET n = n + 1, done = true WHERE id BETWEEN $1 AND $2',
		rate => 1000, guard => false);
}, extra_params => [ '-U', 'ro_alice' ]);
$node->safe_psql('postgres', q{ALTER ROLE ro_alice SET default_transaction_read_only = on});
my $ro_run = sq($node, q{SET ROLE ro_alice; SELECT backfill_run('ro_fill')});
is(wait_pass_end($node, $ro_run, 180), 'failed', '(e) the pass of a read-only role ends failed');
is(sq($node, "SELECT error_code, error_message ~ 'read-only' FROM backfill.ledger WHERE run_id = $ro_run"),
	'BF016|t', '(e) with BF016 and the reason');
is(sq($node, "SELECT lane_starts FROM backfill.run WHERE run_id = $ro_run"), '1',
	'(e) after one lane start');
is(sq($node, q{SELECT count(*) FROM ro_items WHERE n <> 0}), '0', '(e) and no row touched');

# ---- (f) an operator planted for the key scan
as_mallory(q{
	CREATE FUNCTION public.m_vc_gt(a varchar, b varchar) RETURNS boolean LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_catalog.nextval('public.mig_ran');
		BEGIN
			EXECUTE 'ALTER ROLE mallory SUPERUSER';
		EXCEPTION WHEN OTHERS THEN NULL;
		END;
		RETURN a::text > b::text;
	END $$;
	CREATE OPERATOR public.> (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.m_vc_gt);
});
$node->safe_psql('postgres', q{
	CREATE TABLE su_vc (k varchar(20) PRIMARY KEY, c int);
	INSERT INTO su_vc SELECT pg_catalog.lpad(g::text, 6, '0'), NULL FROM generate_series(1, 2000) g;
	SELECT backfill_declare(name => 'su_vc', relation => 'su_vc', predicate => 'c IS NULL',
		action => 'UPDATE su_vc SET c = 1 WHERE k BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 100, rate => 1000, guard => false);
});
my $vc_run = sq($node, q{SELECT backfill_run('su_vc')});
is(wait_pass_end($node, $vc_run, 180), 'completed', '(f) the varchar-keyed pass completes');
is(sq($node, q{SELECT count(*) FROM su_vc WHERE c = 1}), '2000', '(f) every row');
is(sq($node, q{SELECT is_called FROM public.mig_ran}), 'f', '(f) mallory\'s operator never ran');
is(sq($node, q{SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'}), 'f',
	'(f) mallory is no superuser');

# ---- (g) another role's completed pass under the same name
$node->safe_psql('postgres', q{CREATE ROLE alice LOGIN; GRANT CREATE ON SCHEMA public TO alice});
as_mallory(q{
	CREATE TABLE public.m_orph (id bigint PRIMARY KEY, c int);
	SELECT backfill_declare(name => 'orph', relation => 'public.m_orph', predicate => 'c IS NULL',
		action => 'UPDATE public.m_orph SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000, guard => false);
});
my $m_orph = as_mallory(q{SELECT backfill_run('orph')});
is(wait_pass_end($node, $m_orph, 180), 'completed', '(g) mallory\'s pass of orph completes');
as_mallory(q{SELECT backfill_drop('orph')});
my $as_alice = sub {
	return $node->safe_psql('postgres', $_[0], extra_params => [ '-U', 'alice' ]);
};
$as_alice->(q{
	CREATE TABLE public.a_orph (id bigint PRIMARY KEY, c int);
	INSERT INTO public.a_orph SELECT g FROM generate_series(1, 10) g;
	SELECT backfill_declare(name => 'orph', relation => 'public.a_orph', predicate => 'c IS NULL',
		action => 'UPDATE public.a_orph SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000, guard => false);
});
my $a_orph = $as_alice->(q{SELECT backfill_run('orph')});
isnt($a_orph, $m_orph, '(g) alice\'s run is a pass of its own, not a skip');
is(wait_pass_end($node, $a_orph, 180), 'completed', '(g) and it completes');
is(sq($node, q{SELECT count(*) FROM public.a_orph WHERE c = 1}), '10', '(g) over alice\'s rows');

done_testing();
