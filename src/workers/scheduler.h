/*-------------------------------------------------------------------------
 *
 * scheduler.h
 *	  A database's scheduler: starts and supervises its lanes and relay.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_SCHEDULER_H
#define BACKFILL_SCHEDULER_H

#include "postgres.h"

/* what a scheduler hands a lane or relay it starts (in bgw_extra) */
typedef struct LaneArgs
{
	Oid			dboid;
	Oid			roleoid;
	int64		run_id;
	int			lane_index;		/* its entry in the lane table (shmem.c); -1 for the relay */
	uint64		lane_token;
} LaneArgs;

PGDLLEXPORT void backfill_scheduler_main(Datum main_arg);

#endif							/* BACKFILL_SCHEDULER_H */
