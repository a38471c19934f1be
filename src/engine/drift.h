/*-------------------------------------------------------------------------
 *
 * drift.h
 *	  Reopening a required backfill whose predicate matches rows again.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_DRIFT_H
#define BACKFILL_DRIFT_H

#include "postgres.h"

#include "utils/memutils.h"

extern bool drift_reopen_required(int64 waiting_run_id);

/*
 * One look at the watched backfills: probe those due (as their role,
 * bounded), count the probes, enqueue a catch-up pass where rows match
 * again.  Returns the milliseconds until the next is due, or -1 for none.
 * Runs transactions of its own; cxt outlives them.
 */
extern long drift_watch(MemoryContext cxt);

#endif							/* BACKFILL_DRIFT_H */
