# 097_launcher_views.pl -- the launcher's view of a database, as src/README.md
#   draws it, against workers/launcher.c: the views of its DatabaseView enum
#   are the diagram's states, and the edges between them that the diagram
#   draws are exactly the transitions the code makes (each a database_move
#   from a set of views, or any, to one).  Needs no server.
use strict;
use warnings;

use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/../..";

sub slurp
{
	my ($path) = @_;
	open my $fh, '<', "$root/$path" or die "cannot read $path: $!";
	local $/;
	return <$fh>;
}

my $code = slurp('src/workers/launcher.c');
my $readme = slurp('src/README.md');

# ---- the views
my ($enum) = $code =~ /typedef enum DatabaseView\s*\{(.*?)\}\s*DatabaseView;/s
  or BAIL_OUT('no DatabaseView enum in launcher.c');
my @views = map { lc } $enum =~ /\bDATABASE_(\w+)/g;
my %view = map { $_ => 1 } @views;
is(scalar(@views), 6, 'six views: ' . join(', ', @views));

# ---- the code's edges: database_move(st, VIEW(A) | VIEW(B), C); ~VIEW(X) is any
my %code_edges;
for my $call ($code =~ /database_move\(st,\s*([^;]*?)\);/g)
{
	my ($from, $to) = $call =~ /^(.*),\s*DATABASE_(\w+)$/s or next;
	my @from = $from =~ /^~/ ? ('any') : map { lc } $from =~ /VIEW\(DATABASE_(\w+)\)/g;
	$code_edges{"$_ -> " . lc($to)} = 1 for @from;
}
ok(scalar(keys %code_edges) >= 6, scalar(keys %code_edges) . ' edges in launcher.c');

# ---- the diagram's edges between views (or from any): the block after "The launcher's view"
my ($diagram) = $readme =~ /The launcher's view of a database.*?\n```\n(.*?)```/s
  or BAIL_OUT("no launcher diagram in src/README.md");
my %readme_edges;
for my $line (split /\n/, $diagram)
{
	my ($first) = $line =~ /^(\w+)/ or next;
	my $from = $first;
	# each hop: ──label──► target, or ──► target
	while ($line =~ /──(?:[^►]*?──)?►\s*(\w+)/g)
	{
		my $to = $1;
		$readme_edges{"$from -> $to"} = 1
		  if ($view{$from} || $from eq 'any') && $view{$to};
		$from = $to;
	}
}

for my $edge (sort keys %readme_edges)
{
	ok($code_edges{$edge}, "README's edge $edge is a transition of launcher.c");
}
for my $edge (sort keys %code_edges)
{
	ok($readme_edges{$edge}, "launcher.c's transition $edge is drawn in src/README.md");
}

done_testing();
