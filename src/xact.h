/*-------------------------------------------------------------------------
 *
 * xact.h
 *	  One transaction of work in a background worker, and its abort.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_XACT_H
#define BACKFILL_XACT_H

#include "postgres.h"

extern void worker_begin_xact(const char *activity);
extern void worker_commit_xact(void);

/*
 * In a PG_CATCH of a worker: keep the error (a copy in keep), roll the
 * transaction back and go idle.  Returns with keep current.
 */
extern ErrorData *worker_abort_xact(MemoryContext keep);

#endif							/* BACKFILL_XACT_H */
