/*-------------------------------------------------------------------------
 *
 * xact.h
 *	  One transaction of work in a background worker.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_XACT_H
#define BACKFILL_XACT_H

#include "postgres.h"

/* the memory context worker_begin_xact was called in, restored at commit */
extern MemoryContext worker_outer_cxt;

extern void worker_begin_xact(const char *activity);
extern void worker_commit_xact(void);

#endif							/* BACKFILL_XACT_H */
