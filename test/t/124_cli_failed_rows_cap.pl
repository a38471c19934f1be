# 124_cli_failed_rows_cap.pl
#
# pg_backfill run --wait lists the rows a pass skipped, capped (attacker F8
# of issue 14): 25 rows fail alone (a CHECK the action's value breaks),
# max_failed_rows => 30; the CLI says 25 failed, lists the first 20 and
# says how many more backfill_failed_rows has.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $cli = $ENV{PG_BACKFILL_CLI};
if (!defined $cli || $cli eq '')
{
	my $rel = "$FindBin::RealBin/../../cli/pg_backfill";
	$cli = -x $rel ? $rel : '/usr/lib/postgresql/15/bin/pg_backfill';
}
die "pg_backfill CLI not found at $cli (build it with make -C cli, or set PG_BACKFILL_CLI)"
  unless -x $cli;

my $node = BackfillTest::node('cli_failed_rows_cap');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE cf (id int PRIMARY KEY, n int NOT NULL DEFAULT 0,
	                 c int NOT NULL DEFAULT 0 CHECK (c < 100));
	INSERT INTO cf (id) SELECT g FROM generate_series(1, 2500) g;
	UPDATE cf SET c = 99 WHERE id % 100 = 50;
	ANALYZE cf;
	SELECT backfill_declare(name => 'cf', relation => 'cf', predicate => 'n = 0',
		action => 'UPDATE cf SET n = n + 1, c = c + 1 WHERE id BETWEEN $1 AND $2',
		batch_size => 100, rate => 1000, max_failed_rows => 30, guard => false);
});
my ($out, $err) = ('', '');
IPC::Run::run([ $cli, '-d', $node->connstr('postgres'), 'run', 'cf', '--wait', '--plain' ],
	'<', \undef, '>', \$out, '2>', \$err,
	IPC::Run::timeout(4 * $PostgreSQL::Test::Utils::timeout_default));
is($? >> 8, 1, 'run --wait exits 1: not every row is done');
like($out, qr/^completed_with_failures: run \d+/m, 'the pass ended completed_with_failures');
like($out, qr/^25 row\(s\) failed alone and were skipped/m, 'the CLI says 25 rows failed');
my $listed = () = $out =~ /^\s*\d*50\s+23514/mg;
is($listed, 20, 'it lists the first 20 of them');
like($out, qr/^\.\.\. and 5 more \(SELECT \* FROM backfill_failed_rows\('cf'\) lists them all\)$/m,
	'and says how many more there are');
is($node->safe_psql('postgres', q{SELECT count(*) FROM backfill_failed_rows('cf')}),
	'25', 'backfill_failed_rows has all 25');

$node->stop;
done_testing();
