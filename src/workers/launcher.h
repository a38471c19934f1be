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

PGDLLEXPORT void backfill_launcher_main(Datum main_arg);

#endif							/* BACKFILL_LAUNCHER_H */
