/*-------------------------------------------------------------------------
 *
 * lanetable.c
 *	  The cluster's lane table in shared memory: one entry per lane
 *	  reserved or running, so that every scheduler counts every live lane
 *	  and a control can wake (or interrupt) the lanes of its pass.
 *
 * A scheduler reserves an entry before it starts a lane and hands the lane
 * the entry's index and a token; the lane takes the entry over (pid, latch)
 * and releases it at exit.  An entry whose lane never started or died
 * without its exit callback (a process that could not log in, say) is
 * swept by any scheduler: its pid is gone.  Counting the entries is
 * counting the cluster's lanes, whoever started them, so a restarted
 * scheduler never exceeds backfill.max_workers.  A lane in a batch says
 * so, so that backfill_cancel cancels only its batch.  The table's lock is
 * also the lock of the pacers (pacers.c) and the asked probes
 * (askedprobes.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "lanetable.h"

typedef struct BackfillLaneEntry
{
	bool		in_use;
	uint64		token;			/* changes with every reservation */
	Oid			dboid;
	Oid			roleoid;
	int64		run_id;
	TimestampTz reserved_at;
	pid_t		pid;			/* 0 until the lane (or its scheduler) says */
	Latch	   *latch;			/* set once the lane has taken the entry */
	bool		in_batch;		/* a batch's transaction is open */
	bool		stop;			/* the pass was cancelled: stop at once */
	bool		yield;			/* give the lane up to another role's pass */
	TimestampTz batch_since;	/* when the open batch began */
	bool		preempt;		/* its batch was cancelled for another role's pass */
	TimestampTz batch_deadline; /* the open batch's batch_timeout ends (0: none) */
	TimestampTz cancelled_at;	/* a cancel or preemption signalled the open batch */
	TimestampTz terminated_at;	/* the lane was sent SIGTERM for outliving them */
} BackfillLaneEntry;

typedef struct BackfillLaneTable
{
	LWLock	   *lane_lock;		/* the lane table */
	uint64		next_token;
	BackfillLaneEntry lanes[BACKFILL_MAX_LANES];
	TimestampTz lane_wanted_at; /* a scheduler's pass waited for a lane, all taken */
} BackfillLaneTable;

static BackfillLaneTable *shared = NULL;

/* the lane table entry this process (a lane) holds */
static int	my_lane = -1;
static uint64 my_lane_token = 0;

/* the table's size, for the shared memory request */
const Size backfill_lane_table_size = sizeof(BackfillLaneTable);

/*
 * The table, zeroed when created (shmem.c, under AddinShmemInitLock);
 * returns its lock.
 */
LWLock *
backfill_lane_table_attach(void *table, bool created)
{
	shared = table;
	if (created)
	{
		shared->lane_lock = &(GetNamedLWLockTranche("pg_backfill"))->lock;
		shared->next_token = 1;
	}
	return shared->lane_lock;
}

/* Is there a process with this pid?  (Only postmaster children use the table.) */
bool
backfill_pid_alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

/* ------------------------------------------------------------------
 * The lane table: schedulers
 * ------------------------------------------------------------------ */

/*
 * Reserve an entry for a lane about to start.  Returns its index and sets
 * *token, or -1 when the table is full.
 */
int
backfill_lane_reserve(Oid dboid, Oid roleoid, int64 run_id, uint64 *token)
{
	int			index = -1;

	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	for (int i = 0; i < BACKFILL_MAX_LANES; i++)
	{
		BackfillLaneEntry *e = &shared->lanes[i];

		if (e->in_use)
			continue;
		memset(e, 0, sizeof(BackfillLaneEntry));
		e->in_use = true;
		e->token = shared->next_token++;
		e->dboid = dboid;
		e->roleoid = roleoid;
		e->run_id = run_id;
		e->reserved_at = GetCurrentTimestamp();
		*token = e->token;
		index = i;
		break;
	}
	LWLockRelease(shared->lane_lock);
	return index;
}

/* The postmaster started the lane: record its pid, if the lane has not. */
void
backfill_lane_started(int index, uint64 token, pid_t pid)
{
	BackfillLaneEntry *e = &shared->lanes[index];

	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	if (e->in_use && e->token == token && e->pid == 0)
		e->pid = pid;
	LWLockRelease(shared->lane_lock);
}

/* The lane did not start, or has stopped: free its entry if it is still its. */
void
backfill_lane_forget(int index, uint64 token)
{
	BackfillLaneEntry *e = &shared->lanes[index];

	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	if (e->in_use && e->token == token)
		e->in_use = false;
	LWLockRelease(shared->lane_lock);
}

/*
 * Free the entries of lanes that are gone without releasing them: their
 * process no longer exists, or they never said their pid within a minute.
 */
void
backfill_lane_sweep(void)
{
	TimestampTz now = GetCurrentTimestamp();

	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	for (int i = 0; i < BACKFILL_MAX_LANES; i++)
	{
		BackfillLaneEntry *e = &shared->lanes[i];

		if (!e->in_use)
			continue;
		if (e->pid != 0 ? !backfill_pid_alive(e->pid) :
			TimestampDifferenceExceeds(e->reserved_at, now, LANE_RESERVE_TIMEOUT_MS))
			e->in_use = false;
	}
	LWLockRelease(shared->lane_lock);
}

/* Copy the live lanes into out (BACKFILL_MAX_LANES entries); returns how many. */
int
backfill_lane_snapshot(LaneInfo *out)
{
	int			n = 0;

	LWLockAcquire(shared->lane_lock, LW_SHARED);
	for (int i = 0; i < BACKFILL_MAX_LANES; i++)
	{
		BackfillLaneEntry *e = &shared->lanes[i];

		if (!e->in_use)
			continue;
		out[n].dboid = e->dboid;
		out[n].roleoid = e->roleoid;
		out[n].run_id = e->run_id;
		out[n].index = i;
		out[n].yield = e->yield;
		out[n].in_batch = e->in_batch && e->pid != 0;
		out[n].batch_since = e->batch_since;
		n++;
	}
	LWLockRelease(shared->lane_lock);
	return n;
}

/* Ask a lane to give its lane up after its batch; false if it is gone. */
bool
backfill_lane_request_yield(int index)
{
	BackfillLaneEntry *e = &shared->lanes[index];
	bool		asked = false;

	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	if (e->in_use)
	{
		e->yield = true;
		if (e->latch != NULL)
			SetLatch(e->latch);
		asked = true;
	}
	LWLockRelease(shared->lane_lock);
	return asked;
}

/*
 * Cancel a lane's batch for another role's pass (the fair share's bound,
 * backfill.preempt_after): only the batch that began at batch_since, if it
 * is still open.  The flag and the signal go out under the lock the lane
 * takes to leave its batch, as a cancel's do (wake_lanes).
 */
bool
backfill_lane_preempt(int index, TimestampTz batch_since)
{
	BackfillLaneEntry *e = &shared->lanes[index];
	bool		done = false;

	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	/*
	 * Once only: the grace after which the scheduler terminates a batch that
	 * caught the cancel runs from the first one (a cancel sent again each
	 * tick would start it again, and such a batch would never end).
	 */
	if (e->in_use && e->in_batch && e->pid != 0 && e->batch_since == batch_since &&
		!e->preempt)
	{
		e->preempt = true;
		e->yield = true;
		if (e->cancelled_at == 0)
			e->cancelled_at = GetCurrentTimestamp();
		(void) kill(e->pid, SIGINT);
		done = true;
	}
	LWLockRelease(shared->lane_lock);
	return done;
}

/*
 * When must a lane in a batch be terminated: grace after its batch_timeout
 * ends, or after a cancel or preemption signalled its batch (0: never yet).
 */
static TimestampTz
lane_kill_at(BackfillLaneEntry *e, int grace_ms)
{
	TimestampTz at = 0;

	if (!e->in_use || !e->in_batch || e->pid == 0)
		return 0;
	if (e->batch_deadline != 0)
		at = TimestampTzPlusMilliseconds(e->batch_deadline, grace_ms);
	if (e->cancelled_at != 0)
	{
		TimestampTz c = TimestampTzPlusMilliseconds(e->cancelled_at, grace_ms);

		at = (at == 0) ? c : Min(at, c);
	}
	return at;
}

/*
 * The lanes of a database whose batch outlives its bound (its batch_timeout,
 * a cancel, a preemption) by more than grace_ms: a declarer's PL/pgSQL that
 * catches query_canceled ignores the statement's cancel, not SIGTERM (die:
 * a FATAL error no handler catches).  Each is sent SIGTERM (again each
 * grace_ms while it lives); its batch's transaction aborts with the
 * checkpoint, and its lease's holder is dead: reclaimed, or left to the
 * cancel.  Their run ids go into out (BACKFILL_MAX_LANES); returns how
 * many; *next_ms is lowered to the next such moment.
 */
int
backfill_lane_terminate_overdue(Oid dboid, int grace_ms, int64 *out, long *next_ms)
{
	TimestampTz now = GetCurrentTimestamp();
	int			n = 0;

	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	for (int i = 0; i < BACKFILL_MAX_LANES; i++)
	{
		BackfillLaneEntry *e = &shared->lanes[i];
		TimestampTz at;

		if (e->dboid != dboid || (at = lane_kill_at(e, grace_ms)) == 0)
			continue;
		if (e->terminated_at != 0)
			at = Max(at, TimestampTzPlusMilliseconds(e->terminated_at, grace_ms));
		if (at > now)
		{
			*next_ms = Min(*next_ms, (long) ((at - now) / 1000) + 1);
			continue;
		}
		(void) kill(e->pid, SIGTERM);
		if (e->terminated_at == 0)
			out[n++] = e->run_id;
		e->terminated_at = now;
		*next_ms = Min(*next_ms, (long) grace_ms);
	}
	LWLockRelease(shared->lane_lock);
	return n;
}

/* a scheduler's note that a pass waits for a lane holds this long */
#define LANE_WANTED_MS	3000

/* A pass of this scheduler waits for a lane and every lane is taken. */
void
backfill_lane_wanted(void)
{
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	shared->lane_wanted_at = GetCurrentTimestamp();
	LWLockRelease(shared->lane_lock);
}

/*
 * A lane whose next batch is far off (its pass's rate): while a pass waits
 * for a lane, it gives its lane up (its yield flag set, so work.c gives the
 * partition back at its checkpoint and the lane leaves).  False when no
 * pass waits, or this process is no lane.
 */
bool
backfill_lane_give_back_idle(void)
{
	bool		give = false;

	if (my_lane < 0)
		return false;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	if (shared->lane_wanted_at != 0 &&
		!TimestampDifferenceExceeds(shared->lane_wanted_at, GetCurrentTimestamp(),
									LANE_WANTED_MS))
	{
		shared->lanes[my_lane].yield = true;
		give = true;
	}
	LWLockRelease(shared->lane_lock);
	return give;
}

/* The pids of a database's lanes, into pids (BACKFILL_MAX_LANES); returns how many. */
int
backfill_lane_pids(Oid dboid, pid_t *pids)
{
	int			n = 0;

	LWLockAcquire(shared->lane_lock, LW_SHARED);
	for (int i = 0; i < BACKFILL_MAX_LANES; i++)
		if (shared->lanes[i].in_use && shared->lanes[i].dboid == dboid &&
			shared->lanes[i].pid != 0)
			pids[n++] = shared->lanes[i].pid;
	LWLockRelease(shared->lane_lock);
	return n;
}

/* ------------------------------------------------------------------
 * The lane table: the lane itself
 * ------------------------------------------------------------------ */

static void
detach_lane(int code, Datum arg)
{
	BackfillLaneEntry *e;

	if (shared == NULL || my_lane < 0)
		return;
	e = &shared->lanes[my_lane];
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	if (e->in_use && e->token == my_lane_token)
		e->in_use = false;
	LWLockRelease(shared->lane_lock);
	my_lane = -1;
}

/*
 * Take over the entry the scheduler reserved.  False when it is not ours
 * (freed, or reserved again for another lane): the lane must exit.
 */
bool
backfill_lane_attach(int index, uint64 token)
{
	BackfillLaneEntry *e;
	bool		ok = false;

	if (index < 0 || index >= BACKFILL_MAX_LANES)
		return false;
	e = &shared->lanes[index];
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	if (e->in_use && e->token == token)
	{
		e->pid = MyProcPid;
		e->latch = &MyProc->procLatch;
		ok = true;
	}
	LWLockRelease(shared->lane_lock);
	if (ok)
	{
		my_lane = index;
		my_lane_token = token;
		before_shmem_exit(detach_lane, (Datum) 0);
	}
	return ok;
}

void
backfill_lane_set_in_batch(bool in_batch)
{
	TimestampTz now = GetCurrentTimestamp();
	BackfillLaneEntry *e;

	if (my_lane < 0)
		return;
	e = &shared->lanes[my_lane];
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	e->in_batch = in_batch;
	e->cancelled_at = 0;
	e->batch_deadline = 0;
	if (in_batch)
		e->batch_since = now;
	LWLockRelease(shared->lane_lock);
}

/*
 * The batch's transaction begins, under its statement timeout of
 * timeout_ms (batch.c): past it plus a grace, its scheduler terminates the
 * lane (backfill_lane_terminate_overdue).  What the lane waits for before
 * (a shard move) is not bounded by it.
 */
void
backfill_lane_batch_deadline(int timeout_ms)
{
	if (my_lane < 0 || timeout_ms <= 0)
		return;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	shared->lanes[my_lane].batch_deadline =
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	LWLockRelease(shared->lane_lock);
}

static bool
my_lane_flag(bool stop)
{
	bool		set;

	if (my_lane < 0)
		return false;
	LWLockAcquire(shared->lane_lock, LW_SHARED);
	set = stop ? shared->lanes[my_lane].stop : shared->lanes[my_lane].yield;
	LWLockRelease(shared->lane_lock);
	return set;
}

bool
backfill_lane_stop_requested(void)
{
	return my_lane_flag(true);
}

bool
backfill_lane_yield_requested(void)
{
	return my_lane_flag(false);
}

bool
backfill_lane_preempted(void)
{
	bool		set;

	if (my_lane < 0)
		return false;
	LWLockAcquire(shared->lane_lock, LW_SHARED);
	set = shared->lanes[my_lane].preempt;
	LWLockRelease(shared->lane_lock);
	return set;
}

/*
 * Wake the lanes of a pass (run_id 0: all of this database's); interrupt:
 * mark them stopping, and cancel the statement of each that is in a batch.
 * The flag and the signal go out under the lock the lane takes to leave its
 * batch, so a lane that left it sees the flag and ignores the signal.
 */
void
backfill_lane_wake(Oid dboid, int64 run_id, bool interrupt)
{
	if (shared == NULL)
		return;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	for (int i = 0; i < BACKFILL_MAX_LANES; i++)
	{
		BackfillLaneEntry *e = &shared->lanes[i];

		if (!e->in_use || e->dboid != dboid || (run_id != 0 && e->run_id != run_id))
			continue;
		if (interrupt)
		{
			e->stop = true;
			if (e->in_batch && e->pid != 0)
			{
				if (e->cancelled_at == 0)
					e->cancelled_at = GetCurrentTimestamp();
				(void) kill(e->pid, SIGINT);
			}
		}
		if (e->latch != NULL)
			SetLatch(e->latch);
	}
	LWLockRelease(shared->lane_lock);
}
