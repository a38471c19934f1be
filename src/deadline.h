/*-------------------------------------------------------------------------
 *
 * deadline.h
 *	  A background worker's hard bound on a declarer's SQL: past it, the
 *	  worker terminates itself (deadline.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_DEADLINE_H
#define BACKFILL_DEADLINE_H

#include "postgres.h"

#include "datatype/timestamp.h"

/*
 * At time at, this process (a background worker only; a no-op in a
 * client session) sends itself SIGTERM: a FATAL error at the next
 * interrupt check, which no PL/pgSQL handler catches.
 */
extern void deadline_arm(TimestampTz at);
extern void deadline_disarm(void);

/*
 * Every second, check that process pid (the caller that waits for this
 * worker) still exists; when it is gone, this worker terminates itself as
 * at a deadline.  A background worker only.
 */
extern void deadline_watch_pid(int pid);

/* Did the deadline end this process?  *elapsed_ms: since it was armed. */
extern bool deadline_fired(int *elapsed_ms);

#endif							/* BACKFILL_DEADLINE_H */
