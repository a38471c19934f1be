# 097_states.pl -- the state diagrams of doc/internals.md ("## States": a
#   pass's, then a partition's) against the transition tables of
#   src/state/states.c (pass_edges, partition_edges): the same edges
#   {from, event, to} on both sides, none on one side only.  Needs no server.
use strict;
use warnings;
use utf8;

use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/../..";

sub slurp
{
	my ($path) = @_;
	open my $fh, '<:encoding(UTF-8)', "$root/$path" or die "cannot read $path: $!";
	local $/;
	return <$fh>;
}

# the diagrams: the fenced blocks of the section, one "from ──event──► to" a line
my $doc = slurp('doc/internals.md');
my ($section) = $doc =~ /^## States\n(.*?)^## /ms;
ok(defined $section, 'doc/internals.md has a "## States" section');
my @blocks = ($section // '') =~ /^```\n(.*?)^```/msg;
is(scalar(@blocks), 2, 'it draws two diagrams: a pass and a partition');

sub diagram_edges
{
	my ($block) = @_;
	my %edges;
	while ($block =~ /^\s*([a-z_]+) ─+([a-z][a-z ]*?)─+► ([a-z_]+)/mg)
	{
		$edges{"$1 --$2--> $3"}++;
	}
	return \%edges;
}

# the module's tables: {"from", "event", "to"} lines of a static StateEdge array
my $c = slurp('src/state/states.c');

sub table_edges
{
	my ($name) = @_;
	my ($body) = $c =~ /StateEdge \Q$name\E\[\] = \{\n(.*?)^\};/ms;
	ok(defined $body, "src/state/states.c defines $name");
	my %edges;
	while (($body // '') =~ /\{"([^"]+)", "([^"]+)", "([^"]+)"\}/g)
	{
		$edges{"$1 --$2--> $3"}++;
	}
	return \%edges;
}

sub same_edges
{
	my ($what, $drawn, $coded) = @_;
	ok(keys %$coded > 5, "$what: the table has edges (" . scalar(keys %$coded) . ')');
	for my $e (sort keys %$coded)
	{
		ok($drawn->{$e}, "$what: the diagram draws $e");
		is($coded->{$e}, 1, "$what: the table lists $e once");
	}
	for my $e (sort keys %$drawn)
	{
		ok($coded->{$e}, "$what: the table has the drawn edge $e");
		is($drawn->{$e}, 1, "$what: the diagram draws $e once");
	}
}

same_edges('a pass', diagram_edges($blocks[0] // ''), table_edges('pass_edges'));
same_edges('a partition', diagram_edges($blocks[1] // ''), table_edges('partition_edges'));

done_testing();
