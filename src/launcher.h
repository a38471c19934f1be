/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  The launchers: one static background worker per served database.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_LAUNCHER_H
#define BACKFILL_LAUNCHER_H

#include "postgres.h"

/* what a launcher hands a lane it starts (in bgw_extra) */
typedef struct LaneArgs
{
	Oid			dboid;
	Oid			roleoid;
	int64		run_id;
} LaneArgs;

extern void backfill_register_launchers(void);
extern bool backfill_database_is_listed(const char *dbname);

PGDLLEXPORT void backfill_launcher_main(Datum main_arg);

#endif							/* BACKFILL_LAUNCHER_H */
