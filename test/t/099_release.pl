# 099_release.pl -- the release files agree with each other and with PGXN's
# rules, so that a PGXN upload, a Debian package and ALTER EXTENSION all name
# the same version:
#   META.json (PGXN Meta Spec 1.0.0: required fields, semantic versions,
#   files that exist), the control file's default_version, the newest
#   upgrade script, the Makefile's DATA list, debian/changelog, and the zip
#   `make dist` writes.  Needs no server.
use strict;
use warnings;

use File::Temp qw(tempdir);
use FindBin;
use JSON::PP;
use Test::More;

my $root = "$FindBin::RealBin/../..";

sub slurp
{
	my ($path) = @_;
	open my $fh, '<', "$root/$path" or die "cannot read $path: $!";
	local $/;
	return <$fh>;
}

my $semver = qr/^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$/;

# ---- META.json against the PGXN Meta Spec
my $meta = eval { decode_json(slurp('META.json')) };
ok($meta, 'META.json is valid JSON') or BAIL_OUT("META.json: $@");
for my $field (qw(name abstract version maintainer license provides meta-spec))
{
	ok(defined $meta->{$field}, "META.json has the required field \"$field\"");
}
is($meta->{name}, 'pg_backfill', 'META.json names the distribution pg_backfill');
like($meta->{version}, $semver, "META.json version $meta->{version} is a semantic version");
is($meta->{'meta-spec'}{version}, '1.0.0', 'META.json follows Meta Spec 1.0.0');
my @licenses = qw(agpl_3 apache_1_1 apache_2_0 artistic_1 artistic_2 bsd freebsd gfdl_1_2
  gfdl_1_3 gpl_1 gpl_2 gpl_3 lgpl_2_1 lgpl_3_0 mit mozilla_1_0 mozilla_1_1 openssl perl_5
  postgresql qpl_1_0 ssleay sun zlib restricted unrestricted open_source);
ok((grep { $_ eq $meta->{license} } @licenses), "META.json license \"$meta->{license}\" is one PGXN knows");
my $maint = $meta->{maintainer};
ok((ref $maint eq 'ARRAY' ? @$maint : length $maint) > 0, 'META.json names a maintainer');
my $ext = $meta->{provides}{pg_backfill};
ok($ext, 'META.json provides the extension pg_backfill');
like($ext->{version} // '', $semver, 'the provided extension has a semantic version');
is($ext->{version}, $meta->{version}, 'the provided extension has the distribution version');
ok(-f "$root/$ext->{file}", "the provided file $ext->{file} exists");
ok(!defined $ext->{docfile} || -f "$root/$ext->{docfile}", 'the docfile exists');
my $pgreq = $meta->{prereqs}{runtime}{requires}{PostgreSQL} // '';
like($pgreq, qr/^(?:[<>=!]+\s*)?\d+\.\d+\.\d+(?:\s*,\s*[<>=!]+\s*\d+\.\d+\.\d+)*$/,
	"the PostgreSQL prerequisite \"$pgreq\" is a version range PGXN reads");
ok(defined $meta->{release_status}
	  && $meta->{release_status} =~ /^(?:stable|testing|unstable)$/,
	'release_status is stable, testing or unstable');

# ---- the control file and the install / upgrade scripts
my ($default) = slurp('pg_backfill.control') =~ /^default_version\s*=\s*'([^']+)'/m;
ok($default, "the control file has a default_version ($default)");
my ($mm) = $meta->{version} =~ /^(\d+\.\d+)\./;
is($default, $mm, 'default_version is META.json\'s major.minor');

opendir my $dh, $root or die;
my @scripts = sort grep { /^pg_backfill--.*\.sql$/ } readdir $dh;
closedir $dh;
my %to;
my @base;
for (@scripts)
{
	if (/^pg_backfill--([\d.]+)--([\d.]+)\.sql$/) { $to{$1} = $2; }
	elsif (/^pg_backfill--([\d.]+)\.sql$/) { push @base, $1; }
}
sub vcmp { my @a = split /\./, $_[0]; my @b = split /\./, $_[1];
	return ($a[0] <=> $b[0]) || ($a[1] <=> $b[1]); }
my ($newest) = sort { vcmp($b, $a) } (values %to, @base);
is($newest, $default, "the newest script reaches default_version ($newest)");
ok(scalar(@base) > 0, 'there is an install script');
my $v = (sort { vcmp($a, $b) } @base)[0];
my @chain = ($v);
while (defined $to{$v}) { $v = $to{$v}; push @chain, $v; }
is($v, $default, 'the upgrade scripts chain from ' . join(' -> ', @chain));

my ($data) = slurp('Makefile') =~ /^DATA\s*=\s*(.*)$/m;
my %data = map { $_ => 1 } split ' ', $data;
is_deeply([ sort keys %data ], \@scripts, 'the Makefile installs every script, and only those');

my ($cliver) = slurp('cli/cli.h') =~ /^#define BACKFILL_CLI_VERSION "([^"]+)"/m;
is($cliver, $meta->{version}, 'the CLI reports the release version');
my ($catver) = slurp('src/config.h') =~ /^#define BACKFILL_CATALOG_VERSION "([^"]+)"/m;
is($catver, $default, 'the library starts passes on catalogs of default_version (config.h)');

# ---- Debian
my ($debver) = slurp('debian/changelog') =~ /^pg-backfill \(([^)]+)\)/;
is($debver, $meta->{version}, "debian/changelog's newest entry is $meta->{version}");
like(slurp('debian/control'), qr/^Package: postgresql-15-backfill$/m,
	'debian/control makes postgresql-15-backfill (pg_buildext updatecontrol)');

# ---- make dist
SKIP:
{
	skip 'git or a git checkout is not there: make dist not tried', 3
	  unless -d "$root/.git" || -f "$root/.git";
	my $tmp = tempdir(CLEANUP => 1);
	my $out = `cd '$root' && GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*' make -s dist DISTDIR='$tmp' 2>&1`;
	my $zip = "$tmp/pg_backfill-$meta->{version}.zip";
	ok(-f $zip, "make dist wrote pg_backfill-$meta->{version}.zip") or diag($out);
	my %entries = map { chomp; ($_ => 1) }
	  `python3 -c 'import sys, zipfile; print("\\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' '$zip' 2>/dev/null`;
	my @want = map { "pg_backfill-$meta->{version}/$_" } ('META.json', 'pg_backfill.control', @scripts);
	my @missing = grep { !$entries{$_} } @want;
	is_deeply(\@missing, [], 'the zip holds META.json, the control file and every script under one folder');
	ok(%entries && !(grep { !m{^pg_backfill-\Q$meta->{version}\E/} } keys %entries),
		'every entry of the zip is under pg_backfill-VERSION/');
}

done_testing();
