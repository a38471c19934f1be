/*
 * cli.h: what the files of the pg_backfill command-line client share.
 *
 *   pg_backfill.c  options, commands chosen, main
 *   conn.c         the connection, statements, server errors and notices
 *   output.c       tables and numbers for a terminal
 *   commands.c     list, pending, status (--batches), the controls, run, revert,
 *                  finalize, rehearse
 *   progress.c     run --wait: snapshots of a pass and its progress line
 *   top.c          top: a live view of every running pass of the database
 */
#ifndef PG_BACKFILL_CLI_H
#define PG_BACKFILL_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "libpq-fe.h"

/* the release version: META.json's (test/t/099_release.pl checks they agree) */
#define BACKFILL_CLI_VERSION "0.6.0"

#define EXIT_OK			0
#define EXIT_FAILED		1
#define EXIT_USAGE		2
#define EXIT_PENDING	3
#define EXIT_INTERRUPTED 130

/* the progress bar's width between its brackets */
#define BAR_WIDTH		24

/* type oids the output formatting cares about */
#define BOOLOID			16
#define INT8OID			20
#define INT2OID			21
#define INT4OID			23
#define FLOAT4OID		700
#define FLOAT8OID		701
#define NUMERICOID		1700

extern const char *progname;
extern PGconn *conn;
extern volatile sig_atomic_t interrupted;

/* conn.c */
extern void *xmalloc(size_t n);
extern void connect_db(const char *conninfo);
extern int	failure_status(void);
extern PGresult *run_query(const char *sql, int nparams, const char *const *params);
extern PGresult *must_query(const char *sql, int nparams, const char *const *params);
extern char *api_sql(const char *fmt);

/* output.c */
extern void print_table(const PGresult *res);
extern void fmt_count(char *buf, size_t len, double v);
extern void fmt_duration(char *buf, size_t len, double secs);
extern void fmt_bar(char *buf, size_t len, double progress);

/* commands.c */
extern int	cmd_list(void);
extern int	cmd_pending(void);
extern int	cmd_status(const char *name);
extern int	cmd_control(const char *verb, const char *name);
extern int	cmd_run(const char *name, bool force, bool wait, const char *input, bool plain);
extern int	cmd_revert(const char *name, bool wait, const char *input, bool plain);
extern int	cmd_finalize(const char *name, const char *timeout);
extern int	cmd_batches(const char *name);
extern int	cmd_rehearse(const char *name, const char *batches);

/* progress.c */
extern int	wait_for_run(const char *name, const char *run_id, bool plain);

/* top.c */
extern int	cmd_top(double interval, int count);

#endif							/* PG_BACKFILL_CLI_H */
