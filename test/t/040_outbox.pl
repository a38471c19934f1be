# 040_outbox.pl
#
# The transactional outbox (0.2) and its relay worker:
#  1. emit is transactional (a rolled-back emit leaves nothing and is never
#     delivered; a committed one is), and a backfill action that emits sends
#     exactly one message per changed row;
#  2. per-key order under concurrent emitters: each key's messages are
#     delivered in outbox id order; and deterministically, a message whose
#     transaction commits after a later-emitted message of the same key
#     committed is still delivered first;
#  3. a sink that fails 3 times, then succeeds, with capped doubling backoff;
#     a sink that always fails makes the message dead; requeue brings it back;
#  4. the relay killed with SIGKILL mid-delivery: the message is delivered
#     again (at least once), and recorded exactly once by the sink;
#  5. a webhook sink signs its body (HMAC-SHA256) and a receiver that rejects
#     the signature (HTTP 401) makes the message dead;
#  6. a NOTIFY sink;
#  7. pruning of delivered messages after backfill.outbox_retention.
# Every state asserted on is constructed (a transaction held open, an
# advisory lock the sink waits for, emitters taking turns in rounds),
# never assumed from how fast the machine is.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use IPC::Run;
use JSON::PP;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use WebhookReceiver;

# the killed relay must make the postmaster restart the backends
my $node = BackfillTest::node('outbox', crash_restart => 1);
$BackfillTest::poll_interval = 0.1;

sub outbox_row
{
	my ($id) = @_;
	return sq($node, "SELECT state, attempts, last_error IS NULL FROM backfill.outbox WHERE id = $id");
}

my $tmp = PostgreSQL::Test::Utils::tempdir;

sq($node, q{
	CREATE EXTENSION pg_backfill;
	-- a sink that records what it is given; its body resolves sink_log through
	-- the search_path of the role that configured the sink
	CREATE TABLE sink_log (n bigserial PRIMARY KEY, topic text, key text, payload jsonb,
	                       at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE FUNCTION record_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE sql AS $$ INSERT INTO sink_log (topic, key, payload) VALUES ($1, $2, $3) $$;
});
is(sq($node, q{SELECT extversion FROM pg_extension WHERE extname = 'pg_backfill'}), '0.6',
	'pg_backfill is at version 0.6 (0.2 brought the outbox)');

# ==================================================================
# 1. Transactional emit
# ==================================================================
sq($node, q{SELECT backfill_outbox_sink('t1', 'function', 'record_sink')});
is(sq($node, q{SELECT kind, target FROM backfill.outbox_sink WHERE topic = 't1'}),
	'function|public.record_sink', 'the function sink is stored schema-qualified');

sq($node, q{
	BEGIN;
	SELECT backfill_outbox_emit('t1', 'rb', '{"v": "rolled back"}');
	ROLLBACK;
});
is(sq($node, q{SELECT count(*) FROM backfill.outbox WHERE topic = 't1'}), '0',
	'an emit in a rolled-back transaction leaves no message');

my $c_id = sq($node, q{SELECT backfill_outbox_emit('t1', 'c', '{"v": "committed"}')});
like($c_id, qr/^\d+$/, 'backfill_outbox_emit returned an id');
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $c_id", 'delivered', 120),
	'the committed message was delivered');
is(outbox_row($c_id), 'delivered|1|t', 'delivered on the first attempt, no last_error');
is(sq($node, q{SELECT string_agg(key || ' ' || payload::text, ',' ORDER BY n) FROM sink_log
        WHERE topic = 't1'}),
	'c {"v": "committed"}',
	'the sink got the committed message once and never the rolled-back one');

# a backfill whose action emits one message per row it changes
my $NT = 500;
sq($node, qq{
	CREATE TABLE t (id bigint PRIMARY KEY, c int);
	INSERT INTO t (id) SELECT g FROM generate_series(1, $NT) g;
	ANALYZE t;
	SELECT backfill_outbox_sink('t.changed', 'function', 'record_sink');
});
sq($node, q{
	SELECT backfill_declare(name => 'emit_fill', relation => 't', predicate => 'c IS NULL',
		action => $act$WITH u AS (UPDATE t SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL RETURNING id) SELECT backfill_outbox_emit('t.changed', id::text, jsonb_build_object('id', id)) FROM u$act$,
		batch_size => 50, rate => 50);
});
my $run = sq($node, q{SELECT backfill_run('emit_fill')});
like($run, qr/^\d+$/, 'backfill_run returned a run id');
ok(pass_ended($node, $run, 120),
	'the emitting pass ended');
is(ledger($node, $run, 'status'), 'completed',
	'the emitting pass completed');
is(sq($node, 'SELECT count(*) FROM t WHERE c IS NULL'), '0', 'every row was changed');
is( sq($node, q{SELECT count(*), count(DISTINCT key),
               count(*) FILTER (WHERE (payload->>'id') = key)
          FROM backfill.outbox WHERE topic = 't.changed'}),
	"$NT|$NT|$NT", "the pass emitted exactly one message per changed row ($NT)");
ok( poll_until($node, 
		q{SELECT count(*) FILTER (WHERE state = 'delivered'), count(*) FILTER (WHERE state <> 'delivered')
		    FROM backfill.outbox WHERE topic = 't.changed'}, "$NT|0", 180),
	'all the pass\'s messages were delivered');
is( sq($node, q{SELECT count(*), count(DISTINCT key) FROM sink_log WHERE topic = 't.changed'}),
	"$NT|$NT", 'the function sink recorded each changed row exactly once');
is( sq($node, q{SELECT count(*) FROM t FULL JOIN (SELECT * FROM sink_log WHERE topic = 't.changed') s
          ON s.key = t.id::text AND (s.payload->>'id')::bigint = t.id
         WHERE s.n IS NULL OR t.id IS NULL}),
	'0', 'the recorded keys and payloads are exactly the changed rows');

# ==================================================================
# 2. Per-key order under concurrent emitters
# ==================================================================
sq($node, q{
	CREATE SEQUENCE gseq;
	CREATE TABLE order_log (n bigserial PRIMARY KEY, key text, payload jsonb,
	                        at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE FUNCTION order_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE sql AS $$ INSERT INTO public.order_log (key, payload) VALUES ($2, $3) $$;
	SELECT backfill_outbox_sink('ord', 'function', 'order_sink');
});

my $SESSIONS = 3;
my $TXNS = 80;
my $PER_TXN = 2;
my @emitters;
for my $s (1 .. $SESSIONS)
{
	my $sql = "\\set ON_ERROR_STOP 1\n";
	my $seq = 0;
	for my $i (1 .. $TXNS)
	{
		# the sessions go in rounds: transaction i of each starts once every
		# session committed its transaction i - 1, so that every round has
		# the messages of all of them, however the machine schedules them
		my $before = ($i - 1) * $SESSIONS * $PER_TXN;
		$sql .= "DO \$\$ DECLARE t_end timestamptz := clock_timestamp() + interval '5 minutes'; BEGIN"
		  . " WHILE (SELECT count(*) FROM backfill.outbox WHERE topic = 'ord') < $before"
		  . " AND clock_timestamp() < t_end LOOP PERFORM pg_sleep(0.002); END LOOP; END \$\$;\n"
		  if $i > 1;
		$sql .= "BEGIN;\n";
		for my $j (1 .. $PER_TXN)
		{
			my $key = 'k' . (($i * $j + $s) % 5);
			$seq++;
			$sql .= "SELECT backfill_outbox_emit('ord', '$key', jsonb_build_object("
			  . "'s', $s, 'seq', $seq, 'g', nextval('gseq')));\n";
		}
		# some transactions do more work after emitting, so commits of
		# concurrent sessions come in another order than their inserts
		$sql .= "SELECT pg_sleep(0.003);\n" if ($i + $s) % 3 == 0;
		$sql .= "COMMIT;\n";
	}
	my $file = "$tmp/emitter_$s.sql";
	open(my $fh, '>', $file) or die "could not write $file: $!";
	print $fh $sql;
	close($fh);
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-f', $file ],
		'>', \$out, '2>', \$err,
		IPC::Run::timeout(600));
	push @emitters, { h => $h, out => \$out, err => \$err };
}
for my $e (@emitters)
{
	$e->{h}->finish;
	is($e->{h}->result(0), 0, 'an emitter session ran all its transactions')
	  or diag(${ $e->{err} });
}
my $NORD = $SESSIONS * $TXNS * $PER_TXN;
is(sq($node, q{SELECT count(*) FROM backfill.outbox WHERE topic = 'ord'}), $NORD,
	"$NORD messages emitted by $SESSIONS concurrent sessions");
# the sessions really interleaved: in id order, the emitting session changes often
cmp_ok(
	sq($node, q{SELECT count(*) FROM (SELECT payload->>'s' AS s,
	                                 lag(payload->>'s') OVER (ORDER BY id) AS prev
	                            FROM backfill.outbox WHERE topic = 'ord') x
	     WHERE s <> prev}),
	'>=', 10, 'the emitters ran concurrently (their messages interleave in id order, every round)');
ok( poll_until($node, 
		q{SELECT count(*) FILTER (WHERE state = 'delivered'), count(*) FILTER (WHERE state <> 'delivered')
		    FROM backfill.outbox WHERE topic = 'ord'}, "$NORD|0", 180),
	'all the concurrent messages were delivered');
is( sq($node, q{SELECT count(*), count(DISTINCT payload->>'g') FROM order_log}),
	"$NORD|$NORD", 'each message was delivered exactly once');
my $per_key = sq($node, q{
	SELECT l.key, array_agg(o.id ORDER BY l.at, l.n) = array_agg(o.id ORDER BY o.id)
	  FROM order_log l
	  JOIN backfill.outbox o ON o.topic = 'ord' AND o.payload->>'g' = l.payload->>'g'
	 GROUP BY l.key ORDER BY l.key});
is($per_key, "k0|t\nk1|t\nk2|t\nk3|t\nk4|t",
	'for every key, delivery order equals outbox id order')
  or diag(sq($node, q{
	SELECT l.key, array_agg(o.id ORDER BY l.at, l.n)::text AS delivered,
	       array_agg(o.id ORDER BY o.id)::text AS by_id
	  FROM order_log l
	  JOIN backfill.outbox o ON o.topic = 'ord' AND o.payload->>'g' = l.payload->>'g'
	 GROUP BY l.key HAVING array_agg(o.id ORDER BY l.at, l.n) <> array_agg(o.id ORDER BY o.id)
	 ORDER BY l.key}));
is( sq($node, q{SELECT count(*) FROM (
	      SELECT (payload->>'seq')::int AS seq,
	             lag((payload->>'seq')::int) OVER (PARTITION BY payload->>'s', key ORDER BY at, n) AS prev
	        FROM order_log) x
	     WHERE prev >= seq}),
	'0', 'for every key, each session\'s messages were delivered in its emit order');

# The same, deterministically: A emits first (smaller id) but commits after
# B emitted and committed on the same key.  "Messages of one key are
# delivered in the order they were emitted": B must wait behind A.
sq($node, q{SELECT backfill_outbox_sink('race', 'function', 'order_sink')});
my $txa = $node->background_psql('postgres');
$txa->query_safe(q{BEGIN});
my $ra_id = $txa->query_safe(q{SELECT backfill_outbox_emit('race', 'rk', '{"who": "A"}')});
my $rb_id = sq($node, q{SELECT backfill_outbox_emit('race', 'rk', '{"who": "B"}')});
cmp_ok($ra_id, '<', $rb_id, 'A (emitted first, not yet committed) has the smaller id');
ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill relay'},
		'1', 120),
	'the relay runs (B waits for a sink that exists) while A is uncommitted');
# the relay keeps looking (a held-back head is looked at again every
# 100 ms) and B, committed, stays held back all the while A is in flight:
# A may hold an earlier message of the key, and does
my $held = 1;
for my $i (1 .. 20)
{
	$held = 0 if sq($node, "SELECT state FROM backfill.outbox WHERE id = $rb_id") ne 'pending';
	usleep(100_000);
}
ok($held, 'B stays pending for 2 s (about 20 relay looks) while A, emitted before it on the same key, is uncommitted');
is(sq($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill relay'}), '1',
	'the relay was running meanwhile');
$txa->query_safe(q{COMMIT});
$txa->quit;
ok( poll_until($node, 
		"SELECT count(*) FROM backfill.outbox WHERE id IN ($ra_id, $rb_id) AND state = 'delivered'",
		'2', 120),
	'A and B were delivered');
is( sq($node, q{SELECT string_agg(payload->>'who', ',' ORDER BY at, n) FROM order_log WHERE key = 'rk'}),
	'A,B', 'key rk: A was delivered before B (the order they were emitted, = id order)');

# ==================================================================
# 3. A sink that fails 3 times then succeeds; a sink that always fails
# ==================================================================
sq($node, q{
	-- counts calls outside the delivery transaction, which a failure rolls back
	CREATE SEQUENCE flaky_calls;
	CREATE TABLE flaky_log (key text, payload jsonb);
	CREATE FUNCTION flaky_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE plpgsql AS $$
	BEGIN
		IF nextval('flaky_calls') <= 3 THEN
			RAISE EXCEPTION 'flaky sink failure';
		END IF;
		INSERT INTO flaky_log VALUES (key, payload);
	END $$;
	SELECT backfill_outbox_sink('flaky', 'function', 'flaky_sink', max_attempts => 10,
		backoff_base => '50 ms', backoff_cap => '100 ms');
	-- the backoff the relay sets after each failure: next_attempt_at - now()
	-- of the UPDATE that records the failure
	CREATE TABLE flaky_backoff (attempts int, backoff_ms float8);
	CREATE FUNCTION flaky_backoff_log() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO public.flaky_backoff
		VALUES (NEW.attempts, extract(epoch FROM NEW.next_attempt_at - pg_catalog.now()) * 1000);
		RETURN NULL;
	END $$;
	CREATE TRIGGER flaky_backoff_log AFTER UPDATE ON backfill.outbox FOR EACH ROW
		WHEN (NEW.topic = 'flaky' AND NEW.state = 'pending' AND NEW.attempts > OLD.attempts)
		EXECUTE FUNCTION flaky_backoff_log();
});
is( sq($node, q{SELECT max_attempts, backoff_base_ms, backoff_cap_ms FROM backfill.outbox_sink
         WHERE topic = 'flaky'}),
	'10|50|100', 'the flaky sink is stored with its retry settings');
my $f_id = sq($node, q{SELECT backfill_outbox_emit('flaky', 'f', '{"try": 1}')});
# the same key's next message waits behind the failing one (per-key order)
my $f2_id = sq($node, q{SELECT backfill_outbox_emit('flaky', 'f', '{"try": 2}')});
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $f_id", 'delivered', 120),
	'the message to the flaky sink was delivered in the end');
is(outbox_row($f_id), 'delivered|4|t',
	'delivered on attempt 4 after 3 failures, last_error cleared');
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $f2_id", 'delivered', 120),
	'the next message of the same key was delivered too');
is(outbox_row($f2_id), 'delivered|1|t',
	'the next message was not tried while the first one was backing off');
is(sq($node, 'SELECT last_value FROM flaky_calls'), '5', 'the sink was called exactly 4 + 1 times');
is(sq($node, q{SELECT string_agg(key || ' ' || payload::text, ',' ORDER BY ctid) FROM flaky_log}),
	'f {"try": 1},f {"try": 2}',
	'the flaky sink recorded each message exactly once, in emit order');
# three waits of 25..50, 50..100 and 50..100 ms
my $flaky_ms = sq($node, "SELECT (extract(epoch FROM delivered_at - created_at) * 1000)::int
                    FROM backfill.outbox WHERE id = $f_id");
cmp_ok($flaky_ms, '>=', 125, 'the retries waited out their backoff (at least 125 ms in all)');
# base 50 ms doubling: 25..50, 50..100, then 100..200 ms uncapped, 50..100 capped
is( sq($node, q{SELECT string_agg(attempts || ':' || (backoff_ms >= 24.999 AND backoff_ms <= 100.001),
                                  ',' ORDER BY attempts) FROM flaky_backoff}),
	'1:true,2:true,3:true',
	'the backoff was capped: each of the 3 waits within backoff_cap (100 ms), the third too');
ok($node->log_contains("outbox message $f_id will be retried after attempt 3: flaky sink failure"),
	'the failures were logged');

sq($node, q{
	CREATE TABLE doomed_log (key text, payload jsonb);
	CREATE FUNCTION doomed_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE plpgsql AS $$
	BEGIN
		RAISE EXCEPTION 'doomed sink is broken';
	END $$;
	SELECT backfill_outbox_sink('doomed', 'function', 'doomed_sink', max_attempts => 2,
		backoff_base => '50 ms', backoff_cap => '100 ms');
});
my $d_id = sq($node, q{SELECT backfill_outbox_emit('doomed', 'd1', '{"d": 1}')});
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $d_id", 'dead', 120),
	'a message whose sink always fails ends dead');
is(sq($node, "SELECT attempts, last_error FROM backfill.outbox WHERE id = $d_id"),
	'2|doomed sink is broken', 'dead after max_attempts = 2, with the last error');
ok($node->log_contains("outbox message $d_id is dead after attempt 2"),
	'the death was logged as a warning');
is(sq($node, "SELECT backfill_outbox_requeue($f_id)"), 'f', 'requeue of a delivered message: false');
is(sq($node, q{SELECT backfill_outbox_requeue(999999999)}), 'f', 'requeue of no message: false');
# fix the sink, then requeue
sq($node, q{
	CREATE OR REPLACE FUNCTION doomed_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO doomed_log VALUES (key, payload);
	END $$;
});
is(sq($node, "SELECT backfill_outbox_requeue($d_id)"), 't', 'requeue of the dead message: true');
is(sq($node, "SELECT backfill_outbox_requeue($d_id)"), 'f',
	'requeue of the same message again (no longer dead): false');
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $d_id", 'delivered', 120),
	'the requeued message was delivered by the fixed sink');
is(outbox_row($d_id), 'delivered|1|t', 'requeue reset attempts; last_error cleared');
is(sq($node, q{SELECT key || ' ' || payload::text FROM doomed_log}), 'd1 {"d": 1}',
	'the fixed sink recorded the message exactly once');

# ==================================================================
# 4. The relay killed mid-delivery
# ==================================================================
sq($node, q{
	CREATE TABLE slow_log (key text, payload jsonb, at timestamptz DEFAULT clock_timestamp());
	CREATE FUNCTION slow_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO slow_log (key, payload) VALUES (key, payload);
		IF payload ? 'slow' THEN
			-- waits while the test holds advisory lock 4040
			PERFORM pg_advisory_xact_lock_shared(4040);
		END IF;
	END $$;
	SELECT backfill_outbox_sink('slow', 'function', 'slow_sink');
});
# the slow delivery waits for this session's lock until the crash ends the session
my $slow_gate = $node->background_psql('postgres');
$slow_gate->query_safe('SELECT pg_advisory_lock(4040)');
my $s_id = sq($node, q{SELECT backfill_outbox_emit('slow', 's1', '{"slow": true}')});
my $victim;
my $deadline = time() + 120;
while (time() < $deadline)
{
	$victim = sq($node, q{
		SELECT pid FROM pg_stat_activity
		 WHERE backend_type = 'pg_backfill relay'
		   AND query = 'pg_backfill relay: delivering' AND wait_event = 'advisory'});
	last if $victim ne '';
	usleep(50_000);
}
like($victim, qr/^\d+$/, 'the relay is in the middle of delivering the slow message')
  or BAIL_OUT("the relay never got to the slow delivery; server log:\n"
	  . slurp_file($node->logfile));
is(sq($node, "SELECT state, attempts FROM backfill.outbox WHERE id = $s_id"), 'pending|0',
	'the message is still pending while the sink runs');
my $log_pos = -s $node->logfile;
is(kill('KILL', $victim), 1, 'SIGKILL delivered to the relay');
ok(wait_for_server($node, 180), 'server accepts connections again after the crash');
ok( $node->wait_for_log(qr/pg_backfill relay.*\(PID $victim\) was terminated by signal 9/, $log_pos),
	'the postmaster saw the relay die of SIGKILL');
# the crash ended the gate's session too, and with it its lock
eval { $slow_gate->quit };
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $s_id", 'delivered', 180),
	'the message was not lost: it was delivered after the crash');
is(sq($node, q{SELECT count(*) FROM slow_log WHERE key = 's1'}), '1',
	'the sink recorded it exactly once (the killed attempt rolled back)');
isnt(sq($node, q{SELECT coalesce(string_agg(pid::text, ','), '') FROM pg_stat_activity
          WHERE backend_type = 'pg_backfill relay'}), $victim,
	'the killed relay is gone');

# ==================================================================
# 5. Webhook with an HMAC-SHA256 signature
# ==================================================================
my $hook = WebhookReceiver->start($tmp, secret => 's3cret', lifetime => 900);
my $port = $hook->port;
ok($hook->ready, "the webhook receiver listens on 127.0.0.1:$port") or diag($hook->stderr);

sub hook_records
{
	my ($path) = @_;
	return grep { $_->{path} eq $path } $hook->records;
}

sq($node, qq{SELECT backfill_outbox_sink('hook', 'webhook', 'http://127.0.0.1:$port/hook', 's3cret',
	timeout => '5 seconds')});
my @h_ids = map { sq($node, qq{SELECT backfill_outbox_emit('hook', 'h$_', jsonb_build_object('n', $_))}) }
  (1 .. 3);
my $h_list = join(',', @h_ids);
ok( poll_until($node, 
		"SELECT count(*) FROM backfill.outbox WHERE id IN ($h_list) AND state = 'delivered'",
		'3', 120),
	'the 3 webhook messages were delivered');
my @hooks = hook_records('/hook');
is(scalar(@hooks), 3, 'the receiver got exactly 3 requests');
is(scalar(grep { $_->{valid} } @hooks), 3, 'all 3 carried a valid X-Backfill-Signature');
for my $n (1 .. 3)
{
	my $id = $h_ids[ $n - 1 ];
	my ($rec) = grep { defined $_->{id} && $_->{id} eq $id } @hooks;
	ok($rec, "a request with X-Backfill-Id $id arrived") or next;
	my $body = eval { decode_json($rec->{body}) };
	is_deeply($body, { id => $id + 0, topic => 'hook', key => "h$n", payload => { n => $n } },
		"its body is {id, topic, key, payload} of message $id")
	  or diag($rec->{body});
	is($rec->{content_type}, 'application/json', 'sent as application/json');
}

sq($node, qq{SELECT backfill_outbox_sink('hook.bad', 'webhook', 'http://127.0.0.1:$port/bad', 'wrong',
	max_attempts => 2, backoff_base => '50 ms', backoff_cap => '100 ms')});
my $b_id = sq($node, q{SELECT backfill_outbox_emit('hook.bad', 'b1', '{"b": 1}')});
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $b_id", 'dead', 120),
	'a message signed with the wrong secret ends dead');
my ($b_attempts, $b_error) = split /\|/,
  sq($node, "SELECT attempts, last_error FROM backfill.outbox WHERE id = $b_id");
is($b_attempts, 2, 'after 2 attempts');
like($b_error, qr/HTTP 401/, 'last_error mentions HTTP 401');
my @bad = hook_records('/bad');
is(scalar(@bad), 2, 'the receiver got 2 requests for it');
is(scalar(grep { !$_->{valid} } @bad), 2, 'both with a signature it rejected');
$hook->stop;

# ==================================================================
# 6. NOTIFY sink
# ==================================================================
sq($node, q{SELECT backfill_outbox_sink('note', 'notify', 'bf_chan')});
my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN bf_chan');
my $n_id = sq($node, q{SELECT backfill_outbox_emit('note', 'n1', '{"hello": "world"}')});
my ($notified, $seen) = (undef, '');
$deadline = time() + 120;
while (time() < $deadline)
{
	$seen .= $listener->query('SELECT 1');
	if ($seen =~ /Asynchronous notification "bf_chan" with payload "(.*)" received/)
	{
		$notified = $1;
		last;
	}
	usleep(100_000);
}
ok(defined $notified, 'the listener got a notification on bf_chan') or diag($seen);
is_deeply(eval { decode_json($notified // '{}') },
	{ id => $n_id + 0, topic => 'note', key => 'n1', payload => { hello => 'world' } },
	'its payload is the message as JSON');
is(sq($node, "SELECT state FROM backfill.outbox WHERE id = $n_id"), 'delivered',
	'the NOTIFY message is marked delivered');
$listener->quit;

# ==================================================================
# 7. Pruning delivered messages after backfill.outbox_retention
# ==================================================================
sq($node, q{ALTER SYSTEM SET backfill.outbox_retention = 1; SELECT pg_reload_conf();});
ok(poll_until($node, 'SHOW backfill.outbox_retention', '1s', 120), 'retention set to 1 s');
my $old_max = sq($node, q{SELECT max(id) FROM backfill.outbox WHERE state = 'delivered'});
my $old_count = sq($node, q{SELECT count(*) FROM backfill.outbox WHERE state = 'delivered'});
cmp_ok($old_count, '>', 500, "$old_count delivered messages before pruning");
ok( poll_until($node, 
		"SELECT count(*) FROM backfill.outbox WHERE id <= $old_max AND state = 'delivered'
		    AND delivered_at > now() - interval '1.5 seconds'", '0', 120),
	'the delivered messages are all older than the retention');
my $w_id = sq($node, q{SELECT backfill_outbox_emit('t1', 'wake', '{"wake": true}')});
ok( poll_until($node, 
		"SELECT count(*) FROM backfill.outbox WHERE id <= $old_max AND state = 'delivered'",
		'0', 120),
	'the relay pruned the delivered messages older than the retention');
ok(poll_until($node, q{SELECT count(*) FROM sink_log WHERE key = 'wake'}, '1', 120),
	'the wake-up message was delivered');
is(sq($node, "SELECT state FROM backfill.outbox WHERE id = $b_id"), 'dead',
	'a dead message is not pruned');

$node->stop;
done_testing();
