# 136_probe_fair_share.pl
#
# Issue 23, the fresh-context attacker's F3: the scheduler's four probe
# slots were shared by every role first come, first served: mallory's slow
# watch probes held all four, and alice's probes (her watch, the `requires`
# gate of her passes) waited until one ended (~50 s).  Now the slots are
# shared between the roles whose probes are due: a role holds at most its
# share (never all four), so another role's probe gets a slot while hers
# still run.  By construction: mallory's four watched backfills read
# tables a test session holds locked (probe_lock_timeout 60 s), so her
# probes block; alice's one watched backfill is probed every second.
#  (a) mallory's blocked probes take two or three slots (her share, with
#      alice's probes due, or three when hers were due first), never all
#      four, for as long as we look;
#  (b) alice's watch goes on being probed (its probe count grows) while
#      mallory's probes are still blocked.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('probe_fair_share',
	extra_conf => "backfill.probe_timeout = '60s'\nbackfill.probe_lock_timeout = '60s'\n");
sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE mallory LOGIN;
	CREATE ROLE alice LOGIN;
	GRANT CREATE ON SCHEMA public TO mallory, alice;
});

sub watched
{
	my ($role, $t) = @_;
	$node->safe_psql('postgres', qq{
		CREATE TABLE public.$t (id bigint PRIMARY KEY, c int);
		INSERT INTO public.$t SELECT g FROM generate_series(1, 10) g;
		SELECT backfill_declare(name => '$t', relation => '$t', predicate => 'c IS NULL',
			action => 'UPDATE $t SET c = 1 WHERE id BETWEEN \$1 AND \$2', rate => 1000,
			watch => '1 s', guard => false);
	}, extra_params => [ '-U', $role ]);
	my $run = $node->safe_psql('postgres', "SELECT backfill_run('$t')",
		extra_params => [ '-U', $role ]);
	is(wait_pass_end($node, $run, 60), 'completed', "$t completed: watched from now on");
	return;
}
watched('mallory', "mw$_") for 1 .. 4;
watched('alice', 'aw');

my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN; LOCK TABLE public.mw1, public.mw2, public.mw3, public.mw4 IN ACCESS EXCLUSIVE MODE;');

my $blocked = q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill probe'
	AND usename = 'mallory' AND wait_event_type = 'Lock'};
ok(poll_until($node, "SELECT n >= 2 FROM ($blocked) b(n)", 't', 30),
	'(a) mallory\'s probes are blocked on her tables');
is(holds_for($node, "SELECT n <= 3 FROM ($blocked) b(n)", 't', 3), undef,
	'(a) never all four slots: one is left for another role');

my $alice_probes = q{SELECT probes FROM backfill.watch WHERE declaration = 'aw'};
my $before = sq($node, $alice_probes);
ok(poll_until($node, "SELECT probes >= $before + 3 FROM backfill.watch WHERE declaration = 'aw'",
		't', 30), '(b) alice\'s watch is probed again and again');
is(sq($node, "SELECT n >= 2 FROM ($blocked) b(n)"), 't',
	'(b) while mallory\'s probes are still blocked');

$holder->query_safe('COMMIT');
$holder->quit;
$node->stop;
done_testing();
