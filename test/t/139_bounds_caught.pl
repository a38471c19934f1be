# 139_bounds_caught.pl
#
# A fresh-context attacker's findings after issues 23 and 28: bounds that a
# declarer's PL/pgSQL catching query_canceled (EXCEPTION WHEN query_canceled
# THEN NULL, in a loop) still outlived, and rehearsal workers one role could
# stack.  public.stall(k) loops so while public.hostile says on.
#  (a) preemption (D1): backfill.max_workers = 2; role pa's two passes hold
#      both lanes with batches that catch their cancel; role pb's pass
#      waits.  The scheduler cancels the over-share batch past
#      backfill.preempt_after once, and terminates its lane 2 s later
#      (before: it cancelled it again each second, each cancel starting the
#      grace again, and pb waited as long as pa's SQL liked).  pb's pass
#      completes while the hostile SQL still runs.
#  (b) a rehearsal's batch outlives its batch_timeout (1 s) by catching the
#      cancel (D2): its worker terminates itself 2 s later; the caller gets
#      57014 "was terminated after N ms"; no rehearsal worker is left.
#  (c) a rehearsal whose caller is terminated (D3): its worker ends too.
#  (d) one rehearsal at a time per role (D3): a second caller of the same
#      role waits for the lock, in its own session, and starts no worker.
#  (e) backfill_rehearse(NULL) and a NULL number of batches are refused.
#  (f) once the hostile SQL stops, pa's passes complete: every row of every
#      table done once (n = n + 1).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('bounds_caught',
	extra_conf => "backfill.max_workers = 2\nbackfill.preempt_after = '2s'\n");

sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE pa LOGIN;
	CREATE ROLE pb LOGIN;
	CREATE TABLE public.hostile (on_ boolean NOT NULL);
	INSERT INTO public.hostile VALUES (true);
	GRANT SELECT ON public.hostile TO PUBLIC;
	-- VOLATILE: each look at public.hostile takes a new snapshot, so the
	-- loop sees the test turn it off
	CREATE FUNCTION public.stall(k bigint) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
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
	CREATE FUNCTION public.stall_at(id int, at int) RETURNS boolean LANGUAGE sql STABLE
		AS $$ SELECT CASE WHEN id = at THEN public.stall(id) ELSE true END $$;
});

# a table of 1000 rows owned by $role, and a backfill of it whose batch
# stalls at row $at (0: never)
sub declare_fill
{
	my ($role, $name, $at, $timeout) = @_;
	sq($node, qq{
		CREATE TABLE $name (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO $name (id) SELECT g FROM generate_series(1, 1000) g;
		ALTER TABLE $name OWNER TO $role;
	});
	$node->safe_psql('postgres', qq{
		SET ROLE $role;
		SELECT backfill_declare(name => '$name', relation => '$name', predicate => 'n = 0',
			action => 'UPDATE $name SET n = n + 1 WHERE id BETWEEN \$1 AND \$2
			           AND public.stall_at(id, $at)',
			batch_size => 100, rate => 1000, max_parallel => 1,
			lock_timeout => '1 hour', batch_timeout => '$timeout', guard => false);
	});
	return;
}

declare_fill('pa', 'pa1', 50, '1 hour');
declare_fill('pa', 'pa2', 50, '1 hour');
declare_fill('pb', 'pb1', 0, '1 hour');
declare_fill('pa', 'pa3', 1, '1 second');
declare_fill('pa', 'pa4', 1, '1 hour');

my $workers = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = '%s'};

# ---- (a) a preempted batch that catches its cancel
my %run;
$run{$_} = sq($node, "SET ROLE pa; SELECT backfill_run('$_')") for qw(pa1 pa2);
ok( poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND usename = 'pa' AND wait_event = 'PgSleep'}, '2', 180),
	'(a) pa\'s two passes hold both lanes, each batch in the hostile loop');
$run{pb1} = sq($node, "SET ROLE pb; SELECT backfill_run('pb1')");
is(wait_pass_end($node, $run{pb1}, 180), 'completed',
	'(a) pb\'s pass got a lane and completed while pa\'s SQL still catches its cancels');
is(sq($node, 'SELECT on_ FROM public.hostile'), 't', '(a) (the hostile loop was on all along)');
my $log = slurp_file($node->logfile);
like($log, qr/a lane of run ($run{pa1}|$run{pa2}) is terminated: its batch outlived/,
	'(a) the scheduler terminated the preempted lane that caught its cancel');
my @cancels = $log =~ /the batch of a lane of run \d+ is cancelled for a waiting pass/g;
cmp_ok(scalar(@cancels), '<=', 2, '(a) the batch was cancelled once, not again each tick');

# ---- (b) a rehearsal's batch outlives its batch_timeout
my ($rc, $out, $err) = $node->psql('postgres', q{SELECT count(*) FROM backfill_rehearse('pa3', 1)},
	extra_params => [ '-U', 'pa' ]);
isnt($rc, 0, '(b) the rehearsal of a batch that catches its cancel fails');
like($err, qr/the rehearsal of backfill "pa3" was terminated after \d+ ms/,
	'(b) its worker was terminated past batch_timeout and the grace') or diag($err);
ok(poll_until($node, sprintf($workers, 'pg_backfill rehearsal'), '0', 30),
	'(b) no rehearsal worker is left');

# ---- (c) and (d): a rehearsal whose caller goes away; a second of the same role waits
my @bg;
for my $i (0 .. 1)
{
	my ($in, $o) = ('', '');
	my $h = IPC::Run::start([ $node->installed_command('psql'), '-X', '-A', '-t',
			'-d', $node->connstr('postgres'), '-U', 'pa' ], '<', \$in, '>', \$o, '2>', \$o);
	$in .= "SELECT 'pid:' || pg_backend_pid(); SELECT count(*) FROM backfill_rehearse('pa4', 1);\n";
	push @bg, { h => $h, out => \$o };
	my $deadline = time() + 60;
	while (${ $bg[-1]{out} } !~ /pid:(\d+)/ && time() < $deadline)
	{
		$h->pump_nb;
		usleep(50_000);
	}
	($bg[-1]{pid}) = ${ $bg[-1]{out} } =~ /pid:(\d+)/;
	ok( poll_until($node, sprintf($workers, 'pg_backfill rehearsal'), '1', 60),
		"(c) rehearsal $i: one rehearsal worker runs, in the hostile loop");
	$bg[-1]{worker} = sq($node, q{SELECT pid FROM pg_stat_activity
		WHERE backend_type = 'pg_backfill rehearsal'});
}
ok( poll_until($node, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND pid = $bg[1]{pid}", '1', 60),
	'(d) the second caller of the same role waits for the first rehearsal');
ok(!defined(holds_for($node, sprintf($workers, 'pg_backfill rehearsal'), '1', 2)),
	'(d) and has started no worker of its own');
sq($node, "SELECT pg_terminate_backend($bg[0]{pid})");
ok( poll_until($node, "SELECT count(*) FROM pg_stat_activity WHERE pid = $bg[0]{worker}", '0', 30),
	'(c) the first caller terminated: its rehearsal worker ends too');
ok( poll_until($node, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND pid = $bg[1]{pid}", '0', 30),
	'(d) then the second caller gets the lock');
sq($node, "SELECT pg_terminate_backend($bg[1]{pid})");
ok(poll_until($node, sprintf($workers, 'pg_backfill rehearsal'), '0', 30),
	'(c) its caller terminated too: no rehearsal worker is left');
$_->{h}->kill_kill for @bg;

# ---- (e) NULLs
($rc, $out, $err) = $node->psql('postgres', q{SELECT count(*) FROM backfill_rehearse(NULL)});
like($err, qr/backfill name must not be empty/, '(e) backfill_rehearse(NULL) is refused');
($rc, $out, $err) = $node->psql('postgres', q{SELECT count(*) FROM backfill_rehearse('pa3', NULL)});
like($err, qr/needs a number of batches, not NULL/, '(e) a NULL number of batches is refused');

# ---- (f) the hostile SQL stops: everything completes, each row once
sq($node, 'UPDATE public.hostile SET on_ = false');
is(wait_pass_end($node, $run{$_}, 300), 'completed', "(f) $_ completes") for qw(pa1 pa2);
is(sq($node, "SELECT count(*) FROM $_ WHERE n <> 1"), '0', "(f) $_: every row once")
  for qw(pa1 pa2 pb1);
is(sq($node, 'SELECT count(*) FROM pa3 WHERE n <> 0') . ' ' . sq($node, 'SELECT count(*) FROM pa4 WHERE n <> 0'),
	'0 0', '(f) the rehearsals left nothing behind');

$node->stop;
done_testing();
