/*-------------------------------------------------------------------------
 *
 * needs.h
 *	  Which passes need lanes, as a database's scheduler reads them
 *	  (needs.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_NEEDS_H
#define BACKFILL_NEEDS_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

/* a running pass as one tick sees it */
typedef struct RunNeed
{
	int64		run_id;
	Oid			owner;
	int			lanes_wanted;
	int			lanes_live;
	int			claimable;		/* partitions a lane could claim */
	bool		check_drift;	/* queued, and requires another backfill */
	bool		check_migration;	/* queued, its migration not yet read applied since */
	char	   *name;			/* the declaration's name */
	char	   *login_problem;	/* why its lanes could not log in, or NULL */
	int			have;			/* lanes it has, by the lane table or its leases */
	bool		eligible;		/* may get a lane this tick */
	TimestampTz window_next;	/* outside its windows: when the next starts; else 0 */
	bool		idle;			/* its next batch is far off: a lane only if none else waits */
} RunNeed;

/* what the last look found (read_running_passes), for the scheduler's loop */
extern bool outbox_pending;
extern bool extension_present;
extern bool catalogs_current;
extern bool database_busy;
extern const char *database_refusal;

/*
 * Read the running passes and how many lanes each wants (a list of
 * RunNeed, in result_cxt); its own transaction.
 */
extern List *read_running_passes(MemoryContext result_cxt);

/* Has the database work that needs its scheduler?  In the caller's transaction. */
extern bool database_has_work(void);

/* End a pass whose lanes cannot log in: failed, BF016 (its own transaction). */
extern void fail_pass_cannot_login(RunNeed *need);

/* Is the next batch of this pass, by its rate, far off?  *sleep_ms lowered. */
extern bool pass_batch_far_off(RunNeed *need, TimestampTz now, long *sleep_ms);

#endif							/* BACKFILL_NEEDS_H */
