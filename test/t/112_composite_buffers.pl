# 112_composite_buffers.pl
#
# A composite key's batches cost the same early and late in a big leading
# value (issue 12: 1.55x per row at 1,000,000 rows, 1.00x at 200,000).  A
# table keyed (tenant_id, id) whose tenant 2 holds 30000 rows is backfilled
# by one lane in batches of 300, with the action in the form the README
# recommends (four branches, each an index scan from the batch's first key
# to its last) and a non-idempotent n = n + 1.  auto_explain (ANALYZE,
# BUFFERS, JSON; for the lane's role only) logs every key scan and action:
# the index blocks a batch reads late in tenant 2 are no more than early in
# it.  The form the README recommended before,
#   (tenant_id, id) >= ($1, $2) AND (tenant_id < $3 OR (tenant_id = $3 AND id <= $4))
# fails this: its "tenant_id = $3" branch starts at the tenant's first
# entry (an equality on the leading column replaces the row comparison as
# the btree scan's start), so it reads more in every batch, about 100
# index blocks by the end of the tenant.  Every row is done exactly once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;
use List::Util qw(max sum);
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('composite_buffers',
	extra_conf => "shared_preload_libraries = 'pg_backfill,auto_explain'\n");

# tenant 1 and 3: 300 rows each; tenant 2: 30000 (ids with gaps)
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE ck_owner LOGIN;
	CREATE TABLE tenants (tenant_id int, id bigint, n int NOT NULL DEFAULT 0,
	                      PRIMARY KEY (tenant_id, id));
	INSERT INTO tenants (tenant_id, id)
	SELECT t, i * 3 + i % 2
	  FROM generate_series(1, 3) t,
	       LATERAL generate_series(1, CASE WHEN t = 2 THEN 30000 ELSE 300 END) i;
	VACUUM ANALYZE tenants;
	ALTER TABLE tenants OWNER TO ck_owner;
	-- the lane logs in as ck_owner: its plans, and nobody else's
	ALTER ROLE ck_owner SET auto_explain.log_min_duration = 0;
	ALTER ROLE ck_owner SET auto_explain.log_analyze = on;
	ALTER ROLE ck_owner SET auto_explain.log_buffers = on;
	ALTER ROLE ck_owner SET auto_explain.log_timing = off;
	ALTER ROLE ck_owner SET auto_explain.log_format = json;
});
my $ROWS = 30600;
is($node->safe_psql('postgres', 'SELECT count(*) FROM tenants'), $ROWS, 'three tenants, one big');

$node->safe_psql('postgres', q{
	SET ROLE ck_owner;
	SELECT backfill_declare(name => 'ckb', relation => 'tenants', predicate => 'n = 0',
		action => 'UPDATE tenants SET n = n + 1
		            WHERE ((tenant_id = $1 AND tenant_id = $3 AND id BETWEEN $2 AND $4)
		                OR (tenant_id = $1 AND tenant_id < $3 AND id >= $2)
		                OR (tenant_id > $1 AND tenant_id < $3)
		                OR (tenant_id = $3 AND tenant_id > $1 AND id <= $4))',
		batch_size => 300, rate => 100, max_parallel => 1, guard => false);
});
my $run = $node->safe_psql('postgres', q{SET ROLE ck_owner; SELECT backfill_run('ckb')});
like($run, qr/^\d+$/, 'backfill_run returned a run id');
is(wait_pass_end($node, $run, 600), 'completed', 'the pass completed');
each_row_done_once($node, 'tenants', $ROWS, $run);
cmp_ok($node->safe_psql('postgres', q{SELECT batches FROM backfill_status('ckb')}), '>=', 102,
	'at least 102 batches of 300 rows');

# ---- the plans auto_explain logged, in the order the lane ran them
sub plans_of
{
	my ($prefix) = @_;
	my @plans;
	for my $entry (split /\n(?=\d{4}-\d\d-\d\d )/, slurp_file($node->logfile))
	{
		next unless $entry =~ /plan:\n\s*(\{.*\})/s;
		my $plan = decode_json($1);
		push @plans, $plan if index($plan->{'Query Text'}, $prefix) == 0;
	}
	return @plans;
}

# the blocks a plan's index scans read (hit or read), its heap's left out
# where the node is a bitmap index scan
sub index_blocks
{
	my ($node) = @_;
	my $blocks = 0;
	$blocks += $node->{'Shared Hit Blocks'} + $node->{'Shared Read Blocks'}
	  if $node->{'Node Type'} =~ /Index/;
	$blocks += index_blocks($_) for @{ $node->{Plans} // [] };
	return $blocks;
}

# batches 3-12 (early in tenant 2) against 88-97 (late in it, before tenant 3)
sub early_late
{
	my ($what, @plans) = @_;
	my @blocks = map { index_blocks($_->{Plan}) } @plans;
	cmp_ok(scalar(@blocks), '>=', 102, scalar(@blocks) . " ${what}s were explained");
	my $early = max(@blocks[2 .. 11]);
	my $late = max(@blocks[87 .. 96]);
	note("$what index blocks per batch: " . join(' ', @blocks));
	cmp_ok($late, '<=', $early + 4,
		"a $what reads no more index blocks late in tenant 2 ($late) than early in it ($early)");
	return;
}

my @scans = grep { $_->{'Query Text'} !~ /backfill_input/ }
  plans_of('SELECT tenant_id, id FROM public.tenants WHERE ROW(tenant_id, id) OPERATOR(pg_catalog.>)');
early_late('key scan', @scans);
my @actions = plans_of('UPDATE tenants SET n = n + 1');
early_late('action', @actions);
is(scalar(grep { encode_json($_) =~ /Seq Scan|Bitmap/ } @scans), 0,
	'every key scan is an index scan, from the first batch on (no bitmap of the rest of the table)');
is(scalar(grep { encode_json($_) =~ /"Sort"/ } @scans), 0, 'no key scan sorts');
is(scalar(grep { encode_json($_) =~ /Seq Scan/ } @actions), 0, 'no action scans the table');

$node->stop;
done_testing();
