/*-------------------------------------------------------------------------
 *
 * pacers.h
 *	  The pacers in shared memory: each pass's rate and WAL account,
 *	  whoever works it, and the cluster's WAL account (pacers.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PACERS_H
#define BACKFILL_PACERS_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/lwlock.h"

/* the pacers in shared memory (shmem.c asks for them), under the lane table's lock */
extern const Size backfill_pacers_size;
extern void backfill_pacers_attach(void *table, bool created, LWLock *lane_lock);

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
 * cluster's WAL budget: may a batch of this database's pass start now,
 * else from when, and why.
 */
extern void backfill_pace_claim(int64 run_id, double rate, int64 wal_budget, PaceWait *wait);

/* the WAL a batch of the pass wrote, charged to its budget and the cluster's */
extern void backfill_pace_wal(int64 run_id, double rate, int64 wal_budget,
							  TimestampTz started, int64 bytes);

/* for a scheduler: when the next batch of a pass may start by its rate (0: now) */
extern TimestampTz backfill_pace_next_start(Oid dboid, int64 run_id);

/*
 * A pass's throttle_when, evaluated at most once a second for all its
 * lanes: is an evaluation due (then the caller evaluates and records the
 * answer), else the last answer ("": go on), in answer.
 */
#define BACKFILL_CONDITION_LEN	256
extern bool backfill_condition_claim(int64 run_id, char *answer, size_t len);
extern void backfill_condition_record(int64 run_id, const char *reason);

#endif							/* BACKFILL_PACERS_H */
