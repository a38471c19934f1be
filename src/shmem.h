/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  Shared memory of pg_backfill: one slot per served database, where
 *	  its scheduler's latch is found, the cluster's lane table, one entry
 *	  per lane reserved or running, and the pacers, one per pass that
 *	  started a batch within its 1/rate or owes WAL, and the cluster's WAL
 *	  account (shmem.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_SHMEM_H
#define BACKFILL_SHMEM_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* the most lanes the cluster can have at once (backfill.max_workers' maximum) */
#define BACKFILL_MAX_LANES	128

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

extern void backfill_shmem_init(void);

/*
 * A scheduler claims its slot (false: another live scheduler holds it, and
 * this one must exit); the slot is released at exit, by its owner only.
 */
extern bool backfill_shmem_attach_scheduler(int slot, pid_t *holder);

/* the scheduler found no pg_backfill in its database (before it exits) */
extern void backfill_shmem_scheduler_absent(void);

/*
 * The scheduler leaves with nothing to do: its slot released at once (a
 * wake then reaches the launcher) and marked idle; idle false undoes the
 * mark (work came after all).
 */
extern void backfill_shmem_scheduler_idle(int slot, bool idle);

/*
 * The launcher: its latch, for the wakes of databases no scheduler serves
 * yet; the database to look at now (InvalidOid: none; *all: every one);
 * the slots, and whether a slot's last scheduler found no pg_backfill or
 * left with nothing to do.
 */
extern void backfill_shmem_attach_launcher(void);
extern Oid	backfill_shmem_take_look_at(bool *all);
extern bool backfill_shmem_slot_free(int slot, Oid *dboid, pid_t *pid);
extern bool backfill_shmem_take_absent(int slot, Oid dboid);
extern bool backfill_shmem_take_idle(int slot, Oid dboid);

/*
 * The scheduler's last start of a child worker found a worker slot or not;
 * since when the scheduler of a database has found none (0: it found one,
 * it has not tried for 5 s, or no scheduler serves it).  For a backend that
 * waits for lanes.
 */
extern void backfill_shmem_note_worker_slot(bool found);
extern TimestampTz backfill_shmem_no_worker_slot_since(Oid dboid);

/* DROP DATABASE: keep the launcher off the database, stop its workers */
extern void backfill_shmem_database_going(Oid dboid);
extern bool backfill_shmem_database_is_going(Oid dboid);

/* the lane table, for schedulers: reserve before starting a lane */
extern int	backfill_lane_reserve(Oid dboid, Oid roleoid, int64 run_id, uint64 *token);
extern void backfill_lane_started(int index, uint64 token, pid_t pid);
extern void backfill_lane_forget(int index, uint64 token);
extern void backfill_lane_sweep(void);
extern int	backfill_lane_snapshot(LaneInfo *out);
extern bool backfill_lane_request_yield(int index);
extern bool backfill_lane_preempt(int index, TimestampTz batch_since);
extern void backfill_lane_wanted(void);
extern TimestampTz backfill_pace_next_start(Oid dboid, int64 run_id);
extern int	backfill_lane_terminate_overdue(Oid dboid, int grace_ms, int64 *out, long *next_ms);

/* the probes backfill_probe starts: one per backfill, a cap per calling role */
typedef enum ProbeReservation
{
	PROBE_RESERVED,				/* start it */
	PROBE_RUNNING,				/* one of this backfill runs: wait for it */
	PROBE_ROLE_CAP,				/* the role has backfill.max_probes_per_role running */
	PROBE_TABLE_FULL
} ProbeReservation;

extern ProbeReservation backfill_asked_probe_reserve(Oid dboid, Oid caller, int64 name_hash,
													 int role_cap, int *index, uint64 *token,
													 TimestampTz *since, int *running);
extern void backfill_asked_probe_started(int index, uint64 token, pid_t pid);
extern bool backfill_asked_probe_running(int index, uint64 token);

/* the lane table, for the lane itself (and the engine it runs: pacing.c) */
extern bool backfill_lane_attach(int index, uint64 token);
extern void backfill_lane_set_in_batch(bool in_batch);
extern void backfill_lane_batch_deadline(int timeout_ms);
extern bool backfill_lane_stop_requested(void);
extern bool backfill_lane_yield_requested(void);
extern bool backfill_lane_preempted(void);
extern bool backfill_lane_give_back_idle(void);

/* what a batch waits for before it may start */
typedef enum PaceSignal
{
	PACE_GO,					/* nothing: it may start now */
	PACE_RATE,					/* the pass's rate */
	PACE_WAL_PASS,				/* the pass's max_wal_rate */
	PACE_WAL_CLUSTER			/* backfill.max_wal_rate */
} PaceSignal;

typedef struct PaceWait
{
	TimestampTz until;			/* 0: start now (recorded as started) */
	PaceSignal	signal;
	double		wal_rate;		/* a WAL wait: bytes/s written lately */
	int64		wal_budget;		/* and the budget, bytes/s */
} PaceWait;

/*
 * The pass's rate and WAL budget, shared by all that work it, and the
 * cluster's WAL budget (shmem.c, the pacers): may a batch of this
 * database's pass start now, else from when, and why.
 */
extern void backfill_pace_claim(int64 run_id, double rate, int64 wal_budget, PaceWait *wait);

/* the WAL a batch of the pass wrote, charged to its budget and the cluster's */
extern void backfill_pace_wal(int64 run_id, double rate, int64 wal_budget,
							  TimestampTz started, int64 bytes);

/*
 * A pass's throttle_when, evaluated at most once a second for all its
 * lanes: is an evaluation due (then the caller evaluates and records the
 * answer), else the last answer ("": go on), in answer.
 */
#define BACKFILL_CONDITION_LEN	256
extern bool backfill_condition_claim(int64 run_id, char *answer, size_t len);
extern void backfill_condition_record(int64 run_id, const char *reason);

/*
 * Wake this database's scheduler when the current transaction commits
 * (backfill_run, _resume, _retry, backfill_outbox_emit): a transaction
 * that rolls back wakes nobody.  With no scheduler yet, the launcher is
 * woken to start one.
 */
extern void backfill_wake_scheduler_at_commit(void);

/*
 * Wake the lanes of a pass (run_id 0: every lane of this database) when the
 * current transaction commits, so that a sleeping lane reads its pass
 * again at once; interrupt: also cancel the batch they have in flight and
 * tell them to stop (backfill_cancel).
 */
extern void backfill_wake_lanes_at_commit(int64 run_id, bool interrupt);

#endif							/* BACKFILL_SHMEM_H */
