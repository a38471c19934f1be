# 002_pg_cron.pl
#
# pg_cron schedules a backfill: the first scheduled backfill_run does the
# pass; the next minute's run finds it completed and is skipped (it returns
# the previous run id and writes no ledger row).
#
# pg_cron has minute granularity, so this test takes two to three minutes.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

plan skip_all => 'SKIP: pg_cron is not installed for this PostgreSQL server'
  unless BackfillTest::have_pg_cron();
my $node = BackfillTest::node('pg_cron', cron => 1);
# pg_cron runs once a minute: no need to poll faster
$BackfillTest::poll_interval = 0.5;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_cron;
	CREATE EXTENSION pg_backfill;
	CREATE TABLE cf (id bigint PRIMARY KEY, v int);
	INSERT INTO cf (id) SELECT g FROM generate_series(1, 1000) g;
	ANALYZE cf;
	SELECT backfill_declare(name => 'cron_fill', relation => 'cf', predicate => 'v IS NULL',
		action => 'UPDATE cf SET v = id * 2 WHERE id BETWEEN $1 AND $2 AND v IS NULL',
		batch_size => 100, rate => 50);
});

my $jobid = $node->safe_psql('postgres',
	q{SELECT cron.schedule('bf', '* * * * *', $$SELECT backfill_run('cron_fill')$$)});
like($jobid, qr/^\d+$/, 'cron.schedule returns a job id');

ok( poll_until($node,
		q{SELECT count(*) > 0 FROM backfill.ledger
		   WHERE ledger_name = 'cron_fill' AND status = 'completed'},
		't', 300),
	'a pg_cron job ran the backfill to completion');

is( $node->safe_psql('postgres',
		q{SELECT count(*), count(*) FILTER (WHERE v = id * 2) FROM cf}),
	'1000|1000', 'the scheduled pass rewrote every row');

my ($run_id, $status, $rows) = split /\|/, $node->safe_psql('postgres',
	q{SELECT run_id, status, rows FROM backfill.ledger WHERE ledger_name = 'cron_fill'});
is($status, 'completed', 'the ledger row is completed');
is($rows, '1000', 'the ledger counts 1000 rows');

cmp_ok( $node->safe_psql('postgres',
		qq{SELECT count(*) FROM cron.job_run_details
		    WHERE jobid = $jobid AND status = 'succeeded'}),
	'>=', 1, 'pg_cron records the job run as succeeded');

# the next minute's job must be skipped: it succeeds but writes nothing
ok( poll_until($node,
		qq{SELECT count(*) >= 2 FROM cron.job_run_details
		    WHERE jobid = $jobid AND status IN ('succeeded', 'failed')},
		't', 300),
	'pg_cron ran the job a second time');
is( $node->safe_psql('postgres',
		qq{SELECT count(*) FROM cron.job_run_details WHERE jobid = $jobid AND status = 'failed'}),
	'0', 'no scheduled backfill_run failed');
is( $node->safe_psql('postgres',
		q{SELECT count(*), max(run_id) FROM backfill.ledger WHERE ledger_name = 'cron_fill'}),
	"1|$run_id", 'the second scheduled run was skipped: still exactly one ledger row');
is( $node->safe_psql('postgres',
		qq{SELECT return_message FROM cron.job_run_details
		    WHERE jobid = $jobid AND status = 'succeeded' ORDER BY runid DESC LIMIT 1}),
	'SELECT 1', 'the skipped run returned normally (one row: the previous run id)');
is( $node->safe_psql('postgres', q{SELECT backfill_run('cron_fill')}),
	$run_id, 'backfill_run on the completed name returns the previous run id');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM backfill.ledger WHERE ledger_name = 'cron_fill'}),
	'1', 'and writes no ledger row');

# unschedule: no more runs
is($node->safe_psql('postgres', q{SELECT cron.unschedule('bf')}), 't', 'job unscheduled');
is($node->safe_psql('postgres', q{SELECT count(*) FROM cron.job WHERE jobname = 'bf'}),
	'0', 'no job left');

$node->stop;
done_testing();
