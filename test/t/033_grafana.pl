# 033_grafana.pl
#
# metrics/grafana-dashboard.json, the Grafana dashboard on the metrics of
# metrics/queries.yaml (issue 26), without a server:
#  (a) it is JSON Grafana imports: panels with unique ids and a grid
#      position, every datasource the ${DS_PROMETHEUS} its __inputs declares;
#  (b) the panels operators expect are there: passes by state, rows/s per
#      pass, ETA, throttle reasons over time, lanes in use, outbox backlog;
#  (c) every metric an expression (or a template variable) names exists in
#      queries.yaml as postgres_exporter names it, <family>_<column> of a
#      GAUGE or COUNTER column, and every label it filters, groups or joins
#      on is a LABEL column of that family.
#
# The files: $ENV{PG_BACKFILL_METRICS} (queries.yaml; the dashboard beside
# it), else metrics/ of the repository this file is in.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use JSON::PP;
use MetricsYaml;
use Test::More;

my $yaml = MetricsYaml::path();
(my $dash_path = $yaml) =~ s{[^/]*$}{grafana-dashboard.json};
note "dashboard: $dash_path";

my ($fams) = MetricsYaml::parse($yaml);

# metric name -> [family, the family's LABEL columns]
my %metric;
for my $f (keys %$fams)
{
	my @labels = map { $_->{column} } grep { $_->{usage} eq 'LABEL' } @{ $fams->{$f}{metrics} };
	for my $m (grep { $_->{usage} ne 'LABEL' } @{ $fams->{$f}{metrics} })
	{
		$metric{"${f}_$m->{column}"} = { family => $f, labels => { map { $_ => 1 } @labels } };
	}
}
ok(%metric, 'queries.yaml names metrics: ' . join(' ', sort keys %metric));

# ---- (a) importable
open my $fh, '<', $dash_path or die "cannot read $dash_path: $!";
my $dash = eval { decode_json(do { local $/; <$fh> }) };
ok($dash, 'the dashboard is JSON') or BAIL_OUT("no JSON: $@");
is($dash->{__inputs}[0]{name}, 'DS_PROMETHEUS', 'it declares its Prometheus data source as an input');
is($dash->{__inputs}[0]{pluginId}, 'prometheus', 'the input is a Prometheus data source');
ok($dash->{title} && $dash->{uid} && $dash->{schemaVersion}, 'title, uid and schemaVersion');
my @panels = @{ $dash->{panels} // [] };
cmp_ok(scalar(@panels), '>=', 6, 'six panels or more');
my %ids;
for my $p (@panels)
{
	ok(!$ids{ $p->{id} }++, "panel $p->{id} ($p->{title}): a unique id");
	ok(defined $p->{gridPos}{w} && defined $p->{gridPos}{h}, "$p->{title}: a grid position");
	is($p->{datasource}{uid}, '${DS_PROMETHEUS}', "$p->{title}: the input's data source");
	ok(@{ $p->{targets} // [] }, "$p->{title}: has queries");
}

# ---- (b) the pictures
for my $want ('Passes by state', 'Rows per second', 'ETA', 'Throttle reasons', 'Lanes in use',
	'Outbox backlog')
{
	ok((grep { $_->{title} =~ /^\Q$want\E/ } @panels), "a panel \"$want\"");
}

# ---- (c) every metric and label exists in queries.yaml
my @exprs = map { $_->{expr} } map { @{ $_->{targets} } } @panels;
push @exprs, map { $_->{definition} // () } @{ $dash->{templating}{list} };
my $checked = 0;
for my $e (@exprs)
{
	# the metrics named, each with the labels of its selector
	while ($e =~ /\b(pg_backfill\w*)(?:\{([^}]*)\})?/g)
	{
		my ($name, $sel) = ($1, $2 // '');
		my $m = $metric{$name};
		ok($m, "$name is a metric of queries.yaml (in: $e)") or next;
		$checked++;
		for my $l ($sel =~ /(\w+)\s*[=!]~?/g)
		{
			ok($m->{labels}{$l}, "$name: label $l is a LABEL of family $m->{family}");
		}
	}
	# labels grouped or joined on: by (...), on (...), label_values(metric, label)
	my @uses = $e =~ /\b(pg_backfill\w*)/g;
	my %allowed = map { %{ $metric{$_}{labels} // {} } } @uses;
	for my $list ($e =~ /\b(?:by|on|without|ignoring)\s*\(([^)]*)\)/g)
	{
		ok($allowed{$_}, "label $_ (in: $e) is a LABEL of its metrics' families")
		  for split /\s*,\s*/, $list =~ s/^\s+|\s+$//gr;
	}
	if ($e =~ /label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)/)
	{
		ok($metric{$1} && $metric{$1}{labels}{$2}, "label_values($1, $2): a LABEL of its family");
	}
}
cmp_ok($checked, '>=', 10, "$checked metric references checked");

done_testing();
