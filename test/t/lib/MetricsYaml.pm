# MetricsYaml.pm -- reads metrics/queries.yaml for the TAP tests (031, 032).
#
#   MetricsYaml::path()   $ENV{PG_BACKFILL_METRICS}, else metrics/queries.yaml
#       of the repository this file is in (dies when it is not readable).
#   MetricsYaml::parse($path)  returns (\%family, \@order, \@unparsed): a
#       minimal parser of exactly the subset the file uses (top-level
#       families with "query: |", "master:", "cache_seconds:" and
#       "metrics:" entries of usage and description).  %family maps a
#       family to { query, master, cache_seconds, has_metrics, metrics =>
#       [ { column, usage, description } ] }; @order lists the families as
#       written; @unparsed the lines it did not understand ("n: line").
package MetricsYaml;

use strict;
use warnings;

use File::Basename qw(dirname);
use Cwd qw(abs_path);

sub path
{
	my $yaml = $ENV{PG_BACKFILL_METRICS};
	if (!defined $yaml || $yaml eq '')
	{
		$yaml = dirname(abs_path(__FILE__)) . '/../../../metrics/queries.yaml';
	}
	die "metrics/queries.yaml not found (set PG_BACKFILL_METRICS)"
	  unless defined $yaml && -r $yaml;
	return $yaml;
}

sub parse
{
	my ($yaml) = @_;
	my (%family, @order, @unparsed);
	open my $fh, '<', $yaml or die "$yaml: $!";
	my ($fam, $in_query, $metric);
	while (my $line = <$fh>)
	{
		chomp $line;
		if ($in_query)
		{
			if ($line =~ /^    (.*)$/ || $line =~ /^\s*$/)
			{
				$family{$fam}{query} .= ($1 // '') . "\n";
				next;
			}
			$in_query = 0;
		}
		next if $line =~ /^\s*(#.*)?$/;
		if ($line =~ /^([a-z_][a-z0-9_]*):\s*$/)
		{
			$fam = $1;
			die "family $fam twice" if $family{$fam};
			push @order, $fam;
			$family{$fam} = { query => '', metrics => [] };
			undef $metric;
		}
		elsif (defined $fam && $line =~ /^  query:\s*\|\s*$/)
		{
			$in_query = 1;
		}
		elsif (defined $fam && $line =~ /^  master:\s*(\S+)\s*$/)
		{
			$family{$fam}{master} = $1;
		}
		elsif (defined $fam && $line =~ /^  cache_seconds:\s*(\d+)\s*$/)
		{
			$family{$fam}{cache_seconds} = $1;
		}
		elsif (defined $fam && $line =~ /^  metrics:\s*$/)
		{
			$family{$fam}{has_metrics} = 1;
		}
		elsif (defined $fam && $line =~ /^    - ([a-z_][a-z0-9_]*):\s*$/)
		{
			$metric = { column => $1 };
			push @{ $family{$fam}{metrics} }, $metric;
		}
		elsif (defined $metric && $line =~ /^        usage:\s*"?([A-Z]+)"?\s*$/)
		{
			$metric->{usage} = $1;
		}
		elsif (defined $metric && $line =~ /^        description:\s*"([^"]*)"\s*$/)
		{
			$metric->{description} = $1;
		}
		else
		{
			push @unparsed, "$.: $line";
		}
	}
	close $fh;
	return (\%family, \@order, \@unparsed);
}

1;
