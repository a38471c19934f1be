# 050_trust_decl.pl
#
# The trust boundary around declarations (issue 9, findings 1 to 5).  Each
# hostile role owns a function that makes it a superuser if it ever runs
# as one; the test checks rolsuper stays false after every entry point and
# worker has had its go:
#  (1) the scheduler's drift check runs a required backfill's predicate:
#      a predicate that sets search_path with set_config(..., false) must
#      not leave it behind in the scheduler's superuser session, where
#      shadows of to_regclass(), now(), count(*) and pg_stat_activity wait;
#  (1b) likewise a setting changed by a function sink in the outbox relay;
#  (2) requires reads the application's migrations table (a view over the
#      attacker's function) as the declaring role, never as the extension
#      owner, whoever asks: the role itself, a superuser's backfill_pending
#      and backfill_run, the scheduler; a declarer that may not read the
#      table is blocked and told why;
#  (3) a scoped run's scope expression and input casts (a domain whose
#      CHECK calls the attacker's function) are evaluated as the
#      declaration's owner when a superuser runs it, and leave no setting
#      behind in the caller's session;
#  (4) run_as membership is checked at every run, retry and lane start: a
#      lane started after REVOKE ends the pass failed BF016, once;
#  (5) requires_backfill names only a backfill whose owner the declarer is
#      a member of (declare, run), and the scheduler never reopens another
#      role's backfill on drift for someone who may not run it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('trust_decl',
	extra_conf => "backfill.migrations_table = 'mal2.schema_migrations(version)'\n");
$node->safe_psql('postgres', 'CREATE EXTENSION pg_backfill');

# a LOGIN role with a schema of its own and mal.esc(): ALTER ROLE <self>
# SUPERUSER when the caller is a superuser, true otherwise
sub hostile_role
{
	my ($role) = @_;
	$node->safe_psql('postgres', qq{
		CREATE ROLE $role LOGIN;
		CREATE SCHEMA $role AUTHORIZATION $role;
	});
	as($role, qq{
		CREATE FUNCTION $role.esc() RETURNS boolean LANGUAGE plpgsql AS \$\$
		BEGIN
			IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
				EXECUTE 'ALTER ROLE $role SUPERUSER';
			END IF;
			RETURN true;
		END \$\$;
	});
}

sub as
{
	my ($role, $sql) = @_;
	return $node->safe_psql('postgres', $sql, extra_params => [ '-U', $role ]);
}

# (stderr of) a statement that must fail, run as role with SQLSTATEs shown
sub refused
{
	my ($role, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		extra_params => [ '-U', $role ]);
	return $rc == 0 ? "(no error) $out" : $err;
}

sub rolsuper
{
	my ($role) = @_;
	return $node->safe_psql('postgres',
		"SELECT rolsuper FROM pg_roles WHERE rolname = '$role'");
}

# A pass of a trivial superuser backfill, started and completed: proves the
# scheduler has looked at every running pass at least once since the call.
$node->safe_psql('postgres', q{
	CREATE TABLE tick_t (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO tick_t (id) VALUES (1);
	SELECT backfill_declare(name => 'tick', relation => 'tick_t', predicate => 'false',
		action => 'UPDATE tick_t SET n = n + 1 WHERE id BETWEEN $1 AND $2', rate => 1000, guard => false);
});
sub scheduler_tick
{
	my $run = $node->safe_psql('postgres', q{SELECT backfill_run('tick', force => true)});
	return wait_pass_end($node, $run, 180) eq 'completed';
}

# ------------------------------------------------------------------
# (1) the drift check leaves no setting in the scheduler's session
# ------------------------------------------------------------------
hostile_role('mal1');
as('mal1', q{
	CREATE TABLE mal1.b (id int PRIMARY KEY, c int);
	INSERT INTO mal1.b (id) SELECT g FROM generate_series(1, 10) g;
	CREATE TABLE mal1.a (id int PRIMARY KEY, c int);
	INSERT INTO mal1.a (id) SELECT g FROM generate_series(1, 10) g;
	-- the predicate's helper: moves search_path for the rest of the session
	-- (it lies that it is STABLE: a volatile predicate is refused at declaration)
	CREATE FUNCTION mal1.leak() RETURNS boolean LANGUAGE plpgsql STABLE AS $$
	BEGIN
		PERFORM pg_catalog.set_config('search_path', 'mal1, pg_catalog', false);
		RETURN false;
	END $$;
	-- what the scheduler would find first on that search_path
	CREATE FUNCTION mal1.to_regclass(text) RETURNS regclass LANGUAGE sql AS
		$$ SELECT pg_catalog.to_regclass($1) WHERE mal1.esc() $$;
	CREATE FUNCTION mal1.now() RETURNS timestamptz LANGUAGE sql AS
		$$ SELECT pg_catalog.now() WHERE mal1.esc() $$;
	CREATE FUNCTION mal1.cnt(bigint) RETURNS bigint LANGUAGE sql AS
		$$ SELECT $1 + 1 WHERE mal1.esc() $$;
	CREATE AGGREGATE mal1.count(*) (SFUNC = mal1.cnt, STYPE = bigint, INITCOND = '0');
	CREATE VIEW mal1.pg_stat_activity AS
		SELECT * FROM pg_catalog.pg_stat_activity WHERE mal1.esc();
	SELECT backfill_declare(name => 'mal1_b', relation => 'mal1.b',
		predicate => '(c IS NULL OR mal1.leak())',
		action => 'UPDATE mal1.b SET c = 1 WHERE id BETWEEN $1 AND $2', rate => 1000, guard => false);
	SELECT backfill_declare(name => 'mal1_a', relation => 'mal1.a', predicate => 'c IS NULL',
		action => 'UPDATE mal1.a SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000,
		requires_backfill => 'mal1_b');
});
my $b1 = as('mal1', q{SELECT backfill_run('mal1_b')});
is(wait_pass_end($node, $b1, 180), 'completed', '(1) the required backfill completes');
# drift: a row that needs mal1_b again, behind ten that call leak()
as('mal1', q{INSERT INTO mal1.b (id) VALUES (11)});
my $a1 = as('mal1', q{SELECT backfill_run('mal1_a')});
is(wait_pass_end($node, $a1, 180), 'completed', '(1) the requiring backfill completes');
is( $node->safe_psql('postgres',
		q{SELECT count(*), bool_and(status = 'completed'), bool_or(forced)
		    FROM backfill.ledger WHERE declaration = 'mal1_b'}),
	'2|t|t',
	'(1) the drift check ran the predicate (leak() included): it reopened mal1_b as a forced pass');
ok(scheduler_tick(), '(1) the scheduler has looked again since');
is(rolsuper('mal1'), 'f',
	'(1) mal1 is no superuser: no setting of its predicate outlived the drift check');

# (1b) the relay: a function sink that moves search_path for the session
# (an operator's careless function) leaves nothing for the relay's own
# SQL, which would otherwise find mal1b's shadow of to_regprocedure()
hostile_role('mal1b');
as('mal1b', q{
	CREATE FUNCTION mal1b.to_regprocedure(text) RETURNS regprocedure LANGUAGE sql AS
		$$ SELECT pg_catalog.to_regprocedure($1) WHERE mal1b.esc() $$;
});
$node->safe_psql('postgres', q{
	CREATE TABLE sink_seen (n int);
	CREATE FUNCTION careless_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_catalog.set_config('search_path', 'mal1b, pg_catalog', false);
		INSERT INTO public.sink_seen VALUES ((payload->>'n')::int);
	END $$;
	SELECT backfill_outbox_sink('careless', 'function', 'careless_sink');
	-- one transaction: one relay delivers both, one after the other
	SELECT backfill_outbox_emit('careless', 'k' || g, pg_catalog.jsonb_build_object('n', g))
	  FROM generate_series(1, 3) g;
});
ok(poll_until($node, q{SELECT count(*) FROM sink_seen}, '3', 180),
	'(1b) the three messages reached the sink: the relay looked it up after a first call');
is(rolsuper('mal1b'), 'f', '(1b) mal1b is no superuser: the sink\'s setting did not outlive it');

# ------------------------------------------------------------------
# (2) the migrations table is read as the declaring role
# ------------------------------------------------------------------
hostile_role('mal2');
$node->safe_psql('postgres', 'CREATE ROLE app2 LOGIN');
as('mal2', q{
	-- "the application's migrations table": a view over mal2's function
	CREATE VIEW mal2.schema_migrations AS
		SELECT v AS version FROM (VALUES ('m1')) x(v) WHERE mal2.esc();
	CREATE TABLE mal2.r (id int PRIMARY KEY, c int);
	INSERT INTO mal2.r (id) SELECT g FROM generate_series(1, 10) g;
	SELECT backfill_declare(name => 'mal2_req', relation => 'mal2.r', predicate => 'c IS NULL',
		action => 'UPDATE mal2.r SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000,
		requires => 'm1');
});
my $r2 = as('mal2', q{SELECT backfill_run('mal2_req', wait => false)});
is(rolsuper('mal2'), 'f', '(2) after mal2 itself ran it: mal2 is no superuser');
is(wait_pass_end($node, $r2, 180), 'completed',
	'(2) the requirement was met (the view was read) and the scheduler started the pass');
is(rolsuper('mal2'), 'f', '(2) after the scheduler checked the requirement: no superuser');
# since issue 23 no client session but mal2's own runs mal2's view: a
# superuser's backfill_run and direct check are told why instead (before,
# they read it in the superuser's session, as mal2), and backfill_pending
# reads no migrations table at all, only what a probe worker (as mal2)
# recorded
is( $node->safe_psql('postgres',
		q{SELECT state || ': ' || coalesce(blocked_by, 'nothing') FROM backfill_pending()
		   WHERE name = 'mal2_req'}),
	'completed: nothing',
	'(2) a superuser reads backfill_pending(): completed, as recorded; its session reads no view');
is(rolsuper('mal2'), 'f', '(2) after the superuser read backfill_pending(): no superuser');
like(refused('postgres', q{SELECT backfill_run('mal2_req', force => true, wait => false)}),
	qr/ERROR:\s+BF005:.*this session is not role mal2's own/,
	'(2) a superuser runs it again with wait => false: BF005, the view is not read here');
my $r2b = $node->safe_psql('postgres',
	q{SELECT backfill_run('mal2_req', force => true)});
is(wait_pass_end($node, $r2b, 180), 'completed',
	'(2) a superuser runs it again (wait => true): the scheduler reads the view, completed');
is(rolsuper('mal2'), 'f', '(2) after the superuser ran it: no superuser');
my (undef, $direct) = $node->psql('postgres',
	q{SELECT coalesce(backfill.migration_unapplied('m1', 'mal2'::regrole), 'applied')});
like($direct, qr/cannot be checked as role mal2: .*this session is not role mal2's own/,
	'(2) a superuser checks the migration as mal2: not here, and says why');
is(as('mal2', q{SELECT coalesce(backfill.migration_unapplied('m1'), 'applied')}), 'applied',
	'(2) mal2 checks it in its own session: applied');
is(rolsuper('mal2'), 'f', '(2) after a direct call as mal2: no superuser');
like(refused('mal2', q{SELECT backfill.migration_unapplied('m1', 'postgres'::regrole)}),
	qr/ERROR:\s+BF016:.*\n(.*\n)*HINT:/,
	'(2) checking a migration as a role one is not a member of: BF016 with a hint');
is(rolsuper('mal2'), 'f', '(2) no superuser after that either');
# a declarer who may not read the migrations table is blocked, not broken
$node->safe_psql('postgres', q{
	CREATE TABLE app2_t (id int PRIMARY KEY, c int);
	INSERT INTO app2_t (id) SELECT g FROM generate_series(1, 5) g;
	GRANT SELECT, UPDATE ON app2_t TO app2;
});
as('app2', q{
	SELECT backfill_declare(name => 'app2_req', relation => 'app2_t', predicate => 'c IS NULL',
		action => 'UPDATE app2_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', requires => 'm1');
});
# backfill_pending reads no migrations table: a probe (a worker, as app2) records it
as('app2', q{SELECT backfill_probe('app2_req')});
like(as('app2', q{SELECT state || ': ' || blocked_by FROM backfill_pending() WHERE name = 'app2_req'}),
	qr/^blocked: migration m1 cannot be checked as role app2: permission denied/,
	'(2) app2 may not read mal2.schema_migrations: blocked, and blocked_by says why');
like(refused('app2', q{SELECT backfill_run('app2_req', wait => false)}),
	qr/ERROR:\s+BF005:/, '(2) so its run with wait => false is refused: REQUIRES (BF005)');

# ------------------------------------------------------------------
# (3) a scoped run's scope and casts are evaluated as the owner
# ------------------------------------------------------------------
hostile_role('mal3');
as('mal3', q{
	CREATE FUNCTION mal3.esc_int(int) RETURNS boolean LANGUAGE sql AS $$ SELECT mal3.esc() $$;
	CREATE DOMAIN mal3.tid AS int CHECK (mal3.esc_int(VALUE));
	-- the scope: calls esc() and moves the caller's search_path
	CREATE FUNCTION mal3.scope_of(input jsonb) RETURNS text LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM mal3.esc();
		PERFORM pg_catalog.set_config('search_path', 'mal3, pg_catalog', false);
		RETURN input->>'t';
	END $$;
	CREATE TABLE mal3.s (id int PRIMARY KEY, t int NOT NULL, c int);
	INSERT INTO mal3.s (id, t) SELECT g, g % 2 FROM generate_series(1, 10) g;
	SELECT backfill_declare(name => 'mal3_scope', relation => 'mal3.s',
		predicate => 'c IS NULL AND t = (backfill_input()->>''t'')::int',
		action => 'UPDATE mal3.s SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL AND t = (backfill_input()->>''t'')::int)', rate => 1000,
		input => '{"t": "integer"}', scope => 'mal3.scope_of(input)');
	SELECT backfill_declare(name => 'mal3_cast', relation => 'mal3.s',
		predicate => 'c IS NULL AND t = (backfill_input()->>''t'')::int',
		action => 'UPDATE mal3.s SET c = 2 WHERE id BETWEEN $1 AND $2 AND (c IS NULL AND t = (backfill_input()->>''t'')::int)', rate => 1000,
		input => '{"t": "mal3.tid"}', scope => 'input->>''t''');
});
my ($rc3, $out3) = $node->psql('postgres', q{
	SELECT backfill_run('mal3_scope', input => '{"t": 1}');
	SHOW search_path;
});
like($out3, qr/^\d+\n"\$user", public$/,
	'(3) a superuser runs the hostile scope: the run is enqueued and its session keeps its search_path');
is(rolsuper('mal3'), 'f', '(3) after the scope expression: mal3 is no superuser');
is( $node->safe_psql('postgres',
		q{SELECT ledger_name FROM backfill.ledger WHERE declaration = 'mal3_scope'}),
	'mal3_scope:1', '(3) the scope was evaluated (as mal3): ledger name mal3_scope:1');
my $c3 = $node->safe_psql('postgres', q{SELECT backfill_run('mal3_cast', input => '{"t": 0}')});
is(rolsuper('mal3'), 'f', '(3) after the domain cast of the input: mal3 is no superuser');
is(ledger($node, $c3, 'ledger_name'), 'mal3_cast:0', '(3) the cast input was accepted');
like(refused('postgres', q{SELECT backfill_run('mal3_cast', input => '{"t": "x"}')}),
	qr/ERROR:\s+BF011:/, '(3) an input the type refuses is still OPTION_INVALID (BF011)');
is(wait_pass_end($node, $c3, 180), 'completed', '(3) the cast-scoped pass completes');
is(rolsuper('mal3'), 'f', '(3) mal3 is no superuser at the end');

# ------------------------------------------------------------------
# (4) run_as membership at every run, retry and lane start
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	CREATE ROLE intruder LOGIN;
	GRANT app TO intruder;
	CREATE TABLE app_t (id int PRIMARY KEY, who text);
	INSERT INTO app_t (id) SELECT g FROM generate_series(1, 10) g;
	ALTER TABLE app_t OWNER TO app;
});
as('intruder', q{
	SELECT backfill_declare(name => 'intr', relation => 'app_t', predicate => 'who IS NULL',
		action => 'UPDATE app_t SET who = current_user WHERE id BETWEEN $1 AND $2 AND (who IS NULL)',
		run_as => 'app', rate => 1000);
});
# enqueued while a member, paused before any lane starts
my $i4 = as('intruder', q{
	BEGIN;
	SELECT backfill_run('intr');
	SELECT backfill_pause('intr') \g /dev/null
	COMMIT;
});
$node->safe_psql('postgres', 'REVOKE app FROM intruder');
as('intruder', q{SELECT backfill_resume('intr')});
is(wait_pass_end($node, $i4, 180), 'failed',
	'(4) a lane started after REVOKE app FROM intruder: the pass fails');
is(ledger($node, $i4, 'error_code'), 'BF016', '(4) with PRIVILEGE (BF016)');
like(ledger($node, $i4, 'error_message'), qr/not a member of its run_as role "app"/,
	'(4) the ledger says why');
is($node->safe_psql('postgres', q{SELECT count(*) FROM app_t WHERE who IS NOT NULL}),
	'0', '(4) no row of app_t was written as app');
is($node->safe_psql('postgres', qq{SELECT lane_starts FROM backfill.run WHERE run_id = $i4}),
	'1', '(4) one lane started and failed the pass: no loop of lanes');
like(refused('intruder', q{SELECT backfill_run('intr')}),
	qr/ERROR:\s+BF016:.*\n(.*\n)*HINT:\s+GRANT app TO intruder/,
	'(4) backfill_run by intruder after the REVOKE: BF016, hint GRANT app TO intruder');
like(refused('intruder', q{SELECT backfill_retry('intr')}),
	qr/ERROR:\s+BF016:/, '(4) backfill_retry of the failed pass: BF016');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'intr'}),
	'1', '(4) the refused run and retry wrote no ledger row');
$node->safe_psql('postgres', 'GRANT app TO intruder');
my $i4b = as('intruder', q{SELECT backfill_run('intr')});
is(wait_pass_end($node, $i4b, 180), 'completed', '(4) a member again: the pass completes');
is($node->safe_psql('postgres', q{SELECT count(*), min(who) FROM app_t WHERE who IS NOT NULL}),
	'10|app', '(4) written as app');

# ------------------------------------------------------------------
# (5) requires_backfill only of a backfill whose owner one is a member of
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE ROLE mal5 LOGIN;
	CREATE ROLE m2 LOGIN;
	GRANT app TO m2;
	CREATE TABLE app_b (id int PRIMARY KEY, c int);
	INSERT INTO app_b (id) SELECT g FROM generate_series(1, 10) g;
	ALTER TABLE app_b OWNER TO app;
	CREATE TABLE mal5_t (id int PRIMARY KEY, c int);
	INSERT INTO mal5_t (id) SELECT g FROM generate_series(1, 5) g;
	ALTER TABLE mal5_t OWNER TO mal5;
	CREATE TABLE m2_t (id int PRIMARY KEY, c int);
	INSERT INTO m2_t (id) SELECT g FROM generate_series(1, 5) g;
	ALTER TABLE m2_t OWNER TO m2;
});
as('app', q{
	SELECT backfill_declare(name => 'app_b', relation => 'app_b', predicate => 'c IS NULL',
		action => 'UPDATE app_b SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000);
});
my $b5 = as('app', q{SELECT backfill_run('app_b')});
is(wait_pass_end($node, $b5, 180), 'completed', '(5) app completes app_b');
like(refused('mal5', q{
	SELECT backfill_declare(name => 'mal5_a', relation => 'mal5_t', predicate => 'c IS NULL',
		action => 'UPDATE mal5_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)',
		requires_backfill => 'app_b')}),
	qr/ERROR:\s+BF016:.*\n(.*\n)*HINT:/,
	'(5) mal5 declares a backfill requiring app\'s app_b: BF016 with a hint');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill.declaration WHERE name = 'mal5_a'}),
	'0', '(5) nothing was declared');
as('m2', q{
	SELECT backfill_declare(name => 'm2_a', relation => 'm2_t', predicate => 'c IS NULL',
		action => 'UPDATE m2_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000,
		requires_backfill => 'app_b');
	SELECT backfill_declare(name => 'm2_d', relation => 'm2_t', predicate => 'c IS NULL',
		action => 'UPDATE m2_t SET c = 2 WHERE id BETWEEN $1 AND $2 AND (c IS NULL)', rate => 1000,
		requires_backfill => 'app_b');
});
$node->safe_psql('postgres', 'REVOKE app FROM m2');
like(refused('m2', q{SELECT backfill_run('m2_a')}), qr/ERROR:\s+BF016:/,
	'(5) m2, no longer a member of app, runs m2_a: BF016');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'm2_a'}),
	'0', '(5) no ledger row');

# a pass of m2_a enqueued while a member, left to the scheduler after the
# REVOKE, with app_b drifted: no reopen of app_b on m2's account
$node->safe_psql('postgres', q{GRANT app TO m2; INSERT INTO app_b (id) VALUES (11)});
my $d5 = as('m2', q{
	BEGIN;
	SELECT backfill_run('m2_d');
	SELECT backfill_pause('m2_d') \g /dev/null
	COMMIT;
});
$node->safe_psql('postgres', 'REVOKE app FROM m2');
as('m2', q{SELECT backfill_resume('m2_d')});
ok(scheduler_tick(), '(5) the scheduler has looked at the resumed pass');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'app_b'}),
	'1', '(5) app_b drifted, but was not reopened for m2, who may no longer run it');
is( $node->safe_psql('postgres',
		qq{SELECT r.phase, d.state FROM backfill.run r, backfill_pending() d
		    WHERE r.run_id = $d5 AND d.name = 'm2_d'}),
	'queued|blocked', '(5) m2_d stays queued, and pending says blocked');
like( $node->safe_psql('postgres',
		q{SELECT blocked_by FROM backfill_pending() WHERE name = 'm2_d'}),
	qr/belongs to role app, which role m2 is not a member of/, '(5) blocked_by says why');
is($node->safe_psql('postgres', q{SELECT count(*) FROM m2_t WHERE c IS NOT NULL}),
	'0', '(5) no row of m2_t was written');
as('m2', q{SELECT backfill_cancel('m2_d')});

done_testing();
