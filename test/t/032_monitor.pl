# 032_monitor.pl
#
# Monitoring without write power (issue 24 B): a role that is only a member
# of pg_monitor reads every role's backfills, and the exporter's queries
# work for it and for the owner.
#  (a) EVERY query of metrics/queries.yaml (parsed by lib/MetricsYaml.pm)
#      runs as the pg_monitor role and as the owner, and both see the
#      owner's backfills and outbox topic; a role with neither sees none;
#  (b) backfill_status, backfill_pending, backfill_partitions and the
#      backfill_ledger view show the owner's backfills to the pg_monitor
#      role;
#  (c) it has no write power: run, pause and cancel are refused;
#  (d) no report evaluates the declarer's SQL for it: the predicate calls
#      a function that takes a number from a sequence (which no rollback
#      gives back); backfill_pending as the owner probes it (the number
#      moves), as the pg_monitor role it does not;
#  (e) counters only go up: a pass that moves from running to cancelled
#      raises pg_backfill_ledger's passes_total and lowers only the gauge
#      pg_backfill_running;
#  (f) what pg_monitor gets instead of a probe: the drift watch's last
#      probe after the pass (drift_rows 0 once the watch probed and found
#      nothing; NULL without a watch).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use MetricsYaml;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($fams, $order, $unparsed) = MetricsYaml::parse(MetricsYaml::path());
is_deeply($unparsed, [], 'queries.yaml parses');
cmp_ok(scalar(@$order), '>=', 5, 'the families: ' . join(', ', @$order));

my $node = BackfillTest::node('monitor');
sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE app LOGIN;
	CREATE ROLE mon LOGIN IN ROLE pg_monitor;
	CREATE ROLE stranger LOGIN;
	GRANT CREATE ON SCHEMA public TO app;
});

# $sql as $role (a session of its own); (rc, stdout, stderr)
sub as_role
{
	my ($role, $sql) = @_;
	return $node->psql('postgres', $sql, extra_params => [ '-U', $role ]);
}

sub as_role_ok
{
	my ($role, $sql) = @_;
	my ($rc, $out, $err) = as_role($role, $sql);
	die "as $role: $sql: $err" if $rc != 0;
	return $out;
}

as_role_ok('app', q{
	CREATE TABLE mon_t (id int PRIMARY KEY, c int);
	INSERT INTO mon_t SELECT g FROM generate_series(1, 500) g;
	CREATE SEQUENCE mon_probes;
	-- true, and counts each evaluation in a sequence (kept through any
	-- rollback); declared STABLE, as a predicate's functions must be
	CREATE FUNCTION mon_mark() RETURNS boolean LANGUAGE plpgsql STABLE
	    AS $$ BEGIN RETURN nextval('mon_probes') > 0; END $$;
	SELECT backfill_declare(name => 'mon_done', relation => 'mon_t',
		predicate => 'c IS NULL AND mon_mark()',
		action => 'UPDATE mon_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 100, rate => 100, guard => false);
	CREATE TABLE mon_slow_t (id int PRIMARY KEY, c int);
	INSERT INTO mon_slow_t SELECT g FROM generate_series(1, 100000) g;
	SELECT backfill_declare(name => 'mon_slow', relation => 'mon_slow_t', predicate => 'c IS NULL',
		action => 'UPDATE mon_slow_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 10, rate => 2);
	SELECT backfill_declare(name => 'mon_never', relation => 'mon_t', predicate => 'c IS NULL',
		action => 'UPDATE mon_t SET c = 2 WHERE id BETWEEN $1 AND $2 AND c IS NULL');
	SELECT backfill_outbox_emit('mon.topic', 'k1', '{"n": 1}');
});
my $done = as_role_ok('app', q{SELECT backfill_run('mon_done')});
is(wait_pass_end($node, $done, 120), 'completed', 'mon_done completed');
my $slow = as_role_ok('app', q{SELECT backfill_run('mon_slow')});
ok(poll_until($node, q{SELECT rows > 0 FROM backfill_status('mon_slow')}, 't', 120),
	'mon_slow makes progress');
as_role_ok('app', q{SELECT backfill_pause('mon_slow')});

# ------------------------------------------------------------------
# (a) every query of queries.yaml, as pg_monitor and as the owner
# ------------------------------------------------------------------
for my $f (@$order)
{
	my $q = $fams->{$f}{query};
	my @labels = map { $_->{column} } grep { $_->{usage} eq 'LABEL' } @{ $fams->{$f}{metrics} };
	my $sel = "SELECT " . join(q{ || '|' || }, map { "coalesce(q.$_, '')" } @labels)
	  . " FROM (\n$q) q";
	my $want = $f eq 'pg_backfill_outbox' ? qr/^mon\.topic\|pending$/m : qr/^mon_done(\||$)/m;
	for my $role (qw(mon app))
	{
		my ($rc, $out, $err) = as_role($role, $sel);
		is($rc, 0, "$f: runs as $role") or diag($err);
		like($out, $want, "$f: $role sees the owner's " . ($f eq 'pg_backfill_outbox'
				? 'topic' : 'backfills'));
	}
	my ($rc, $out, $err) = as_role('stranger', $sel);
	is($rc, 0, "$f: runs as a role with neither") or diag($err);
	unlike($out, qr/mon/, "$f: a role with neither sees none of them");
}

# ------------------------------------------------------------------
# (b) the reports, as pg_monitor
# ------------------------------------------------------------------
is(as_role_ok('mon', q{SELECT status, rows FROM backfill_status('mon_done')}), 'completed|500',
	'backfill_status: pg_monitor sees the owner\'s completed pass');
is(as_role_ok('mon', q{SELECT status, paused FROM backfill_status('mon_slow')}), 'running|t',
	'backfill_status: and its paused one');
is(as_role_ok('mon', q{SELECT string_agg(name || ':' || state, ',' ORDER BY name)
	FROM backfill_pending()}),
	'mon_done:completed,mon_never:pending,mon_slow:running',
	'backfill_pending: pg_monitor sees every declaration and its state');
cmp_ok(as_role_ok('mon', q{SELECT count(*) FROM backfill_partitions('mon_done')}), '>', 0,
	'backfill_partitions: pg_monitor sees the partitions');
is(as_role_ok('mon', q{SELECT count(*) FROM backfill_ledger WHERE owner = 'app'}), '2',
	'backfill_ledger: pg_monitor sees the owner\'s passes');
is(as_role_ok('stranger', q{SELECT count(*) FROM backfill_ledger}), '0',
	'backfill_ledger: a role with neither sees none');

# ------------------------------------------------------------------
# (c) no write power
# ------------------------------------------------------------------
for my $call ("backfill_run('mon_never')", "backfill_resume('mon_slow')",
	"backfill_cancel('mon_slow')", "backfill_drop('mon_never')")
{
	my ($rc, $out, $err) = as_role('mon', "SELECT $call");
	isnt($rc, 0, "pg_monitor may not call $call");
}
is(sq($node, q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'mon_never'}), '0',
	'no pass of mon_never was started');

# ------------------------------------------------------------------
# (d) no declarer's SQL evaluated for pg_monitor
# ------------------------------------------------------------------
my $probes = sq($node, q{SELECT last_value FROM mon_probes});
as_role_ok('mon', q{SELECT * FROM backfill_pending()});
as_role_ok('mon', q{SELECT * FROM backfill_status('mon_done')});
is(sq($node, q{SELECT last_value FROM mon_probes}), $probes,
	'backfill_pending as pg_monitor evaluates no predicate (mon_mark not called)');
# no report probes for anyone since 0.6 (issue 23): the owner's
# backfill_probe, in a probe worker, shows the check above can see a probe
as_role_ok('app', q{SELECT * FROM backfill_pending()});
is(sq($node, q{SELECT last_value FROM mon_probes}), $probes,
	'backfill_pending as the owner evaluates no predicate either');
as_role_ok('app', q{SELECT backfill_probe('mon_done')});
cmp_ok(sq($node, q{SELECT last_value FROM mon_probes}), '>', $probes,
	'backfill_probe as the owner probes the predicate (the check above can see a probe)');
my ($prc) = as_role('mon', q{SELECT backfill_probe('mon_done')});
isnt($prc, 0, 'pg_monitor may not call backfill_probe');

# ------------------------------------------------------------------
# (e) counters only go up
# ------------------------------------------------------------------
sub family_values
{
	my ($f, $role) = @_;
	my @cols = map { $_->{column} } @{ $fams->{$f}{metrics} };
	my @labels = map { $_->{column} } grep { $_->{usage} eq 'LABEL' } @{ $fams->{$f}{metrics} };
	my %v;
	for my $m (grep { $_->{usage} ne 'LABEL' } @{ $fams->{$f}{metrics} })
	{
		my $key = join(q{ || '/' || }, map { "q.$_" } @labels);
		my $out = as_role_ok($role,
			"SELECT $key || '=' || q.$m->{column} FROM (\n$fams->{$f}{query}) q");
		for my $l (split /\n/, $out)
		{
			my ($k, $val) = split /=/, $l, 2;
			$v{"$m->{column}\{$k\}"} = { value => $val, usage => $m->{usage} };
		}
	}
	return \%v;
}

my %before = map { %{ family_values($_, 'mon') } } qw(pg_backfill_ledger pg_backfill_running);
is($before{'passes{mon_slow}'}{value}, '1', 'running: mon_slow has a pass running');
as_role_ok('app', q{SELECT backfill_cancel('mon_slow')});
is(wait_pass_end($node, $slow, 60), 'cancelled', 'mon_slow cancelled');
my %after = map { %{ family_values($_, 'mon') } } qw(pg_backfill_ledger pg_backfill_running);
for my $k (sort grep { $before{$_}{usage} eq 'COUNTER' } keys %before)
{
	ok(defined $after{$k} && $after{$k}{value} >= $before{$k}{value},
		"counter $k does not go down ($before{$k}{value} -> " . ($after{$k}{value} // 'gone') . ')');
}
is($after{'passes_total{mon_slow/cancelled}'}{value}, '1',
	'passes_total counts the cancelled pass once it ended');
is($after{'passes{mon_slow}'}{value}, '0', 'the running gauge went back to 0');

# ------------------------------------------------------------------
# (f) the watch's recorded probe, for pg_monitor
# ------------------------------------------------------------------
as_role_ok('app', q{
	CREATE TABLE mon_w_t (id int PRIMARY KEY, c int);
	INSERT INTO mon_w_t SELECT g FROM generate_series(1, 50) g;
	SELECT backfill_declare(name => 'mon_watched', relation => 'mon_w_t', predicate => 'c IS NULL',
		action => 'UPDATE mon_w_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 100, rate => 100, watch => '200 ms');
});
my $watched = as_role_ok('app', q{SELECT backfill_run('mon_watched')});
is(wait_pass_end($node, $watched, 120), 'completed', 'mon_watched completed');
ok(poll_until($node, q{SELECT watch_probes > 0 FROM backfill_status('mon_watched')}, 't', 120),
	'the watch probed mon_watched after its pass');
is(as_role_ok('mon', q{SELECT state || '|' || coalesce(drift_rows::text, 'none')
	FROM backfill_pending() WHERE name IN ('mon_watched', 'mon_done') ORDER BY name}),
	"completed|0\ncompleted|0",
	'pg_monitor: mon_done shows what its pass found beyond its bound at its end (0 rows, no probe '
	  . 'since), mon_watched the watch\'s recorded probe (0 rows)');

$node->stop;
done_testing();
