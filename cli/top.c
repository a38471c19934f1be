/*
 * top.c: pg_backfill top.  A live view of every running pass of the
 * database: name, run, progress bar, rows/s, ETA, lanes and throttle, one
 * line each.  On a terminal the screen is redrawn every interval (1 s)
 * until ^C; when stdout is not a terminal, one snapshot is printed (or,
 * with --interval/--count, one per interval), as plain lines.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* the running passes, oldest first, with what backfill_status says of each */
static const char *top_sql_fmt =
	"SELECT l.ledger_name, l.run_id, s.progress, coalesce(s.rows, l.rows, 0),"
	"       s.rows_per_sec, extract(epoch FROM s.eta), coalesce(s.live_leases, 0),"
	"       s.phase, coalesce(s.paused, false), s.throttle"
	"  FROM %s.backfill_ledger l"
	"  LEFT JOIN LATERAL %s.backfill_status(l.declaration) s ON s.run_id = l.run_id"
	" WHERE l.status = 'running'"
	" ORDER BY l.run_id";

static void
on_stop(int signo)
{
	(void) signo;
	interrupted = 1;
}

static double
num_or(const PGresult *res, int r, int c, double dflt)
{
	return PQgetisnull(res, r, c) ? dflt : strtod(PQgetvalue(res, r, c), NULL);
}

/* One pass's line: name, run, bar, percent, rows, rows/s, ETA, lanes, why held back. */
static void
top_line(const PGresult *res, int r, int name_width, char *buf, size_t len)
{
	char		bar[BAR_WIDTH + 3],
				pct[16],
				rows[32],
				rate[32],
				eta[32] = "--";
	double		progress = num_or(res, r, 2, -1);
	double		rps = num_or(res, r, 4, -1);
	double		secs = num_or(res, r, 5, -1);
	const char *phase = PQgetisnull(res, r, 7) ? "queued" : PQgetvalue(res, r, 7);
	size_t		o;

	fmt_bar(bar, sizeof(bar), progress);
	if (progress >= 0)
		snprintf(pct, sizeof(pct), "%5.1f%%", 100.0 * progress);
	else
		snprintf(pct, sizeof(pct), "  --%%");
	fmt_count(rows, sizeof(rows), num_or(res, r, 3, 0));
	if (rps >= 0)
		fmt_count(rate, sizeof(rate), rps);
	else
		snprintf(rate, sizeof(rate), "--");
	if (secs >= 0)
		fmt_duration(eta, sizeof(eta), secs);
	o = snprintf(buf, len, "%-*s  %6s  %s %s  %11s  %9s  %6s  %5s",
				 name_width, PQgetvalue(res, r, 0), PQgetvalue(res, r, 1), bar, pct,
				 rows, rate, eta, PQgetvalue(res, r, 6));
	if (strcmp(phase, "running") != 0 && o < len)
		o += snprintf(buf + o, len - o, "  %s", phase);
	if (strcmp(PQgetvalue(res, r, 8), "t") == 0 && o < len)
		o += snprintf(buf + o, len - o, "  paused");
	if (!PQgetisnull(res, r, 9) && o < len)
		snprintf(buf + o, len - o, "  %s", PQgetvalue(res, r, 9));
}

/* One snapshot: a heading line, then a line per running pass. */
static bool
top_snapshot(const char *sql, bool tty)
{
	PGresult   *res = run_query(sql, 0, NULL);
	int			nt,
				name_width = 4;
	char		when[32],
				line[1024];
	time_t		now = time(NULL);

	if (res == NULL)
		return false;
	nt = PQntuples(res);
	for (int r = 0; r < nt; r++)
		if ((int) strlen(PQgetvalue(res, r, 0)) > name_width)
			name_width = strlen(PQgetvalue(res, r, 0));
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&now));
	if (tty)
		fputs("\033[H\033[2J", stdout);
	printf("pg_backfill top  %s  %d running pass%s%s\n", when, nt, nt == 1 ? "" : "es",
		   tty ? "  (Ctrl-C quits)" : "");
	if (nt > 0)
		printf("%-*s  %6s  %-*s %6s  %11s  %9s  %6s  %5s  %s\n", name_width, "NAME", "RUN",
			   BAR_WIDTH + 2, "PROGRESS", "", "ROWS", "ROWS/S", "ETA", "LANES", "THROTTLE");
	for (int r = 0; r < nt; r++)
	{
		top_line(res, r, name_width, line, sizeof(line));
		printf("%s\n", line);
	}
	fflush(stdout);
	PQclear(res);
	return true;
}

/*
 * pg_backfill top [--interval SECONDS] [--count N]: count 0 is until ^C;
 * interval <= 0 means the default, 1 s.
 */
int
cmd_top(double interval, int count)
{
	bool		tty = isatty(STDOUT_FILENO);
	char	   *sql = api_sql(top_sql_fmt);
	struct sigaction sa;

	if (interval <= 0)
		interval = 1.0;
	if (count < 0)
		count = tty ? 0 : 1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	for (int n = 1; !interrupted; n++)
	{
		if (!top_snapshot(sql, tty))
		{
			free(sql);
			return failure_status();
		}
		if (count > 0 && n >= count)
			break;
		if (!tty)
			putchar('\n');
		/* sleep in small steps, so that ^C ends the view at once */
		for (double slept = 0; slept < interval && !interrupted; slept += 0.1)
			usleep(100000);
	}
	free(sql);
	return EXIT_OK;
}
