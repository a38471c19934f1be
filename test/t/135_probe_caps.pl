# 135_probe_caps.pl
#
# Issue 23, the fresh-context attacker's F2: backfill_probe started a worker
# per call (one role held 28 worker slots).  Now one probe runs per
# backfill, a call while it runs waits for its answer, and the probes one
# role's calls hold at once are capped (backfill.max_probes_per_role, 2
# here); beyond it, BF038 with a hint, and no worker starts.  By
# construction: mallory's three backfills have predicates over tables a
# test session holds locked (probe_lock_timeout 60 s), so their probes wait.
#  (a) two calls for m1 at once: one probe worker; both calls wait.
#  (b) a call for m2: a second worker (mallory's cap is 2).
#  (c) a call for m3: BF038 at once, naming backfill.max_probes_per_role in
#      its hint; still two probe workers.
#  (d) the locks let go: both m1 calls answer the one probe's rows (10),
#      and so does m2's; no probe worker is left; a call for m3 now works.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('probe_caps',
	extra_conf => "backfill.probe_timeout = '60s'\nbackfill.probe_lock_timeout = '60s'\n"
	  . "backfill.max_probes_per_role = 2\n");
sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE mallory LOGIN;
	GRANT CREATE ON SCHEMA public TO mallory;
	CREATE TABLE public.answers (who text, rows bigint);
	GRANT INSERT ON public.answers TO mallory;
});
for my $t (qw(m1 m2 m3))
{
	$node->safe_psql('postgres', qq{
		CREATE TABLE public.$t (id bigint PRIMARY KEY, c int);
		INSERT INTO public.$t SELECT g FROM generate_series(1, 10) g;
		SELECT backfill_declare(name => '$t', relation => '$t', predicate => 'c IS NULL',
			action => 'UPDATE $t SET c = 1 WHERE id BETWEEN \$1 AND \$2', guard => false);
	}, extra_params => [ '-U', 'mallory' ]);
}

my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN; LOCK TABLE public.m1, public.m2, public.m3 IN ACCESS EXCLUSIVE MODE;');

my $probes = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill probe'};
my @callers;
for my $who (qw(a b))
{
	my $s = $node->background_psql('postgres', extra_params => [ '-U', 'mallory' ]);
	$s->query_until(qr/calling/,
		"\\echo calling\nINSERT INTO public.answers SELECT 'm1$who', backfill_probe('m1', '60 s');\n");
	push @callers, $s;
}
ok( poll_until($node, q{SELECT count(*) FROM pg_stat_activity
		WHERE query LIKE 'INSERT INTO public.answers%' AND state = 'active'}, '2', 30),
	'(a) two calls probe m1 at once');
ok(poll_until($node, $probes, '1', 30), '(a) one probe worker runs for them');
is(holds_for($node, $probes, '1', 2), undef, '(a) and only one');

my $m2 = $node->background_psql('postgres', extra_params => [ '-U', 'mallory' ]);
$m2->query_until(qr/calling/,
	"\\echo calling\nINSERT INTO public.answers SELECT 'm2', backfill_probe('m2', '60 s');\n");
ok(poll_until($node, $probes, '2', 30), '(b) a call for m2 starts a second probe worker');

my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\nSELECT backfill_probe('m3', '60 s')",
	extra_params => [ '-U', 'mallory' ]);
isnt($rc, 0, '(c) a third probe of mallory\'s is refused');
like($err, qr/BF038.*role mallory already has 2 probes running/s, '(c) BF038, saying why')
  or diag($err);
like($err, qr/HINT:.*backfill\.max_probes_per_role/s, '(c) its hint names the setting');
is(sq($node, $probes), '2', '(c) no worker was started for it');

$holder->query_safe('COMMIT');
ok(poll_until($node, q{SELECT string_agg(who || '=' || rows, ',' ORDER BY who) FROM public.answers},
		'm1a=10,m1b=10,m2=10', 60),
	'(d) both m1 calls answer the one probe\'s rows, and m2\'s its own');
ok(poll_until($node, $probes, '0', 30), '(d) no probe worker is left');
is($node->safe_psql('postgres', q{SELECT backfill_probe('m3', '60 s')},
		extra_params => [ '-U', 'mallory' ]), '10', '(d) a call for m3 now works');

$_->quit for (@callers, $m2);
$holder->quit;
$node->stop;
done_testing();
