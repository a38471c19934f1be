# 098_structure.pl -- the shape of the C code, as src/README.md draws it:
#   every source file opens with a comment naming it and saying its job;
#   the project headers a file includes are its dependencies, and the
#   modules (a .c with the .h beside it) form no cycle; a dependency between
#   layers (the folders of src/) points down the order below; a header
#   declares only what the file beside it defines; no .c file is over 900
#   lines and no function over 80; no C file outside src/state/ writes
#   (INSERT, UPDATE, DELETE) backfill.ledger, backfill.run or
#   backfill.partition, the state module being their only writer (issue 25);
#   and src/README.md's module map lists exactly the files there are.
#   Needs no server.
use strict;
use warnings;

use File::Basename qw(basename dirname);
use File::Find;
use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/../..";

# the layers, top first: a file may include headers of its own layer's
# modules (no cycle) and of layers below it.  src/pg_backfill.c, the module's
# entry point, sits above all of them; the rest of src/ itself is the base.
my %rank = (
	'src/pg_backfill.c' => 9,
	'src/sql'      => 6,
	'src/workers'  => 5,
	'src/outbox'   => 4,
	'src/engine'   => 3,
	'src/trust'    => 2,
	'src/state'    => 1.5,
	'src/catalogs' => 1,
	'src'          => 0,
	'cli'          => 0);

sub slurp
{
	my ($path) = @_;
	open my $fh, '<', "$root/$path" or die "cannot read $path: $!";
	local $/;
	return <$fh>;
}

my @files;
find(
	{
		no_chdir => 1,
		wanted   => sub {
			return unless /\.[ch]$/;
			(my $rel = $File::Find::name) =~ s{^\Q$root\E/}{};
			push @files, $rel;
		}
	},
	"$root/src", "$root/cli");
@files = sort @files;
ok(@files > 20, scalar(@files) . ' C files under src/ and cli/');

sub module { my ($f) = @_; $f =~ s/\.[ch]$//; return $f; }

sub layer_rank
{
	my ($f) = @_;
	return $rank{$f} if exists $rank{$f};
	my $dir = dirname($f);
	return $rank{$dir} if exists $rank{$dir};
	return undef;
}

# ---- every file names itself and says its job
for my $f (@files)
{
	my $text = slurp($f);
	my $base = basename($f);
	like($text, qr{\A/\*-*\n(?: \*\n)? \* \Q$base\E(?::\s+\S|\n \*\s+\S)}, "$f opens with a comment naming it and its job");
	ok(defined layer_rank($f), "$f is in a layer of the order");
}

# ---- the include graph between modules
my %header;
for my $f (grep { /\.h$/ } @files)
{
	my $base = basename($f);
	# a name used twice would make includes by basename ambiguous
	ok(!exists $header{$base}, "header $base is unique") if exists $header{$base};
	$header{$base} = $f;
}
my %deps;
for my $f (@files)
{
	my $m = module($f);
	for my $inc (slurp($f) =~ /^#include "([^"]+)"/mg)
	{
		my $h = $header{$inc} or next;
		my $to = module($h);
		next if $to eq $m;
		# cli/ and src/ are separate programs
		next if (dirname($f) eq 'cli') != (dirname($h) eq 'cli');
		$deps{$m}{$to} = "$f includes $inc";
	}
}

my (%state, @cycles, @stack);
sub visit
{
	my ($m) = @_;
	$state{$m} = 1;
	push @stack, $m;
	for my $to (sort keys %{ $deps{$m} // {} })
	{
		if (($state{$to} // 0) == 1)
		{
			my @at = @stack;
			shift @at while $at[0] ne $to;
			push @cycles, join(' -> ', @at, $to);
		}
		visit($to) unless $state{$to};
	}
	pop @stack;
	$state{$m} = 2;
}
visit($_) for sort map { module($_) } @files;
is(scalar(@cycles), 0, 'no cycle between modules')
  or diag(join("\n", map { "cycle: $_" } @cycles));

my @upward;
for my $m (sort keys %deps)
{
	for my $to (sort keys %{ $deps{$m} })
	{
		my ($from_file) = $deps{$m}{$to} =~ /^(\S+)/;
		my ($rf, $rt) = (layer_rank($from_file), layer_rank("$to.h"));
		next unless defined $rf && defined $rt;
		next if dirname($from_file) eq dirname("$to.h");
		push @upward, "$deps{$m}{$to} (layer $rf -> $rt)" if $rt >= $rf;
	}
}
is(scalar(@upward), 0, 'every dependency between layers points down')
  or diag(join("\n", @upward));

# ---- a header declares what the file beside it defines
for my $h (grep { /\.h$/ } @files)
{
	my $c = module($h) . '.c';
	next unless -f "$root/$c";
	my $body = slurp($c);
	my $text = slurp($h);
	my @protos = $text =~ /^extern\s+[^;(]*?\b(\w+)\s*\(/mg;
	my @vars = $text =~ /^extern\s+(?:PGDLLIMPORT\s+)?[\w\s\*]+?\b(\w+)(?:\[\w*\])?\s*;/mg;
	push @protos, $text =~ /^PGDLLEXPORT\s+\w+\s+(\w+)\s*\(/mg;
	my @missing = grep { $body !~ /^(?:\w[\w\s\*]*\n)?\Q$_\E\s*\(/m } @protos;
	push @missing, grep { $body !~ /^[\w\s\*]*\b\Q$_\E\b(?:\[\w*\])?\s*(?:=|;)/m } @vars;
	is(join(', ', @missing), '', "$h declares only what $c defines");
}

# ---- file and function length (issue 25): a file does one job, a
# function one step; a longer one is split, not excused
my $max_file_lines     = 900;
my $max_function_lines = 80;
my (@long_files, @long_functions);
for my $c (grep { /\.c$/ } @files)
{
	my @lines = split /\n/, slurp($c), -1;
	pop @lines if @lines && $lines[-1] eq '';
	push @long_files, "$c is " . scalar(@lines) . ' lines'
	  if @lines > $max_file_lines;
	for my $i (0 .. $#lines)
	{
		next unless $lines[$i] eq '{';
		# a struct's, union's or enum's body is no function
		next if $i > 0 && $lines[ $i - 1 ] =~ /^(?:typedef\s+)?(?:struct|union|enum)\b/;
		my $j = $i;
		$j-- while $j > 0 && $lines[$j] !~ /^[A-Za-z_]\w*\s*\(/;
		my ($name) = $lines[$j] =~ /^(\w+)/;
		my $end = $i;
		$end++ while $end < $#lines && $lines[$end] ne '}';
		my $len = $end - $i + 1;
		push @long_functions, "$c: $name is $len lines" if $len > $max_function_lines;
	}
}
is(join("\n", @long_files), '', "no .c file in src/ or cli/ is over $max_file_lines lines");
is(join("\n", @long_functions), '', "no function in src/ or cli/ is over $max_function_lines lines");

# ---- one writer of a pass's state (issue 25): only src/state/ writes the
# ledger, run and partition rows; every other module asks it to
my @writers;
for my $f (grep { !m{^src/state/} } @files)
{
	my $text = slurp($f);
	# SQL texts are C string literals, split over lines: a gap between two
	# words may be a literal's end and the next one's start
	my $gap = qr/(?:\s|"\s*")+/;
	while ($text =~ /\b(INSERT${gap}INTO|UPDATE|DELETE${gap}FROM)${gap}backfill\.(ledger|run|partition)\b/gi)
	{
		my ($verb, $table, $at) = ($1, $2, $-[0]);
		my $line = 1 + (() = substr($text, 0, $at) =~ /\n/g);
		$verb =~ s/$gap/ /g;
		push @writers, "$f:$line: $verb backfill.$table";
	}
}
is(join("\n", @writers), '', 'no C file outside src/state/ writes backfill.ledger, backfill.run or backfill.partition');

# ---- src/README.md's module map
my $map = slurp('src/README.md');
my %listed = map { $_ => 1 } $map =~ /^\|\s*`([\w\/.]+\.[ch])`/mg;
for my $f (grep { m{^src/} } @files)
{
	(my $rel = $f) =~ s{^src/}{};
	next if $rel =~ /\.h$/ && -f "$root/" . module($f) . '.c';
	ok($listed{$rel}, "src/README.md's module map lists $rel");
}
for my $rel (sort keys %listed)
{
	ok(-f "$root/src/$rel", "src/$rel, listed in src/README.md, exists");
}

done_testing();
