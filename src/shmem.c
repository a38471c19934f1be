/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared memory of pg_backfill: where each database's scheduler can be
 *	  found, so that a committed backfill_run wakes it at once, and the
 *	  cluster's lane table, so that every scheduler counts every live lane
 *	  and a control can wake (or interrupt) the lanes of its pass.
 *
 * Scheduler slots.  A scheduler claims its slot under the lock when it has
 * connected (database OID, pid and latch).  A slot held by another live
 * process is not taken: the newcomer exits (a restarted launcher starts
 * schedulers whose predecessors may still run).  At exit a scheduler
 * clears its slot only if it still holds it.
 *
 * The launcher.  It puts its latch here, so that a wake meant for a
 * database no scheduler serves yet (the first backfill_run after CREATE
 * EXTENSION) reaches it instead, with the database to look at now.  A
 * scheduler that found no pg_backfill in its database says so in its slot
 * before it exits (the launcher then waits longer before it looks again);
 * one that leaves with nothing to do (backfill.scheduler_idle_exit) gives
 * its slot up first, so that a wake from then on reaches the launcher, and
 * says so too (the launcher then waits for a wake).
 * DROP DATABASE marks its database as going, so that the launcher starts
 * no scheduler for it, and asks its scheduler and lanes to stop.
 *
 * The lane table.  A scheduler reserves an entry before it starts a lane
 * and hands the lane the entry's index and a token; the lane takes the
 * entry over (pid, latch) and releases it at exit.  An entry whose lane
 * never started or died without its exit callback (a process that could
 * not log in, say) is swept by any scheduler: its pid is gone.  Counting
 * the entries is counting the cluster's lanes, whoever started them, so a
 * restarted scheduler never exceeds backfill.max_workers.  A lane in a
 * batch says so, so that backfill_cancel cancels only its batch.
 *
 * The pacers.  The rate is the pass's: every process that works a pass
 * (its lanes, a finalizing session) asks its pacer before each batch.  A
 * pacer is the start of the pass's last batch and the rate it started at;
 * the next batch may start once 1/rate has passed since (one start per
 * 1/rate, never a burst).  A pacer has no owner, so a lane that dies holds
 * nothing back: a pacer whose 1/rate has passed says nothing any more and
 * is free to be taken for another pass.  With every pacer taken (more
 * passes than BACKFILL_MAX_PACERS that each started a batch less than
 * 1/rate ago), a lane paces alone, as its own last batch says.
 *
 * WAL budgets.  A pacer also keeps the pass's WAL account, and one more
 * account keeps every lane's (backfill.max_wal_rate): after each batch its
 * lane charges the WAL the batch wrote, paid at the budget from the
 * batch's start (or from when the WAL before it is paid, whichever is
 * later), and no batch of the pass (of the cluster) starts before it is
 * paid.  So over any window the WAL written stays within the budget but
 * for the batches in flight, and a pace the batches themselves set (their
 * own duration) is not charged twice.  A pacer that owes WAL is not free.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "config.h"
#include "shmem.h"

/* an entry reserved for a lane that never said its pid is freed after this */
#define LANE_RESERVE_TIMEOUT_MS	60000

/* DROP DATABASE keeps the launcher off its database this long */
#define DATABASE_GOING_MS	30000
#define MAX_GOING_DATABASES	4

typedef struct BackfillSchedulerSlot
{
	Oid			dboid;			/* InvalidOid while no scheduler is connected */
	pid_t		pid;
	Latch	   *latch;
	Oid			absent_dboid;	/* its last scheduler found no pg_backfill there */
	Oid			idle_dboid;		/* its last scheduler left there with nothing to do */
	TimestampTz no_slot_since;	/* its starts of a child have found no worker slot since
								 * then (0: the last found one) */
	TimestampTz no_slot_last;	/* the last start that found none */
} BackfillSchedulerSlot;

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

/*
 * A WAL budget's account: the time until which the WAL written so far is
 * paid at the budget, and the bytes of the last two 5 s windows (for the
 * rate shown).
 */
typedef struct BackfillWalMeter
{
	TimestampTz paid_until;		/* 0: nothing owed */
	TimestampTz window_start;
	int64		window_bytes;
	int64		previous_bytes;	/* of the window before */
} BackfillWalMeter;

#define WAL_WINDOW_US	(5 * USECS_PER_SEC)

typedef struct BackfillPacer
{
	Oid			dboid;
	int64		run_id;			/* 0: never used */
	TimestampTz last_start;		/* the start of the pass's last batch */
	double		rate;			/* the rate it started at */
	BackfillWalMeter wal;		/* the pass's WAL, against its max_wal_rate */
	TimestampTz condition_at;	/* when a lane last began evaluating throttle_when */
	char		condition[BACKFILL_CONDITION_LEN];	/* its last answer: why it holds, or "" */
} BackfillPacer;

/* pacers: a pass needs one while it has a live lane, or just had one */
#define BACKFILL_MAX_PACERS	(2 * BACKFILL_MAX_LANES)

typedef struct BackfillShared
{
	slock_t		mutex;			/* scheduler slots */
	BackfillSchedulerSlot slots[BACKFILL_MAX_DATABASES];
	Latch	   *launcher_latch; /* the launcher's, while it runs */
	Oid			look_at_dboid;	/* a database to look at now */
	bool		look_at_all;	/* more than one: look at every database */
	Oid			going_dboid[MAX_GOING_DATABASES];	/* DROP DATABASE under way */
	TimestampTz going_since[MAX_GOING_DATABASES];
	LWLock	   *lane_lock;		/* the lane table */
	uint64		next_token;
	BackfillLaneEntry lanes[BACKFILL_MAX_LANES];
	BackfillPacer pacers[BACKFILL_MAX_PACERS];	/* under lane_lock */
	BackfillWalMeter cluster_wal;	/* every lane's WAL, against backfill.max_wal_rate */
	TimestampTz lane_wanted_at; /* a scheduler's pass waited for a lane, all taken */
} BackfillShared;

static BackfillShared *shared = NULL;

/* the probes backfill_probe starts: a table of their own, below */
typedef struct BackfillAskedProbe BackfillAskedProbe;
static BackfillAskedProbe *asked_probes = NULL;
static Size asked_probes_size(void);
static BackfillAskedProbe *asked_probes_attach(void);
static int	my_slot = -1;

/* the lane table entry this process (a lane) holds */
static int	my_lane = -1;
static uint64 my_lane_token = 0;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
backfill_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(BackfillShared)) + asked_probes_size());
	RequestNamedLWLockTranche("pg_backfill", 1);
}

static void
backfill_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("pg_backfill", sizeof(BackfillShared), &found);
	if (!found)
	{
		memset(shared, 0, sizeof(BackfillShared));
		SpinLockInit(&shared->mutex);
		shared->lane_lock = &(GetNamedLWLockTranche("pg_backfill"))->lock;
		shared->next_token = 1;
	}
	asked_probes = asked_probes_attach();
	LWLockRelease(AddinShmemInitLock);
}

void
backfill_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = backfill_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = backfill_shmem_startup;
}

/* Is there a process with this pid?  (Only postmaster children use the table.) */
static bool
pid_alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

/* ------------------------------------------------------------------
 * Scheduler slots
 * ------------------------------------------------------------------ */

static void
detach_scheduler(int code, Datum arg)
{
	if (shared == NULL || my_slot < 0)
		return;
	SpinLockAcquire(&shared->mutex);
	if (shared->slots[my_slot].pid == MyProcPid)
	{
		shared->slots[my_slot].dboid = InvalidOid;
		shared->slots[my_slot].pid = 0;
		shared->slots[my_slot].latch = NULL;
	}
	SpinLockRelease(&shared->mutex);
	my_slot = -1;
}

bool
backfill_shmem_attach_scheduler(int slot, pid_t *holder)
{
	BackfillSchedulerSlot *s;
	pid_t		other;

	Assert(slot >= 0 && slot < BACKFILL_MAX_DATABASES);
	s = &shared->slots[slot];
	SpinLockAcquire(&shared->mutex);
	other = s->pid;
	SpinLockRelease(&shared->mutex);

	/* kill() is a system call: not under the spinlock */
	if (other != 0 && other != MyProcPid && pid_alive(other))
	{
		*holder = other;
		return false;
	}

	SpinLockAcquire(&shared->mutex);
	if (s->pid != other)
	{
		/* another scheduler claimed it meanwhile */
		*holder = s->pid;
		SpinLockRelease(&shared->mutex);
		return false;
	}
	s->dboid = MyDatabaseId;
	s->pid = MyProcPid;
	s->latch = &MyProc->procLatch;
	s->no_slot_since = 0;
	SpinLockRelease(&shared->mutex);
	my_slot = slot;
	before_shmem_exit(detach_scheduler, (Datum) 0);
	return true;
}

/*
 * Set the latch of the database's scheduler, if one holds its slot (at
 * commit); if none does, the launcher's, asking it to look at the database
 * now.
 */
static void
backfill_wake_scheduler(Oid dboid)
{
	Latch	   *latch = NULL;

	if (shared == NULL)
		return;
	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < BACKFILL_MAX_DATABASES; i++)
		if (shared->slots[i].dboid == dboid)
			latch = shared->slots[i].latch;
	if (latch == NULL)
	{
		if (OidIsValid(shared->look_at_dboid) && shared->look_at_dboid != dboid)
			shared->look_at_all = true;
		shared->look_at_dboid = dboid;
		latch = shared->launcher_latch;
	}
	SpinLockRelease(&shared->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/* The scheduler found no pg_backfill in its database: say so for the launcher. */
void
backfill_shmem_scheduler_absent(void)
{
	if (shared == NULL || my_slot < 0)
		return;
	SpinLockAcquire(&shared->mutex);
	if (shared->slots[my_slot].pid == MyProcPid)
		shared->slots[my_slot].absent_dboid = MyDatabaseId;
	SpinLockRelease(&shared->mutex);
}

/*
 * The scheduler tried to start a child (a lane, the relay): found a worker
 * slot or not.  A backend that waits for lanes (finalize) reads it.
 */
void
backfill_shmem_note_worker_slot(bool found)
{
	TimestampTz now = GetCurrentTimestamp();

	if (shared == NULL || my_slot < 0)
		return;
	SpinLockAcquire(&shared->mutex);
	if (shared->slots[my_slot].pid == MyProcPid)
	{
		if (found)
			shared->slots[my_slot].no_slot_since = 0;
		else
		{
			if (shared->slots[my_slot].no_slot_since == 0)
				shared->slots[my_slot].no_slot_since = now;
			shared->slots[my_slot].no_slot_last = now;
		}
	}
	SpinLockRelease(&shared->mutex);
}

/*
 * A mark older than NO_SLOT_FRESH_MS says nothing: the scheduler tries again
 * every second while a pass waits for a lane.
 */
#define NO_SLOT_FRESH_MS	5000

TimestampTz
backfill_shmem_no_worker_slot_since(Oid dboid)
{
	TimestampTz since = 0;
	TimestampTz last = 0;

	if (shared == NULL)
		return 0;
	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < BACKFILL_MAX_DATABASES; i++)
		if (shared->slots[i].dboid == dboid && shared->slots[i].pid != 0)
		{
			since = shared->slots[i].no_slot_since;
			last = shared->slots[i].no_slot_last;
		}
	SpinLockRelease(&shared->mutex);
	if (since == 0 || TimestampDifferenceExceeds(last, GetCurrentTimestamp(), NO_SLOT_FRESH_MS))
		return 0;
	return since;
}

/*
 * The scheduler leaves with nothing to do: its slot is released now, so
 * that any wake from here on reaches the launcher, and marked for the
 * launcher as left idle (idle false: not so after all, undone).
 */
void
backfill_shmem_scheduler_idle(int slot, bool idle)
{
	if (shared == NULL || slot < 0 || slot >= BACKFILL_MAX_DATABASES)
		return;
	SpinLockAcquire(&shared->mutex);
	if (!idle)
		shared->slots[slot].idle_dboid = InvalidOid;
	else if (shared->slots[slot].pid == MyProcPid)
	{
		shared->slots[slot].idle_dboid = MyDatabaseId;
		shared->slots[slot].dboid = InvalidOid;
		shared->slots[slot].pid = 0;
		shared->slots[slot].latch = NULL;
	}
	SpinLockRelease(&shared->mutex);
	if (idle)
		my_slot = -1;
}

/* ------------------------------------------------------------------
 * The launcher
 * ------------------------------------------------------------------ */

static void
detach_launcher(int code, Datum arg)
{
	if (shared == NULL)
		return;
	SpinLockAcquire(&shared->mutex);
	if (shared->launcher_latch == &MyProc->procLatch)
		shared->launcher_latch = NULL;
	SpinLockRelease(&shared->mutex);
}

void
backfill_shmem_attach_launcher(void)
{
	SpinLockAcquire(&shared->mutex);
	shared->launcher_latch = &MyProc->procLatch;
	SpinLockRelease(&shared->mutex);
	before_shmem_exit(detach_launcher, (Datum) 0);
}

Oid
backfill_shmem_take_look_at(bool *all)
{
	Oid			dboid;

	SpinLockAcquire(&shared->mutex);
	dboid = shared->look_at_dboid;
	*all = shared->look_at_all;
	shared->look_at_dboid = InvalidOid;
	shared->look_at_all = false;
	SpinLockRelease(&shared->mutex);
	return dboid;
}

/*
 * Is slot i free: no scheduler in it, or only a dead one?  *dboid and *pid
 * are those of a live holder.
 */
bool
backfill_shmem_slot_free(int slot, Oid *dboid, pid_t *pid)
{
	SpinLockAcquire(&shared->mutex);
	*pid = shared->slots[slot].pid;
	*dboid = shared->slots[slot].dboid;
	SpinLockRelease(&shared->mutex);
	if (*pid != 0 && pid_alive(*pid))
		return false;
	*dboid = InvalidOid;
	*pid = 0;
	return true;
}

/* Did the last scheduler of slot i leave dboid with nothing to do?  (Cleared.) */
bool
backfill_shmem_take_idle(int slot, Oid dboid)
{
	bool		idle;

	SpinLockAcquire(&shared->mutex);
	idle = shared->slots[slot].idle_dboid == dboid;
	shared->slots[slot].idle_dboid = InvalidOid;
	SpinLockRelease(&shared->mutex);
	return idle;
}

/* Did the last scheduler of slot i find no pg_backfill in dboid?  (Cleared.) */
bool
backfill_shmem_take_absent(int slot, Oid dboid)
{
	bool		absent;

	SpinLockAcquire(&shared->mutex);
	absent = shared->slots[slot].absent_dboid == dboid;
	shared->slots[slot].absent_dboid = InvalidOid;
	SpinLockRelease(&shared->mutex);
	return absent;
}

/*
 * DROP DATABASE of dboid is about to run: keep the launcher off it for a
 * while, and ask its scheduler and its lanes to exit (DROP DATABASE waits a
 * few seconds for the sessions connected to it).
 */
void
backfill_shmem_database_going(Oid dboid)
{
	pid_t		pids[BACKFILL_MAX_DATABASES + BACKFILL_MAX_LANES];
	int			n = 0;
	int			oldest = 0;

	if (shared == NULL)
		return;
	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < MAX_GOING_DATABASES; i++)
	{
		if (shared->going_dboid[i] == dboid || !OidIsValid(shared->going_dboid[i]))
		{
			oldest = i;
			break;
		}
		if (shared->going_since[i] < shared->going_since[oldest])
			oldest = i;
	}
	shared->going_dboid[oldest] = dboid;
	shared->going_since[oldest] = GetCurrentTimestamp();
	for (int i = 0; i < BACKFILL_MAX_DATABASES; i++)
		if (shared->slots[i].dboid == dboid && shared->slots[i].pid != 0)
			pids[n++] = shared->slots[i].pid;
	SpinLockRelease(&shared->mutex);

	LWLockAcquire(shared->lane_lock, LW_SHARED);
	for (int i = 0; i < BACKFILL_MAX_LANES; i++)
		if (shared->lanes[i].in_use && shared->lanes[i].dboid == dboid &&
			shared->lanes[i].pid != 0)
			pids[n++] = shared->lanes[i].pid;
	LWLockRelease(shared->lane_lock);

	for (int i = 0; i < n; i++)
		(void) kill(pids[i], SIGTERM);
}

/* Is a DROP DATABASE of dboid under way (marked less than 30 s ago)? */
bool
backfill_shmem_database_is_going(Oid dboid)
{
	bool		going = false;
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < MAX_GOING_DATABASES; i++)
		if (shared->going_dboid[i] == dboid &&
			!TimestampDifferenceExceeds(shared->going_since[i], now, DATABASE_GOING_MS))
			going = true;
	SpinLockRelease(&shared->mutex);
	return going;
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
		if (e->pid != 0 ? !pid_alive(e->pid) :
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

/* ------------------------------------------------------------------
 * The probes backfill_probe starts
 * ------------------------------------------------------------------ */

/*
 * A probe worker a backfill_probe call started: one per backfill at most,
 * at most backfill.max_probes_per_role per calling role.  Freed by its
 * starter once the worker stopped, or by any reservation once its pid is
 * gone (the caller left before it ended).
 */
struct BackfillAskedProbe
{
	bool		in_use;
	uint64		token;
	Oid			dboid;
	Oid			caller;			/* the role whose call started it */
	int64		name_hash;		/* the backfill probed (drift_name_hash) */
	pid_t		pid;			/* 0 until it started */
	TimestampTz reserved_at;
};

#define BACKFILL_MAX_ASKED_PROBES	64

/* the table's size, for the shared memory request */
static Size
asked_probes_size(void)
{
	return MAXALIGN(sizeof(BackfillAskedProbe) * BACKFILL_MAX_ASKED_PROBES);
}

/* the table, created empty at the first attach (under AddinShmemInitLock) */
static BackfillAskedProbe *
asked_probes_attach(void)
{
	bool		found;
	BackfillAskedProbe *table = ShmemInitStruct("pg_backfill asked probes",
												 asked_probes_size(), &found);

	if (!found)
		memset(table, 0, asked_probes_size());
	return table;
}

/* an entry whose worker is gone, or never started within LANE_RESERVE_TIMEOUT_MS */
static bool
asked_probe_gone(BackfillAskedProbe *e, TimestampTz now)
{
	return e->pid != 0 ? !pid_alive(e->pid) :
		TimestampDifferenceExceeds(e->reserved_at, now, LANE_RESERVE_TIMEOUT_MS);
}

/*
 * Reserve an entry for a probe of backfill name_hash that the caller's
 * role is about to start.  PROBE_RESERVED (*index, *token set), or
 * PROBE_RUNNING when one of that backfill runs (*since: when it was
 * started, *index, *token: its entry, to wait for), or PROBE_ROLE_CAP when
 * the role has role_cap running (*running: how many), or PROBE_TABLE_FULL.
 */
ProbeReservation
backfill_asked_probe_reserve(Oid dboid, Oid caller, int64 name_hash, int role_cap,
							 int *index, uint64 *token, TimestampTz *since, int *running)
{
	TimestampTz now = GetCurrentTimestamp();
	ProbeReservation answer = PROBE_TABLE_FULL;
	int			free_one = -1;

	*running = 0;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	for (int i = 0; i < BACKFILL_MAX_ASKED_PROBES; i++)
	{
		BackfillAskedProbe *e = &asked_probes[i];

		if (e->in_use && asked_probe_gone(e, now))
			e->in_use = false;
		if (!e->in_use)
		{
			free_one = (free_one < 0) ? i : free_one;
			continue;
		}
		if (e->dboid == dboid && e->name_hash == name_hash)
		{
			*index = i;
			*token = e->token;
			*since = e->reserved_at;
			answer = PROBE_RUNNING;
			break;
		}
		if (e->caller == caller)
			(*running)++;
	}
	if (answer != PROBE_RUNNING && *running >= role_cap)
		answer = PROBE_ROLE_CAP;
	else if (answer != PROBE_RUNNING && free_one >= 0)
	{
		BackfillAskedProbe *e = &asked_probes[free_one];

		memset(e, 0, sizeof(BackfillAskedProbe));
		e->in_use = true;
		e->token = shared->next_token++;
		e->dboid = dboid;
		e->caller = caller;
		e->name_hash = name_hash;
		e->reserved_at = now;
		*index = free_one;
		*token = e->token;
		*since = now;
		answer = PROBE_RESERVED;
	}
	LWLockRelease(shared->lane_lock);
	return answer;
}

/* The reserved probe's worker started as pid (0: it did not start: freed). */
void
backfill_asked_probe_started(int index, uint64 token, pid_t pid)
{
	BackfillAskedProbe *e = &asked_probes[index];

	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	if (e->in_use && e->token == token)
	{
		e->pid = pid;
		e->in_use = pid != 0;
	}
	LWLockRelease(shared->lane_lock);
}

/* Is the probe of that entry still running?  (It is freed once it is not.) */
bool
backfill_asked_probe_running(int index, uint64 token)
{
	BackfillAskedProbe *e = &asked_probes[index];
	bool		running;

	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	running = e->in_use && e->token == token && !asked_probe_gone(e, GetCurrentTimestamp());
	if (!running && e->in_use && e->token == token)
		e->in_use = false;
	LWLockRelease(shared->lane_lock);
	return running;
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
static void
wake_lanes(Oid dboid, int64 run_id, bool interrupt)
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

/* ------------------------------------------------------------------
 * The pacers: the rate of a pass, whoever works it
 * ------------------------------------------------------------------ */

/* When a batch of the pacer's pass may start next (by its last batch's rate). */
static TimestampTz
pacer_next(BackfillPacer *p)
{
	return p->last_start + (TimestampTz) (1000000.0 / p->rate);
}

/*
 * The pacer of pass (dboid, run_id), or one that is free (never used, or
 * its last batch's 1/rate has passed and it owes no WAL), emptied, or NULL
 * when every pacer is taken.
 */
static BackfillPacer *
pacer_find(Oid dboid, int64 run_id, TimestampTz now)
{
	BackfillPacer *free_one = NULL;

	for (int i = 0; i < BACKFILL_MAX_PACERS; i++)
	{
		BackfillPacer *p = &shared->pacers[i];

		if (p->run_id == run_id && p->dboid == dboid)
			return p;
		if (free_one == NULL &&
			(p->run_id == 0 || (pacer_next(p) <= now && p->wal.paid_until <= now &&
								p->condition_at + USECS_PER_SEC <= now)))
			free_one = p;
	}
	if (free_one != NULL)
		memset(free_one, 0, sizeof(BackfillPacer));
	return free_one;
}

/*
 * When may the next batch of this database's pass start by its rate (0:
 * now, or no batch of it started lately)?  For a scheduler: a lane started
 * for it before then would only sleep.
 */
TimestampTz
backfill_pace_next_start(Oid dboid, int64 run_id)
{
	TimestampTz next = 0;

	LWLockAcquire(shared->lane_lock, LW_SHARED);
	for (int i = 0; i < BACKFILL_MAX_PACERS; i++)
	{
		BackfillPacer *p = &shared->pacers[i];

		if (p->run_id == run_id && p->dboid == dboid && p->rate > 0)
			next = Max(next, pacer_next(p));
	}
	LWLockRelease(shared->lane_lock);
	return next;
}

/*
 * bytes per second over the meter's last 5 to 10 s (its current window
 * alone, at least 1 s of it, when the one before wrote nothing); 0 when
 * nothing was written lately
 */
static double
meter_rate(const BackfillWalMeter *m, TimestampTz now)
{
	TimestampTz span = now - m->window_start;

	if (m->window_start == 0 || span >= 2 * WAL_WINDOW_US)
		return 0;
	if (m->previous_bytes > 0)
		span += WAL_WINDOW_US;
	return (m->previous_bytes + m->window_bytes) * 1000000.0 / Max(span, USECS_PER_SEC);
}

/*
 * Charge a batch's WAL: paid at the budget from the batch's start, or from
 * when the WAL before it is paid (budget 0: no budget, nothing owed).
 */
static void
meter_charge(BackfillWalMeter *m, int64 budget, TimestampTz started, int64 bytes,
			 TimestampTz now)
{
	if (now - m->window_start >= WAL_WINDOW_US)
	{
		m->previous_bytes = now - m->window_start < 2 * WAL_WINDOW_US ? m->window_bytes : 0;
		m->window_start = now;
		m->window_bytes = 0;
	}
	m->window_bytes += bytes;
	if (budget <= 0)
		m->paid_until = 0;
	else
		m->paid_until = Max(m->paid_until, started) +
			(TimestampTz) (bytes * 1000000.0 / budget);
}

/* the later of two waits: the WAL's wins a tie, it is what the lane shows */
static void
pace_wait_on(PaceWait *wait, TimestampTz until, PaceSignal signal,
			 const BackfillWalMeter *m, int64 budget, TimestampTz now)
{
	if (until <= now || until < wait->until)
		return;
	wait->until = until;
	wait->signal = signal;
	wait->wal_rate = m ? meter_rate(m, now) : 0;
	wait->wal_budget = budget;
}

/*
 * May a batch of this database's pass run_id start now, at this rate (the
 * declaration's, as the caller read it last) and within the pass's WAL
 * budget (wal_budget bytes/s, 0: none) and the cluster's
 * (backfill.max_wal_rate)?  wait->until 0: yes, and its start is recorded;
 * else the time from which it may (ask again then: another process of the
 * pass may have started one meanwhile), and what it waits for.  A rate
 * lowered since the last batch counts from it at the new rate, as does one
 * raised.
 */
void
backfill_pace_claim(int64 run_id, double rate, int64 wal_budget, PaceWait *wait)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		cluster_budget = (int64) backfill_max_wal_rate * 1024;
	BackfillPacer *p;

	memset(wait, 0, sizeof(PaceWait));
	if (shared == NULL || rate <= 0)
		return;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	p = pacer_find(MyDatabaseId, run_id, now);
	if (p != NULL && p->run_id != 0)
	{
		p->rate = rate;
		pace_wait_on(wait, pacer_next(p), PACE_RATE, NULL, 0, now);
		if (wal_budget > 0)
			pace_wait_on(wait, p->wal.paid_until, PACE_WAL_PASS, &p->wal, wal_budget, now);
	}
	if (cluster_budget > 0)
		pace_wait_on(wait, shared->cluster_wal.paid_until, PACE_WAL_CLUSTER,
					 &shared->cluster_wal, cluster_budget, now);
	if (p != NULL && wait->until == 0)
	{
		p->dboid = MyDatabaseId;
		p->run_id = run_id;
		p->last_start = now;
		p->rate = rate;
	}
	LWLockRelease(shared->lane_lock);
}

/*
 * A batch of pass run_id that started at started wrote bytes of WAL:
 * charged to the pass's budget (wal_budget bytes/s, 0: none) and to the
 * cluster's (backfill.max_wal_rate), which the next claims wait out.
 */
void
backfill_pace_wal(int64 run_id, double rate, int64 wal_budget, TimestampTz started, int64 bytes)
{
	TimestampTz now = GetCurrentTimestamp();
	BackfillPacer *p;

	if (shared == NULL || bytes <= 0)
		return;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	meter_charge(&shared->cluster_wal, (int64) backfill_max_wal_rate * 1024, started, bytes, now);
	p = pacer_find(MyDatabaseId, run_id, now);
	if (p != NULL && p->run_id == 0)
	{
		/* the pass's pacer was let go meanwhile: taken again, as of this batch */
		p->dboid = MyDatabaseId;
		p->run_id = run_id;
		p->last_start = started;
		p->rate = Max(rate, 0.001);
	}
	if (p != NULL)
		meter_charge(&p->wal, wal_budget, started, bytes, now);
	LWLockRelease(shared->lane_lock);
}

/*
 * The pass's throttle_when, evaluated at most once a second per pass:
 * true when it is due (this process evaluates it now and records the
 * answer); else answer receives the last one ("": go on).  With no pacer
 * free, it is due: the lane bounds itself (condition.c).
 */
bool
backfill_condition_claim(int64 run_id, char *answer, size_t len)
{
	TimestampTz now = GetCurrentTimestamp();
	BackfillPacer *p;
	bool		due = true;

	answer[0] = '\0';
	if (shared == NULL)
		return true;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	p = pacer_find(MyDatabaseId, run_id, now);
	if (p != NULL && p->run_id == 0)
	{
		/* taken for the condition alone: no batch of the pass to wait for yet */
		p->dboid = MyDatabaseId;
		p->run_id = run_id;
		p->rate = 1;
	}
	if (p != NULL)
	{
		due = p->condition_at + USECS_PER_SEC <= now;
		if (due)
			p->condition_at = now;
		else
			strlcpy(answer, p->condition, len);
	}
	LWLockRelease(shared->lane_lock);
	return due;
}

/* the answer of the evaluation backfill_condition_claim gave (NULL: go on) */
void
backfill_condition_record(int64 run_id, const char *reason)
{
	TimestampTz now = GetCurrentTimestamp();
	BackfillPacer *p;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	p = pacer_find(MyDatabaseId, run_id, now);
	if (p != NULL && p->run_id == run_id)
		strlcpy(p->condition, reason ? reason : "", sizeof(p->condition));
	LWLockRelease(shared->lane_lock);
}

/* ------------------------------------------------------------------
 * Wakes at commit: a transaction that rolls back wakes nobody
 * ------------------------------------------------------------------ */

#define MAX_PENDING_WAKES	16

typedef struct PendingWake
{
	int64		run_id;
	bool		interrupt;
} PendingWake;

static bool wake_at_commit = false;
static PendingWake pending_wakes[MAX_PENDING_WAKES];
static int	npending_wakes = 0;
static bool wake_all_lanes = false;
static bool xact_callback_registered = false;

static void
backfill_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (wake_at_commit)
				backfill_wake_scheduler(MyDatabaseId);
			for (int i = 0; i < npending_wakes; i++)
			{
				wake_lanes(MyDatabaseId, pending_wakes[i].run_id, pending_wakes[i].interrupt);
				/* the scheduler ends a batch that outlives the cancel (terminate_overdue) */
				if (pending_wakes[i].interrupt && !wake_at_commit)
				{
					backfill_wake_scheduler(MyDatabaseId);
					wake_at_commit = true;
				}
			}
			if (wake_all_lanes)
				wake_lanes(MyDatabaseId, 0, false);
			break;
		default:
			break;
	}
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			wake_at_commit = false;
			npending_wakes = 0;
			wake_all_lanes = false;
			break;
		default:
			break;
	}
}

static void
register_xact_callback(void)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(backfill_xact_callback, NULL);
		xact_callback_registered = true;
	}
}

void
backfill_wake_scheduler_at_commit(void)
{
	register_xact_callback();
	wake_at_commit = true;
}

void
backfill_wake_lanes_at_commit(int64 run_id, bool interrupt)
{
	register_xact_callback();
	if (run_id == 0)
	{
		wake_all_lanes = true;
		return;
	}
	for (int i = 0; i < npending_wakes; i++)
		if (pending_wakes[i].run_id == run_id)
		{
			pending_wakes[i].interrupt |= interrupt;
			return;
		}
	if (npending_wakes < MAX_PENDING_WAKES)
	{
		pending_wakes[npending_wakes].run_id = run_id;
		pending_wakes[npending_wakes].interrupt = interrupt;
		npending_wakes++;
	}
	else
		wake_all_lanes = true;	/* a wake is cheap; a cancel's lanes still see it at checkpoint */
}
