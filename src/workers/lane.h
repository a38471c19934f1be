/*-------------------------------------------------------------------------
 *
 * lane.h
 *	  A lane: the dynamic background worker that runs a pass's batches.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_LANE_H
#define BACKFILL_LANE_H

#include "postgres.h"

#include "utils/timestamp.h"

/* the lane's long-lived memory, and its interruptible sleep */
extern MemoryContext lane_cxt;
extern bool lane_sleep_until(TimestampTz until);

PGDLLEXPORT void backfill_lane_main(Datum main_arg);

#endif							/* BACKFILL_LANE_H */
