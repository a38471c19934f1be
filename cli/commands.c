/*
 * commands.c: the client's commands (list, pending, status, pause,
 * resume, cancel, retry, run, revert, finalize), each one call of the extension's
 * SQL API.
 * Each returns the process exit status.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int
cmd_list(void)
{
	char	   *sql = api_sql(
		"SELECT p.name, p.state, p.last_run_id AS last_run, l.status AS result,"
		"       to_char(coalesce(l.finished_at, l.started_at), 'YYYY-MM-DD HH24:MI:SS') AS at,"
		"       p.rows"
		"  FROM %s.backfill_pending() p"
		"  LEFT JOIN %s.backfill_ledger l ON l.run_id = p.last_run_id"
		" ORDER BY p.name");
	PGresult   *res = must_query(sql, 0, NULL);

	if (PQntuples(res) == 0)
		printf("no backfills declared\n");
	else
		print_table(res);
	PQclear(res);
	free(sql);
	return EXIT_OK;
}

int
cmd_pending(void)
{
	char	   *sql = api_sql(
		"SELECT name, state, changed, last_run_id AS last_run,"
		"       last_completed_run_id AS last_completed, rows,"
		"       array_to_string(environments, ',') AS environments,"
		"       left(checksum, 12) AS checksum, blocked_by"
		"  FROM %s.backfill_pending() ORDER BY name");
	static const char *const gate[] = {"pending", "blocked", "failed", "stalled", "changed",
	"completed_with_failures", "drifted", "reverting", "reverted", NULL};
	PGresult   *res = must_query(sql, 0, NULL);
	int			not_done = 0;

	if (PQntuples(res) == 0)
		printf("no backfills declared\n");
	else
		print_table(res);
	for (int r = 0; r < PQntuples(res); r++)
	{
		const char *state = PQgetvalue(res, r, 1);

		for (int g = 0; gate[g]; g++)
			if (strcmp(state, gate[g]) == 0)
			{
				if (not_done++ == 0)
					fprintf(stderr, "%s: not done:", progname);
				fprintf(stderr, " %s (%s)", PQgetvalue(res, r, 0), state);
			}
	}
	if (not_done > 0)
		fputc('\n', stderr);
	PQclear(res);
	free(sql);
	return not_done > 0 ? EXIT_PENDING : EXIT_OK;
}

int
cmd_status(const char *name)
{
	char	   *sql = api_sql("SELECT * FROM %s.backfill_status($1)");
	const char *params[] = {name};
	PGresult   *res = must_query(sql, 1, params);
	int			keyw = 0;

	free(sql);
	if (PQntuples(res) == 0)
	{
		fprintf(stderr, "%s: backfill \"%s\" is not declared and has no passes\n",
				progname, name);
		PQclear(res);
		return EXIT_FAILED;
	}
	for (int c = 0; c < PQnfields(res); c++)
		if ((int) strlen(PQfname(res, c)) > keyw)
			keyw = strlen(PQfname(res, c));
	for (int c = 0; c < PQnfields(res); c++)
	{
		const char *key = PQfname(res, c);
		Oid			t = PQftype(res, c);
		char		buf[64];
		const char *v;

		if (PQgetisnull(res, 0, c))
			v = "";
		else if (t == BOOLOID)
			v = strcmp(PQgetvalue(res, 0, c), "t") == 0 ? "true" : "false";
		else if (strcmp(key, "progress") == 0 && t == FLOAT8OID)
		{
			snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * strtod(PQgetvalue(res, 0, c), NULL));
			v = buf;
		}
		else if (t == FLOAT8OID || t == FLOAT4OID)
		{
			snprintf(buf, sizeof(buf), "%.1f", strtod(PQgetvalue(res, 0, c), NULL));
			v = buf;
		}
		else
			v = PQgetvalue(res, 0, c);
		if (*v)
			printf("%s:%*s%s\n", key, keyw - (int) strlen(key) + 1, "", v);
		else
			printf("%s:\n", key);
	}
	PQclear(res);
	return EXIT_OK;
}

int
cmd_control(const char *verb, const char *name)
{
	char		fmt[96];
	char	   *sql;
	const char *params[] = {name};
	PGresult   *res;
	bool		changed;

	snprintf(fmt, sizeof(fmt), "SELECT %%s.backfill_%s($1)", verb);
	sql = api_sql(fmt);
	res = must_query(sql, 1, params);
	free(sql);
	changed = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	printf("%s\n", changed ? "changed" : "unchanged");
	PQclear(res);
	return EXIT_OK;
}

/* print the run id a call answered, and with --wait follow the pass */
static int
follow_run(PGresult *res, const char *fn, const char *name, bool wait, bool plain)
{
	char	   *run_id;

	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
	{
		fprintf(stderr, "%s: %s returned no run id\n", progname, fn);
		PQclear(res);
		return EXIT_FAILED;
	}
	run_id = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	printf("%s\n", run_id);
	fflush(stdout);
	if (!wait)
		return EXIT_OK;
	return wait_for_run(name, run_id, plain);
}

int
cmd_run(const char *name, bool force, bool wait, const char *input, bool plain)
{
	char	   *sql = api_sql("SELECT %s.backfill_run($1, $2::boolean, $3::jsonb)");
	const char *params[] = {name, force ? "true" : "false", input};
	PGresult   *res = must_query(sql, 3, params);

	free(sql);
	return follow_run(res, "backfill_run", name, wait, plain);
}

/*
 * revert: start the revert pass (or name the one running or completed);
 * nothing to revert is said by the server's NOTICE, and is no failure.
 * A scoped backfill's scope is named by its input.
 */
int
cmd_revert(const char *name, bool wait, const char *input, bool plain)
{
	char	   *sql = api_sql(input != NULL ? "SELECT %s.backfill_revert($1, $2::jsonb)" :
							  "SELECT %s.backfill_revert($1)");
	const char *params[] = {name, input};
	PGresult   *res = must_query(sql, input != NULL ? 2 : 1, params);

	free(sql);
	if (PQntuples(res) == 1 && PQgetisnull(res, 0, 0))
	{
		printf("nothing to revert\n");
		PQclear(res);
		return EXIT_OK;
	}
	return follow_run(res, "backfill_revert", name, wait, plain);
}

/*
 * CALL backfill_finalize(name, timeout): returns once the backfill is
 * complete (working it in this session when no lane does); its NOTICEs
 * say how, an error says why not (BF018, BF019, the pass's SQLSTATE).
 */
int
cmd_finalize(const char *name, const char *timeout)
{
	char	   *sql = api_sql("CALL %s.backfill_finalize($1, coalesce($2::interval, '1 hour'))");
	const char *params[] = {name, timeout};
	PGresult   *res = run_query(sql, 2, params);
	int			rc = EXIT_FAILED;

	free(sql);
	if (res != NULL)
	{
		printf("complete\n");
		rc = EXIT_OK;
		PQclear(res);
	}
	else
		rc = failure_status();
	return rc;
}

/* status --batches: the recorded batches of the newest pass (backfill.batch_history) */
int
cmd_batches(const char *name)
{
	char	   *sql = api_sql("SELECT seq, part_no AS part, first_key, last_key, rows,"
							  " round(ms::numeric, 1) AS ms, wal_bytes, batch_size, throttle, at"
							  " FROM %s.backfill_batches($1) ORDER BY seq");
	const char *params[] = {name};
	PGresult   *res = must_query(sql, 1, params);

	free(sql);
	printf("\nlast %d recorded batches (backfill.batch_history):\n", PQntuples(res));
	print_table(res);
	PQclear(res);
	return EXIT_OK;
}

/* a column of row r by name, "" when NULL */
static const char *
col(const PGresult *res, int r, const char *name)
{
	int			c = PQfnumber(res, name);

	return (c < 0 || PQgetisnull(res, r, c)) ? "" : PQgetvalue(res, r, c);
}

static const char *
yes_no(const char *b)
{
	return strcmp(b, "t") == 0 ? "index" : strcmp(b, "f") == 0 ? "no index" : "unknown";
}

static void
print_rehearsed_batch(const PGresult *res, int r)
{
	char		ms[32];

	snprintf(ms, sizeof(ms), "%.1f", strtod(col(res, r, "ms"), NULL));
	printf("batch %s (%s): keys %s..%s, %s rows, %s ms, WAL %s bytes, buffers hit %s read %s\n",
		   col(res, r, "batch"), col(res, r, "position"), col(res, r, "first_key"),
		   col(res, r, "last_key"), col(res, r, "rows"), ms, col(res, r, "wal_bytes"),
		   col(res, r, "shared_hit"), col(res, r, "shared_read"));
	if (*col(res, r, "error"))
		printf("  error:    %s\n", col(res, r, "error"));
	else
	{
		printf("  key scan: %s (%s)\n", col(res, r, "key_scan_plan"),
			   yes_no(col(res, r, "key_scan_index")));
		printf("  action:   %s (%s)\n", col(res, r, "action_plan"),
			   yes_no(col(res, r, "action_index")));
	}
	printf("  locks:    %s\n", col(res, r, "locks"));
}

static void
print_projection(const PGresult *res, int r)
{
	char		dur[64];
	char		wal[64];

	printf("projection of the whole pass:\n");
	if (*col(res, r, "ms"))
	{
		fmt_duration(dur, sizeof(dur), strtod(col(res, r, "ms"), NULL) / 1000.0);
		fmt_count(wal, sizeof(wal), strtod(col(res, r, "wal_bytes"), NULL));
	}
	else
		strcpy(dur, strcpy(wal, "-"));
	printf("  rows to do:  %s\n  batches:     %s\n  duration:    %s\n  WAL bytes:   %s\n"
		   "  assumptions: %s\n", *col(res, r, "rows") ? col(res, r, "rows") : "-",
		   *col(res, r, "batch") ? col(res, r, "batch") : "-", dur, wal,
		   col(res, r, "assumptions"));
}

/*
 * rehearse NAME [BATCHES]: backfill_rehearse's batches (every one rolled
 * back), then its projection of the whole pass.
 */
int
cmd_rehearse(const char *name, const char *batches)
{
	char	   *sql = api_sql("SELECT kind, batch, position, first_key, last_key, rows, ms,"
							  " wal_bytes, shared_hit, shared_read,"
							  " array_to_string(locks, ', ') AS locks, key_scan_index,"
							  " action_index, key_scan_plan, action_plan, error, assumptions"
							  " FROM %s.backfill_rehearse($1, coalesce($2::int, 5))");
	const char *params[] = {name, batches};
	PGresult   *res = must_query(sql, 2, params);

	free(sql);
	printf("rehearsal of backfill \"%s\" (every batch rolled back):\n", name);
	for (int r = 0; r < PQntuples(res); r++)
	{
		if (strcmp(col(res, r, "kind"), "batch") == 0)
			print_rehearsed_batch(res, r);
		else
			print_projection(res, r);
	}
	PQclear(res);
	return EXIT_OK;
}
