# 030_cli.pl
#
# The pg_backfill command-line client (cli/pg_backfill) against a real
# cluster:
#  (a) --help, usage and connection errors (exit 2);
#  (b) list and pending with a never-run declaration (pending exits 3),
#      run --wait of a small pass, then pending exits 0; run without
#      --force is skipped (same run id, NOTICE), with --force a new pass;
#  (c) run --wait with stdout a pipe: plain progress lines, no redraws,
#      a final 'completed' line, exit 0;
#  (d) run --wait under a pseudo-terminal: one line redrawn in place with
#      '\r' and ESC[K, ending with a newline, exit 0;
#  (e) a pass that stalls (BF006): exit 1, the error printed; pending exits 3;
#  (f) pause/resume/cancel/retry print changed/unchanged, status follows;
#  (g) server errors print message, SQLSTATE (exit 1); values are sent as
#      parameters; the libpq environment is used without -d;
#  (h) (within f, while the slow pass runs) top: one plain snapshot on a
#      pipe, --count/--interval snapshots, SIGINT ends it with 0, the
#      screen redrawn under a pty, usage errors; no running pass after
#      the cancel.
#
# The binary: $ENV{PG_BACKFILL_CLI}, else cli/pg_backfill of the repository
# this file is in, else the installed /usr/lib/postgresql/15/bin/pg_backfill.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $cli = $ENV{PG_BACKFILL_CLI};
if (!defined $cli || $cli eq '')
{
	my $rel = "$FindBin::RealBin/../../cli/pg_backfill";
	$cli = -x $rel ? $rel : '/usr/lib/postgresql/15/bin/pg_backfill';
}
die "pg_backfill CLI not found at $cli (build it with make -C cli, or set PG_BACKFILL_CLI)"
  unless -x $cli;
note "CLI: $cli";

my $node = BackfillTest::node('cli');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_backfill');

my $connstr = $node->connstr('postgres');

# Run the CLI with stdout and stderr captured (stdout a pipe).
# Returns (exit status, stdout, stderr).
sub cli
{
	my @args = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $cli, '-d', $connstr, @args ],
		'<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $out, $err);
}

# Run the CLI with stdout on a pseudo-terminal: IO::Pty through IPC::Run
# when it is installed, else util-linux script(1) (PG_BACKFILL_TEST_SCRIPT_PTY=1
# forces script(1)).  Returns (exit, output).
sub cli_tty
{
	my @args = @_;
	my $out = '';
	if (!$ENV{PG_BACKFILL_TEST_SCRIPT_PTY} && eval { require IO::Pty; 1 })
	{
		my $in = '';
		my $err = '';
		IPC::Run::run([ $cli, '-d', $connstr, @args ],
			'<pty<', \$in, '>pty>', \$out, '2>', \$err,
			IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
		note "tty via IO::Pty; stderr: $err";
		return ($? >> 8, $out);
	}
	my $cmd = join ' ', map { "'" . s/'/'\\''/gr . "'" } ($cli, '-d', $connstr, @args);
	IPC::Run::run([ 'script', '-qfec', $cmd, '/dev/null' ],
		'<', \undef, '>', \$out,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	note 'tty via script(1)';
	return ($? >> 8, $out);
}

my ($rc, $out, $err);

# ------------------------------------------------------------------
# (a) help, usage and connection errors
# ------------------------------------------------------------------
($rc, $out, $err) = cli('--help');
is($rc, 0, '--help exits 0');
like($out, qr/^Usage:/m, '--help prints usage');

($rc, $out, $err) = cli();
is($rc, 2, 'no command: exit 2');
like($err, qr/no command given/, 'no command: message');

($rc, $out, $err) = cli('frobnicate', 'x');
is($rc, 2, 'unknown command: exit 2');

($rc, $out, $err) = cli('status');
is($rc, 2, 'status without a name: exit 2');

($rc, $out, $err) = cli('list', '--wait');
is($rc, 2, '--wait outside run: exit 2');

{
	my ($o, $e) = ('', '');
	IPC::Run::run([ $cli, '-d', 'host=/nonexistent port=1 dbname=postgres', 'list' ],
		'<', \undef, '>', \$o, '2>', \$e);
	is($? >> 8, 2, 'connection failure: exit 2');
	like($e, qr/could not connect/, 'connection failure: message');
}

# ------------------------------------------------------------------
# (b) list, pending, a small run
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE small (id int PRIMARY KEY, a int, c int);
	INSERT INTO small SELECT i, i FROM generate_series(1, 100) i;
	SELECT backfill_declare(name => 'small', relation => 'small', predicate => 'c IS NULL',
		action => 'UPDATE small SET c = a * 2 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 50, rate => 100);
});

($rc, $out, $err) = cli('list');
is($rc, 0, 'list exits 0');
like($out, qr/^NAME\s+STATE\s+LAST RUN\s+RESULT\s+AT\s+ROWS$/m, 'list: header');
like($out, qr/^small\s+pending\s+-\s+-\s+-\s+-$/m, 'list: never-run declaration');

($rc, $out, $err) = cli('pending');
is($rc, 3, 'pending exits 3 with a never-run declaration');
like($out, qr/^small\s+pending\s/m, 'pending: the declaration is pending');
like($err, qr/not done: small \(pending\)/, 'pending: says what is not done');

($rc, $out, $err) = cli('run', 'small', '--wait');
is($rc, 0, 'run small --wait exits 0');
my ($small_run) = $out =~ /\A(\d+)\n/;
ok(defined $small_run, 'run prints the run id first');
like($out, qr/^completed: run $small_run, 100 rows/m, 'run --wait: completed line');
is($node->safe_psql('postgres', 'SELECT count(*) FROM small WHERE c IS NULL'),
	'0', 'small: every row filled');

($rc, $out, $err) = cli('pending');
is($rc, 0, 'pending exits 0 when everything completed');
like($out, qr/^small\s+completed\s+no\s+$small_run\s+$small_run\s+100\s/m,
	'pending: completed row');

($rc, $out, $err) = cli('list');
like($out, qr/^small\s+completed\s+$small_run\s+completed\s+\S+ \S+\s+100$/m,
	'list: last run and rows');

($rc, $out, $err) = cli('status', 'small');
is($rc, 0, 'status exits 0');
like($out, qr/^status:\s+completed$/m, 'status: completed');
like($out, qr/^run_id:\s+$small_run$/m, 'status: run id');
like($out, qr/^rows:\s+100$/m, 'status: rows');
like($out, qr/^progress:\s+100\.0%$/m, 'status: progress');
like($out, qr/^paused:\s+false$/m, 'status: paused');

($rc, $out, $err) = cli('run', 'small');
is($rc, 0, 'run of a completed backfill exits 0');
is($out, "$small_run\n", 'run without --force: the completed run id');
like($err, qr/NOTICE:.*skipped/, 'run without --force: the NOTICE on stderr');

($rc, $out, $err) = cli('run', 'small', '--force');
is($rc, 0, 'run --force exits 0');
like($out, qr/\A(\d+)\n\z/, 'run --force prints a run id');
cmp_ok($out + 0, '>', $small_run, 'run --force: a new pass');
ok(poll_until($node, "SELECT status FROM backfill_status('small')", 'completed', 180),
	'the forced pass completes');

# ------------------------------------------------------------------
# (c) run --wait, plain (stdout is a pipe)
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	-- 40 batches at 5 a second: each pass runs for at least 8 s, long
	-- enough for several progress lines (one every 2 s) and redraws
	CREATE TABLE t_plain (id int PRIMARY KEY, a int, c int);
	INSERT INTO t_plain SELECT i, i FROM generate_series(1, 20000) i;
	ANALYZE t_plain;
	SELECT backfill_declare(name => 'plain', relation => 't_plain', predicate => 'c IS NULL',
		action => 'UPDATE t_plain SET c = a WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 500, rate => 5);
	CREATE TABLE t_tty (id int PRIMARY KEY, a int, c int);
	INSERT INTO t_tty SELECT i, i FROM generate_series(1, 20000) i;
	ANALYZE t_tty;
	SELECT backfill_declare(name => 'tty', relation => 't_tty', predicate => 'c IS NULL',
		action => 'UPDATE t_tty SET c = a WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 500, rate => 5);
});

($rc, $out, $err) = cli('run', 'plain', '--wait');
note "plain output:\n$out";
is($rc, 0, 'run plain --wait exits 0');
my @lines = split /\n/, $out;
like($lines[0], qr/^\d+$/, 'plain: the run id first');
my @progress = grep { /^\[[#-]{24}\] .* rows\/s / } @lines;
cmp_ok(scalar(@progress), '>=', 3, 'plain: several progress lines');
ok((grep { /lanes 1/ } @progress), 'plain: a progress line shows a live lane');
ok((grep { /ETA \d/ } @progress), 'plain: a progress line shows an ETA');
like($lines[-1], qr/^completed: run \d+, 20,000 rows in /, 'plain: final completed line');
unlike($out, qr/\r|\e/, 'plain: no carriage returns or escapes');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t_plain WHERE c IS NULL'),
	'0', 'plain: every row filled');

# ------------------------------------------------------------------
# (d) run --wait under a pseudo-terminal
# ------------------------------------------------------------------
($rc, $out) = cli_tty('run', 'tty', '--wait');
(my $shown = $out) =~ s/\e/<ESC>/g;
$shown =~ s/\r(?!\n)/<CR>/g;
note "tty output:\n$shown";
is($rc, 0, 'run tty --wait under a pty exits 0');
my $redraws = () = $out =~ /\r(?!\n)/g;
cmp_ok($redraws, '>=', 3, "tty: several in-place redraws ($redraws)");
like($out, qr/\e\[K/, 'tty: clears to end of line');
like($out, qr/\r\[[#-]{24}\] [^\r\n]*rows\/s/, 'tty: the bar is redrawn after \\r');
like($out, qr/completed: run \d+, 20,000 rows in [^\n]*\n\z/,
	'tty: ends with the completed line and a newline');
# the pty turns \n into \r\n; no progress line ends with a bare newline
my $plain_lines = () = $out =~ /rows\/s  ETA[^\r\n]*\r?\n/g;
is($plain_lines, 0, 'tty: progress is not printed line by line');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t_tty WHERE c IS NULL'),
	'0', 'tty: every row filled');

# ------------------------------------------------------------------
# (e) a stalled pass
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE t_stall (id int PRIMARY KEY, c int);
	INSERT INTO t_stall SELECT i FROM generate_series(1, 2000) i;
	SELECT backfill_declare(name => 'stall', relation => 't_stall', predicate => 'c IS NULL',
		action => 'UPDATE t_stall SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL AND id % 2 = 0',
		batch_size => 500, rate => 50);
});
($rc, $out, $err) = cli('run', 'stall', '--wait');
note "stall output:\n$out\nstderr:\n$err";
is($rc, 1, 'run stall --wait exits 1');
like($out . $err, qr/BF006/, 'stall: BF006 printed');
like($out, qr/^stalled: run \d+/m, 'stall: final stalled line');
like($err, qr/last error: BF006: .*1000 rows/, 'stall: last_error on stderr');

($rc, $out, $err) = cli('pending');
is($rc, 3, 'pending exits 3 with a stalled backfill');
like($out, qr/^stall\s+stalled\s/m, 'pending: stalled');

($rc, $out, $err) = cli('retry', 'stall');
is($rc, 0, 'retry of a stalled pass exits 0');
is($out, "changed\n", 'retry of a failed pass: changed');
ok(poll_until($node, q{SELECT state FROM backfill_pending() WHERE name = 'stall'}, 'stalled', 180),
	'the retried pass stalls again');

# ------------------------------------------------------------------
# (f) pause / resume / cancel / retry
# ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE t_steer (id int PRIMARY KEY, c int);
	INSERT INTO t_steer SELECT i FROM generate_series(1, 20000) i;
	SELECT backfill_declare(name => 'steer', relation => 't_steer', predicate => 'c IS NULL',
		action => 'UPDATE t_steer SET c = 1 WHERE id BETWEEN $1 AND $2 AND c IS NULL',
		batch_size => 100, rate => 0.5);
});
# 200 batches at one every 2 s: the pass runs for minutes, so pause, resume
# and cancel certainly find it running
($rc, $out, $err) = cli('run', 'steer');
is($rc, 0, 'run steer exits 0');
like($out, qr/\A\d+\n\z/, 'run steer prints only the run id');
ok(poll_until($node, q{SELECT rows > 0 FROM backfill_status('steer')}, 't', 180),
	'steer makes progress');

# (h) top: the running pass, as plain lines on a pipe, redrawn on a terminal
($rc, $out, $err) = cli('top');
is($rc, 0, 'top on a pipe exits 0');
my @top = split /\n/, $out;
like($top[0], qr/^pg_backfill top  \S+ \S+  1 running pass$/, 'top: a heading with the count');
like($top[1], qr/^NAME\s+RUN\s+PROGRESS\s+ROWS\s+ROWS\/S\s+ETA\s+LANES\s+THROTTLE$/,
	'top: the column names');
like($top[2], qr/^steer\s+\d+\s+\[[#-]{24}\]\s+\d+\.\d%\s+[\d,]+\s+[\d,]+\s+\S+\s+[01]\b/,
	'top: the pass with its bar, percent, rows, rows/s, ETA and lanes');
is(scalar(@top), 3, 'top on a pipe: one snapshot');
unlike($out, qr/\e/, 'top on a pipe: no escapes');

($rc, $out, $err) = cli('top', '--count', '2', '--interval', '0.2');
is($rc, 0, 'top --count 2 exits 0');
is(scalar(() = $out =~ /^pg_backfill top /mg), 2, 'top --count 2: two snapshots');

{
	# --interval alone: one snapshot per interval until SIGINT, then exit 0
	my ($o, $e) = ('', '');
	my $h = IPC::Run::start([ $cli, '-d', $connstr, 'top', '--interval', '0.2' ],
		'<', \undef, '>', \$o, '2>', \$e,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	$h->pump until (() = $o =~ /^pg_backfill top /mg) >= 2;
	$h->signal('INT');
	$h->finish;
	is($h->result(0), 0, 'top --interval: SIGINT ends it with status 0');
	like($o, qr/^steer\s+\d+\s+\[/m, 'top --interval: the pass in each snapshot');
}

($rc, $out) = cli_tty('top', '--count', '2', '--interval', '0.2');
is($rc, 0, 'top under a pty exits 0');
is(scalar(() = $out =~ /\e\[H\e\[2J/g), 2, 'top under a pty: the screen redrawn per snapshot');
like($out, qr/\(Ctrl-C quits\)/, 'top under a pty: says how to quit');
like($out, qr/^steer\s+\d+\s+\[[#-]{24}\]/m, 'top under a pty: the pass');

($rc, $out, $err) = cli('top', '--count', '0');
is($rc, 2, 'top --count 0: a usage error');
($rc, $out, $err) = cli('list', '--interval', '1');
is($rc, 2, '--interval with another command: a usage error');

($rc, $out, $err) = cli('pause', 'steer');
is("$rc $out", "0 changed\n", 'pause: changed');
($rc, $out, $err) = cli('pause', 'steer');
is("$rc $out", "0 unchanged\n", 'pause again: unchanged');
($rc, $out, $err) = cli('status', 'steer');
like($out, qr/^paused:\s+true$/m, 'status: paused');
like($out, qr/^status:\s+running$/m, 'status: still running');

($rc, $out, $err) = cli('resume', 'steer');
is("$rc $out", "0 changed\n", 'resume: changed');
($rc, $out, $err) = cli('resume', 'steer');
is("$rc $out", "0 unchanged\n", 'resume again: unchanged');
($rc, $out, $err) = cli('status', 'steer');
like($out, qr/^paused:\s+false$/m, 'status: not paused');

($rc, $out, $err) = cli('cancel', 'steer');
is("$rc $out", "0 changed\n", 'cancel: changed');
($rc, $out, $err) = cli('cancel', 'steer');
is("$rc $out", "0 unchanged\n", 'cancel again: unchanged');
like($err, qr/NOTICE:/, 'cancel again: the NOTICE on stderr');
($rc, $out, $err) = cli('status', 'steer');
like($out, qr/^status:\s+cancelled$/m, 'status: cancelled');
like($out, qr/^last_error:\s+BF010: /m, 'status: last_error BF010');

($rc, $out, $err) = cli('retry', 'steer');
is("$rc $out", "0 unchanged\n", 'retry of a cancelled pass: unchanged');

($rc, $out, $err) = cli('top');
is("$rc $out", "0 " . ($out =~ /\A(pg_backfill top  \S+ \S+  )/)[0] . "0 running passes\n",
	'top with no running pass: the heading only');

($rc, $out, $err) = cli('pending');
is($rc, 3, 'pending exits 3 with a cancelled backfill');
like($out, qr/^steer\s+failed\s/m, 'pending: cancelled shows as failed');

# ------------------------------------------------------------------
# (g) server errors, parameters, the libpq environment
# ------------------------------------------------------------------
($rc, $out, $err) = cli('pause', 'nosuch');
is($rc, 1, 'pause of an unknown backfill exits 1');
like($err, qr/ERROR:  .*nosuch/, 'unknown backfill: the message');
like($err, qr/^SQLSTATE: BF002$/m, 'unknown backfill: the SQLSTATE');

($rc, $out, $err) = cli('status', 'nosuch');
is($rc, 1, 'status of an unknown backfill exits 1');

($rc, $out, $err) = cli('run', 'small', '--input', '{not json');
is($rc, 1, 'run with malformed --input exits 1');
like($err, qr/^SQLSTATE: 22P02$/m, 'malformed input: the SQLSTATE');

($rc, $out, $err) = cli('run', 'small', '--force', '--input', '{"tenant_id": 1}');
is($rc, 1, 'run of an unscoped backfill with --input exits 1');
like($err, qr/^SQLSTATE: BF0(01|11)$/m, 'input for an unscoped backfill: BF001/BF011');

($rc, $out, $err) = cli('run', q{small'); DROP TABLE small; --});
is($rc, 1, 'a name with quotes is a value, not SQL');
is($node->safe_psql('postgres', q{SELECT to_regclass('small') IS NOT NULL}),
	't', 'table small still exists');

{
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	local $ENV{PGDATABASE} = 'postgres';
	my ($o, $e) = ('', '');
	IPC::Run::run([ $cli, 'list' ], '<', \undef, '>', \$o, '2>', \$e,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	is($? >> 8, 0, 'list from the libpq environment exits 0');
	like($o, qr/^small\s+completed\s/m, 'list from the libpq environment');
}

$node->stop;
done_testing();
