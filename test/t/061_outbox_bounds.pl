# 061_outbox_bounds.pl
#
# The outbox is bounded, and the relay holds nothing while it waits
# (issue 9 finding 7, outbox part; issue 10 finding 9, relay part):
#  1. messages of a topic with no sink are never tried (no attempts, no
#     log line per message): they wait for a sink;
#  2. a sink that keeps failing logs at most a few lines per topic, then
#     one line with the count of those not logged;
#  3. failed deliveries leak no memory into the relay's TopMemoryContext
#     (the error path used to leave it current);
#  4. dead messages, and those of topics with no sink, are pruned after
#     backfill.outbox_dead_retention; pending and delivered ones are kept;
#  5. a webhook is called with no transaction open and no row lock held,
#     the attempt counted first; the key's next message waits for it;
#  6. the relay killed during a webhook call: the message is sent again
#     once its lease runs out (at least once).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use Time::Local qw(timegm);
use IPC::Run;
use JSON::PP;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use WebhookReceiver;

# the killed relay must make the postmaster restart the backends
my $node = BackfillTest::node('outbox_bounds', crash_restart => 1);
$BackfillTest::poll_interval = 0.1;
my $tmp = PostgreSQL::Test::Utils::tempdir;

sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE bf_mallory LOGIN;
	CREATE TABLE ok_log (key text);
	CREATE FUNCTION ok_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE sql AS $$ INSERT INTO public.ok_log VALUES ($2) $$;
	SELECT backfill_outbox_sink('ok', 'function', 'ok_sink');
});

sub relay_pid
{
	return sq($node, q{SELECT coalesce(string_agg(pid::text, ','), '')
	                     FROM pg_stat_activity WHERE backend_type = 'pg_backfill relay'});
}

# ==================================================================
# 1. A topic with no sink: its messages wait, untried
# ==================================================================
my $NOWHERE = 300;
is( $node->safe_psql('postgres',
		qq{SELECT count(backfill_outbox_emit('nowhere', 'n' || g, '{}'))
		     FROM generate_series(1, $NOWHERE) g}, extra_params => [ '-U', 'bf_mallory' ]),
	$NOWHERE, "bf_mallory emitted $NOWHERE messages into a topic with no sink");
sq($node, q{SELECT backfill_outbox_emit('ok', 'o1', '{}')});
ok(poll_until($node, q{SELECT count(*) FROM ok_log WHERE key = 'o1'}, '1', 120),
	'a message emitted after them, to a topic with a sink, was delivered');
is( sq($node, q{SELECT count(*) FILTER (WHERE state = 'pending' AND attempts = 0), count(*)
                  FROM backfill.outbox WHERE topic = 'nowhere'}),
	"$NOWHERE|$NOWHERE", 'the messages of the topic with no sink were never tried');
ok(!$node->log_contains('no outbox sink for topic "nowhere"'),
	'and never logged, one by one');

# ==================================================================
# 2. A failing sink: a few log lines per topic, then a count
# ==================================================================
my $SPAM = 40;
sq($node, q{
	CREATE FUNCTION spam_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'spam sink is down'; END $$;
	SELECT backfill_outbox_sink('spam', 'function', 'spam_sink', max_attempts => 1);
});
my $log_start = -s $node->logfile;
sq($node, qq{SELECT count(backfill_outbox_emit('spam', 's' || g, '{}'))
               FROM generate_series(1, $SPAM) g});
ok( poll_until($node, q{SELECT count(*) FROM backfill.outbox WHERE topic = 'spam' AND state = 'dead'},
		$SPAM, 180),
	"all $SPAM messages of the failing sink are dead");
# the relay exits once nothing is pending, and says what it did not log
ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill relay'},
		'0', 120), 'the relay exited, nothing being left to deliver');
my $spam_log = substr(slurp_file($node->logfile), $log_start);
my $logged = () = $spam_log =~ /outbox message \d+ is dead after attempt 1: spam sink is down/g;
my $summed = 0;
$summed += $1 while $spam_log =~ /(\d+) more failed deliveries of outbox topic "spam" were not logged/g;
# the relay logs at most 5 failures of a topic in each window of a minute
# (a window opens at the first failure after the last one's minute): on a
# machine slow enough for the 40 failures to take longer, a second window
# may log 5 more, and that is no failure of the bound
my ($windows, $most) = (0, 0);
{
	my ($start, $in);
	while ($spam_log =~ /^(\d+)-(\d+)-(\d+) (\d+):(\d+):(\d+)(\.\d+)?\b[^\n]*outbox message \d+ is dead after attempt 1: spam sink is down/mg)
	{
		my $t = timegm($6, $5, $4, $3, $2 - 1, $1) + ($7 // 0);
		if (!defined $start || $t - $start > 60)
		{
			($start, $in) = ($t, 0);
			$windows++;
		}
		$in++;
		$most = $in if $in > $most;
	}
}
cmp_ok($most, '<=', 5,
	"at most 5 of the $SPAM failures were logged one by one in a minute ($logged, in $windows minute(s))");
cmp_ok($logged, '>=', 1, 'the first ones were');
is($logged + $summed, $SPAM, 'the rest were counted in a summary line');

# ==================================================================
# 3. Failed deliveries leak nothing into TopMemoryContext
# ==================================================================
sq($node, q{
	-- keeps the relay running: pending, its next attempt an hour away
	CREATE FUNCTION hold_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hold sink refuses'; END $$;
	SELECT backfill_outbox_sink('hold', 'function', 'hold_sink', max_attempts => 5,
		backoff_base => '1 hour', backoff_cap => '1 hour');
	-- fails with a 200 kB message
	CREATE FUNCTION big_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '%', repeat('x', 200000); END $$;
	SELECT backfill_outbox_sink('big', 'function', 'big_sink', max_attempts => 1);
});
my $hold_id = sq($node, q{SELECT backfill_outbox_emit('hold', 'h1', '{}')});
ok(poll_until($node, "SELECT attempts FROM backfill.outbox WHERE id = $hold_id", '1', 120),
	'the hold message failed once and waits an hour');
my $relay = relay_pid();
like($relay, qr/^\d+$/, 'the relay keeps running meanwhile');
my $BIG = 60;
sq($node, qq{SELECT count(backfill_outbox_emit('big', 'b' || g, '{}')) FROM generate_series(1, $BIG) g});
ok( poll_until($node, q{SELECT count(*) FROM backfill.outbox WHERE topic = 'big' AND state = 'dead'},
		$BIG, 180),
	"$BIG deliveries failed with a 200 kB error each");
is(relay_pid(), $relay, 'the same relay handled them all');
cmp_ok(sq($node, q{SELECT max(length(last_error)) FROM backfill.outbox WHERE topic = 'big'}),
	'<=', 1003, 'the error kept (and logged) is cut to 1000 bytes');
my $mem_start = -s $node->logfile;
is(sq($node, "SELECT pg_log_backend_memory_contexts($relay)"), 't',
	'asked the relay to log its memory contexts');
# the top context is at level 0, from PostgreSQL 18 on at level 1
my $top_level = sq($node, 'SHOW server_version_num') >= 180000 ? 1 : 0;
ok($node->wait_for_log(qr/level: $top_level; TopMemoryContext: \d+ total/, $mem_start),
	'the relay logged them');
my ($top) = substr(slurp_file($node->logfile), $mem_start)
  =~ /level: $top_level; TopMemoryContext: (\d+) total/;
cmp_ok($top, '<', 2_000_000,
	"the relay's TopMemoryContext holds $top bytes after $BIG failures (a leak would be 12 MB)");

# ==================================================================
# 4. Pruning dead messages and those of topics with no sink
# ==================================================================
my ($rc, $out, $err) = $node->psql('postgres',
	q{ALTER SYSTEM SET backfill.outbox_dead_retention = 1; SELECT pg_reload_conf();});
is($rc, 0, 'backfill.outbox_dead_retention set to 1 s') or diag($err);
ok(poll_until($node, 'SHOW backfill.outbox_dead_retention', '1s', 120), 'and loaded');
ok( poll_until($node, q{SELECT count(*) FROM backfill.outbox WHERE topic IN ('nowhere', 'spam', 'big')},
		'0', 180),
	'the dead messages and those of the topic with no sink were pruned');
ok($node->log_contains(qr/pruned \d+ dead outbox messages and \d+ of topics with no sink/),
	'the pruning was logged');
is(sq($node, "SELECT state FROM backfill.outbox WHERE id = $hold_id"), 'pending',
	'a pending message of a topic with a sink is kept');
is(sq($node, q{SELECT count(*) FROM backfill.outbox WHERE topic = 'ok' AND state = 'delivered'}), '1',
	'a delivered message is kept (backfill.outbox_retention)');

# ==================================================================
# 5. A webhook call holds no transaction and no row lock
# ==================================================================
my $hook = WebhookReceiver->start($tmp, lifetime => 900);
my $port = $hook->port;
ok($hook->ready, "the webhook receiver listens on 127.0.0.1:$port") or diag($hook->stderr);

sub hook_calls
{
	my ($id) = @_;
	return grep { $_->{id} eq $id } $hook->records;
}

sub hook_count
{
	my @calls = hook_calls(@_);
	return scalar(@calls);
}

sub wait_call
{
	my ($id, $n, $timeout) = @_;
	my $end = time() + $timeout;
	while (time() < $end)
	{
		return 1 if hook_count($id) >= $n;
		usleep(50_000);
	}
	return 0;
}

# the receiver holds the call until released: a timeout far longer than
# the checks made meanwhile, so the call is certainly still in flight
sq($node, qq{SELECT backfill_outbox_sink('held', 'webhook', 'http://127.0.0.1:$port/hook',
	timeout => '10 minutes')});
my $w1 = sq($node, q{SELECT backfill_outbox_emit('held', 'hk', '{"n": 1, "hold": true}')});
my $w2 = sq($node, q{SELECT backfill_outbox_emit('held', 'hk', '{"n": 2}')});
ok(wait_call($w1, 1, 120), 'the receiver got the first message and holds the call');
is(sq($node, "SELECT state, attempts FROM backfill.outbox WHERE id = $w1"), 'pending|1',
	'during the call the message is pending, its attempt counted');
($rc, $out, $err) = $node->psql('postgres',
	"BEGIN; SELECT id FROM backfill.outbox WHERE id = $w1 FOR UPDATE NOWAIT; COMMIT;");
is($rc, 0, 'during the call no lock is held on the message\'s row') or diag($err);
is( sq($node, q{SELECT count(*), count(*) FILTER (WHERE xact_start IS NULL AND backend_xid IS NULL
                                                   AND backend_xmin IS NULL)
                  FROM pg_stat_activity WHERE backend_type = 'pg_backfill relay'}),
	'1|1', 'during the call the relay has no transaction open');
is(hook_count($w2), 0, 'the next message of the key waits behind the one in flight');
$hook->release($w1);
ok( poll_until($node, "SELECT string_agg(state || ' ' || attempts, ',' ORDER BY id)
                        FROM backfill.outbox WHERE id IN ($w1, $w2)",
		'delivered 1,delivered 1', 120),
	'both were delivered, each on its first attempt');
my @order = map { $_->{id} } grep { $_->{id} eq $w1 || $_->{id} eq $w2 } $hook->records;
is(join(',', @order), "$w1,$w2", 'each was sent once, in emit order');

# ==================================================================
# 6. The relay killed during a webhook call
# ==================================================================
# the call's timeout (20 s) leaves the relay in the call while it is found
# and killed; its lease (timeout + 2 s) then runs out and it is sent again
sq($node, qq{SELECT backfill_outbox_sink('crash', 'webhook', 'http://127.0.0.1:$port/hook',
	timeout => '20 seconds')});
my $c1 = sq($node, q{SELECT backfill_outbox_emit('crash', 'ck', '{"hold": true}')});
ok(wait_call($c1, 1, 120), 'the receiver holds the call of the crash message');
my $victim = relay_pid();
like($victim, qr/^\d+$/, 'the relay is in the call');
is(kill('KILL', $victim), 1, 'SIGKILL delivered to the relay');
ok(wait_for_server($node, 180), 'server accepts connections again after the crash');
ok(poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $c1", 'delivered', 180),
	'the message was delivered after the crash, once its lease ran out');
is(hook_count($c1), 2, 'it was sent again: at least once');
is(sq($node, "SELECT attempts FROM backfill.outbox WHERE id = $c1"), '2',
	'both attempts are counted');
$hook->release($c1);
$hook->stop;

$node->stop;
done_testing();
