# 183_events_locks.pl -- an event's number holds up no other pass
#
# Lifecycle events (issue 28 point 2; a tester's finding): each pass's
# events are numbered under a row lock of that pass's own
# (backfill.event_state, by run_id).  Here a session enqueues a pass of a
# scoped backfill with events and leaves its transaction open, so it holds
# that pass's number; meanwhile another pass of the same backfill runs and
# ends (its lane's events), the scheduler fails a third one whose table was
# renamed (its fail_unbound_passes writes the ledger, whose trigger emits
# the event), and a backfill of another role's table completes: none of
# them waits for the open transaction.  Then it commits and every event is
# delivered once, numbered per pass from 1.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('events_locks', extra_conf => 'max_prepared_transactions = 4');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE el_log (n bigserial PRIMARY KEY, key text, payload jsonb);
	CREATE FUNCTION el_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE sql AS $$ INSERT INTO public.el_log (key, payload) VALUES (key, payload) $$;
	SELECT backfill_outbox_sink('el.events', 'function', 'el_sink');
	CREATE TABLE el_items (id int PRIMARY KEY, tenant int NOT NULL, c int);
	INSERT INTO el_items SELECT g, g % 3 + 1, NULL FROM generate_series(1, 600) g;
	CREATE TABLE el_other (id int PRIMARY KEY, c int);
	INSERT INTO el_other SELECT g, NULL FROM generate_series(1, 300) g;
	CREATE TABLE el_gone (id int PRIMARY KEY, c int);
	INSERT INTO el_gone SELECT g, NULL FROM generate_series(1, 300) g;
	SELECT backfill_declare(name => 'el', relation => 'el_items', input => '{"t": "integer"}',
		scope => $$input->>'t'$$,
		predicate => $$c IS NULL AND tenant = (backfill_input()->>'t')::int$$,
		set => 'c = id', batch_size => 50, events => 'el.events');
	SELECT backfill_declare(name => 'el_other', relation => 'el_other', predicate => 'c IS NULL',
		set => 'c = id', batch_size => 50);
});

# a pass whose lane works slowly (a batch of 10 rows every 5 s), to be
# failed by the scheduler below
sq($node, q{SELECT backfill_declare(name => 'el_gone', relation => 'el_gone', predicate => 'c IS NULL',
	set => 'c = id', batch_size => 10, rate => 0.2, events => 'el.events')});
my $gone = sq($node, q{SELECT backfill_run('el_gone')});
ok(poll_until($node, "SELECT phase FROM backfill.run WHERE run_id = $gone", 'running', 120),
	'the pass of el_gone runs');
# a pass of the scoped backfill, held at row 99 (tenant 1) by a gate
gate_close($node, 'el_g1', 'el_items', 'id = 99');
my $one = sq($node, q{SELECT backfill_run('el', input => '{"t": 1}')});
ok(gates_waited_at($node, 'el_g1', 120), 'a pass of el (tenant 1) waits at the gate');

# a session holds the number of a pass it enqueued, uncommitted
my $x = $node->background_psql('postgres');
$x->query_safe('BEGIN');
my $held = $x->query_safe(q{SELECT backfill_run('el', input => '{"t": 2}')});
like($held, qr/^\d+$/, 'a pass enqueued in a transaction left open');
is($x->query_safe("SELECT seq FROM backfill.event_state WHERE run_id = $held"), '1',
	'it holds its own event number (its queued)');

# the other pass of the same backfill goes on and ends meanwhile
gate_open($node, 'el_g1');
is(sq($node, "SELECT backfill_wait($one, '120 s')"), 'completed',
	'another pass of the backfill completes while it is open');
# the scheduler fails a pass whose table is gone, emitting its event
sq($node, 'ALTER TABLE el_gone RENAME TO el_gone_renamed');
ok(poll_until($node, "SELECT status FROM backfill.ledger WHERE run_id = $gone", 'failed', 120),
	'the scheduler fails the pass whose table is gone while it is open');
# and another backfill's pass runs
my $other = sq($node, q{SELECT backfill_run('el_other')});
is(sq($node, "SELECT backfill_wait($other, '120 s')"), 'completed',
	'a pass of another backfill completes while it is open');
is(sq($node, "SELECT string_agg(payload->>'event', ',' ORDER BY id) FROM backfill.outbox"
	  . " WHERE (payload->>'run_id')::bigint = $one"), 'queued,started,completed',
	'the completed pass emitted its events');
like(sq($node, "SELECT string_agg(payload->>'event', ',' ORDER BY id) FROM backfill.outbox"
	  . " WHERE (payload->>'run_id')::bigint = $gone"), qr/,failed$/,
	'the failed pass emitted its end');

$x->query_safe('COMMIT');
$x->quit;
is(sq($node, "SELECT backfill_wait($held, '120 s')"), 'completed',
	'the pass enqueued in the open transaction completes once it commits');
ok(poll_until($node, q{SELECT count(*) FROM backfill.outbox WHERE state <> 'delivered'}, '0', 120),
	'every event delivered');
is(sq($node, q{SELECT count(*) FROM el_log}), sq($node, q{SELECT count(*) FROM backfill.outbox}),
	'each event delivered once');
is(sq($node, q{
	SELECT count(*) FROM (
	  SELECT (payload->>'seq')::int AS seq,
	         row_number() OVER (PARTITION BY payload->>'run_id' ORDER BY n) AS k
	    FROM el_log) s WHERE seq <> k}), '0', 'each pass numbered from 1, without a gap');

done_testing();
