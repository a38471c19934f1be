# 146_catalog_version.pl -- the library works with its own catalog version
# only (issue 25, point 3): a database whose catalogs are older than the
# library (the package updated, ALTER EXTENSION ... UPDATE not yet run).
#
# (a) Its scheduler says so in ONE WARNING (BF027, the hint to update), once
#     per start and not at every look, and does no work there: a pass queued
#     under the old catalogs gets no lane while it keeps looking.
# (b) Its SQL functions refuse with BF027 (a control, a finalize here; the
#     others: pgTAP 146).
# (c) ALTER EXTENSION pg_backfill UPDATE brings it back: the same scheduler,
#     at its next look, starts the queued pass, which completes, each row
#     once, and says nothing more.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";
use BackfillTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = BackfillTest::node('catalog_version');
my $warning = qr/WARNING:  pg_backfill scheduler for database "postgres" does no work: the catalogs of pg_backfill are at version 0\.5/;
my $scheduler_pid =
  q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_backfill scheduler'};

sub count_in_log
{
	my ($re) = @_;
	my @hits = (slurp_file($node->logfile) =~ /$re/g);
	return scalar(@hits);
}

# a table, its declaration and a queued pass, as the 0.5 library wrote them
sq($node, q{
	CREATE EXTENSION pg_backfill VERSION '0.5';
	CREATE TABLE items (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
	INSERT INTO items (id) SELECT g FROM generate_series(1, 300) g;
	INSERT INTO backfill.declaration (name, relid, relation, key_column, key_type, predicate,
	       action, batch_size, rate, max_attempts, backoff_base_ms, backoff_cap_ms,
	       batch_timeout_ms, min_batch_size, max_batch_size, run_as, search_path, owner, checksum)
	VALUES ('items', 'items'::regclass, 'public.items', 'id', 'integer', 'n = 0',
	       'UPDATE items SET n = n + 1 WHERE id BETWEEN $1 AND $2 AND n = 0',
	       100, 200, 5, 1000, 60000, 60000, 100, 100000, current_user::regrole, 'public',
	       current_user::regrole, 'c146');
	WITH l AS (INSERT INTO backfill.ledger (ledger_name, declaration, checksum, owner)
	           VALUES ('items', 'items', 'c146', current_user::regrole) RETURNING run_id)
	INSERT INTO backfill.run (run_id) SELECT run_id FROM l;
});
my $run = sq($node, q{SELECT run_id FROM backfill.ledger WHERE declaration = 'items'});

# --- (a) one warning, no work
ok(poll_until($node, q{SELECT count(*) FROM pg_stat_activity
                        WHERE backend_type = 'pg_backfill scheduler'}, '1', 60),
	'the database gets its scheduler');
my $pid = sq($node, $scheduler_pid);
ok($node->wait_for_log($warning, 0), 'its scheduler warns that the catalogs are older');
like(slurp_file($node->logfile),
	qr/$warning.*\n.*DETAIL:  The installed library is version 0\.6.*\n.*HINT:  Run ALTER EXTENSION pg_backfill UPDATE; in this database\./,
	'with the library\'s version and the hint to update');

# at least three more looks (naptime 1 s): each one a transaction, which
# moves the scheduler's state_change
my $since = sq($node, q{SELECT now()});
ok(poll_until($node, qq{SELECT state_change > '$since'::timestamptz + interval '3 s'
                          FROM pg_stat_activity WHERE pid = $pid}, 't', 60),
	'the scheduler keeps looking');
is(count_in_log($warning), 1, 'and says it once, not at every look');
is(sq($node, qq{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_backfill lane'}),
	'0', 'no lane was started');
is(sq($node, qq{SELECT l.status || ' ' || r.phase FROM backfill.ledger l JOIN backfill.run r USING (run_id)
                 WHERE run_id = $run}),
	'running queued', 'the queued pass is left as it was');
is(sq($node, q{SELECT count(*) FROM items WHERE n <> 0}), '0', 'and no row was touched');

# --- (b) a session's call is refused
my ($rc, $out, $err) = $node->psql('postgres', q{SELECT backfill_pause('items')});
like($err, qr/ERROR:  cannot control backfill "items": the catalogs of pg_backfill are at version 0\.5/,
	'a control is refused (BF027)');
($rc, $out, $err) = $node->psql('postgres', q{CALL backfill_finalize('items', '1 s')});
like($err, qr/ERROR:  the catalogs of pg_backfill in this database are at version 0\.5/,
	'so is a finalize (BF027)');

# --- (c) the update brings it back, with no wake and no restart
sq($node, q{ALTER EXTENSION pg_backfill UPDATE});
is(wait_pass_end($node, $run, 300), 'completed', 'after the update the queued pass completes');
each_row_done_once($node, 'items', 300, $run);
is(sq($node, $scheduler_pid), $pid, 'started by the same scheduler');
is(count_in_log($warning), 1, 'which said nothing more');

done_testing();
