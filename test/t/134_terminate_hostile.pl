# 134_terminate_hostile.pl
#
# Issue 23, the fresh-context attacker's F1: a declarer's PL/pgSQL that
# catches query_canceled in a loop (EXCEPTION WHEN query_canceled THEN
# NULL) outlived backfill.probe_timeout, the scope worker's timeout and
# backfill_cancel: a timeout or a cancel is only an error, and it caught
# it.  Past each bound plus a grace (BACKFILL_TERMINATE_GRACE_MS, 2 s), the
# worker's process is terminated now (SIGTERM: a FATAL error no handler
# catches), and what happened is recorded.  alice's function stall() loops
# so for as long as public.hostile says on:
#  (a) backfill_probe of a backfill whose predicate calls it
#      (backfill.probe_timeout 1 s): BF039, "terminated after N s"; the
#      probe recorded failed with BF039 in backfill.probe; no probe worker
#      left.
#  (b) a superuser's backfill_run of alice's scoped backfill whose scope
#      calls it (evaluated in a scope worker logged in as alice): BF039,
#      the scope worker "terminated after N s"; no scope worker left, and
#      no "still referenced" warning of its shared memory (F5's path).
#  (c) a lane whose batch calls it at row 150 (batch_timeout an hour), then
#      backfill_cancel: the lane's process ends, the scheduler logs that it
#      terminated it, the pass is cancelled, the stalled batch rolled back
#      (rows 101-149 it had updated are n = 0), the ledger counts the 100
#      rows of the batch that committed, each done once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('terminate_hostile',
	extra_conf => "backfill.probe_timeout = '1s'\nbackfill.probe_lock_timeout = '1s'\n");
sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE alice LOGIN;
	GRANT CREATE ON SCHEMA public TO alice;
});
$node->safe_psql('postgres', q{
	CREATE TABLE public.hostile (on_ boolean NOT NULL);
	INSERT INTO public.hostile VALUES (true);
	CREATE FUNCTION public.stall(k bigint) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
	BEGIN
		LOOP
			EXIT WHEN NOT (SELECT on_ FROM public.hostile);
			BEGIN
				PERFORM pg_catalog.pg_sleep(0.5);
			EXCEPTION WHEN query_canceled THEN NULL;
			END;
		END LOOP;
		RETURN true;
	END $$;
	CREATE FUNCTION public.stall_at(id bigint, at bigint) RETURNS boolean LANGUAGE sql STABLE
		AS $$ SELECT CASE WHEN id = at THEN public.stall(id) ELSE true END $$;
	CREATE TABLE public.hp (id bigint PRIMARY KEY, c int);
	INSERT INTO public.hp SELECT g FROM generate_series(1, 10) g;
	CREATE TABLE public.hs (id bigint PRIMARY KEY, c int);
	CREATE TABLE public.hl (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO public.hl (id) SELECT g FROM generate_series(1, 300) g;
	SELECT backfill_declare(name => 'hp', relation => 'hp',
		predicate => 'c IS NULL AND public.stall(id)',
		action => 'UPDATE hp SET c = 1 WHERE id BETWEEN $1 AND $2', guard => false);
	SELECT backfill_declare(name => 'hs', relation => 'hs', predicate => 'c IS NULL',
		action => 'UPDATE hs SET c = 1 WHERE id BETWEEN $1 AND $2',
		input => '{"t": "integer"}', scope => '(input->>''t'') || public.stall(0)::text',
		guard => false);
	SELECT backfill_declare(name => 'hl', relation => 'hl', predicate => 'n = 0',
		action => 'UPDATE hl SET n = n + 1 WHERE id BETWEEN $1 AND $2 AND public.stall_at(id, 150)',
		batch_size => 100, rate => 1000, max_parallel => 1,
		lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
}, extra_params => [ '-U', 'alice' ]);

my $workers = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = '%s'};

# ---- (a) a probe worker
my ($rc, $out, $err) = $node->psql('postgres', q{SELECT backfill_probe('hp', '60 s')});
isnt($rc, 0, '(a) backfill_probe of a predicate that catches its cancel fails');
like($err, qr/BF039.*terminated after \d+ s/s, '(a) BF039: its worker was terminated after N s')
  or diag($err);
is(sq($node, q{SELECT error_code || ' ' || (error_message LIKE 'terminated after % s: %')
	FROM backfill.probe WHERE declaration = 'hp'}), 'BF039 true',
	'(a) the probe is recorded failed, terminated');
ok(poll_until($node, sprintf($workers, 'pg_backfill probe'), '0', 30), '(a) no probe worker is left');

# ---- (b) a scope worker
($rc, $out, $err) = $node->psql('postgres', q{SELECT backfill_run('hs', input => '{"t": 1}')});
isnt($rc, 0, '(b) a superuser\'s run of a scope that catches its cancel fails');
like($err, qr/the scope of backfill "hs" was not evaluated: its worker was terminated after \d+ s/,
	'(b) its scope worker was terminated after N s') or diag($err);
unlike($err, qr/still referenced|leak/, '(b) no shared memory left referenced');
ok(poll_until($node, sprintf($workers, 'pg_backfill scope'), '0', 30), '(b) no scope worker is left');
is(sq($node, q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'hs'}), '0',
	'(b) no pass was enqueued');

# ---- (c) a lane, cancelled
my $run = $node->safe_psql('postgres', q{SELECT backfill_run('hl')}, extra_params => [ '-U', 'alice' ]);
ok( poll_until($node, q{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'pg_backfill lane' AND wait_event = 'PgSleep'}, '1', 60),
	'(c) the lane\'s second batch stalls at row 150');
my $lane = sq($node, q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'});
sq($node, q{SELECT backfill_cancel('hl')});
ok(poll_until($node, "SELECT count(*) FROM pg_stat_activity WHERE pid = $lane", '0', 60),
	'(c) the lane that caught the cancel ends: terminated');
ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'},
		'0', 60), '(c) and no lane is started for the pass again');
like(slurp_file($node->logfile), qr/a lane of run $run is terminated: its batch outlived/,
	'(c) the scheduler says it terminated the lane, and why');
is(ledger($node, $run, 'status'), 'cancelled', '(c) the pass is cancelled');
is(sq($node, q{SELECT count(*) FILTER (WHERE n = 1) || ' ' || count(*) FILTER (WHERE n > 1)
	|| ' ' || count(*) FILTER (WHERE n = 0 AND id BETWEEN 101 AND 149) FROM hl}), '100 0 49',
	'(c) the stalled batch rolled back: only the committed batch\'s 100 rows are done, once');
is(ledger($node, $run, 'rows'), '100', '(c) the ledger counts exactly those 100 rows');

sq($node, 'UPDATE public.hostile SET on_ = false');
$node->stop;
done_testing();
