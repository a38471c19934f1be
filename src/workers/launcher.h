/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  The cluster's launcher: one static background worker that keeps a
 *	  scheduler running for each database in backfill.database_names.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_LAUNCHER_H
#define BACKFILL_LAUNCHER_H

#include "postgres.h"

extern void backfill_register_launcher(void);
extern bool backfill_database_is_listed(const char *dbname);

PGDLLEXPORT void backfill_launcher_main(Datum main_arg);

#endif							/* BACKFILL_LAUNCHER_H */
