# 140_pg_upgrade.pl -- pg_upgrade of a cluster with pg_backfill installed
# (issue 16): a completed pass, a pages source with a count function (its
# functions' oids change: the declaration names them) and a pass paused
# half way go through pg_upgrade to a newer PostgreSQL; there the ledger is
# what it was, the pages source's checksum and functions resolve, and the
# paused pass resumes and completes with every row done exactly once.
#
# The new server is the newest installation newer than the one under test
# that has pg_upgrade and pg_backfill (PG_UPGRADE_NEW names one installation
# directory instead); the test installs nothing.  With none, it SKIPs (as in
# CI, which has 15 only), and so it does, in one line, when that
# installation's pg_backfill is not this tree's (another default_version in
# its control file, or install scripts that differ from the tree's): a stale
# install elsewhere on the machine never fails the suite.
#
# "Paused half way" is made, not hoped for: a session holds the row lock of
# row 31, the lane's batch waits on it, the pass is paused, and only then
# is the row let go: the lane ends that batch and stops after 40 rows.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use PostgreSQL::Test::Utils;
use Test::More;

sub pg_config_of
{
	my ($bindir, $opt) = @_;
	my $out = `"$bindir/pg_config" $opt 2>/dev/null`;
	chomp $out;
	return $out;
}

sub major_of
{
	my ($bindir) = @_;
	return (pg_config_of($bindir, '--version') =~ /PostgreSQL (\d+)/)[0] // 0;
}

# the default_version a control file names, or '' when it cannot be read
sub control_version
{
	my ($control) = @_;
	open my $fh, '<', $control or return '';
	my ($v) = map { /^\s*default_version\s*=\s*'([^']*)'/ ? $1 : () } <$fh>;
	return $v // '';
}

# pg_backfill's default_version in an installation, or '' when absent
sub backfill_version
{
	my ($bindir) = @_;
	my $control = pg_config_of($bindir, '--sharedir') . '/extension/pg_backfill.control';
	my $lib = pg_config_of($bindir, '--pkglibdir') . '/pg_backfill.so';
	return '' unless -f $control && -f $lib;
	return control_version($control);
}

# the first of this tree's install scripts that an installation lacks or
# has otherwise, or undef when it has them all as they are here
sub script_differing
{
	my ($bindir, $tree) = @_;
	my $extdir = pg_config_of($bindir, '--sharedir') . '/extension';
	for my $script (sort glob("$tree/pg_backfill--*.sql"))
	{
		my $name = (split m{/}, $script)[-1];
		return $name
		  unless -f "$extdir/$name" && slurp_file("$extdir/$name") eq slurp_file($script);
	}
	return undef;
}

my $tree = "$FindBin::RealBin/../..";
my $version = control_version("$tree/pg_backfill.control");
my $old_bindir = `pg_config --bindir`;
chomp $old_bindir;
my $old_major = major_of($old_bindir);

my @candidates = defined $ENV{PG_UPGRADE_NEW}
  ? ($ENV{PG_UPGRADE_NEW})
  : (glob('/usr/lib/postgresql/*'), glob('/opt/pg/*'), glob('/usr/local/pgsql*'));
my ($new_root, $new_major) = (undef, 0);
for my $root (@candidates)
{
	next unless -x "$root/bin/pg_upgrade" && -x "$root/bin/pg_config";
	my $major = major_of("$root/bin");
	next unless $major > $old_major && $major > $new_major;
	next if backfill_version("$root/bin") eq '';
	($new_root, $new_major) = ($root, $major);
}
if (!defined $new_root)
{
	plan skip_all => "SKIP: no PostgreSQL newer than $old_major with pg_upgrade and "
	  . "pg_backfill installed (set PG_UPGRADE_NEW to an installation directory)";
}
my $new_version = backfill_version("$new_root/bin");
my $differing = script_differing("$new_root/bin", $tree);
if ($new_version ne $version || defined $differing)
{
	plan skip_all => "SKIP: the pg_backfill installed in $new_root is not this tree's ("
	  . ($new_version ne $version
		? "version $new_version, the tree's is $version"
		: "its $differing differs from the tree's")
	  . "); install this tree there with make PG_CONFIG=$new_root/bin/pg_config install";
}
note("pg_upgrade from PostgreSQL $old_major ($old_bindir) to $new_major ($new_root)");

my $rows = 300;
my $old = BackfillTest::node('upgrade_old');
sq($old, qq{
	CREATE ROLE app LOGIN;
	CREATE TABLE items (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO items (id) SELECT g FROM generate_series(1, $rows) g;
	CREATE TABLE done_items (id int PRIMARY KEY, c int);
	INSERT INTO done_items (id) SELECT g FROM generate_series(1, 50) g;
	CREATE TABLE src (id int PRIMARY KEY, v text);
	INSERT INTO src SELECT g, 'v' || g FROM generate_series(1, 25) g;
	CREATE TABLE dst (id int PRIMARY KEY, v text);
	GRANT SELECT, UPDATE ON items, done_items TO app;
	GRANT SELECT ON src TO app;
	GRANT SELECT, INSERT ON dst TO app;
	CREATE FUNCTION src_page(cursor text, input jsonb) RETURNS jsonb
	LANGUAGE sql STABLE AS \$\$
	    SELECT jsonb_build_object(
	             'rows', coalesce(jsonb_agg(to_jsonb(s) ORDER BY s.id), '[]'::jsonb),
	             'next', CASE WHEN count(*) = 0 THEN NULL ELSE max(s.id)::text END)
	      FROM (SELECT id, v FROM public.src WHERE id > coalesce(cursor::int, 0)
	             ORDER BY id LIMIT 10) s
	\$\$;
	CREATE FUNCTION src_left(input jsonb) RETURNS bigint
	LANGUAGE sql STABLE AS \$\$
	    SELECT count(*) FROM public.src s
	     WHERE NOT EXISTS (SELECT 1 FROM public.dst d WHERE d.id = s.id)
	\$\$;
	CREATE EXTENSION pg_backfill;
});
sq($old, q{
	SET ROLE app;
	SELECT backfill_declare(name => 'done', relation => 'done_items', predicate => 'c IS NULL',
	    action => 'UPDATE done_items SET c = id WHERE id BETWEEN $1 AND $2 AND c IS NULL',
	    rate => 100);
	SELECT backfill_declare(name => 'pages', pages => 'src_page', count_function => 'src_left',
	    action => 'INSERT INTO dst SELECT * FROM jsonb_populate_recordset(NULL::dst, $1)'
	              ' ON CONFLICT (id) DO NOTHING',
	    rate => 100);
	SELECT backfill_declare(name => 'half', relation => 'items', predicate => 'n = 0',
	    action => 'UPDATE items SET n = n + 1 WHERE id BETWEEN $1 AND $2',
	    batch_size => 10, rate => 10, lock_timeout => '1 hour', batch_timeout => '1 hour', guard => false);
});
my $done_run = sq($old, q{SET ROLE app; SELECT backfill_run('done')});
is(wait_pass_end($old, $done_run, 300), 'completed', 'before: a pass completes');
my $pages_run = sq($old, q{SET ROLE app; SELECT backfill_run('pages')});
is(wait_pass_end($old, $pages_run, 300), 'completed', 'before: the pages pass completes');

my $holder = $old->background_psql('postgres');
$holder->set_query_timer_restart();
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
$holder->query_safe('BEGIN; SELECT 1 FROM items WHERE id = 31 FOR UPDATE;');
my $half_run = sq($old, q{SET ROLE app; SELECT backfill_run('half')});
ok( poll_until($old,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'
		   AND $holder_pid = ANY (pg_blocking_pids(pid))", '1', 180),
	'before: the third pass\'s batch waits on a held row');
is(sq($old, q{SELECT rows FROM backfill_status('half')}), '30',
	'before: the third pass has done some batches');
is(sq($old, q{SET ROLE app; SELECT backfill_pause('half')}), 't', 'before: it is paused');
$holder->query_safe('COMMIT');
$holder->quit;
ok( poll_until($old,
		q{SELECT partitions_running = 0 AND live_leases = 0
		         AND (SELECT count(*) FROM pg_stat_activity
		               WHERE backend_type = 'pg_backfill lane') = 0
		    FROM backfill_status('half')}, 't', 180),
	'before: its lanes left');
my $done_before = sq($old, q{SELECT count(*) FROM items WHERE n = 1});
cmp_ok($done_before, '<', $rows, 'before: paused half way');
cmp_ok($done_before, '>', 0, 'before: some rows done');

my $ledger_sql = q{SELECT run_id, ledger_name, status, rows, batches, checksum, forced,
	started_at, finished_at, owner::text FROM backfill.ledger ORDER BY run_id};
my $decl_sql = q{SELECT name, checksum, relation, pages_fn, count_fn FROM backfill.declaration
	ORDER BY name};
my $ledger_before = sq($old, $ledger_sql);
my $decl_before = sq($old, $decl_sql);
my $partitions_before = sq($old,
	qq{SELECT part_no, lo, hi, cursor, rows, batches, state FROM backfill.partition
	    WHERE run_id = $half_run ORDER BY 1});
my $pages_fn_before = sq($old, q{SELECT 'src_page(text,jsonb)'::regprocedure::oid});

# Some PostgreSQL 15 builds (Debian's 15.20-0+deb12u1) stamp every column
# with an option "pg_attver" that no other server knows: pg_dump writes it,
# and pg_upgrade's restore into any upstream server fails on the first
# table, whatever extension it belongs to.  Nothing of pg_backfill's: the
# stamp is taken off user columns before the upgrade.
my $stamp = q{a.attrelid >= 16384 AND a.attoptions::text LIKE '%pg_attver=%'};
if (sq($old, "SELECT count(*) FROM pg_attribute a WHERE $stamp") > 0)
{
	note('this PostgreSQL stamps columns with option pg_attver: taken off user columns');
	sq($old, qq{UPDATE pg_attribute a
	    SET attoptions = NULLIF(ARRAY(SELECT o FROM unnest(a.attoptions) o
	                                   WHERE o NOT LIKE 'pg_attver=%'), '{}')
	  WHERE $stamp});
}
# pg_upgrade wants the same data checksums setting; initdb turns them on by
# default from 18 on
my $checksums = sq($old, 'SHOW data_checksums');
$old->stop;

my $new = BackfillTest::node('upgrade_new', install_path => $new_root, start => 0,
	init => { extra => [ $checksums eq 'on' ? '--data-checksums' : ($new_major >= 18 ? '--no-data-checksums' : ()) ] });
my $workdir = PostgreSQL::Test::Utils::tempdir();
chdir $workdir;
$new->command_ok(
	[
		'pg_upgrade', '--no-sync',
		'-d', $old->data_dir, '-D', $new->data_dir,
		'-b', $old_bindir, '-B', "$new_root/bin",
		'-s', $new->host, '-p', $old->port, '-P', $new->port
	],
	"pg_upgrade from $old_major to $new_major");
$new->start;

is(sq($new, q{SELECT extversion FROM pg_extension WHERE extname = 'pg_backfill'}),
	$version, "after: pg_backfill $version in the upgraded cluster");
is(sq($new, $ledger_sql), $ledger_before, 'after: the ledger is as it was, row for row');
is(sq($new, $decl_sql), $decl_before,
	'after: the declarations and their checksums are as they were');
is( sq($new, qq{SELECT part_no, lo, hi, cursor, rows, batches, state FROM backfill.partition
	    WHERE run_id = $half_run ORDER BY 1}),
	$partitions_before, 'after: the paused pass\'s checkpoints are as they were');
isnt(sq($new, q{SELECT 'src_page(text,jsonb)'::regprocedure::oid}), $pages_fn_before,
	'after: the pages function has another oid');
is(sq($new, q{SELECT count(*) FROM items WHERE n = 1}), $done_before,
	'after: the rows done before the upgrade');
is(sq($new, q{SELECT paused, status FROM backfill_status('half')}), 't|running',
	'after: the pass is still paused and running');

is(sq($new, q{SET ROLE app; SELECT backfill_resume('half')}), 't', 'after: resumed');
is(wait_pass_end($new, $half_run, 300), 'completed', 'after: the resumed pass completes');
each_row_done_once($new, 'items', $rows, $half_run);

# the pages source calls its functions by name: a forced pass works on the new oids
sq($new, q{DELETE FROM dst WHERE id > 20});
my $pages_again = sq($new, q{SET ROLE app; SELECT backfill_run('pages', force => true)});
is(wait_pass_end($new, $pages_again, 300), 'completed',
	'after: a forced pass of the pages source completes');
is(sq($new, q{SELECT count(*) FROM dst}), '25', 'after: the pages source copied every row');
cmp_ok($pages_again, '>', $half_run, 'after: run ids go on');
is(sq($new, q{SELECT count(*) FROM backfill.ledger WHERE status = 'completed'}), '4',
	'after: four completed passes in the ledger');

$new->stop;
done_testing();
