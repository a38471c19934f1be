/*-------------------------------------------------------------------------
 *
 * children.h
 *	  A database's scheduler's children: its lanes and relay, the round
 *	  robin and the fair share (children.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_CHILDREN_H
#define BACKFILL_CHILDREN_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "needs.h"
#include "shmem.h"

/* what the scheduler remembers of a running pass between ticks */
typedef struct RunMemo
{
	int64		run_id;
	int			quick_exits;	/* lanes that died soon after starting, in a row */
	TimestampTz next_start;		/* no lane for this pass before then */
	bool		seen;			/* still running at the last tick */
	bool		drift_checked;	/* the backfill it requires was probed (probe.c) */
} RunMemo;

/*
 * The cluster's lanes as one tick sees them: the lane table's entries, plus
 * the lanes this tick started.
 */
typedef struct LaneCensus
{
	int			n;
	LaneInfo	lanes[BACKFILL_MAX_LANES];
} LaneCensus;

/* the scheduler's long-lived context: its children, its memos */
extern MemoryContext scheduler_cxt;

/* what the scheduler remembers of a pass (created empty) */
extern RunMemo *memo_for(int64 run_id);

/* every memo marked not seen at this tick */
extern void memos_unseen(void);

/* Forget lanes that have stopped; note those that stopped too soon. */
extern void reap_lanes(void);

/* Lanes in the census matching a database, role and pass (0 / InvalidOid: any). */
extern int	census_count(LaneCensus *census, Oid dboid, Oid roleoid, int64 run_id);

/* Start lanes, round robin over the eligible passes, while slots are free. */
extern void start_lanes(List *needs, LaneCensus *census);

/* Does an eligible pass still wait for a lane? */
extern bool passes_waiting(List *needs);

/* Fair share: a lane of the role holding the most asked to give its place up. */
extern void ask_for_fair_share(List *needs, LaneCensus *census);

/* Start the outbox relay if messages wait and it is not running. */
extern void start_relay_if_needed(void);

/* Forget the memos of passes that have ended and have no lane left. */
extern void forget_ended_passes(void);

/* a child still running (a lane, the relay); the relay running */
extern bool children_running(void);
extern bool relay_running(void);

#endif							/* BACKFILL_CHILDREN_H */
