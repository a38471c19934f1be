# 072_pg_temp_last.pl
#
# pg_temp last, always (issue 23, point 1; doc/internals.md "Trust model"): the
# declarer's SQL runs under the declaration's search_path with pg_temp
# named as its last entry, so a temporary object of the session never
# stands in for the declarer's table, function or operator.
#  (a) CALL backfill_finalize working the pass in a session that created
#      TEMP TABLE processed: the action's INSERT INTO processed writes
#      public.processed (before: the temporary table took every row, and
#      the ledger counted rows public.processed never got);
#  (b) the same with a temporary table of the action's UPDATE target's name
#      (UPDATE tf ...): public.tf is updated, the temporary one untouched;
#      and for a declaration whose search_path named pg_temp first;
#  (c) a temporary function and a temporary operator that would be better
#      matches than the public ones the action and predicate use: never
#      found (PostgreSQL looks up neither in pg_temp, even named last);
#  (d) asrole.c: backfill_pending's drift probe, in a session whose
#      temporary table shadows a table the predicate reads, answers from
#      the public one;
#  (e) a lane: an action that creates a temporary table of its target's
#      name in the lane's session keeps writing the public table in every
#      later batch, and runs with pg_temp last (the recorded search_path),
#      also when the declarer named pg_temp first.
# No lane can start on the first node (max_worker_processes is taken by
# the launcher, the logical replication launcher and the scheduler), so
# (a)-(c) run in the finalizing session; (e) runs on a second node.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('pg_temp_session', extra_conf => "max_worker_processes = 3\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE pt_user LOGIN;
	GRANT CREATE ON SCHEMA public TO pt_user;
});
ok( poll_until($node,
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill scheduler'},
		'1', 60),
	'the scheduler runs, and takes the last worker slot');

# run $sql connected as pt_user; returns (rc, out, err)
sub as_user
{
	my ($n, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $n->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-U', 'pt_user' ]);
	return ($rc, $out, $err);
}

sub ok_as_user
{
	my ($n, $sql, $what) = @_;
	my ($rc, $out, $err) = as_user($n, $sql);
	is($rc, 0, $what) or diag($err);
	return $out;
}

# a table $t of $rows rows (c NULL), owned by pt_user
sub table_of
{
	my ($n, $t, $rows) = @_;
	ok_as_user($n, qq{
		CREATE TABLE public.$t (id int PRIMARY KEY, c int);
		INSERT INTO public.$t (id) SELECT g FROM generate_series(1, $rows) g;
		ANALYZE public.$t;
	}, "table $t of $rows rows");
	return;
}

# ------------------------------------------------------------------
# (a) a temporary table named as the action's INSERT target
# ------------------------------------------------------------------
table_of($node, 'pa', 2000);
ok_as_user($node, q{
	CREATE TABLE public.processed (id int);
	SELECT backfill_declare(name => 'pa', relation => 'pa', predicate => 'c IS NULL',
		action => 'WITH u AS (UPDATE pa SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL
		           RETURNING id) INSERT INTO processed (id) SELECT id FROM u',
		batch_size => 250, rate => 1000);
}, '(a) declared, with search_path "$user", public');
my $out = ok_as_user($node, q{
	CREATE TEMP TABLE processed (id int);
	CALL backfill_finalize('pa', '2 minutes');
	SELECT 'temp|' || count(*) FROM pg_temp.processed;
}, '(a) CALL backfill_finalize in a session with TEMP TABLE processed');
like($out, qr/^temp\|0$/m, '(a) the temporary table got no row');
is(sq($node, q{SELECT count(*), count(DISTINCT id) FROM public.processed}), '2000|2000',
	'(a) public.processed got every row, once');
is(sq($node, q{SELECT status, rows FROM backfill.ledger WHERE declaration = 'pa'}), 'completed|2000',
	'(a) the ledger counts the 2,000 rows public.processed got');

# ------------------------------------------------------------------
# (b) a temporary table named as the action's UPDATE target
# ------------------------------------------------------------------
table_of($node, 'tf', 1000);
ok_as_user($node, q{
	SELECT backfill_declare(name => 'tf', relation => 'tf', predicate => 'c IS NULL',
		action => 'UPDATE tf SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 250, rate => 1000);
}, '(b) declared');
$out = ok_as_user($node, q{
	CREATE TEMP TABLE tf (id int PRIMARY KEY, c int);
	INSERT INTO tf (id) SELECT g FROM generate_series(1, 1000) g;
	CALL backfill_finalize('tf', '2 minutes');
	SELECT 'temp|' || count(c) FROM pg_temp.tf;
}, '(b) CALL backfill_finalize in a session with TEMP TABLE tf');
like($out, qr/^temp\|0$/m, '(b) the temporary tf: no row updated');
is(sq($node, q{SELECT count(*) FILTER (WHERE c = 1), count(*) FROM public.tf}), '1000|1000',
	'(b) public.tf: every row updated');
is(sq($node, q{SELECT status, rows FROM backfill.ledger WHERE declaration = 'tf'}), 'completed|1000',
	'(b) the ledger counts them');

# declared with pg_temp named first: moved last
table_of($node, 'tg', 500);
ok_as_user($node, q{
	CREATE TABLE public.tg_done (id int);
	SET search_path = pg_temp, public;
	SELECT backfill_declare(name => 'tg', relation => 'tg', predicate => 'c IS NULL',
		action => 'WITH u AS (UPDATE tg SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL
		           RETURNING id) INSERT INTO tg_done (id) SELECT id FROM u',
		batch_size => 250, rate => 1000);
}, '(b) declared with search_path pg_temp, public');
$out = ok_as_user($node, q{
	CREATE TEMP TABLE tg_done (id int);
	CALL backfill_finalize('tg', '2 minutes');
	SELECT 'temp|' || count(*) FROM pg_temp.tg_done;
}, '(b) finalized in a session with TEMP TABLE tg_done');
like($out, qr/^temp\|0$/m, '(b) pg_temp named first by the declarer is searched last');
is(sq($node, q{SELECT count(*) FROM public.tg_done}), '500', '(b) public.tg_done got every row');

# ------------------------------------------------------------------
# (c) a temporary function and operator: never found
# ------------------------------------------------------------------
table_of($node, 'tc', 600);
ok_as_user($node, q{
	-- public's take a bigint: the int versions in pg_temp would match better
	CREATE FUNCTION public.pt_mark(bigint) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1';
	CREATE FUNCTION public.pt_keep(int, bigint) RETURNS boolean LANGUAGE sql IMMUTABLE
		AS 'SELECT true';
	CREATE OPERATOR public.@@@ (LEFTARG = int, RIGHTARG = bigint, FUNCTION = public.pt_keep);
	SELECT backfill_declare(name => 'tc', relation => 'tc',
		predicate => 'c IS NULL AND id @@@ 0',
		action => 'UPDATE tc SET c = pt_mark(id) WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 200, rate => 1000, guard => false);
}, '(c) declared: the action calls pt_mark(id), the predicate id @@@ 0');
$out = ok_as_user($node, q{
	CREATE FUNCTION pg_temp.pt_mark(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 666';
	CREATE FUNCTION pg_temp.pt_skip(int, int) RETURNS boolean LANGUAGE sql IMMUTABLE
		AS 'SELECT false';
	CREATE OPERATOR pg_temp.@@@ (LEFTARG = int, RIGHTARG = int, FUNCTION = pg_temp.pt_skip);
	CALL backfill_finalize('tc', '2 minutes');
	SELECT 'qualified|' || pg_temp.pt_mark(1);
}, '(c) CALL backfill_finalize in a session with a temporary pt_mark(int) and @@@ (int, int)');
like($out, qr/^qualified\|666$/m, '(c) the temporary function exists (qualified)');
is(sq($node, q{SELECT count(*) FILTER (WHERE c = 1), count(*) FROM tc}), '600|600',
	'(c) every row marked by public.pt_mark; the predicate kept them all (public.@@@)');
is(sq($node, q{SELECT status, rows FROM backfill.ledger WHERE declaration = 'tc'}), 'completed|600',
	'(c) the pass completed, 600 rows');

# ------------------------------------------------------------------
# (d) asrole.c: the drift probe of backfill_pending
# ------------------------------------------------------------------
table_of($node, 'td', 300);
ok_as_user($node, q{
	CREATE TABLE public.td_wanted (id int);
	INSERT INTO public.td_wanted SELECT g FROM generate_series(1, 300) g;
	SELECT backfill_declare(name => 'td', relation => 'td',
		predicate => 'c IS NULL AND id IN (SELECT w.id FROM td_wanted w)',
		action => 'UPDATE td SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL AND (c IS NULL AND id IN (SELECT w.id FROM td_wanted w))',
		batch_size => 100, rate => 1000);
	CALL backfill_finalize('td', '2 minutes');
	INSERT INTO public.td (id) SELECT g FROM generate_series(301, 350) g;
}, '(d) td completed, then 50 rows that public.td_wanted does not want');
$out = ok_as_user($node, q{
	CREATE TEMP TABLE td_wanted AS SELECT g AS id FROM generate_series(1, 350) g;
	SELECT 'pending|' || state || '|' || coalesce(drift, '-') FROM backfill_pending() WHERE name = 'td';
}, '(d) backfill_pending in a session whose TEMP TABLE td_wanted wants them');
like($out, qr/^pending\|completed\|-$/m, '(d) the probe reads public.td_wanted: no drift');
$node->stop;

# ------------------------------------------------------------------
# (e) a lane: its own temporary table never takes the action's rows
# ------------------------------------------------------------------
my $lanes = BackfillTest::node('pg_temp_lanes');
$lanes->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE ROLE pt_user LOGIN;
	GRANT CREATE ON SCHEMA public TO pt_user;
	-- what a declarer's SQL might do in the lane's session
	CREATE FUNCTION public.pt_shadow() RETURNS boolean LANGUAGE plpgsql AS $$
	BEGIN
		CREATE TEMP TABLE IF NOT EXISTS le_done (id int, path text);
		RETURN true;
	END $$;
});
table_of($lanes, 'le', 1000);
ok_as_user($lanes, q{
	CREATE TABLE public.le_done (id int, path text);
	SELECT backfill_declare(name => 'le', relation => 'le', predicate => 'c IS NULL',
		action => 'WITH u AS (UPDATE le SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL
		           RETURNING id) INSERT INTO le_done (id, path)
		           SELECT id, pg_catalog.current_setting(''search_path'') FROM u WHERE pt_shadow()',
		batch_size => 100, rate => 1000);
	SET search_path = pg_temp, public;
	SELECT backfill_declare(name => 'lf', relation => 'le', predicate => 'c = 1',
		action => 'WITH u AS (UPDATE le SET c = 2 WHERE id BETWEEN $1 AND $2 AND c = 1
		           RETURNING id) INSERT INTO le_done (id, path)
		           SELECT id, pg_catalog.current_setting(''search_path'') FROM u WHERE pt_shadow()',
		batch_size => 100, rate => 1000);
}, '(e) declared: an action that creates a TEMP TABLE le_done in the lane, then writes le_done');
my $run = sq($lanes, q{SET ROLE pt_user; SELECT backfill_run('le')});
is(wait_pass_end($lanes, $run, 120), 'completed', '(e) the lane completed the pass');
is(sq($lanes, q{SELECT count(*), count(DISTINCT id) FROM public.le_done}), '1000|1000',
	'(e) public.le_done got every row, in all ten batches (not the lane\'s temporary table)');
is(sq($lanes, q{SELECT DISTINCT path FROM public.le_done}), '"$user", public, pg_temp',
	'(e) the lane ran with "$user", public, pg_temp');
$run = sq($lanes, q{SET ROLE pt_user; SELECT backfill_run('lf')});
is(wait_pass_end($lanes, $run, 120), 'completed', '(e) declared with pg_temp first: completed');
is(sq($lanes, q{SELECT count(*) FROM public.le_done WHERE path = 'public, pg_temp'}), '1000',
	'(e) every batch ran with public, pg_temp: pg_temp moved last');
$lanes->stop;

done_testing();
