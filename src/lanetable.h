/*-------------------------------------------------------------------------
 *
 * lanetable.h
 *	  The cluster's lane table in shared memory: one entry per lane
 *	  reserved or running (lanetable.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_LANETABLE_H
#define BACKFILL_LANETABLE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/lwlock.h"

/* the most lanes the cluster can have at once (backfill.max_workers' maximum) */
#define BACKFILL_MAX_LANES	128

/* an entry reserved for a lane (or a probe) that never said its pid is freed after this */
#define LANE_RESERVE_TIMEOUT_MS	60000

/* a lane as the lane table shows it (a copy, taken under the lock) */
typedef struct LaneInfo
{
	Oid			dboid;
	Oid			roleoid;
	int64		run_id;
	int			index;			/* its entry in the table */
	bool		yield;			/* asked to give its lane up */
	bool		in_batch;		/* a batch of it is open ... */
	TimestampTz batch_since;	/* ... since then */
} LaneInfo;

/* the table in shared memory (shmem.c asks for it); its lock, also the pacers' */
extern const Size backfill_lane_table_size;
extern LWLock *backfill_lane_table_attach(void *table, bool created);

/* Is there a process with this pid?  (Only postmaster children use the tables.) */
extern bool backfill_pid_alive(pid_t pid);

/* the lane table, for schedulers: reserve before starting a lane */
extern int	backfill_lane_reserve(Oid dboid, Oid roleoid, int64 run_id, uint64 *token);
extern void backfill_lane_started(int index, uint64 token, pid_t pid);
extern void backfill_lane_forget(int index, uint64 token);
extern void backfill_lane_sweep(void);
extern int	backfill_lane_snapshot(LaneInfo *out);
extern bool backfill_lane_request_yield(int index);
extern bool backfill_lane_preempt(int index, TimestampTz batch_since);
extern void backfill_lane_wanted(void);
extern int	backfill_lane_terminate_overdue(Oid dboid, int grace_ms, int64 *out, long *next_ms);

/*
 * DROP DATABASE: the pids of a database's lanes; a committed control: wake
 * the lanes of a pass (run_id 0: all of the database's), interrupt: stop
 * them and cancel their batch in flight.
 */
extern int	backfill_lane_pids(Oid dboid, pid_t *pids);
extern void backfill_lane_wake(Oid dboid, int64 run_id, bool interrupt);

/* the lane table, for the lane itself (and the engine it runs: pacing.c) */
extern bool backfill_lane_attach(int index, uint64 token);
extern void backfill_lane_set_in_batch(bool in_batch);
extern void backfill_lane_batch_deadline(int timeout_ms);
extern bool backfill_lane_stop_requested(void);
extern bool backfill_lane_yield_requested(void);
extern bool backfill_lane_preempted(void);
extern bool backfill_lane_give_back_idle(void);

#endif							/* BACKFILL_LANETABLE_H */
