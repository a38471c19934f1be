/*
 * pg_backfill.c: command-line client of the pg_backfill extension.
 *
 *   pg_backfill [-d CONNINFO] COMMAND [ARGS]
 *
 * Commands: list, run, status, pause, resume, cancel, retry, revert,
 * finalize, pending, top, rehearse.
 * The connection comes from the usual libpq environment (PGHOST, PGPORT,
 * PGUSER, PGDATABASE, PGPASSWORD, PGSERVICE ...) or from -d, which takes a
 * connection string or URI.  Every value goes to the server as a parameter
 * (PQexecParams); nothing is pasted into SQL text.  Every statement runs in
 * its own autocommit transaction.
 *
 * Exit status: 0 success; 1 the command failed (a server error, or the pass
 * waited for did not complete); 2 usage or connection error; 3 (pending
 * only) some backfill is pending, blocked, failed, stalled or changed.
 *
 * This file reads the command line and dispatches; cli.h lists the others.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char *progname = "pg_backfill";

/* what the command line asked for */
typedef struct Options
{
	const char *conninfo;
	const char *input;
	bool		force;
	bool		wait;
	bool		plain;
	bool		batches;		/* status --batches */
	bool		run_opts;		/* an option that only run takes was given */
	double		interval;		/* top --interval (0: not given) */
	int			count;			/* top --count (-1: not given) */
	const char *pos[8];			/* the command and its arguments */
	int			npos;
} Options;

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
			"  status NAME [--batches]   where the newest pass of NAME stands (key: value);\n"
			"                            --batches adds its last recorded batches\n"
			"  rehearse NAME [BATCHES]   run BATCHES (default 5) real batches spread over\n"
			"                            the key space, each rolled back, and project the\n"
			"                            whole pass (backfill_rehearse)\n"
			"  pause NAME                pause the running pass\n"
			"  resume NAME               resume a paused pass\n"
			"  cancel NAME               cancel the running pass\n"
			"  retry NAME                retry failed partitions, or resume a failed pass\n"
			"                            (these four print 'changed' or 'unchanged')\n"
			"  revert NAME [--wait] [--input JSON] [--plain]\n"
			"                            start the declared revert pass and print its run\n"
			"                            id; --wait follows it until it ends\n"
			"  finalize NAME [TIMEOUT]   CALL backfill_finalize: return once NAME is complete\n"
			"                            with its current definition, running its batches\n"
			"                            here when no lane does (default timeout 1 hour)\n"
			"  pending                   the backfill_pending() report; exit status 3 when\n"
			"                            any backfill is pending, blocked, failed, stalled\n"
			"                            or changed (a deploy gate)\n"
			"  top [--interval SECONDS] [--count N]\n"
			"                            every running pass of the database: progress,\n"
			"                            rows/s, ETA, lanes, throttle; redrawn each second\n"
			"                            until Ctrl-C on a terminal, else one snapshot (or\n"
			"                            one per interval with --interval or --count)\n"
			"\n"
			"Options:\n"
			"  -d, --dbname=CONNINFO     connection string or URI (default: the libpq\n"
			"                            environment: PGHOST, PGPORT, PGUSER, PGDATABASE...)\n"
			"  --force                   run: record a new pass even if one completed\n"
			"  --wait                    run, revert: wait for the pass to end, showing\n"
			"                            progress\n"
			"  --input=JSON              run, revert: the input of a scoped backfill\n"
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

/* top's --interval SECONDS and --count N (either as --opt=VALUE) */
static void
parse_top_option(int argc, char **argv, int *i, Options *o)
{
	const char *a = argv[*i];
	bool		is_count = strncmp(a, "--count", 7) == 0;
	const char *v = strchr(a, '=');
	char	   *end;

	if (v != NULL)
		v++;
	else if (++*i < argc)
		v = argv[*i];
	else
		usage_error("option %s needs a value", a);
	if (is_count)
	{
		long		n = strtol(v, &end, 10);

		if (*v == '\0' || *end != '\0' || n < 1 || n > 1000000)
			usage_error("--count takes a number of snapshots from 1 to 1000000, not \"%s\"", v);
		o->count = (int) n;
	}
	else
	{
		double		s = strtod(v, &end);

		if (*v == '\0' || *end != '\0' || !(s >= 0.1 && s <= 3600))
			usage_error("--interval takes seconds from 0.1 to 3600, not \"%s\"", v);
		o->interval = s;
	}
}

/*
 * One option at argv[*i] (advancing *i past its value); returns false when
 * the option was --help or --version, already answered.
 */
static bool
parse_option(int argc, char **argv, int *i, Options *o)
{
	const char *a = argv[*i];

	if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0 || strcmp(a, "-?") == 0)
	{
		usage(stdout);
		return false;
	}
	if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0)
	{
		printf("pg_backfill (pg_backfill CLI) %s\n", BACKFILL_CLI_VERSION);
		return false;
	}
	if (strcmp(a, "-d") == 0 || strcmp(a, "--dbname") == 0)
	{
		if (++*i >= argc)
			usage_error("option %s needs a connection string", a);
		o->conninfo = argv[*i];
	}
	else if (strncmp(a, "--dbname=", 9) == 0)
		o->conninfo = a + 9;
	else if (strncmp(a, "-d", 2) == 0)
		o->conninfo = a + 2;
	else if (strcmp(a, "--force") == 0)
		o->force = o->run_opts = true;
	else if (strcmp(a, "--wait") == 0)
		o->wait = o->run_opts = true;
	else if (strcmp(a, "--batches") == 0)
		o->batches = true;
	else if (strcmp(a, "--plain") == 0)
		o->plain = o->run_opts = true;
	else if (strcmp(a, "--input") == 0)
	{
		if (++*i >= argc)
			usage_error("option --input needs a JSON value");
		o->input = argv[*i];
		o->run_opts = true;
	}
	else if (strncmp(a, "--input=", 8) == 0)
	{
		o->input = a + 8;
		o->run_opts = true;
	}
	else if (strcmp(a, "--interval") == 0 || strncmp(a, "--interval=", 11) == 0 ||
			 strcmp(a, "--count") == 0 || strncmp(a, "--count=", 8) == 0)
		parse_top_option(argc, argv, i, o);
	else
		usage_error("unknown option: %s", a);
	return true;
}

/* Options and arguments, in any order; "--" ends the options. */
static bool
parse_args(int argc, char **argv, Options *o)
{
	bool		options_done = false;

	memset(o, 0, sizeof(Options));
	o->count = -1;
	for (int i = 1; i < argc; i++)
	{
		const char *a = argv[i];

		if (!options_done && a[0] == '-' && a[1] != '\0')
		{
			if (strcmp(a, "--") == 0)
				options_done = true;
			else if (!parse_option(argc, argv, &i, o))
				return false;
			continue;
		}
		if (o->npos >= (int) (sizeof(o->pos) / sizeof(o->pos[0])))
			usage_error("too many arguments");
		o->pos[o->npos++] = a;
	}
	return true;
}

/* Is the command known, with the arguments and options it takes? */
static void
check_command(const Options *o)
{
	const char *cmd = o->pos[0];

	if (strcmp(cmd, "list") == 0 || strcmp(cmd, "pending") == 0 || strcmp(cmd, "top") == 0)
	{
		if (o->npos != 1)
			usage_error("%s takes no arguments", cmd);
	}
	else if (strcmp(cmd, "run") == 0 || strcmp(cmd, "status") == 0 ||
			 strcmp(cmd, "revert") == 0 ||
			 strcmp(cmd, "pause") == 0 || strcmp(cmd, "resume") == 0 ||
			 strcmp(cmd, "cancel") == 0 || strcmp(cmd, "retry") == 0)
	{
		if (o->npos != 2)
			usage_error("%s takes one backfill name", cmd);
	}
	else if (strcmp(cmd, "finalize") == 0 || strcmp(cmd, "rehearse") == 0)
	{
		if (o->npos != 2 && o->npos != 3)
			usage_error("%s takes one backfill name and an optional %s", cmd,
						cmd[0] == 'f' ? "timeout" : "number of batches");
	}
	else
		usage_error("unknown command: %s", cmd);
	if (o->batches && strcmp(cmd, "status") != 0)
		usage_error("--batches applies to status only");
	if ((o->interval > 0 || o->count >= 0) && strcmp(cmd, "top") != 0)
		usage_error("--interval and --count apply to top only");
	if (o->run_opts && strcmp(cmd, "revert") == 0 && o->force)
		usage_error("revert takes --wait, --plain and --input only");
	else if (o->run_opts && strcmp(cmd, "run") != 0 && strcmp(cmd, "revert") != 0)
		usage_error("--force, --wait, --input and --plain apply to run (and --wait, --plain, --input "
					"to revert) only");
}

int
main(int argc, char **argv)
{
	Options		o;
	const char *cmd;
	int			rc;

	if (!parse_args(argc, argv, &o))
		return EXIT_OK;
	if (o.npos == 0)
		usage_error("no command given");
	cmd = o.pos[0];
	if (strcmp(cmd, "help") == 0)
	{
		usage(stdout);
		return EXIT_OK;
	}
	check_command(&o);

	connect_db(o.conninfo);
	if (strcmp(cmd, "list") == 0)
		rc = cmd_list();
	else if (strcmp(cmd, "pending") == 0)
		rc = cmd_pending();
	else if (strcmp(cmd, "top") == 0)
		rc = cmd_top(o.interval, o.count > 0 ? o.count : (o.interval > 0 ? 0 : -1));
	else if (strcmp(cmd, "run") == 0)
		rc = cmd_run(o.pos[1], o.force, o.wait, o.input, o.plain);
	else if (strcmp(cmd, "revert") == 0)
		rc = cmd_revert(o.pos[1], o.wait, o.input, o.plain);
	else if (strcmp(cmd, "status") == 0)
	{
		rc = cmd_status(o.pos[1]);
		if (rc == EXIT_OK && o.batches)
			rc = cmd_batches(o.pos[1]);
	}
	else if (strcmp(cmd, "rehearse") == 0)
		rc = cmd_rehearse(o.pos[1], o.npos == 3 ? o.pos[2] : NULL);
	else if (strcmp(cmd, "finalize") == 0)
		rc = cmd_finalize(o.pos[1], o.npos == 3 ? o.pos[2] : NULL);
	else
		rc = cmd_control(cmd, o.pos[1]);

	fflush(stdout);
	PQfinish(conn);
	return rc;
}
