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

PGDLLEXPORT void backfill_lane_main(Datum main_arg);

#endif							/* BACKFILL_LANE_H */
