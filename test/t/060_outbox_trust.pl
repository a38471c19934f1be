# 060_outbox_trust.pl
#
# Outbox topics have owners (issue 9, finding 6).  The role that sets a
# topic's sink owns the topic; only its members and the roles it granted
# the topic to may emit into it:
#  1. a sink is stored with its owner and its function's oid;
#  2. an ordinary role's emit into another role's topic (function sink or
#     webhook signed with the owner's secret) is refused with BF016 and a
#     hint, and leaves no message; into a topic with no sink it is allowed;
#  3. a member of the owner emits; its message records the emitting role,
#     which a 4-argument function sink receives (3-argument sinks still
#     work);
#  4. messages planted in a topic before its sink was set are never
#     delivered to that sink;
#  5. a sink function dropped and created again by another role never runs;
#  6. a setting a function sink changes for the session does not outlive
#     its delivery;
#  7. only members of the owner may grant, revoke or set the sink again;
#     a granted role emits; a revoked role's message still pending dies
#     unsent.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('outbox_trust');
$BackfillTest::poll_interval = 0.1;

# run $sql as $role; returns the psql exit code and its stderr (verbose)
sub as_role
{
	my ($role, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		extra_params => [ '-U', $role ], on_error_stop => 1);
	return ($rc, $err, $out);
}

# run $sql (as $role); its output, or the error as text: a failure fails
# the assertion that reads it instead of ending the test (so the test also
# shows how a build without topic owners fails)
sub safe_as
{
	my ($role, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql, extra_params => [ '-U', $role ],
		on_error_stop => 1);
	return $out if $rc == 0;
	diag("as $role: $sql\n$err");
	return "ERROR: $err";
}

sub tq
{
	my ($sql) = @_;
	return safe_as('postgres', $sql);
}

sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE bf_op LOGIN;          -- an operator: sets sinks
	CREATE ROLE bf_op2 LOGIN;         -- another operator
	CREATE ROLE bf_member LOGIN IN ROLE bf_op;
	CREATE ROLE bf_app LOGIN;         -- will be granted a topic
	CREATE ROLE bf_mallory LOGIN;     -- an ordinary role
	-- the operators' privileges (on what exists: this test also runs on
	-- builds without grants, to show it fails there)
	DO $$
	DECLARE
		obj text;
	BEGIN
		FOR obj IN SELECT c.oid::regclass::text FROM pg_class c
		            WHERE c.oid IN ('backfill.outbox_sink'::regclass,
		                            to_regclass('backfill.outbox_grant')) LOOP
			EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO bf_op, bf_op2', obj);
		END LOOP;
		FOR obj IN SELECT p.oid::regprocedure::text FROM pg_proc p
		            WHERE p.proname IN ('backfill_outbox_sink', 'backfill_outbox_grant',
		                                'backfill_outbox_revoke') LOOP
			EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO bf_op, bf_op2', obj);
		END LOOP;
	END $$;
	CREATE SCHEMA opschema AUTHORIZATION bf_op;
	-- a schema both the operator and mallory may create functions in
	CREATE SCHEMA shared;
	GRANT CREATE, USAGE ON SCHEMA shared TO bf_op, bf_mallory;
	CREATE TABLE shared.pwned (who text, at timestamptz DEFAULT clock_timestamp());
	GRANT INSERT ON shared.pwned TO PUBLIC;
});
safe_as('bf_op', q{
	CREATE TABLE opschema.op_log (n bigserial PRIMARY KEY, topic text, key text,
	                              emitted_by text, run_by text DEFAULT current_user);
	CREATE FUNCTION opschema.op_sink(topic text, key text, payload jsonb, emitted_by regrole)
	RETURNS void LANGUAGE sql AS
	$$ INSERT INTO opschema.op_log (topic, key, emitted_by) VALUES ($1, $2, $4::text) $$;
	CREATE FUNCTION opschema.op_sink3(topic text, key text, payload jsonb)
	RETURNS void LANGUAGE sql AS
	$$ INSERT INTO opschema.op_log (topic, key, emitted_by) VALUES ($1, $2, '(3 args)') $$;
});
safe_as('bf_op', q{SELECT backfill_outbox_sink('op.fn', 'function', 'opschema.op_sink')});
safe_as('bf_op', q{SELECT backfill_outbox_sink('op.legacy', 'function', 'opschema.op_sink3')});
safe_as('bf_op',
	q{SELECT backfill_outbox_sink('op.hook', 'webhook', 'http://127.0.0.1:9/never', 'op-secret')});

# ==================================================================
# 1. The sink is stored with its owner and its function by oid
# ==================================================================
is( tq(q{SELECT run_as::regrole, target, target_fn::regprocedure
                  FROM backfill.outbox_sink WHERE topic = 'op.fn'}),
	'bf_op|opschema.op_sink|opschema.op_sink(text,text,jsonb,regrole)',
	'the sink of op.fn belongs to bf_op and names its function by oid (4 arguments)');
is( tq(q{SELECT target_fn::regprocedure FROM backfill.outbox_sink WHERE topic = 'op.legacy'}),
	'opschema.op_sink3(text,text,jsonb)', 'a 3-argument sink function is found too');

# ==================================================================
# 2. Another role may not emit into the topic
# ==================================================================
for my $topic ('op.fn', 'op.hook')
{
	my ($rc, $err) = as_role('bf_mallory',
		qq{SELECT backfill_outbox_emit('$topic', 'm1', '{"evil": true}')});
	isnt($rc, 0, "bf_mallory's emit into $topic is refused");
	like($err, qr/BF016: permission denied for outbox topic "\Q$topic\E"/,
		'with BF016, naming the topic');
	like($err, qr/DETAIL:.*bf_op/, 'the detail names the owner');
	like($err, qr/HINT:.*backfill_outbox_grant\('\Q$topic\E', 'bf_mallory'\)/,
		'the hint says how to be granted the topic');
}
is(tq(q{SELECT count(*) FROM backfill.outbox}), '0', 'the refused emits left no message');
my $free = safe_as('bf_mallory', q{SELECT backfill_outbox_emit('nosink.topic', 'f1', '{}')});
like($free, qr/^\d+$/, 'bf_mallory may emit into a topic that has no sink');
is(tq("SELECT emitted_by FROM backfill.outbox WHERE id = $free"), 'bf_mallory',
	'the message records who emitted it');

# ==================================================================
# 3. A member of the owner emits; the sink sees who emitted
# ==================================================================
my $m_id = safe_as('bf_member', q{SELECT backfill_outbox_emit('op.fn', 'k1', '{"n": 1}')});
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $m_id", 'delivered', 120),
	'a member of bf_op emits into op.fn, and it is delivered');
is(tq("SELECT emitted_by FROM backfill.outbox WHERE id = $m_id"), 'bf_member',
	'the message records bf_member as its emitter');
is(tq(q{SELECT key, emitted_by, run_by FROM opschema.op_log WHERE topic = 'op.fn'}),
	'k1|bf_member|bf_op', 'the 4-argument sink got the emitting role, and ran as bf_op');
my $l_id = safe_as('bf_member', q{SELECT backfill_outbox_emit('op.legacy', 'k1', '{}')});
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $l_id", 'delivered', 120),
	'a 3-argument sink still delivers');
is(tq(q{SELECT key, emitted_by, run_by FROM opschema.op_log WHERE topic = 'op.legacy'}),
	'k1|(3 args)|bf_op', 'the 3-argument sink was called with 3 arguments');

# ==================================================================
# 4. Messages planted before the sink was set are not delivered to it
# ==================================================================
my $p_id = safe_as('bf_mallory', q{SELECT backfill_outbox_emit('later', 'p1', '{"planted": true}')});
safe_as('bf_op', q{SELECT backfill_outbox_sink('later', 'function', 'opschema.op_sink3')});
my $ok_id = safe_as('bf_member', q{SELECT backfill_outbox_emit('later', 'p2', '{}')});
ok( poll_until($node, "SELECT state FROM backfill.outbox WHERE id IN ($p_id, $ok_id) ORDER BY id",
		"dead\ndelivered", 120),
	'once the sink is set, the member\'s message is delivered and bf_mallory\'s planted one dies');
is(tq(q{SELECT string_agg(key, ',') FROM opschema.op_log WHERE topic = 'later'}),
	'p2', 'the sink got only the member\'s message');
ok($node->log_contains("outbox message $p_id is dead: role \"bf_mallory\" may not emit"),
	'the refusal was logged');

# ==================================================================
# 5. A sink function dropped and created again by another role
# ==================================================================
safe_as('bf_op', q{
	CREATE FUNCTION shared.swap_sink(topic text, key text, payload jsonb)
	RETURNS void LANGUAGE sql AS
	$$ INSERT INTO opschema.op_log (topic, key, emitted_by) VALUES ($1, $2, 'swap') $$;
	SELECT backfill_outbox_sink('swap', 'function', 'shared.swap_sink', max_attempts => 1);
});
my $s1 = safe_as('bf_member', q{SELECT backfill_outbox_emit('swap', 's1', '{}')});
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $s1", 'delivered', 120),
	'the swap sink delivers with its own function');
safe_as('bf_op', q{DROP FUNCTION shared.swap_sink(text, text, jsonb)});
safe_as('bf_mallory', q{
	CREATE FUNCTION shared.swap_sink(topic text, key text, payload jsonb)
	RETURNS void LANGUAGE sql AS $$ INSERT INTO shared.pwned (who) VALUES (current_user) $$;
	GRANT EXECUTE ON FUNCTION shared.swap_sink(text, text, jsonb) TO PUBLIC;
});
my $s2 = safe_as('bf_member', q{SELECT backfill_outbox_emit('swap', 's2', '{}')});
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $s2", 'dead', 120),
	'after the function was dropped and bf_mallory made one of that name, the message dies');
like(tq("SELECT last_error FROM backfill.outbox WHERE id = $s2"),
	qr/outbox sink function shared.swap_sink of topic "swap" is not the one the sink was set to/,
	'its last_error says the function is not the sink\'s');
is(tq(q{SELECT count(*) FROM shared.pwned}), '0', 'bf_mallory\'s function never ran');
# setting the sink again to bf_mallory's function is refused too: bf_mallory
# could replace its body, under the same oid, with anything bf_op may do
my ($rc, $err) = as_role('bf_op', q{SELECT backfill_outbox_sink('swap', 'function', 'shared.swap_sink')});
like($err, qr/belongs to role bf_mallory/,
	'the operator may not set the sink again to the function now of that name, bf_mallory\'s');

# ==================================================================
# 6. A setting the sink makes does not outlive its delivery
# ==================================================================
safe_as('bf_op', q{
	CREATE TABLE opschema.plant_log (key text, seen text);
	CREATE FUNCTION opschema.plant_sink(topic text, key text, payload jsonb)
	RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO opschema.plant_log VALUES (key, coalesce(current_setting('bf.planted', true), ''));
		PERFORM set_config('bf.planted', 'yes', false);
	END $$;
	SELECT backfill_outbox_sink('plant', 'function', 'opschema.plant_sink');
});
safe_as('bf_member', q{
	BEGIN;
	SELECT backfill_outbox_emit('plant', 'p1', '{}');
	SELECT backfill_outbox_emit('plant', 'p2', '{}');
	COMMIT;
});
ok( poll_until($node, q{SELECT count(*) FROM opschema.plant_log}, '2', 120),
	'both messages of the plant topic were delivered');
is(tq(q{SELECT string_agg(key || '=' || seen, ',' ORDER BY key) FROM opschema.plant_log}),
	'p1=,p2=', 'the second delivery did not see the setting the first one made for the session');

# ==================================================================
# 7. Grants: only members of the owner grant, revoke or set the sink
# ==================================================================
($rc, $err) = as_role('bf_op2', q{SELECT backfill_outbox_grant('op.fn', 'bf_app')});
isnt($rc, 0, 'bf_op2, not a member of bf_op, may not grant op.fn');
like($err, qr/BF016: permission denied for outbox topic "op.fn"/, 'BF016');
like($err, qr/HINT:/, 'with a hint');
($rc, $err) = as_role('bf_op2', q{SELECT backfill_outbox_sink('op.fn', 'notify', 'stolen')});
isnt($rc, 0, 'bf_op2 may not set the sink of bf_op\'s topic again');
like($err, qr/BF016: permission denied for outbox topic "op.fn"/, 'BF016');
is(tq(q{SELECT kind, run_as::regrole FROM backfill.outbox_sink WHERE topic = 'op.fn'}),
	'function|bf_op', 'the sink is unchanged');
($rc, $err) = as_role('bf_op', q{SELECT backfill_outbox_grant('no.such.topic', 'bf_app')});
like($err, qr/BF002: outbox topic "no.such.topic" has no sink/, 'a topic with no sink cannot be granted');

is(safe_as('bf_op', q{SELECT backfill_outbox_grant('op.fn', 'bf_app')}), 't',
	'bf_op grants op.fn to bf_app');
is(safe_as('bf_member', q{SELECT backfill_outbox_grant('op.fn', 'bf_app')}), 'f',
	'granting it again (as a member of bf_op) changes nothing');
my $a_id = safe_as('bf_app', q{SELECT backfill_outbox_emit('op.fn', 'a1', '{}')});
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $a_id", 'delivered', 120),
	'the granted role emits, and it is delivered');
is(tq(q{SELECT emitted_by, run_by FROM opschema.op_log WHERE key = 'a1'}),
	'bf_app|bf_op', 'the sink sees bf_app as the emitter');
($rc, $err) = as_role('bf_app', q{SELECT backfill_outbox_emit('op.legacy', 'a1', '{}')});
like($err, qr/BF016/, 'a grant of op.fn is not one of op.legacy');

# a message of bf_app held back (an earlier transaction of its key is in
# flight) when the grant is revoked dies unsent
my $txa = $node->background_psql('postgres');
$txa->query_safe('BEGIN');
my $z1 = $txa->query_safe(q{SELECT backfill_outbox_emit('op.fn', 'z', '{"n": 1}')});
my $z2 = safe_as('bf_app', q{SELECT backfill_outbox_emit('op.fn', 'z', '{"n": 2}')});
is(tq("SELECT state FROM backfill.outbox WHERE id = $z2"), 'pending',
	'bf_app\'s message waits behind the open transaction');
is(safe_as('bf_op', q{SELECT backfill_outbox_revoke('op.fn', 'bf_app')}), 't',
	'bf_op revokes op.fn from bf_app');
is(safe_as('bf_op', q{SELECT backfill_outbox_revoke('op.fn', 'bf_app')}), 'f',
	'revoking it again: false');
$txa->query_safe('COMMIT');
$txa->quit;
ok( poll_until($node, "SELECT state FROM backfill.outbox WHERE id IN ($z1, $z2) ORDER BY id",
		"delivered\ndead", 120),
	'the first message was delivered; bf_app\'s, emitted before the revoke, is dead');
like(tq("SELECT last_error FROM backfill.outbox WHERE id = $z2"),
	qr/role "bf_app" may not emit into topic "op.fn"/, 'its last_error says why');
is(tq(q{SELECT string_agg(emitted_by, ',') FROM opschema.op_log WHERE key = 'z'}),
	'postgres', 'the sink never got bf_app\'s message');
($rc, $err) = as_role('bf_app', q{SELECT backfill_outbox_emit('op.fn', 'a2', '{}')});
like($err, qr/BF016/, 'bf_app may no longer emit into op.fn');

is(tq(q{SELECT count(*) FROM shared.pwned}), '0', 'nothing ever ran bf_mallory\'s function');
is(tq(q{SELECT count(*) FROM pg_roles WHERE rolsuper AND rolname LIKE 'bf\_%'}), '0',
	'no test role became a superuser');

$node->stop;
done_testing();
