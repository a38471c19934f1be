# 031_metrics.pl
#
# metrics/queries.yaml, the postgres_exporter custom queries of pg_backfill:
#  (a) it parses (a minimal parser of exactly the subset the file uses:
#      top-level families with "query: |", "master: true" and "metrics:"
#      entries of usage and description), every usage is LABEL, GAUGE or
#      COUNTER, every family has a description for each column;
#  (b) every query runs against a real cluster; its columns are exactly the
#      metrics listed, labels are text and gauges/counters numeric;
#  (c) the values follow a completed pass, a paused pass and a pass with
#      failing batches;
#  (d) the outbox query counts messages emitted (rolled back); on a
#      version without backfill_outbox_topics (before 0.6) it is skipped.
#  Every query as a role that is only a member of pg_monitor, and as the
#  owner: 032_monitor.pl.
#
# The file: $ENV{PG_BACKFILL_METRICS}, else metrics/queries.yaml of the
# repository this file is in (a copy of test/t run from elsewhere must set
# PG_BACKFILL_METRICS); lib/MetricsYaml.pm reads it.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use MetricsYaml;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $yaml = MetricsYaml::path();
note "metrics: $yaml";

# ------------------------------------------------------------------
# (a) parse
# ------------------------------------------------------------------
my ($fams, $ord, $unp) = MetricsYaml::parse($yaml);
my %family = %$fams;
my @order = @$ord;
my @unparsed = @$unp;

is_deeply(\@unparsed, [], 'every line of queries.yaml is understood');
cmp_ok(scalar(@order), '>=', 4, 'several metric families: ' . join(', ', @order));
for my $f (qw(pg_backfill pg_backfill_throttle pg_backfill_outbox))
{
	ok($family{$f}, "family $f is there");
}
for my $f (@order)
{
	my $fam = $family{$f};
	like($f, qr/^pg_backfill/, "$f: prefixed pg_backfill");
	like($fam->{query}, qr/^\s*SELECT\b/i, "$f: has a query");
	is($fam->{master} // '', 'true', "$f: master: true");
	ok($fam->{has_metrics} && @{ $fam->{metrics} }, "$f: has metrics");
	my %seen;
	for my $m (@{ $fam->{metrics} })
	{
		like($m->{usage} // '', qr/^(LABEL|GAUGE|COUNTER)$/,
			"$f.$m->{column}: usage LABEL, GAUGE or COUNTER");
		ok(length($m->{description} // ''), "$f.$m->{column}: described");
		ok(!$seen{ $m->{column} }++, "$f.$m->{column}: listed once");
	}
	ok((grep { $_->{usage} ne 'LABEL' } @{ $fam->{metrics} }), "$f: at least one value");
}

# ------------------------------------------------------------------
# a cluster with a completed pass, a paused pass and a failing pass
# ------------------------------------------------------------------
my $node = BackfillTest::node('metrics');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_backfill');

$node->safe_psql('postgres', q{
	CREATE TABLE done_t (id int PRIMARY KEY, c int);
	INSERT INTO done_t SELECT i FROM generate_series(1, 1000) i;
	SELECT backfill_declare(name => 'done', relation => 'done_t', predicate => 'c IS NULL',
		action => 'UPDATE done_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 250, rate => 100);
	CREATE TABLE slow_t (id int PRIMARY KEY, c int);
	INSERT INTO slow_t SELECT i FROM generate_series(1, 100000) i;
	SELECT backfill_declare(name => 'slow', relation => 'slow_t', predicate => 'c IS NULL',
		action => 'UPDATE slow_t SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 100, rate => 2);
	CREATE TABLE bad_t (id int PRIMARY KEY, c int);
	INSERT INTO bad_t SELECT i FROM generate_series(1, 1000) i;
	-- every batch fails, not for a row's fault (class 55: no bisection),
	-- and is retried with backoff
	CREATE FUNCTION bad_fail(lo int) RETURNS int LANGUAGE plpgsql AS $$
	BEGIN
		RAISE EXCEPTION 'bad_fail: not ready' USING ERRCODE = 'object_not_in_prerequisite_state';
	END $$;
	SELECT backfill_declare(name => 'bad', relation => 'bad_t', predicate => 'c IS NULL',
		action => 'UPDATE bad_t SET c = bad_fail($1) WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 100, rate => 100, max_attempts => 100,
		backoff_base => '100 ms', backoff_cap => '200 ms');
	SELECT backfill_declare(name => 'never', relation => 'bad_t', predicate => 'c IS NULL',
		action => 'UPDATE bad_t SET c = 2 WHERE id BETWEEN $1 AND $2 AND c IS NULL');
});
my $done_run = $node->safe_psql('postgres', q{SELECT backfill_run('done')});
is($node->safe_psql('postgres', "SELECT backfill_wait($done_run, '180 s')"),
	'completed', 'pass done completed');
$node->safe_psql('postgres', q{SELECT backfill_run('slow')});
ok(poll_until($node, q{SELECT rows > 0 FROM backfill_status('slow')}, 't', 180), 'slow makes progress');
$node->safe_psql('postgres', q{SELECT backfill_pause('slow')});
$node->safe_psql('postgres', q{SELECT backfill_run('bad')});
ok(poll_until($node, q{SELECT sum(failures) > 0 FROM backfill.partition p
	JOIN backfill.ledger l USING (run_id) WHERE l.declaration = 'bad'}, 't', 180),
	'bad has failed batch attempts');

# ------------------------------------------------------------------
# (b) every query runs; columns and types match the metrics
# ------------------------------------------------------------------
my %numeric = map { $_ => 1 }
  ('smallint', 'integer', 'bigint', 'real', 'double precision', 'numeric');
my $has_outbox =
  $node->safe_psql('postgres', q{SELECT to_regclass('backfill_outbox_topics') IS NOT NULL}) eq 't';

# "name:type" of the columns of a query, in order
sub columns_of
{
	my ($q) = @_;
	my $out = $node->safe_psql('postgres', qq{
		CREATE TEMP VIEW metric_q AS
		$q;
		SELECT attname || ':' || format_type(atttypid, atttypmod) FROM pg_attribute
		 WHERE attrelid = 'metric_q'::regclass AND attnum > 0 ORDER BY attnum;
	});
	return map { [ split /:/, $_, 2 ] } split /\n/, $out;
}

sub check_columns
{
	my ($f, @cols) = @_;
	my %type = map { $_->[0] => $_->[1] } @cols;
	my @listed = map { $_->{column} } @{ $family{$f}{metrics} };
	is_deeply([ sort map { $_->[0] } @cols ], [ sort @listed ],
		"$f: the query's columns are the listed metrics");
	for my $m (@{ $family{$f}{metrics} })
	{
		my $t = $type{ $m->{column} } // 'missing';
		if ($m->{usage} eq 'LABEL')
		{
			is($t, 'text', "$f.$m->{column}: a text label");
		}
		else
		{
			ok($numeric{$t}, "$f.$m->{column}: numeric ($t)");
		}
	}
}

# rows of a query as hashes (columns separated by |)
sub rows_of
{
	my ($f) = @_;
	my @cols = map { $_->{column} } @{ $family{$f}{metrics} };
	my $sel = join(q{ || '|' || }, map { "coalesce(q.${_}::text, 'NULL')" } @cols);
	my $out = $node->safe_psql('postgres', "SELECT $sel FROM (\n$family{$f}{query}) q");
	my @rows;
	for my $l (split /\n/, $out)
	{
		my %r;
		@r{@cols} = split /\|/, $l, -1;
		push @rows, \%r;
	}
	return @rows;
}

for my $f (@order)
{
	my $q = $family{$f}{query};
	if ($q =~ /\bbackfill_outbox_topics\b/ && !$has_outbox)
	{
	  SKIP:
		{
			skip "$f: backfill_outbox_topics does not exist yet (it comes with pg_backfill 0.6)", 1;
		}
		next;
	}
	my ($rc, $out, $err) = $node->psql('postgres', $q);
	is($rc, 0, "$f: the query runs") or diag($err);
	check_columns($f, columns_of($q));
}

# ------------------------------------------------------------------
# (c) values
# ------------------------------------------------------------------
my %bf = map { $_->{backfill} => $_ } rows_of('pg_backfill');
is_deeply([ sort keys %bf ], [qw(bad done never slow)], 'pg_backfill: one row per declaration');
is($bf{done}{rows}, '1000', 'done: rows');
is($bf{done}{running}, '0', 'done: not running');
is($bf{done}{progress}, '1', 'done: progress 1');
is($bf{slow}{running}, '1', 'slow: running');
is($bf{slow}{paused}, '1', 'slow: paused');
cmp_ok($bf{slow}{rows}, '>', 0, 'slow: rows');
is($bf{done}{paused}, '0', 'done: not paused');
cmp_ok($bf{bad}{failures}, '>', 0, 'bad: failures');
is($bf{never}{run_id}, '0', 'never: run_id 0');
is($bf{never}{rows}, '0', 'never: rows 0');

my %th = map { $_->{backfill} => $_ } rows_of('pg_backfill_throttle');
is($th{done}{throttled}, '0', 'throttle: done is not throttled');
is($th{done}{reason}, '', 'throttle: no reason');

my %st = map { $_->{backfill} => $_ } rows_of('pg_backfill_state');
is($st{done}{state}, 'completed', 'state: done completed');
is($st{never}{state}, 'pending', 'state: never pending');
is($st{slow}{state}, 'running', 'state: slow running');

my @ledger = rows_of('pg_backfill_ledger');
ok((grep { $_->{backfill} eq 'done' && $_->{status} eq 'completed' && $_->{passes_total} eq '1'
	  && $_->{rows_total} eq '1000' } @ledger), 'ledger: done has one completed pass of 1000 rows');
ok(!(grep { $_->{status} eq 'running' } @ledger),
	'ledger: counts only passes that ended (a counter never goes down)');
my %running = map { $_->{backfill} => $_->{passes} } rows_of('pg_backfill_running');
is($running{slow}, '1', 'running: slow has a pass running (a gauge)');
is($running{done}, '0', 'running: done has none');

if ($has_outbox)
{
	my $out = $node->safe_psql('postgres', qq{
		BEGIN;
		SELECT backfill_outbox_emit('orders', 'k1', '{}') > 0, backfill_outbox_emit('orders', 'k2', '{}') > 0;
		SELECT topic || '|' || state || '|' || messages FROM ($family{pg_backfill_outbox}{query}) q;
		ROLLBACK;
	});
	like($out, qr/^orders\|pending\|2$/m, 'outbox: the depth of a topic');
}

$node->safe_psql('postgres', q{SELECT backfill_cancel('slow'); SELECT backfill_cancel('bad')});
$node->stop;
done_testing();
