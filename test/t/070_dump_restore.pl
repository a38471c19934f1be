# 070_dump_restore.pl -- a pg_dump of a database with backfills, restored
# into a fresh cluster whose roles and tables were created in another
# order (other oids): the declarations name the same tables and roles, the
# history is there, a run works as the declaring role and the run ids go
# on; a declaration whose role is gone (its oid dumped as a number, which
# here is another role's, a superuser's) is refused, and a pass whose
# roles no longer carry their names gets no lane (issue 9, finding 8).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $src = BackfillTest::node('dump_src');

# --- the source: app declares and completes a backfill; a superuser sets a
# function sink (on a function of its own: a sink runs only a function whose
# owner has the privileges of the role that sets it)
sq($src, q{
	CREATE ROLE app LOGIN;
	CREATE ROLE gone LOGIN;
	CREATE TABLE items (id int PRIMARY KEY, c int, who text);
	INSERT INTO items (id) SELECT g FROM generate_series(1, 40) g;
	CREATE TABLE gone_items (id int PRIMARY KEY, c int);
	INSERT INTO gone_items (id) SELECT g FROM generate_series(1, 5) g;
	GRANT SELECT, UPDATE ON items TO app;
	GRANT SELECT, UPDATE ON gone_items TO gone;
	CREATE EXTENSION pg_backfill;
	CREATE TABLE sink_log (topic text, who text);
	GRANT INSERT ON sink_log TO app;
	CREATE FUNCTION sink_fn(topic text, key text, payload jsonb) RETURNS void
	    LANGUAGE sql AS $$ INSERT INTO public.sink_log VALUES (topic, current_user) $$;
	SELECT backfill_outbox_sink('app.events', 'function', 'sink_fn');
});
sq($src, q{
	SET ROLE app;
	SELECT backfill_declare(name => 'fill', relation => 'items', predicate => 'c IS NULL',
	    action => 'UPDATE items SET c = id, who = current_user WHERE id BETWEEN $1 AND $2 AND c IS NULL',
	    rate => 100);
	SET ROLE gone;
	SELECT backfill_declare(name => 'orphan', relation => 'gone_items', predicate => 'c IS NULL',
	    action => 'UPDATE gone_items SET c = id WHERE id BETWEEN $1 AND $2 AND c IS NULL',
	    rate => 100);
});
my $run = sq($src, q{SET ROLE app; SELECT backfill_run('fill')});
is(wait_pass_end($src, $run, 180), 'completed', 'the source completes its pass');
# a retired backfill (issue 24): its ledger row and its retirement are dumped
sq($src, q{
	CREATE TABLE kept (id int PRIMARY KEY, c int);
	INSERT INTO kept (id) SELECT g FROM generate_series(1, 5) g;
	GRANT SELECT, UPDATE ON kept TO app;
	SET ROLE app;
	SELECT backfill_declare(name => 'kept', relation => 'kept', predicate => 'c IS NULL',
	    action => 'UPDATE kept SET c = id WHERE id BETWEEN $1 AND $2 AND c IS NULL', rate => 100);
});
my $run_kept = sq($src, q{SET ROLE app; SELECT backfill_run('kept')});
is(wait_pass_end($src, $run_kept, 180), 'completed', 'the source completes the pass it retires');
is(sq($src, q{SET ROLE app; SELECT backfill_retire('kept')}), $run_kept, 'and retires it');
my $gone_oid = sq($src, q{SELECT oid FROM pg_roles WHERE rolname = 'gone'});
# the role goes; its declaration stays (it is history), with its oid
sq($src, q{REVOKE ALL ON gone_items FROM gone; DROP ROLE gone});

my $dump = PostgreSQL::Test::Utils::tempdir() . '/backfill.sql';
command_ok([ 'pg_dump', '-d', $src->connstr('postgres'), '-f', $dump ],
	'pg_dump of the source database');
$src->stop;

# --- the target: other roles first, so every oid differs; one role, a
# superuser, gets the oid the dropped role had
my $dst = BackfillTest::node('dump_dst');
sq($dst, q{CREATE ROLE other LOGIN});
my $padded = sq($dst, qq{
	DO \$\$
	BEGIN
	    FOR i IN 1..2000 LOOP
	        EXIT WHEN (SELECT max(oid) FROM pg_authid) >= $gone_oid - 1;
	        EXECUTE format('CREATE ROLE pad_%s', i);
	    END LOOP;
	END
	\$\$;
	CREATE ROLE victim LOGIN SUPERUSER;
	SELECT oid = $gone_oid FROM pg_roles WHERE rolname = 'victim';
});
sq($dst, q{
	CREATE ROLE app LOGIN;
	CREATE TABLE decoy (id int PRIMARY KEY, c int, who text);
	CREATE INDEX decoy_c ON decoy (c);
});
my ($rc, $out, $err) = $dst->psql('postgres', undef,
	extra_params => [ '-v', 'ON_ERROR_STOP=1', '-f', $dump ]);
is($rc, 0, 'the dump restores into the fresh cluster') or diag($err);

is( sq($dst, q{
		SELECT d.name, d.relid::oid = 'public.items'::regclass::oid,
		       d.owner::oid = 'app'::regrole::oid, d.run_as::oid = 'app'::regrole::oid
		  FROM backfill.declaration d WHERE d.name = 'fill'}),
	'fill|t|t|t',
	'the declaration names the restored table and role, not the oids of the source');
is( sq($dst, q{SELECT owner::oid = 'app'::regrole::oid, status FROM backfill.ledger
		WHERE run_id = } . $run),
	't|completed', 'the completed pass is there, owned by app');
is( sq($dst, q{SET ROLE app; SELECT state FROM backfill_pending() WHERE name = 'fill'}),
	'completed', 'app sees its backfill completed');
is( sq($dst, q{SET ROLE app; SELECT state FROM backfill_pending() WHERE name = 'kept'}),
	'retired', 'the retired backfill is still retired');
($rc, $out, $err) = $dst->psql('postgres', q{SET ROLE app; SELECT backfill_run('kept', force => true)});
like($err, qr/is retired/, 'and its runs are refused');
is( sq($dst, q{SELECT run_as::oid = 'postgres'::regrole::oid, run_as_name
		FROM backfill.outbox_sink WHERE topic = 'app.events'}),
	't|postgres', 'the function sink still runs as the role that set it');

# a run works there, as app, and its id follows the restored ones
sq($dst, q{UPDATE items SET c = NULL, who = NULL WHERE id <= 10});
my $run2 = sq($dst, q{SET ROLE app; SELECT backfill_run('fill', force => true)});
cmp_ok($run2, '>', $run, 'the new run id follows the restored history');
is(wait_pass_end($dst, $run2, 180), 'completed', 'the forced pass completes in the target');
is( sq($dst, q{SELECT count(*), count(*) FILTER (WHERE who = 'app') FROM items WHERE id <= 10}),
	'10|10', 'its batches ran as app');
is(sq($dst, q{SELECT count(*) FROM decoy}), '0', 'the other table was not touched');

# the dropped role's declaration: its oid is victim's here; refused, never run
is($padded, 't', 'the superuser victim has the oid the dropped role had');
is( sq($dst, q{SELECT owner::oid = 'victim'::regrole::oid, owner_name FROM backfill.declaration
		WHERE name = 'orphan'}),
	't|gone', 'the dropped role\'s oid came back as a number');
($rc, $out, $err) = $dst->psql('postgres', q{SELECT backfill_run('orphan')});
like($err, qr/BF016|owner of backfill "orphan" is no longer role "gone"/,
	'running it is refused: its owner is not the role that declared it');
like($err, qr/HINT:.*(Create role gone|declare the backfill again)/, 'with a hint');
is(sq($dst, q{SELECT count(*) FROM backfill.ledger WHERE declaration = 'orphan'}),
	'0', 'no pass was enqueued');

# a pass whose owner no longer carries its name gets no lane: the scheduler
# fails it (renaming the role in the transaction that enqueues the pass)
sq($dst, q{UPDATE items SET c = NULL, who = NULL WHERE id <= 5});
my $run3 = sq($dst, q{
	BEGIN;
	SET ROLE app;
	SELECT backfill_run('fill', force => true);
	RESET ROLE;
	ALTER ROLE app RENAME TO app_renamed;
	COMMIT;});
is(wait_pass_end($dst, $run3, 180), 'failed', 'the pass of a renamed owner fails');
is(ledger($dst, $run3, 'error_code'), 'BF016', 'with BF016');
is( sq($dst, q{SELECT count(*) FROM items WHERE who IS NOT NULL AND id <= 5}),
	'0', 'no lane ran its batches');
is( sq($dst, q{SELECT count(*) FROM pg_roles WHERE rolsuper AND rolname <> 'postgres'
		AND rolname <> 'victim'}),
	'0', 'no role became a superuser');

# declaring again as the (renamed) owner binds the names anew; it runs
sq($dst, q{SET ROLE app_renamed;
	SELECT backfill_declare(name => 'fill', relation => 'items', predicate => 'c IS NULL',
	    action => 'UPDATE items SET c = id, who = current_user WHERE id BETWEEN $1 AND $2 AND c IS NULL',
	    rate => 100)});
my $run4 = sq($dst, q{SET ROLE app_renamed; SELECT backfill_run('fill', force => true)});
is(wait_pass_end($dst, $run4, 180), 'completed', 'declared again, it runs');

$dst->stop;
done_testing();
