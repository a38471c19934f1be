# 138_scope_worker_dsm.pl
#
# Issue 23, the fresh-context attacker's F5: a superuser's backfill_run of
# another role's scoped backfill (its scope evaluated in a "pg_backfill
# scope" worker, answering through a dynamic shared memory segment) warned
# "dynamic shared memory leak: segment ... still referenced" at commit: the
# caller never detached the segment.  Now it is detached on every path:
#  (a) the scope evaluates: the run is enqueued, no warning;
#  (b) the scope raises an error: the caller gets it, no warning;
#  (c) the caller is cancelled (its statement_timeout) while the worker
#      evaluates a slow scope: the caller's error is the cancel, no warning,
#      and the worker is terminated with it (none left);
#  (d) the server log has no leak warning at all.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('scope_worker_dsm');
sq($node, q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE alice LOGIN;
	GRANT CREATE ON SCHEMA public TO alice;
});
$node->safe_psql('postgres', q{
	CREATE TABLE public.sd (id bigint PRIMARY KEY, c int);
	CREATE FUNCTION public.sd_scope(i jsonb) RETURNS text LANGUAGE plpgsql AS $$
	BEGIN
		IF (i->>'t')::int = 2 THEN RAISE EXCEPTION 'no scope for tenant 2'; END IF;
		IF (i->>'t')::int = 3 THEN PERFORM pg_catalog.pg_sleep(30); END IF;
		RETURN i->>'t';
	END $$;
	SELECT backfill_declare(name => 'sd', relation => 'sd', predicate => 'c IS NULL',
		action => 'UPDATE sd SET c = 1 WHERE id BETWEEN $1 AND $2',
		input => '{"t": "integer"}', scope => 'public.sd_scope(input)', guard => false);
}, extra_params => [ '-U', 'alice' ]);

my ($rc, $out, $err) = $node->psql('postgres', q{SELECT backfill_run('sd', input => '{"t": 1}')});
is($rc, 0, '(a) a superuser runs alice\'s scoped backfill') or diag($err);
is(sq($node, "SELECT ledger_name FROM backfill.ledger WHERE run_id = $out"), 'sd:1',
	'(a) its scope was evaluated (in a scope worker)');
unlike($err, qr/WARNING/, '(a) no warning: the segment was detached');

($rc, $out, $err) = $node->psql('postgres', q{SELECT backfill_run('sd', input => '{"t": 2}')});
isnt($rc, 0, '(b) a scope that raises: the run fails');
like($err, qr/no scope for tenant 2/, '(b) with the scope\'s error');
unlike($err, qr/WARNING/, '(b) no warning');

($rc, $out, $err) = $node->psql('postgres',
	q{SET statement_timeout = '1s'; SELECT backfill_run('sd', input => '{"t": 3}')});
isnt($rc, 0, '(c) the caller cancelled while its scope worker works');
like($err, qr/canceling statement due to statement timeout/, '(c) by its statement_timeout');
unlike($err, qr/WARNING/, '(c) no warning');
ok( poll_until($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill scope'},
		'0', 30), '(c) its scope worker went with it');

unlike(slurp_file($node->logfile), qr/dynamic shared memory leak|still referenced/,
	'(d) the server log has no leak warning');
$node->stop;
done_testing();
