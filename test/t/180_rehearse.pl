# 180_rehearse.pl
#
# backfill_rehearse (issue 28 point 1): real batches of a declaration,
# spread over its key space, each rolled back, in a rehearsal worker as the
# backfill's run_as role, restricted.
#  (a) The results are plausible: five batches at the start, 25%, middle,
#      75% and end of a 20,000-row table, their first keys in that order
#      and far apart, each with rows, time and WAL > 0, the table's locks
#      (RowExclusiveLock) and index scans for the key scan and the action;
#      then one projection row: the rows to do (about 20,000), 20 batches,
#      a duration and WAL > 0, its assumptions.
#  (b) Nothing persists: the table (read by a sequential scan and through
#      an index on the column the action sets), every catalog table of the
#      extension and its sequences are as before; no ledger row.
#  (c) The role and the session: rita's action calls her function, which
#      looks around and raises what it found.  It runs as rita (not the
#      superuser caller), restricted (no temporary table), cannot write a
#      table of the superuser's (42501), does not see the caller's
#      temporary table nor its cursor; the caller's WITH HOLD cursor goes
#      on from where it was.
#  (d) Refusals: batches 0 and 101 are BF043 with a hint; an unknown
#      backfill BF002; a role not a member of the owner BF016; an owner no
#      longer a member of its run_as BF016 (rehearsed as run_as before the
#      REVOKE); a retired backfill BF041; the CLI's
#      `pg_backfill rehearse NAME` prints the batches and the projection.
#  (f) A partitioned table with a composite key: three batches at the
#      start, middle and end, each a leaf's, nothing stays.
#  (e) No background worker slot free (max_worker_processes = 3): BF038.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;

my $node = BackfillTest::node('rehearse');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE items (id bigint PRIMARY KEY, a int NOT NULL, c int);
	INSERT INTO items SELECT g, g, NULL FROM generate_series(1, 20000) g;
	CREATE INDEX items_c ON items (c);
	ANALYZE items;
	SELECT backfill_declare(name => 'fill', relation => 'items', predicate => 'c IS NULL',
		set => 'c = a * 2', batch_size => 1000, rate => 50, max_parallel => 2);
});

# ------------------------------------------------------------------
# (a) plausible results
# ------------------------------------------------------------------
# every table and sequence of the extension's schema, as text, in one checksum
my $catalogs_sql = q{
	DO $$
	DECLARE r record; acc text := ''; part text;
	BEGIN
	  FOR r IN SELECT c.oid::regclass AS rel, c.relkind FROM pg_class c
	            JOIN pg_namespace n ON n.oid = c.relnamespace
	           WHERE n.nspname = 'backfill' AND c.relkind IN ('r', 'S') ORDER BY c.relname
	  LOOP
	    IF r.relkind = 'S' THEN
	      EXECUTE format('SELECT last_value::text || is_called::text FROM %s', r.rel) INTO part;
	    ELSE
	      EXECUTE format('SELECT coalesce(md5(string_agg(t::text, %L ORDER BY t::text)), %L) FROM %s t',
	                     ',', 'empty', r.rel) INTO part;
	    END IF;
	    acc := acc || r.rel::text || '=' || part || ';';
	  END LOOP;
	  PERFORM set_config('rehearse.catalogs', md5(acc), false);
	END $$;
	SELECT current_setting('rehearse.catalogs');
};
my $table_sql = q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT (SELECT count(*) FROM items WHERE c IS NOT NULL);
	RESET enable_seqscan; RESET enable_bitmapscan;
	SELECT md5(string_agg(i::text, ',' ORDER BY i.id)) FROM items i;
};
my $table_before = sq($node, $table_sql);
my $catalogs_before = sq($node, $catalogs_sql);
like($table_before, qr/^0\n[0-9a-f]{32}$/, 'the table read through its index and in full');

# kept in a table of the caller's (public): the projection is read from the same rehearsal
sq($node, q{CREATE TABLE r1 AS SELECT * FROM backfill_rehearse('fill')});
my $out = sq($node, q{
	SELECT kind, batch, position, first_key, rows > 0, ms > 0, wal_bytes > 0,
	       shared_hit + shared_read > 0, 'public.items RowExclusiveLock' = ANY (locks),
	       key_scan_index, action_index, error IS NULL
	  FROM r1 WHERE kind = 'batch' ORDER BY batch});
my @rows = map { [ split /\|/ ] } split /\n/, $out;
is(scalar(@rows), 5, '(a) five batches by default');
is(join(',', map { $_->[2] } @rows), 'start,25%,middle,75%,end', '(a) start, 25%, middle, 75%, end')
  or diag($out);
is($rows[0][3], '1', '(a) the first batch starts at the first key');
my @firsts = map { $_->[3] } @rows;
ok($firsts[1] > 2000 && $firsts[2] > $firsts[1] + 2000 && $firsts[3] > $firsts[2] + 2000
	  && $firsts[4] > $firsts[3] + 2000 && $firsts[4] > 17000,
	'(a) the batches are spread over the key space: ' . join(' ', @firsts));
is(join(',', map { join '', @$_[4 .. 11] } @rows), join(',', ('tttttttt') x 5),
	'(a) each batch found rows, took time, wrote WAL, read buffers, held RowExclusiveLock on '
	  . 'the table, and its key scan and action read an index, without an error')
  or diag($out);

$out = sq($node, q{
	SELECT batch, rows BETWEEN 18000 AND 22000, ms > 0, wal_bytes > 0,
	       assumptions LIKE '%planner''s estimate%1000 rows a batch%'
	  FROM r1 WHERE kind = 'projection'});
like($out, qr/^(18|19|20|21|22)\|t\|t\|t\|t$/,
	'(a) the projection: about 20,000 rows in 20 batches, a duration, WAL and its assumptions')
  or diag($out);

# ------------------------------------------------------------------
# (b) nothing persists
# ------------------------------------------------------------------
is(sq($node, q{SELECT count(*) FROM backfill_rehearse('fill', 3) WHERE kind = 'batch'}), '3',
	'(b) another rehearsal, of three batches');
is(sq($node, $table_sql), $table_before,
	'(b) the table and its index on c are as before the rehearsals');
is(sq($node, $catalogs_sql), $catalogs_before,
	'(b) every catalog table and sequence of the extension is as before');
is(sq($node, q{SELECT count(*) FROM backfill.ledger}), '0', '(b) no ledger row');

# ------------------------------------------------------------------
# (c) as rita, restricted, not in the caller's session
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE ROLE rita LOGIN;
	GRANT CREATE ON SCHEMA public TO rita;
	CREATE TABLE secret (id int);
	SET ROLE rita;
	CREATE TABLE rtab (id bigint PRIMARY KEY, c int);
	INSERT INTO rtab SELECT g, NULL FROM generate_series(1, 100) g;
	CREATE FUNCTION look(lo bigint, hi bigint) RETURNS void LANGUAGE plpgsql AS $f$
	DECLARE found text := 'user=' || current_user; c refcursor := 'loot'; r record;
	BEGIN
	  BEGIN INSERT INTO public.secret VALUES (1); found := found || ' secret=written';
	  EXCEPTION WHEN OTHERS THEN found := found || ' secret=' || SQLSTATE; END;
	  BEGIN CREATE TEMP TABLE mine (x int); found := found || ' temp=created';
	  EXCEPTION WHEN OTHERS THEN found := found || ' temp=' || SQLSTATE; END;
	  found := found || ' caller_tmp=' || coalesce(to_regclass('caller_tmp')::text, 'absent');
	  BEGIN FETCH c INTO r; found := found || ' cursor=fetched';
	  EXCEPTION WHEN OTHERS THEN found := found || ' cursor=' || SQLSTATE; END;
	  UPDATE rtab SET c = 1 WHERE id BETWEEN lo AND hi;
	  RAISE EXCEPTION 'looked: %', found;
	END $f$;
	SELECT backfill_declare(name => 'look', relation => 'rtab', predicate => 'c IS NULL',
		action => 'SELECT look($1, $2)', batch_size => 10);
	RESET ROLE;
});
$out = sq($node, q{
	BEGIN;
	DECLARE loot CURSOR WITH HOLD FOR SELECT g FROM generate_series(1, 5) g;
	COMMIT;
	CREATE TEMP TABLE caller_tmp (x int);
	FETCH 1 FROM loot;
	SELECT position || ' ' || error FROM backfill_rehearse('look', 1) WHERE kind = 'batch';
	FETCH 1 FROM loot;
});
is($out, "1\nstart P0001: looked: user=rita secret=42501 temp=42501 caller_tmp=absent cursor=34000\n2",
	'(c) as rita, restricted (no temporary table), no write to the superuser\'s table, the '
	  . 'caller\'s temporary table and cursor out of reach; the cursor goes on where it was');
is(sq($node, q{SELECT count(*) FROM secret}) . sq($node, q{SELECT count(*) FROM rtab WHERE c IS NOT NULL}),
	'00', '(c) nothing written');

# ------------------------------------------------------------------
# (d) refusals and the CLI
# ------------------------------------------------------------------
my ($rc, $err);
($rc, $out, $err) = $node->psql('postgres', q{\set VERBOSITY verbose
	SELECT * FROM backfill_rehearse('fill', 0)});
like($err, qr/BF043: a rehearsal of backfill "fill" runs 1 to 100 batches, not 0/, '(d) 0 batches: BF043');
like($err, qr/HINT:  Pass batches => 5/, '(d) with a hint');
($rc, $out, $err) = $node->psql('postgres', q{\set VERBOSITY verbose
	SELECT * FROM backfill_rehearse('fill', 101)});
like($err, qr/BF043/, '(d) 101 batches: BF043');
($rc, $out, $err) = $node->psql('postgres', q{\set VERBOSITY verbose
	SELECT * FROM backfill_rehearse('nothing')});
like($err, qr/BF002: backfill "nothing" is not declared/, '(d) an unknown backfill: BF002');
$node->safe_psql('postgres', q{CREATE ROLE stranger LOGIN});
($rc, $out, $err) = $node->psql('postgres', q{\set VERBOSITY verbose
	SET ROLE stranger; SELECT * FROM backfill_rehearse('fill')});
like($err, qr/BF016|BF002/, '(d) a role that may not act for the owner is refused');

# the owner no longer a member of its run_as: refused as a lane's start would be
$node->safe_psql('postgres', q{
	CREATE ROLE lanes LOGIN;
	CREATE ROLE ann LOGIN IN ROLE lanes;
	GRANT SELECT, UPDATE ON items TO lanes;
	SET ROLE ann;
	SELECT backfill_declare(name => 'ann_fill', relation => 'items', predicate => 'c IS NULL',
		set => 'c = a * 2', run_as => 'lanes');
	RESET ROLE;
});
is(sq($node, q{SELECT count(*) FROM backfill_rehearse('ann_fill', 1) WHERE kind = 'batch' AND error IS NULL}),
	'1', '(d) ann\'s backfill rehearsed as role lanes');
$node->safe_psql('postgres', q{REVOKE lanes FROM ann});
($rc, $out, $err) = $node->psql('postgres', q{\set VERBOSITY verbose
	SELECT * FROM backfill_rehearse('ann_fill')});
like($err, qr/BF016: permission denied to run backfill "ann_fill" as role "lanes"/,
	'(d) once ann is no longer a member of lanes: BF016');

# a retired backfill: refused as its runs are (BF041)
$node->safe_psql('postgres', q{
	CREATE TABLE tiny (id int PRIMARY KEY, c int);
	INSERT INTO tiny SELECT g, NULL FROM generate_series(1, 10) g;
	SELECT backfill_declare(name => 'tiny', relation => 'tiny', predicate => 'c IS NULL',
		set => 'c = 1', rate => 100);
});
my $tiny_run = sq($node, q{SELECT backfill_run('tiny')});
is(wait_pass_end($node, $tiny_run, 60), 'completed', '(d) tiny completed');
sq($node, q{SELECT backfill_retire('tiny')});
($rc, $out, $err) = $node->psql('postgres', q{\set VERBOSITY verbose
	SELECT * FROM backfill_rehearse('tiny')});
like($err, qr/BF041/, '(d) a retired backfill: BF041');

my $cli = $ENV{PG_BACKFILL_CLI};
if (!defined $cli || $cli eq '')
{
	my $rel = "$FindBin::RealBin/../../cli/pg_backfill";
	$cli = -x $rel ? $rel : '/usr/lib/postgresql/15/bin/pg_backfill';
}
SKIP:
{
	skip 'no pg_backfill CLI built', 2 unless -x $cli;
	my ($stdout, $stderr) = ('', '');
	my $connstr = $node->connstr('postgres');
	IPC::Run::run([ $cli, '-d', $connstr, 'rehearse', 'fill' ], '>', \$stdout, '2>', \$stderr);
	like($stdout, qr/start.*\n(?:.*\n)*.*end/, '(d) the CLI prints the batches from start to end')
	  or diag("$stdout\n$stderr");
	like($stdout, qr/projection|projected/i, '(d) and the projection');
}

# ------------------------------------------------------------------
# (f) a partitioned table with a composite key
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE events (tenant_id int, id bigint, n int NOT NULL DEFAULT 0,
	                     PRIMARY KEY (tenant_id, id)) PARTITION BY RANGE (tenant_id);
	CREATE TABLE events_1 PARTITION OF events FOR VALUES FROM (1) TO (2);
	CREATE TABLE events_2 PARTITION OF events FOR VALUES FROM (2) TO (3);
	CREATE TABLE events_3 PARTITION OF events FOR VALUES FROM (3) TO (4);
	INSERT INTO events (tenant_id, id) SELECT t, i FROM generate_series(1, 3) t,
	       generate_series(1, 3000) i;
	ANALYZE events;
	SELECT backfill_declare(name => 'ev', relation => 'events', predicate => 'n = 0',
		set => 'n = 1', batch_size => 500);
});
my $ev_before = sq($node, q{SELECT count(*) FROM events WHERE n <> 0});
$out = sq($node, q{
	SELECT position, first_key, rows, error IS NULL,
	       (SELECT count(*) FROM unnest(locks) k WHERE k LIKE 'public.events_% RowExclusiveLock') > 0
	  FROM backfill_rehearse('ev', 3) WHERE kind = 'batch' ORDER BY batch});
like($out, qr/^start\|\(1,1\)\|500\|t\|t\nmiddle\|\(2,\d+\)\|500\|t\|t\nend\|\(3,\d+\)\|500\|t\|t$/,
	'(f) a composite key over leaves: start, middle, end, each 500 rows, a leaf written and locked')
  or diag($out);
is(sq($node, q{SELECT count(*) FROM events WHERE n <> 0}), $ev_before, '(f) and nothing stays');

# ------------------------------------------------------------------
# (e) no worker slot: BF038
# ------------------------------------------------------------------
$node->stop;
my $full = BackfillTest::node('rehearse_no_slot', extra_conf => "max_worker_processes = 3\n");
$full->safe_psql('postgres', q{
	CREATE EXTENSION pg_backfill;
	CREATE TABLE f (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
	SELECT backfill_declare(name => 'f', relation => 'f', predicate => 'n = 0',
		set => 'n = 1');
});
ok(poll_until($full, q{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type IN ('logical replication launcher', 'pg_backfill launcher',
		                       'pg_backfill scheduler')}, '3', 300),
	'(e) every background worker slot is taken (3 of 3)');
($rc, $out, $err) = $full->psql('postgres', q{\set VERBOSITY verbose
	SELECT * FROM backfill_rehearse('f')});
like($err, qr/BF038: no background worker slot is free to rehearse backfill "f"/, '(e) BF038');
like($err, qr/HINT:  .*max_worker_processes/, '(e) with a hint');
$full->stop;

done_testing();
