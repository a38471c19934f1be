# 182_events_faults.pl
#
# Lifecycle events (issue 28 point 2) under faults: four backfills with
# events => 'fe.events' (a function sink that writes each delivery into a
# table) run pass after pass while lanes, the scheduler, the relay and the
# server are killed at random moments (SIGKILL, pg_terminate_backend,
# pg_ctl -m immediate; seeded: FE_SEED=N repeats a run, the seed is
# printed), and some passes are paused and resumed on the way.  At the end
# every event of every pass was delivered exactly once to the sink, in
# order per backfill, with no gap in its pass's sequence number; and the events
# are those the ledger's history says: for each pass one queued, one
# started and one end event of its ledger status, and one paused / resumed
# for each backfill_pause / backfill_resume that changed something.
#
# Every wait polls the catalogs with a deadline; no timing is asserted.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $SEED = $ENV{FE_SEED} // (time() * 1000 % 1_000_000);
srand($SEED);
diag("182_events_faults: seed $SEED (FE_SEED=$SEED repeats it)");

my @NAMES = qw(fe_a fe_b fe_c fe_d);
my $ROWS = 600;
my $ROUNDS = 6;
my $END_TIMEOUT = 120;

my $node = BackfillTest::node('events_faults', crash_restart => 1);
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE fe_log (n bigserial PRIMARY KEY, key text, payload jsonb);
	CREATE FUNCTION fe_sink(topic text, key text, payload jsonb) RETURNS void
	LANGUAGE sql AS $$ INSERT INTO public.fe_log (key, payload) VALUES (key, payload) $$;
	SELECT backfill_outbox_sink('fe.events', 'function', 'fe_sink');
});
foreach my $i (0 .. $#NAMES)
{
	my $t = $NAMES[$i];
	my $lanes = 1 + $i % 2;
	$node->safe_psql('postgres', qq{
		CREATE TABLE ${t}_items (id int PRIMARY KEY, c int);
		INSERT INTO ${t}_items SELECT g, NULL FROM generate_series(1, $ROWS) g;
		ANALYZE ${t}_items;
		SELECT backfill_declare(name => '$t', relation => '${t}_items', predicate => 'c IS NULL',
			set => 'c = id', batch_size => 25, rate => 15, max_parallel => $lanes,
			events => 'fe.events');
	});
}

my %kills;
my ($pauses, $resumes) = (0, 0);

# a psql that may meet a server restarting: undef then
sub try_sql
{
	my ($sql) = @_;
	my ($rc, $out) = eval { $node->psql('postgres', $sql) };
	return (defined $rc && $rc == 0) ? $out : undef;
}

# the pid of a live backend of that type, polled for up to $secs
sub pid_of
{
	my ($type, $secs) = @_;
	my $deadline = time() + $secs;
	while (time() < $deadline)
	{
		my $pid = try_sql("SELECT pid FROM pg_stat_activity WHERE backend_type = '$type'"
			  . " ORDER BY random() LIMIT 1");
		return $pid if defined $pid && $pid =~ /^\d+$/;
		usleep(50_000);
	}
	return undef;
}

# one fault of a kind drawn from the seed; counted when it hit something
sub inject_fault
{
	my @kinds = qw(lane_kill9 lane_terminate scheduler_kill9 scheduler_terminate
	  relay_kill9 relay_terminate immediate);
	my $kind = $kinds[ int(rand(@kinds)) ];
	if ($kind eq 'immediate')
	{
		$node->stop('immediate');
		$node->start;
		$kills{$kind}++;
		wait_for_server($node, 60) or BAIL_OUT('the server did not come back');
		return;
	}
	my ($who, $how) = split /_/, $kind;
	my $pid = pid_of("pg_backfill $who", 2);
	return unless defined $pid;
	if ($how eq 'kill9')
	{
		return unless kill('KILL', $pid);
		$kills{$kind}++;
		wait_for_server($node, 60) or BAIL_OUT('the server did not come back');
		return;
	}
	$kills{$kind}++ if (try_sql("SELECT pg_terminate_backend($pid)") // '') eq 't';
}

# pause a running pass, maybe hit it, resume it: counted when they changed something
sub pause_resume
{
	my ($name) = @_;
	my $p = try_sql("SELECT backfill_pause('$name')");
	return unless defined $p && $p eq 't';
	$pauses++;
	usleep(int(rand(400_000)));
	my $deadline = time() + 60;
	while (time() < $deadline)
	{
		my $r = try_sql("SELECT backfill_resume('$name')");
		if (defined $r)
		{
			$resumes++ if $r eq 't';
			return;
		}
		usleep(200_000);
	}
	BAIL_OUT("backfill_resume('$name') never answered");
}

my @runs;
for my $round (1 .. $ROUNDS)
{
	my @these;
	foreach my $t (@NAMES)
	{
		$node->safe_psql('postgres', "UPDATE ${t}_items SET c = NULL");
		push @these, $node->safe_psql('postgres',
			"SELECT backfill_run('$t', force => true)");
	}
	push @runs, @these;
	my $ids = join(',', @these);
	# faults at random moments while the passes run (and their events wait)
	my $faults = 2 + int(rand(2));
	for my $f (1 .. $faults)
	{
		usleep(int(rand(1_200_000)));
		if (rand() < 0.5)
		{
			pause_resume($NAMES[ int(rand(@NAMES)) ]);
		}
		inject_fault();
	}
	ok(poll_until($node, "SELECT count(*) FROM backfill.ledger WHERE run_id IN ($ids)"
		  . " AND status <> 'running'", scalar(@these), $END_TIMEOUT),
		"round $round: its passes ended");
}

# every event delivered (the relay may have been killed last)
ok(poll_until($node, q{SELECT count(*) FROM backfill.outbox WHERE state <> 'delivered'}, '0',
	$END_TIMEOUT), 'every event was delivered');

my $emitted = $node->safe_psql('postgres', 'SELECT count(*) FROM backfill.outbox');
my $delivered = $node->safe_psql('postgres', 'SELECT count(*) FROM fe_log');
my $dups = $node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT key, payload->>'run_id', payload->>'seq' FROM fe_log
	                       GROUP BY 1, 2, 3 HAVING count(*) > 1) d});
is($dups, '0', 'no event delivered twice');
is($delivered, $emitted, "as many deliveries ($delivered) as events emitted");

# per pass, in delivery order: seq 1, 2, 3, ... with no gap nor swap; per
# backfill, its passes' events one pass after the other, in delivery order
my $gaps = $node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	  SELECT key, (payload->>'seq')::bigint AS seq,
	         row_number() OVER (PARTITION BY key, payload->>'run_id' ORDER BY n) AS k
	    FROM fe_log) s WHERE seq <> k});
is($gaps, '0', 'each pass\'s events arrived in order, numbered without a gap');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	  SELECT row_number() OVER (PARTITION BY key ORDER BY n) AS delivered,
	         row_number() OVER (PARTITION BY key ORDER BY (payload->>'run_id')::bigint,
	                                                     (payload->>'seq')::bigint) AS numbered
	    FROM fe_log) s WHERE delivered <> numbered}),
	'0', 'each backfill\'s events arrived in order: pass after pass');

# the events are the ledger's history: per pass queued, started, its end
my $bad = $node->safe_psql('postgres', q{
	WITH ev AS (SELECT (payload->>'run_id')::bigint AS run_id, payload->>'event' AS event,
	                   payload->>'status' AS status
	              FROM fe_log),
	     want AS (SELECT l.run_id, l.status,
	                     CASE WHEN l.status = 'failed' AND l.error_code = 'BF006' THEN 'stalled'
	                          ELSE l.status END AS end_event
	                FROM backfill.ledger l WHERE l.declaration LIKE 'fe\_%')
	SELECT string_agg(w.run_id::text, ',') FROM want w
	 WHERE (SELECT count(*) FROM ev WHERE ev.run_id = w.run_id AND ev.event = 'queued') <> 1
	    OR (SELECT count(*) FROM ev WHERE ev.run_id = w.run_id AND ev.event = 'started') <> 1
	    OR (SELECT count(*) FROM ev WHERE ev.run_id = w.run_id AND ev.event = w.end_event
	                                  AND ev.status = w.status) <> 1
	    OR (SELECT count(*) FROM ev WHERE ev.run_id = w.run_id
	         AND ev.event NOT IN ('queued', 'started', 'paused', 'resumed', 'throttled',
	                              'unthrottled', w.end_event)) <> 0});
is($bad, '', 'every pass: one queued, one started, one end event as its ledger says');
is($node->safe_psql('postgres', "SELECT count(*) FROM backfill.ledger WHERE declaration LIKE 'fe\\_%'"),
	scalar(@runs), 'the ledger holds every pass the test ran');
is($node->safe_psql('postgres', q{SELECT count(*) FROM fe_log WHERE payload->>'event' = 'paused'}),
	$pauses, "one paused event per pause that changed something ($pauses)");
is($node->safe_psql('postgres', q{SELECT count(*) FROM fe_log WHERE payload->>'event' = 'resumed'}),
	$resumes, "one resumed event per resume that changed something ($resumes)");
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM fe_log f JOIN backfill.outbox o ON o.key = f.key
	   AND o.payload->>'run_id' = f.payload->>'run_id'
	   AND o.payload->>'seq' = f.payload->>'seq' WHERE o.emitted_by::text <> 'postgres'}),
	'0', 'emitted by the declarations\' owner');

my $statuses = $node->safe_psql('postgres', q{
	SELECT string_agg(status || ' ' || n, ', ' ORDER BY status)
	  FROM (SELECT status, count(*) AS n FROM backfill.ledger GROUP BY 1) s});
diag(sprintf('182_events_faults: seed %d; %d passes (%s); %d events delivered, %d duplicates, '
	  . '%d gaps; %d pauses, %d resumes; kills: %s', $SEED, scalar(@runs), $statuses, $delivered,
	  $dups, $gaps, $pauses, $resumes,
	  join(', ', map { "$_ $kills{$_}" } sort keys %kills)));

$node->stop;
done_testing();
