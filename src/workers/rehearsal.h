/*-------------------------------------------------------------------------
 *
 * rehearsal.h
 *	  The rehearsal worker: a backfill's batches rehearsed, and rolled
 *	  back, in a background process logged in as its run_as role.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_REHEARSAL_H
#define BACKFILL_REHEARSAL_H

#include "postgres.h"

#include "postmaster/bgworker.h"
#include "storage/dsm.h"

/*
 * Start a rehearsal worker for the Rehearsal (rehearse.h) in seg, which
 * tells this process when it stops; its handle in cxt, NULL when no
 * background worker slot is free.
 */
extern BackgroundWorkerHandle *rehearsal_start(dsm_segment *seg, MemoryContext cxt);

extern PGDLLEXPORT void backfill_rehearsal_main(Datum main_arg);

#endif							/* BACKFILL_REHEARSAL_H */
