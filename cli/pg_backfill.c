/*
 * pg_backfill: command-line client of the pg_backfill extension.
 *
 *   pg_backfill [-d CONNINFO] COMMAND [ARGS]
 *
 * Commands: list, run, status, pause, resume, cancel, retry, pending.
 * The connection comes from the usual libpq environment (PGHOST, PGPORT,
 * PGUSER, PGDATABASE, PGPASSWORD, PGSERVICE ...) or from -d, which takes a
 * connection string or URI.  Every value goes to the server as a parameter
 * (PQexecParams); nothing is pasted into SQL text.  Every statement runs in
 * its own autocommit transaction.
 *
 * Exit status: 0 success; 1 the command failed (a server error, or the pass
 * waited for did not complete); 2 usage or connection error; 3 (pending
 * only) some backfill is pending, blocked, failed, stalled or changed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

/* the release version: META.json's (test/t/099_release.pl checks they agree) */
#define BACKFILL_CLI_VERSION "0.3.0"

#define EXIT_OK			0
#define EXIT_FAILED		1
#define EXIT_USAGE		2
#define EXIT_PENDING	3
#define EXIT_INTERRUPTED 130

/* type oids the output formatting cares about */
#define BOOLOID			16
#define INT8OID			20
#define INT2OID			21
#define INT4OID			23
#define FLOAT4OID		700
#define FLOAT8OID		701
#define NUMERICOID		1700

#define POLL_USEC		500000	/* --wait polls every 0.5 s */
#define PLAIN_EVERY		2.0		/* a plain progress line every 2 s */
#define BAR_WIDTH		24

static const char *progname = "pg_backfill";
static PGconn *conn;
static char *ext_schema;		/* quoted schema of the extension's functions */
static volatile sig_atomic_t interrupted = 0;

static void
usage(FILE *out)
{
	fprintf(out,
			"%s controls the backfills of the pg_backfill extension.\n"
			"\n"
			"Usage:\n"
			"  %s [-d CONNINFO] COMMAND [ARGS]\n"
			"\n"
			"Commands:\n"
			"  list                      one line per backfill: state, last run, rows\n"
			"  run NAME [--force] [--wait] [--input JSON] [--plain]\n"
			"                            start a pass and print its run id; --wait follows\n"
			"                            it with a progress line until it ends\n"
			"  status NAME               where the newest pass of NAME stands (key: value)\n"
			"  pause NAME                pause the running pass\n"
			"  resume NAME               resume a paused pass\n"
			"  cancel NAME               cancel the running pass\n"
			"  retry NAME                retry failed partitions, or resume a failed pass\n"
			"                            (these four print 'changed' or 'unchanged')\n"
			"  pending                   the backfill_pending() report; exit status 3 when\n"
			"                            any backfill is pending, blocked, failed, stalled\n"
			"                            or changed (a deploy gate)\n"
			"\n"
			"Options:\n"
			"  -d, --dbname=CONNINFO     connection string or URI (default: the libpq\n"
			"                            environment: PGHOST, PGPORT, PGUSER, PGDATABASE...)\n"
			"  --force                   run: record a new pass even if one completed\n"
			"  --wait                    run: wait for the pass to end, showing progress\n"
			"  --input=JSON              run: the input of a scoped backfill\n"
			"  --plain                   run --wait: plain progress lines even on a terminal\n"
			"  -h, --help                show this help and exit\n"
			"  -V, --version             show the version and exit\n"
			"\n"
			"Exit status: 0 success; 1 the command failed, or the pass waited for\n"
			"failed, was cancelled or stalled; 2 usage or connection error; 3 pending\n"
			"found backfills that are not done.\n",
			progname, progname);
}

static void usage_error(const char *fmt,...)
			__attribute__((format(printf, 1, 2), noreturn));

static void
usage_error(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry \"%s --help\" for more information.\n", progname);
	exit(EXIT_USAGE);
}

static void *
xmalloc(size_t n)
{
	void	   *p = malloc(n);

	if (p == NULL)
	{
		fprintf(stderr, "%s: out of memory\n", progname);
		exit(EXIT_FAILED);
	}
	return p;
}

static double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
on_sigint(int signo)
{
	(void) signo;
	interrupted = 1;
}

/* ------------------------------------------------------------ errors */

/* Print a server error: message, DETAIL, HINT and SQLSTATE, to stderr. */
static void
report_error(const PGresult *res)
{
	const char *severity = res ? PQresultErrorField(res, PG_DIAG_SEVERITY) : NULL;
	const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *detail = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL) : NULL;
	const char *hint = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_HINT) : NULL;
	const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (primary == NULL)
	{
		/* a client-side failure (lost connection...): libpq's message */
		const char *msg = res ? PQresultErrorMessage(res) : "";

		if (msg == NULL || *msg == '\0')
			msg = PQerrorMessage(conn);
		fprintf(stderr, "%s: %s", progname, msg);
		if (*msg == '\0' || msg[strlen(msg) - 1] != '\n')
			fputc('\n', stderr);
		return;
	}
	fprintf(stderr, "%s: %s:  %s\n", progname, severity ? severity : "ERROR", primary);
	if (detail)
		fprintf(stderr, "DETAIL:  %s\n", detail);
	if (hint)
		fprintf(stderr, "HINT:  %s\n", hint);
	else if (sqlstate && (strcmp(sqlstate, "42883") == 0 || strcmp(sqlstate, "3F000") == 0))
		fprintf(stderr, "HINT:  Is the extension installed in this database?  "
				"(CREATE EXTENSION pg_backfill)\n");
	if (sqlstate)
		fprintf(stderr, "SQLSTATE: %s\n", sqlstate);
}

/* NOTICEs and WARNINGs of the server go to stderr, like psql's. */
static void
notice_receiver(void *arg, const PGresult *res)
{
	const char *severity = PQresultErrorField(res, PG_DIAG_SEVERITY);
	const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);

	(void) arg;
	if (primary == NULL)
	{
		fprintf(stderr, "%s", PQresultErrorMessage(res));
		return;
	}
	fprintf(stderr, "%s: %s:  %s\n", progname, severity ? severity : "NOTICE", primary);
	if (detail)
		fprintf(stderr, "DETAIL:  %s\n", detail);
	if (hint)
		fprintf(stderr, "HINT:  %s\n", hint);
}

/* Exit status for a failed statement: 2 if the connection is gone. */
static int
failure_status(void)
{
	return PQstatus(conn) == CONNECTION_OK ? EXIT_FAILED : EXIT_USAGE;
}

/*
 * Run one statement with text parameters in its own (autocommit)
 * transaction.  On an error, report it and return NULL.
 */
static PGresult *
run_query(const char *sql, int nparams, const char *const *params)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);

	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
	{
		report_error(res);
		PQclear(res);
		return NULL;
	}
	return res;
}

/* Like run_query, but exit on an error. */
static PGresult *
must_query(const char *sql, int nparams, const char *const *params)
{
	PGresult   *res = run_query(sql, nparams, params);

	if (res == NULL)
	{
		int			rc = failure_status();

		PQfinish(conn);
		exit(rc);
	}
	return res;
}

/* SQL text with %s replaced by the extension's (quoted) schema. */
static char *
api_sql(const char *fmt)
{
	size_t		n = strlen(fmt) + 8 * strlen(ext_schema) + 1;
	char	   *out = xmalloc(n);
	char	   *o = out;

	for (const char *p = fmt; *p; p++)
	{
		if (p[0] == '%' && p[1] == 's')
		{
			o += sprintf(o, "%s", ext_schema);
			p++;
		}
		else
			*o++ = *p;
	}
	*o = '\0';
	return out;
}

/* -------------------------------------------------------- connection */

static void
connect_db(const char *conninfo)
{
	const char *keywords[] = {"dbname", "fallback_application_name", NULL};
	const char *values[] = {conninfo, "pg_backfill", NULL};
	PGresult   *res;

	conn = PQconnectdbParams(keywords, values, 1);
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "%s: could not connect: %s", progname,
				conn ? PQerrorMessage(conn) : "out of memory\n");
		PQfinish(conn);
		exit(EXIT_USAGE);
	}
	PQsetNoticeReceiver(conn, notice_receiver, NULL);

	/* where the extension's functions live (usually public) */
	res = must_query("SELECT quote_ident(n.nspname) FROM pg_catalog.pg_extension e"
					 " JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace"
					 " WHERE e.extname = 'pg_backfill'", 0, NULL);
	if (PQntuples(res) != 1)
	{
		fprintf(stderr, "%s: the pg_backfill extension is not installed in database \"%s\"\n"
				"HINT:  CREATE EXTENSION pg_backfill;\n", progname, PQdb(conn));
		PQclear(res);
		PQfinish(conn);
		exit(EXIT_FAILED);
	}
	ext_schema = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
}

/* ------------------------------------------------------------ output */

/* display width of UTF-8 text (code points; good enough for names) */
static int
text_width(const char *s)
{
	int			w = 0;

	for (; *s; s++)
		if ((*s & 0xC0) != 0x80)
			w++;
	return w;
}

static bool
is_numeric_type(Oid t)
{
	return t == INT2OID || t == INT4OID || t == INT8OID || t == FLOAT4OID ||
		t == FLOAT8OID || t == NUMERICOID;
}

static const char *
cell(const PGresult *res, int r, int c)
{
	if (PQgetisnull(res, r, c))
		return "-";
	if (PQftype(res, c) == BOOLOID)
		return strcmp(PQgetvalue(res, r, c), "t") == 0 ? "yes" : "no";
	return PQgetvalue(res, r, c);
}

/* An aligned table: upper-case headers, numbers right-aligned, NULL as '-'. */
static void
print_table(const PGresult *res)
{
	int			nf = PQnfields(res);
	int			nt = PQntuples(res);
	int		   *width = xmalloc(sizeof(int) * (nf > 0 ? nf : 1));

	for (int c = 0; c < nf; c++)
	{
		width[c] = text_width(PQfname(res, c));
		for (int r = 0; r < nt; r++)
		{
			int			w = text_width(cell(res, r, c));

			if (w > width[c])
				width[c] = w;
		}
	}
	for (int r = -1; r < nt; r++)
	{
		for (int c = 0; c < nf; c++)
		{
			const char *v;
			int			pad;
			bool		last = (c == nf - 1);

			if (r < 0)
			{
				v = PQfname(res, c);
				pad = width[c] - text_width(v);
				for (const char *p = v; *p; p++)
					putchar(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : (*p == '_' ? ' ' : *p));
				if (!last)
					printf("%*s", pad + 2, "");
				continue;
			}
			v = cell(res, r, c);
			pad = width[c] - text_width(v);
			if (is_numeric_type(PQftype(res, c)))
				printf("%*s%s", pad, "", v);
			else
			{
				fputs(v, stdout);
				if (!last)
					printf("%*s", pad, "");
			}
			if (!last)
				fputs("  ", stdout);
		}
		putchar('\n');
	}
	free(width);
}

/* an integer with thousands separators: 1234567 -> 1,234,567 */
static void
fmt_count(char *buf, size_t len, double v)
{
	char		digits[32];
	int			n,
				o = 0;
	long long	x = (long long) (v + (v >= 0 ? 0.5 : -0.5));

	snprintf(digits, sizeof(digits), "%lld", x < 0 ? -x : x);
	n = strlen(digits);
	if (x < 0 && (size_t) o + 1 < len)
		buf[o++] = '-';
	for (int i = 0; i < n && (size_t) o + 1 < len; i++)
	{
		if (i > 0 && (n - i) % 3 == 0 && (size_t) o + 2 < len)
			buf[o++] = ',';
		buf[o++] = digits[i];
	}
	buf[o] = '\0';
}

/* a duration: 5s, 2m05s, 1h02m */
static void
fmt_duration(char *buf, size_t len, double secs)
{
	long		s = (long) (secs + 0.5);

	if (secs < 0)
		s = 0;
	if (s < 60)
		snprintf(buf, len, "%lds", s);
	else if (s < 3600)
		snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
	else
		snprintf(buf, len, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
}

/* --------------------------------------------------------- commands */

static int
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

static int
cmd_pending(void)
{
	char	   *sql = api_sql(
		"SELECT name, state, changed, last_run_id AS last_run,"
		"       last_completed_run_id AS last_completed, rows,"
		"       array_to_string(environments, ',') AS environments,"
		"       left(checksum, 12) AS checksum, blocked_by"
		"  FROM %s.backfill_pending() ORDER BY name");
	static const char *const gate[] = {"pending", "blocked", "failed", "stalled", "changed", NULL};
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

static int
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

static int
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

/* one snapshot of a pass being waited for */
typedef struct Snapshot
{
	char		status[32];		/* ledger status */
	char		phase[32];
	char		error[1024];	/* SQLSTATE: message, or the run's latest error */
	char		error_code[16];
	char		throttle[256];
	double		rows;
	double		rows_per_sec;	/* < 0: unknown */
	double		progress;		/* < 0: unknown */
	double		eta;			/* < 0: unknown */
	double		elapsed;
	int			lanes;
	int			partitions;
	int			partitions_done;
	int			partitions_failed;
	bool		paused;
	bool		has_status;		/* backfill_status described this run */
} Snapshot;

static void
copy_field(char *dst, size_t len, const PGresult *res, int c)
{
	if (PQgetisnull(res, 0, c))
		dst[0] = '\0';
	else
		snprintf(dst, len, "%s", PQgetvalue(res, 0, c));
}

static double
num_field(const PGresult *res, int c, double dflt)
{
	return PQgetisnull(res, 0, c) ? dflt : strtod(PQgetvalue(res, 0, c), NULL);
}

/*
 * Read where run run_id of backfill name stands: the ledger row always,
 * backfill_status(name) while that run is the newest pass of name.
 * Returns false on an error (already reported).
 */
static bool
take_snapshot(const char *name, const char *run_id, Snapshot *s)
{
	static char *sql = NULL;
	const char *params[] = {name, run_id};
	PGresult   *res;

	if (sql == NULL)
		sql = api_sql(
			"SELECT l.status, s.phase,"
			"       coalesce(l.error_code || ': ' || l.error_message, s.last_error),"
			"       l.error_code, s.throttle,"
			"       coalesce(s.rows, l.rows, 0), s.rows_per_sec, s.progress,"
			"       extract(epoch FROM s.eta),"
			"       extract(epoch FROM coalesce(l.finished_at, now()) - l.started_at),"
			"       s.live_leases, s.partitions, s.partitions_done, s.partitions_failed,"
			"       coalesce(s.paused, false), s.run_id IS NOT NULL"
			"  FROM %s.backfill_ledger l"
			"  LEFT JOIN %s.backfill_status($1) s ON s.run_id = l.run_id"
			" WHERE l.run_id = $2::bigint");
	res = run_query(sql, 2, params);
	if (res == NULL)
		return false;
	if (PQntuples(res) != 1)
	{
		fprintf(stderr, "%s: run %s of backfill \"%s\" is not visible\n", progname, run_id, name);
		PQclear(res);
		return false;
	}
	copy_field(s->status, sizeof(s->status), res, 0);
	copy_field(s->phase, sizeof(s->phase), res, 1);
	copy_field(s->error, sizeof(s->error), res, 2);
	copy_field(s->error_code, sizeof(s->error_code), res, 3);
	copy_field(s->throttle, sizeof(s->throttle), res, 4);
	s->rows = num_field(res, 5, 0);
	s->rows_per_sec = num_field(res, 6, -1);
	s->progress = num_field(res, 7, -1);
	s->eta = num_field(res, 8, -1);
	s->elapsed = num_field(res, 9, 0);
	s->lanes = (int) num_field(res, 10, 0);
	s->partitions = (int) num_field(res, 11, 0);
	s->partitions_done = (int) num_field(res, 12, 0);
	s->partitions_failed = (int) num_field(res, 13, 0);
	s->paused = strcmp(PQgetvalue(res, 0, 14), "t") == 0;
	s->has_status = strcmp(PQgetvalue(res, 0, 15), "t") == 0;
	PQclear(res);
	return true;
}

/* The progress line: bar, percent, rows, rows/s, ETA, lanes, throttle. */
static void
progress_line(const Snapshot *s, char *buf, size_t len)
{
	char		bar[BAR_WIDTH + 3];
	char		pct[16],
				rows[32],
				rate[48],
				eta[32];
	int			filled = 0;
	size_t		o;

	if (s->progress >= 0)
	{
		filled = (int) (s->progress * BAR_WIDTH + 0.5);
		if (filled > BAR_WIDTH)
			filled = BAR_WIDTH;
		snprintf(pct, sizeof(pct), "%5.1f%%", 100.0 * s->progress);
	}
	else
		snprintf(pct, sizeof(pct), "  --%%");
	bar[0] = '[';
	for (int i = 0; i < BAR_WIDTH; i++)
		bar[i + 1] = i < filled ? '#' : '-';
	bar[BAR_WIDTH + 1] = ']';
	bar[BAR_WIDTH + 2] = '\0';

	fmt_count(rows, sizeof(rows), s->rows);
	if (s->rows_per_sec >= 0)
	{
		fmt_count(rate, sizeof(rate), s->rows_per_sec);
		strncat(rate, " rows/s", sizeof(rate) - strlen(rate) - 1);
	}
	else
		snprintf(rate, sizeof(rate), "-- rows/s");
	if (strcmp(s->status, "failed") == 0 && strcmp(s->error_code, "BF006") == 0)
		snprintf(eta, sizeof(eta), "stalled");
	else if (strcmp(s->status, "running") != 0)
		snprintf(eta, sizeof(eta), "%s", s->status);
	else if (s->eta >= 0)
	{
		strcpy(eta, "ETA ");
		fmt_duration(eta + 4, sizeof(eta) - 4, s->eta);
	}
	else
		snprintf(eta, sizeof(eta), "ETA --");

	snprintf(buf, len, "%s %s  %s rows  %s  %s  lanes %d",
			 bar, pct, rows, rate, eta, s->lanes);
	o = strlen(buf);
	if (s->partitions > 1 && o < len)
		o += snprintf(buf + o, len - o, "  parts %d/%d", s->partitions_done, s->partitions);
	if (s->partitions_failed > 0 && o < len)
		o += snprintf(buf + o, len - o, " (%d failed)", s->partitions_failed);
	if (strcmp(s->status, "running") == 0 && s->phase[0] && strcmp(s->phase, "running") != 0 &&
		o < len)
		o += snprintf(buf + o, len - o, "  %s", s->phase);
	if (s->paused && o < len)
		o += snprintf(buf + o, len - o, "  paused");
	if (s->throttle[0] && o < len)
		snprintf(buf + o, len - o, "  throttled: %s", s->throttle);
}

static int
terminal_columns(void)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 0;
}

static int
wait_for_run(const char *name, const char *run_id, bool plain)
{
	bool		tty = !plain && isatty(STDOUT_FILENO);
	double		last_line = -1e9;
	int			errors = 0;
	Snapshot	s;
	char		line[1024];
	char		rows[32],
				rate[48],
				took[32];
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	memset(&s, 0, sizeof(s));
	for (;;)
	{
		if (!take_snapshot(name, run_id, &s))
		{
			/* a lost connection is re-established; other errors end the wait */
			if (PQstatus(conn) == CONNECTION_OK || ++errors > 20)
			{
				if (tty)
					putchar('\n');
				return failure_status();
			}
			PQreset(conn);
			usleep(POLL_USEC);
			continue;
		}
		errors = 0;
		if (strcmp(s.status, "running") != 0 || interrupted)
			break;
		progress_line(&s, line, sizeof(line));
		if (tty)
		{
			int			cols = terminal_columns();

			if (cols > 1 && (int) strlen(line) >= cols)
				line[cols - 1] = '\0';	/* a wrapped line cannot be redrawn */
			printf("\r%s\033[K", line);
			fflush(stdout);
		}
		else if (now_seconds() - last_line >= PLAIN_EVERY)
		{
			printf("%s\n", line);
			fflush(stdout);
			last_line = now_seconds();
		}
		usleep(POLL_USEC);
	}

	/* the final state, then the outcome */
	progress_line(&s, line, sizeof(line));
	if (tty)
	{
		int			cols = terminal_columns();

		if (cols > 1 && (int) strlen(line) >= cols)
			line[cols - 1] = '\0';
		printf("\r%s\033[K\n", line);
	}
	else
		printf("%s\n", line);

	if (interrupted && strcmp(s.status, "running") == 0)
	{
		fflush(stdout);
		fprintf(stderr, "%s: interrupted; run %s keeps running (\"%s status %s\" shows it)\n",
				progname, run_id, progname, name);
		return EXIT_INTERRUPTED;
	}

	fmt_count(rows, sizeof(rows), s.rows);
	fmt_count(rate, sizeof(rate), s.elapsed > 0 ? s.rows / s.elapsed : 0);
	fmt_duration(took, sizeof(took), s.elapsed);
	if (strcmp(s.status, "completed") == 0)
	{
		printf("completed: run %s, %s rows in %s (%s rows/s)\n", run_id, rows, took, rate);
		fflush(stdout);
		return EXIT_OK;
	}
	else
	{
		const char *outcome = s.status;

		if (strcmp(s.status, "failed") == 0 && strcmp(s.error_code, "BF006") == 0)
			outcome = "stalled";
		printf("%s: run %s, %s rows in %s%s%s\n", outcome, run_id, rows, took,
			   s.error[0] ? ": " : "", s.error);
		fflush(stdout);
		fprintf(stderr, "%s: run %s of backfill \"%s\" %s\n", progname, run_id, name,
				strcmp(outcome, "stalled") == 0 ? "stalled" : s.status);
		if (s.error[0])
			fprintf(stderr, "last error: %s\n", s.error);
		return EXIT_FAILED;
	}
}

static int
cmd_run(const char *name, bool force, bool wait, const char *input, bool plain)
{
	char	   *sql = api_sql("SELECT %s.backfill_run($1, $2::boolean, $3::jsonb)");
	const char *params[] = {name, force ? "true" : "false", input};
	PGresult   *res = must_query(sql, 3, params);
	char	   *run_id;

	free(sql);
	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
	{
		fprintf(stderr, "%s: backfill_run returned no run id\n", progname);
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

/* -------------------------------------------------------------- main */

int
main(int argc, char **argv)
{
	const char *conninfo = NULL;
	const char *input = NULL;
	bool		force = false,
				wait = false,
				plain = false,
				run_opts = false;
	const char *pos[8];
	int			npos = 0;
	bool		options_done = false;
	const char *cmd;
	int			rc;

	for (int i = 1; i < argc; i++)
	{
		const char *a = argv[i];

		if (!options_done && a[0] == '-' && a[1] != '\0')
		{
			if (strcmp(a, "--") == 0)
				options_done = true;
			else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0 || strcmp(a, "-?") == 0)
			{
				usage(stdout);
				return EXIT_OK;
			}
			else if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0)
			{
				printf("pg_backfill (pg_backfill CLI) %s\n", BACKFILL_CLI_VERSION);
				return EXIT_OK;
			}
			else if (strcmp(a, "-d") == 0 || strcmp(a, "--dbname") == 0)
			{
				if (++i >= argc)
					usage_error("option %s needs a connection string", a);
				conninfo = argv[i];
			}
			else if (strncmp(a, "--dbname=", 9) == 0)
				conninfo = a + 9;
			else if (strncmp(a, "-d", 2) == 0)
				conninfo = a + 2;
			else if (strcmp(a, "--force") == 0)
				force = run_opts = true;
			else if (strcmp(a, "--wait") == 0)
				wait = run_opts = true;
			else if (strcmp(a, "--plain") == 0)
				plain = run_opts = true;
			else if (strcmp(a, "--input") == 0)
			{
				if (++i >= argc)
					usage_error("option --input needs a JSON value");
				input = argv[i];
				run_opts = true;
			}
			else if (strncmp(a, "--input=", 8) == 0)
			{
				input = a + 8;
				run_opts = true;
			}
			else
				usage_error("unknown option: %s", a);
			continue;
		}
		if (npos >= (int) (sizeof(pos) / sizeof(pos[0])))
			usage_error("too many arguments");
		pos[npos++] = a;
	}

	if (npos == 0)
		usage_error("no command given");
	cmd = pos[0];
	if (strcmp(cmd, "help") == 0)
	{
		usage(stdout);
		return EXIT_OK;
	}

	if (strcmp(cmd, "list") == 0 || strcmp(cmd, "pending") == 0)
	{
		if (npos != 1)
			usage_error("%s takes no arguments", cmd);
	}
	else if (strcmp(cmd, "run") == 0 || strcmp(cmd, "status") == 0 ||
			 strcmp(cmd, "pause") == 0 || strcmp(cmd, "resume") == 0 ||
			 strcmp(cmd, "cancel") == 0 || strcmp(cmd, "retry") == 0)
	{
		if (npos != 2)
			usage_error("%s takes one backfill name", cmd);
	}
	else
		usage_error("unknown command: %s", cmd);
	if (run_opts && strcmp(cmd, "run") != 0)
		usage_error("--force, --wait, --input and --plain apply to run only");

	connect_db(conninfo);

	if (strcmp(cmd, "list") == 0)
		rc = cmd_list();
	else if (strcmp(cmd, "pending") == 0)
		rc = cmd_pending();
	else if (strcmp(cmd, "run") == 0)
		rc = cmd_run(pos[1], force, wait, input, plain);
	else if (strcmp(cmd, "status") == 0)
		rc = cmd_status(pos[1]);
	else
		rc = cmd_control(cmd, pos[1]);

	fflush(stdout);
	PQfinish(conn);
	return rc;
}
