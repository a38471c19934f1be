/*
 * progress.c: run --wait.  Follows one pass by polling its ledger row and
 * backfill_status() every half second, drawing a progress line (redrawn in
 * place on a terminal, a plain line every 2 s otherwise), then prints how
 * the pass ended.  ^C stops the waiting, not the pass.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define POLL_USEC		500000	/* --wait polls every 0.5 s */
#define PLAIN_EVERY		2.0		/* a plain progress line every 2 s */

volatile sig_atomic_t interrupted = 0;

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
	size_t		o;

	if (s->progress >= 0)
		snprintf(pct, sizeof(pct), "%5.1f%%", 100.0 * s->progress);
	else
		snprintf(pct, sizeof(pct), "  --%%");
	fmt_bar(bar, sizeof(bar), s->progress);

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

/* Print the progress line: redrawn in place on a terminal, else a line. */
static void
show_line(char *line, bool tty, bool final)
{
	if (tty)
	{
		int			cols = terminal_columns();

		if (cols > 1 && (int) strlen(line) >= cols)
			line[cols - 1] = '\0';	/* a wrapped line cannot be redrawn */
		printf("\r%s\033[K%s", line, final ? "\n" : "");
	}
	else
		printf("%s\n", line);
	fflush(stdout);
}

/*
 * The rows run run_id recorded as failed alone and skipped, as a table on
 * stdout (nothing when there are none): the first SHOW_FAILED_ROWS of
 * them, then how many more backfill_failed_rows lists.
 */
#define SHOW_FAILED_ROWS	"20"

static void
show_failed_rows(const char *name, const char *run_id)
{
	char	   *sql = api_sql("SELECT key, sqlstate, message, attempts"
							  "  FROM %s.backfill_failed_rows($1) WHERE run_id = $2::bigint"
							  " LIMIT " SHOW_FAILED_ROWS);
	char	   *count_sql = api_sql("SELECT count(*) FROM %s.backfill_failed_rows($1)"
									" WHERE run_id = $2::bigint");
	const char *params[] = {name, run_id};
	PGresult   *res = run_query(sql, 2, params);
	PGresult   *count = run_query(count_sql, 2, params);
	long		total = count != NULL && PQntuples(count) == 1 ?
		strtol(PQgetvalue(count, 0, 0), NULL, 10) : 0;

	if (res != NULL && PQntuples(res) > 0)
	{
		if (total < PQntuples(res))
			total = PQntuples(res);
		printf("%ld row(s) failed alone and were skipped (backfill_failed_rows):\n", total);
		print_table(res);
		if (total > PQntuples(res))
			printf("... and %ld more (SELECT * FROM backfill_failed_rows('%s') lists them all)\n",
				   total - PQntuples(res), name);
		printf("fix them, then \"%s retry %s\" tries exactly these rows again\n",
			   progname, name);
	}
	if (res != NULL)
		PQclear(res);
	if (count != NULL)
		PQclear(count);
	free(sql);
	free(count_sql);
}

/* How the pass ended, on stdout; why it failed, on stderr too. */
static int
report_outcome(const Snapshot *s, const char *name, const char *run_id)
{
	char		rows[32],
				rate[48],
				took[32];
	const char *outcome = s->status;

	if (interrupted && strcmp(s->status, "running") == 0)
	{
		fprintf(stderr, "%s: interrupted; run %s keeps running (\"%s status %s\" shows it)\n",
				progname, run_id, progname, name);
		return EXIT_INTERRUPTED;
	}

	fmt_count(rows, sizeof(rows), s->rows);
	fmt_count(rate, sizeof(rate), s->elapsed > 0 ? s->rows / s->elapsed : 0);
	fmt_duration(took, sizeof(took), s->elapsed);
	if (strcmp(s->status, "completed") == 0)
	{
		printf("completed: run %s, %s rows in %s (%s rows/s)\n", run_id, rows, took, rate);
		fflush(stdout);
		return EXIT_OK;
	}
	if (strcmp(s->status, "failed") == 0 && strcmp(s->error_code, "BF006") == 0)
		outcome = "stalled";
	printf("%s: run %s, %s rows in %s%s%s\n", outcome, run_id, rows, took,
		   s->error[0] ? ": " : "", s->error);
	/* a pass that ended with rows it skipped (tolerated or not) lists them */
	if (strcmp(s->status, "completed_with_failures") == 0 ||
		strcmp(s->error_code, "BF018") == 0)
		show_failed_rows(name, run_id);
	fflush(stdout);
	fprintf(stderr, "%s: run %s of backfill \"%s\" %s\n", progname, run_id, name, outcome);
	if (s->error[0])
		fprintf(stderr, "last error: %s\n", s->error);
	return EXIT_FAILED;
}

int
wait_for_run(const char *name, const char *run_id, bool plain)
{
	bool		tty = !plain && isatty(STDOUT_FILENO);
	double		last_line = -1e9;
	int			errors = 0;
	Snapshot	s;
	char		line[1024];
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
		if (tty || now_seconds() - last_line >= PLAIN_EVERY)
		{
			show_line(line, tty, false);
			last_line = now_seconds();
		}
		usleep(POLL_USEC);
	}

	/* the final state, then the outcome */
	progress_line(&s, line, sizeof(line));
	show_line(line, tty, true);
	return report_outcome(&s, name, run_id);
}
