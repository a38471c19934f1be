/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  Plumbing every pg_backfill background worker shares: how one is
 *	  described and started, and what a scheduler hands its children.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_WORKER_H
#define BACKFILL_WORKER_H

#include "postgres.h"

#include "postmaster/bgworker.h"
#include "storage/dsm.h"
#include "utils/guc.h"

/* what a scheduler hands a lane or relay it starts (in bgw_extra) */
typedef struct LaneArgs
{
	Oid			dboid;
	Oid			roleoid;
	int64		run_id;
	int			lane_index;		/* its entry in the lane table (shmem.c); -1 for the relay */
	uint64		lane_token;
} LaneArgs;

/* a worker of this library that connects to a database once recovery is over */
extern void worker_describe(BackgroundWorker *worker, const char *function,
							const char *name, const char *type);

/*
 * The settings a worker that runs only the extension's own SQL (scheduler,
 * relay) keeps whatever its database or role was given: read-write, no
 * statement or idle timeout, READ COMMITTED.
 */
extern void worker_own_settings(void);

/*
 * A worker is the role it logged in as: a database's or role's SET role
 * or SET session_authorization is undone (in a transaction of its own).
 */
extern void worker_own_identity(GucSource source);

/*
 * The settings under which keys, cursors and bounds become text and back,
 * the same in every lane and finalizing session whatever the role, the
 * database or the caller set: DateStyle ISO, IntervalStyle postgres,
 * extra_float_digits 3.  action is GUC_ACTION_SET for a lane's session,
 * GUC_ACTION_SAVE inside a GUC nest level.
 */
extern void worker_key_text_settings(GucAction action);

/*
 * One key value's text (output function output) or value from its text
 * (input function input), under those settings and lc_monetary C for the
 * call alone.
 */
extern char *worker_key_output(Oid output, Datum value);
extern Datum worker_key_input(Oid input, const char *text, Oid ioparam);

/*
 * Start a child of this process: never restarted, it tells this process
 * when it stops.  extra (extra_len bytes, at most BGW_EXTRALEN) goes into
 * its bgw_extra.  The handle is allocated in cxt; NULL when no worker slot
 * is free (the caller warns and tries again later).
 */
extern BackgroundWorkerHandle *worker_start(const char *function, const char *name,
											const char *type, Datum main_arg,
											const void *extra, Size extra_len,
											MemoryContext cxt);

/*
 * A worker that answers a caller through a shared memory segment (scope,
 * rehearsal): SIGTERM ends it, signals unblocked, the segment whose handle
 * is main_arg attached (*seg); its address.  The worker exits at once
 * when the segment is gone (its caller left).
 */
extern void *worker_attach_caller(Datum main_arg, dsm_segment **seg);

/* a lane's, a rehearsal's or a probe's CPU priority lowered to backfill.lane_nice */
extern void worker_lower_priority(void);

#endif							/* BACKFILL_WORKER_H */
