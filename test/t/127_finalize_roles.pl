# 127_finalize_roles.pl
#
# Issue 23, finding 1: the declarer's SQL must never run in another role's
# session.  CALL backfill_finalize used to work a pass in the caller's
# session when no lane held it, so a superuser's finalize ran alice's action
# beside what the superuser's session held: a WITH HOLD cursor over
# pg_authid, fetched by the action into alice's table.  Now a caller who is
# not the lanes' role only waits: the lanes (as alice, in sessions of their
# own) do every batch and the count.  Each case below plants something in
# the finalizing session that alice's action tries to copy into her table
# loot (a cursor, a prepared statement, a LISTEN channel, a session advisory
# lock, a temporary table), and checks that the pass completes, finalize
# returns, loot stays empty and the session keeps what it held:
#  (a) the attacker's exact reproducer: a superuser's WITH HOLD cursor;
#  (b) a prepared statement of the superuser's;
#  (c) a LISTEN channel of the superuser's;
#  (d) a session advisory lock of the superuser's (still held once after);
#  (e) a temporary table of the superuser's (read as pg_temp.name);
#  (f) the superuser SET ROLE alice (current_user is the lanes' role, the
#      session is still the superuser's): lanes work the pass; a SECURITY
#      DEFINER procedure of alice's that calls finalize: BF015 (such a
#      procedure cannot commit), no batch run;
#  (g) bob, a member of alice, with a cursor of his own over a table alice
#      may not read;
#  (h) backfill_run of alice's scoped backfill by the superuser and by bob,
#      each holding a cursor the scope expression fetches from: the scope
#      is evaluated in a worker logged in as alice (its value says it found
#      no cursor).
# 121 (e) covers the case where no worker slot is free: BF038.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('finalize_roles');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN IN ROLE alice;
	ALTER ROLE postgres PASSWORD 'super-secret';
	GRANT CREATE ON SCHEMA public TO alice, bob;
	CREATE TABLE bob_secret (s text);
	INSERT INTO bob_secret VALUES ('bob-only');
	ALTER TABLE bob_secret OWNER TO bob;
	REVOKE ALL ON bob_secret FROM alice;
	SET ROLE alice;
	CREATE TABLE loot (what text, s text);
});

# alice's backfill $name over a table g_$name of 3000 rows, whose action
# does its batch (n = n + 1) and then $steal, in a block that swallows
# errors, writing what it finds into loot
sub declare_steal
{
	my ($name, $steal) = @_;
	$node->safe_psql('postgres', qq{
		SET ROLE alice;
		CREATE TABLE g_$name (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO g_$name (id) SELECT generate_series(1, 3000);
		CREATE FUNCTION ${name}_work(lo bigint, hi bigint) RETURNS int LANGUAGE plpgsql AS \$f\$
		DECLARE r record; k int; c refcursor;
		BEGIN
			UPDATE g_$name SET n = n + 1 WHERE id BETWEEN lo AND hi;
			GET DIAGNOSTICS k = ROW_COUNT;
			BEGIN
				$steal
			EXCEPTION WHEN others THEN NULL;
			END;
			RETURN k;
		END \$f\$;
		SELECT backfill_declare(name => '$name', relation => 'g_$name', predicate => 'n = 0',
			action => 'SELECT ${name}_work(\$1, \$2)', batch_size => 250, rate => 1000);
	});
	return;
}

# run $sql as $role (a login) in one session; (exit code, stdout, stderr)
sub session
{
	my ($role, $sql) = @_;
	return $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		extra_params => [ '-U', $role ]);
}

# the pass of $name completed, every row done once by lanes, and loot empty
sub check_pass
{
	my ($case, $name, $err) = @_;
	my $run = $node->safe_psql('postgres',
		"SELECT max(run_id) FROM backfill.ledger WHERE declaration = '$name'");
	is(ledger($node, $run, 'status'), 'completed', "$case the pass completed");
	unlike($err, qr/this session works/, "$case the caller's session worked no batch");
	is($node->safe_psql('postgres', "SELECT count(*) FROM loot WHERE what = '$name'"), '0',
		"$case loot is empty: the action never reached the caller's session");
	is($node->safe_psql('postgres', "SELECT count(*) FROM g_$name WHERE n <> 1"), '0',
		"$case every row done once");
	return;
}

# ------------------------------------------------------------------
# (a) the reproducer: a superuser's WITH HOLD cursor over pg_authid
# ------------------------------------------------------------------
declare_steal('steal', q{
	c := 'supercur';
	LOOP
		FETCH c INTO r;
		EXIT WHEN NOT FOUND;
		INSERT INTO loot VALUES ('steal', r::text);
	END LOOP;});
my ($rc, $out, $err) = session('postgres', q{
	BEGIN;
	DECLARE supercur CURSOR WITH HOLD FOR
		SELECT rolname, rolpassword FROM pg_authid WHERE rolpassword IS NOT NULL;
	COMMIT;
	CALL backfill_finalize('steal', '5 minutes');
	FETCH ALL FROM supercur;
});
is($rc, 0, '(a) finalize returns') or diag($err);
check_pass('(a)', 'steal', $err);
like($out, qr/^postgres\|SCRAM-SHA-256/m, '(a) the cursor is still the superuser\'s, unread');

# ------------------------------------------------------------------
# (b) a prepared statement
# ------------------------------------------------------------------
declare_steal('prep', q{
	FOR r IN EXECUTE 'EXECUTE superstmt' LOOP
		INSERT INTO loot VALUES ('prep', r::text);
	END LOOP;});
($rc, $out, $err) = session('postgres', q{
	PREPARE superstmt AS SELECT rolname, rolpassword FROM pg_authid WHERE rolpassword IS NOT NULL;
	CALL backfill_finalize('prep', '5 minutes');
	SELECT count(*) FROM pg_prepared_statements WHERE name = 'superstmt';
});
is($rc, 0, '(b) finalize returns') or diag($err);
check_pass('(b)', 'prep', $err);
is($out, '1', '(b) the prepared statement is still there');

# ------------------------------------------------------------------
# (c) a LISTEN channel
# ------------------------------------------------------------------
declare_steal('listen', q{
	INSERT INTO loot SELECT 'listen', c FROM pg_listening_channels() c;});
($rc, $out, $err) = session('postgres', q{
	LISTEN payroll_secrets;
	CALL backfill_finalize('listen', '5 minutes');
	SELECT string_agg(c, ',') FROM pg_listening_channels() c;
});
is($rc, 0, '(c) finalize returns') or diag($err);
check_pass('(c)', 'listen', $err);
is($out, 'payroll_secrets', '(c) the session still listens on its channel');

# ------------------------------------------------------------------
# (d) a session advisory lock
# ------------------------------------------------------------------
declare_steal('advis', q{
	INSERT INTO loot SELECT 'advis', objid::text FROM pg_locks
	 WHERE locktype = 'advisory' AND pid = pg_backend_pid();
	PERFORM pg_advisory_unlock_all();});
($rc, $out, $err) = session('postgres', q{
	SELECT pg_advisory_lock(4242);
	CALL backfill_finalize('advis', '5 minutes');
	SELECT pg_advisory_unlock(4242) || '|' || pg_advisory_unlock(4242);
});
is($rc, 0, '(d) finalize returns') or diag($err);
check_pass('(d)', 'advis', $err);
like($out, qr/^true\|false$/m, '(d) the session still holds its lock, once');

# ------------------------------------------------------------------
# (e) a temporary table
# ------------------------------------------------------------------
declare_steal('temp', q{
	INSERT INTO loot SELECT 'temp', s FROM pg_temp.secrets;});
($rc, $out, $err) = session('postgres', q{
	CREATE TEMP TABLE secrets AS SELECT 'temp-secret'::text AS s;
	CALL backfill_finalize('temp', '5 minutes');
	SELECT s FROM secrets;
});
is($rc, 0, '(e) finalize returns') or diag($err);
check_pass('(e)', 'temp', $err);
is($out, 'temp-secret', '(e) the temporary table is untouched');

# ------------------------------------------------------------------
# (f) SET ROLE alice in the superuser's session; alice's SECURITY DEFINER
#     procedure
# ------------------------------------------------------------------
declare_steal('setrole', q{
	c := 'supercur';
	LOOP
		FETCH c INTO r;
		EXIT WHEN NOT FOUND;
		INSERT INTO loot VALUES ('setrole', r::text);
	END LOOP;});
($rc, $out, $err) = session('postgres', q{
	BEGIN;
	DECLARE supercur CURSOR WITH HOLD FOR
		SELECT rolname, rolpassword FROM pg_authid WHERE rolpassword IS NOT NULL;
	COMMIT;
	SET ROLE alice;
	CALL backfill_finalize('setrole', '5 minutes');
});
is($rc, 0, '(f) finalize after SET ROLE alice returns') or diag($err);
check_pass('(f) SET ROLE:', 'setrole', $err);

declare_steal('definer', q{
	c := 'supercur';
	LOOP
		FETCH c INTO r;
		EXIT WHEN NOT FOUND;
		INSERT INTO loot VALUES ('definer', r::text);
	END LOOP;});
$node->safe_psql('postgres', q{
	SET ROLE alice;
	CREATE PROCEDURE alice_finalize() LANGUAGE plpgsql SECURITY DEFINER AS $$
	BEGIN
		CALL backfill_finalize('definer', '5 minutes');
	END $$;
});
($rc, $out, $err) = session('postgres', q{
	BEGIN;
	DECLARE supercur CURSOR WITH HOLD FOR
		SELECT rolname, rolpassword FROM pg_authid WHERE rolpassword IS NOT NULL;
	COMMIT;
	CALL alice_finalize();
});
# a SECURITY DEFINER procedure cannot commit (PostgreSQL makes its CALLs
# atomic): finalize refuses (BF015) before it starts a pass, and nothing of
# alice's runs here
like($err, qr/ERROR:  BF015: backfill_finalize of "definer" must be called with CALL outside/,
	'(f) SECURITY DEFINER: refused with BF015');
unlike($err, qr/this session works/, '(f) SECURITY DEFINER: the session worked no batch');
is($node->safe_psql('postgres', "SELECT count(*) FROM loot WHERE what = 'definer'"), '0',
	'(f) SECURITY DEFINER: loot is empty');
is($node->safe_psql('postgres', "SELECT count(*) FROM g_definer WHERE n > 1"), '0',
	'(f) SECURITY DEFINER: no row done twice');

# ------------------------------------------------------------------
# (g) a member of alice
# ------------------------------------------------------------------
declare_steal('member', q{
	c := 'bobcur';
	LOOP
		FETCH c INTO r;
		EXIT WHEN NOT FOUND;
		INSERT INTO loot VALUES ('member', r::text);
	END LOOP;});
($rc, $out, $err) = session('bob', q{
	BEGIN;
	DECLARE bobcur CURSOR WITH HOLD FOR SELECT s FROM bob_secret;
	COMMIT;
	CALL backfill_finalize('member', '5 minutes');
	FETCH ALL FROM bobcur;
});
is($rc, 0, '(g) bob\'s finalize returns') or diag($err);
check_pass('(g)', 'member', $err);
is($out, 'bob-only', '(g) bob\'s cursor is his, unread');

# ------------------------------------------------------------------
# (h) backfill_run of a scoped backfill: the input casts and the scope
#     expression run in a worker logged in as alice, not in the caller's
#     session (a scope's value names the ledger row alice can read)
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	SET ROLE alice;
	CREATE TABLE g_sc (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO g_sc (id) SELECT generate_series(1, 100);
	CREATE FUNCTION alice_scope(i jsonb) RETURNS text LANGUAGE plpgsql AS $$
	DECLARE c refcursor := 'supercur'; r record;
	BEGIN
		BEGIN
			FETCH c INTO r;
			IF FOUND THEN RETURN 'got-' || r.rolname; END IF;
		EXCEPTION WHEN others THEN RETURN 'nocursor';
		END;
		RETURN 'empty';
	END $$;
	SELECT backfill_declare(name => 'sc', relation => 'g_sc', predicate => 'n = 0',
		action => 'UPDATE g_sc SET n = n + 1 WHERE id BETWEEN $1 AND $2',
		input => '{"t": "integer"}', scope => 'public.alice_scope(input)', rate => 1000, guard => false);
});
for my $who (['postgres', 'supercur'], ['bob', 'supercur'])
{
	my ($role, $cur) = @$who;
	my $t = $role eq 'postgres' ? 1 : 2;
	($rc, $out, $err) = session($role, qq{
		BEGIN;
		DECLARE $cur CURSOR WITH HOLD FOR SELECT 'secret-of-$role'::text AS rolname;
		COMMIT;
		SELECT backfill_run('sc', input => '{"t": $t}');
	});
	is($rc, 0, "(h) $role runs alice's scoped backfill") or diag($err);
	is($node->safe_psql('postgres', "SELECT ledger_name FROM backfill.ledger WHERE run_id = $out"),
		'sc:nocursor', "(h) $role: the scope was evaluated in a session without the caller's cursor");
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill.ledger WHERE ledger_name LIKE 'sc:got%'}),
	'0', '(h) no scope named a cursor row of the caller');

is($node->safe_psql('postgres', 'SELECT count(*) FROM loot'), '0', 'nothing was stolen');

$node->stop;
done_testing();
