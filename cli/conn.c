/*
 * conn.c: the client's connection to the server, the statements it runs,
 * and how the server's errors and notices reach the user.
 *
 * Every statement runs in its own autocommit transaction, and every value
 * travels as a parameter (PQexecParams); nothing is pasted into SQL text
 * but the extension's own schema, quoted by the server.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

PGconn	   *conn;
static char *ext_schema;		/* quoted schema of the extension's functions */

void *
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

/* ------------------------------------------------------------ errors */

/*
 * Text from the server can hold what another role wrote (an action's error
 * message, a backfill's name in a report): terminal control characters in
 * it would let that role clear the operator's screen or print a line over
 * the real outcome, and bidirectional overrides would show its text other
 * than it is.  Every control character but newline and tab (C0, DEL, and in
 * UTF-8 the C1 controls, the bidi overrides and isolates, the line and
 * paragraph separators) shows as '?', one per byte.
 */
static void
make_printable(char *s)
{
	unsigned char *u = (unsigned char *) s;

	for (; *u; u++)
	{
		if ((*u < ' ' && *u != '\n' && *u != '\t') || *u == 0x7f)
			*u = '?';
		/* UTF-8 C1 controls (U+0080..U+009F: CSI, NEL, ...) */
		else if (u[0] == 0xc2 && u[1] >= 0x80 && u[1] <= 0x9f)
			u[0] = u[1] = '?';
		/* bidirectional overrides and isolates, line and paragraph separators */
		else if (u[0] == 0xe2 && ((u[1] == 0x80 && u[2] >= 0xa8 && u[2] <= 0xae) ||
								  (u[1] == 0x81 && u[2] >= 0xa6 && u[2] <= 0xa9)))
			u[0] = u[1] = u[2] = '?';
	}
}

/* a printable copy of an error field, NULL for NULL (never freed: exits soon) */
static char *
field(const PGresult *res, int code)
{
	const char *v = PQresultErrorField(res, code);
	char	   *copy;

	if (v == NULL)
		return NULL;
	copy = strdup(v);
	if (copy != NULL)
		make_printable(copy);
	return copy;
}

/* "pg_backfill: SEVERITY:  message", then DETAIL and HINT, to stderr */
static void
print_message(const PGresult *res, const char *default_severity)
{
	const char *severity = field(res, PG_DIAG_SEVERITY);
	const char *detail = field(res, PG_DIAG_MESSAGE_DETAIL);
	const char *hint = field(res, PG_DIAG_MESSAGE_HINT);

	fprintf(stderr, "%s: %s:  %s\n", progname, severity ? severity : default_severity,
			field(res, PG_DIAG_MESSAGE_PRIMARY));
	if (detail)
		fprintf(stderr, "DETAIL:  %s\n", detail);
	if (hint)
		fprintf(stderr, "HINT:  %s\n", hint);
}

/* Print a server error: message, DETAIL, HINT and SQLSTATE, to stderr. */
static void
report_error(const PGresult *res)
{
	const char *sqlstate;

	if (res == NULL || PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) == NULL)
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
	print_message(res, "ERROR");
	sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (PQresultErrorField(res, PG_DIAG_MESSAGE_HINT) == NULL && sqlstate &&
		(strcmp(sqlstate, "42883") == 0 || strcmp(sqlstate, "3F000") == 0))
		fprintf(stderr, "HINT:  Is the extension installed in this database?  "
				"(CREATE EXTENSION pg_backfill)\n");
	if (sqlstate)
		fprintf(stderr, "SQLSTATE: %s\n", sqlstate);
}

/* NOTICEs and WARNINGs of the server go to stderr, like psql's. */
static void
notice_receiver(void *arg, const PGresult *res)
{
	(void) arg;
	if (PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) == NULL)
		fprintf(stderr, "%s", PQresultErrorMessage(res));
	else
		print_message(res, "NOTICE");
}

/* Exit status for a failed statement: 2 if the connection is gone. */
int
failure_status(void)
{
	return PQstatus(conn) == CONNECTION_OK ? EXIT_FAILED : EXIT_USAGE;
}

/*
 * Run one statement with text parameters in its own (autocommit)
 * transaction.  On an error, report it and return NULL.
 */
PGresult *
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
	for (int r = 0; r < PQntuples(res); r++)
		for (int c = 0; c < PQnfields(res); c++)
			make_printable(PQgetvalue(res, r, c));
	return res;
}

/* Like run_query, but exit on an error. */
PGresult *
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
char *
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

/* connect, and find the schema of the extension's functions; exits on failure */
void
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
