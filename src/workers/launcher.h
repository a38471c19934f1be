/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  The cluster's launcher: one static background worker that keeps a
 *	  scheduler running for each database where pg_backfill is installed
 *	  (among those backfill.database_names names, when it is set), and the
 *	  DROP DATABASE hook that stops them first.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_LAUNCHER_H
#define BACKFILL_LAUNCHER_H

#include "postgres.h"

extern void backfill_register_launcher(void);
/* may this database be served: named in backfill.database_names, or it is empty */
extern bool backfill_database_is_listed(const char *dbname);
extern void backfill_check_database_served(const char *name);

/*
 * How the run's last_error begins when a scheduler paused the pass because
 * its database is no longer served (a template, no connections); a resume
 * clears it.
 */
#define BACKFILL_UNSERVED_PAUSE "paused by its scheduler: "

PGDLLEXPORT void backfill_launcher_main(Datum main_arg);

#endif							/* BACKFILL_LAUNCHER_H */
