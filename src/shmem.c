/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared memory of pg_backfill: where each database's scheduler can be
 *	  found, so that a committed backfill_run wakes it at once, the
 *	  launcher's latch, the databases being dropped, and the wakes sent at
 *	  commit; the segment's other tables are asked for here and kept by
 *	  their own files (lanetable.c, pacers.c, askedprobes.c).
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
 * scheduler that leaves says why in its slot (SchedulerExit): one that
 * found no pg_backfill in its database says so before it exits (the
 * launcher then waits longer before it looks again); one that leaves with
 * nothing to do (backfill.scheduler_idle_exit) gives its slot up first, so
 * that a wake from then on reaches the launcher, and says so too (the
 * launcher then waits for a wake).
 * DROP DATABASE marks its database as going, so that the launcher starts
 * no scheduler for it, and asks its scheduler and lanes to stop.
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

/* DROP DATABASE keeps the launcher off its database this long */
#define DATABASE_GOING_MS	30000
#define MAX_GOING_DATABASES	4

typedef struct BackfillSchedulerSlot
{
	Oid			dboid;			/* InvalidOid while no scheduler is connected */
	pid_t		pid;
	Latch	   *latch;
	SchedulerExit exit;			/* why its last scheduler left exit_dboid */
	Oid			exit_dboid;
	TimestampTz no_slot_since;	/* its starts of a child have found no worker slot since
								 * then (0: the last found one) */
	TimestampTz no_slot_last;	/* the last start that found none */
} BackfillSchedulerSlot;

typedef struct BackfillShared
{
	slock_t		mutex;			/* scheduler slots */
	BackfillSchedulerSlot slots[BACKFILL_MAX_DATABASES];
	Latch	   *launcher_latch; /* the launcher's, while it runs */
	Oid			look_at_dboid;	/* a database to look at now */
	bool		look_at_all;	/* more than one: look at every database */
	Oid			going_dboid[MAX_GOING_DATABASES];	/* DROP DATABASE under way */
	TimestampTz going_since[MAX_GOING_DATABASES];
} BackfillShared;

static BackfillShared *shared = NULL;
static int	my_slot = -1;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
backfill_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(BackfillShared)) + MAXALIGN(backfill_lane_table_size) +
						   MAXALIGN(backfill_pacers_size) + MAXALIGN(backfill_asked_probes_size));
	RequestNamedLWLockTranche("pg_backfill", 1);
}

/* a table of the segment (ShmemInitStruct), zeroed when it is created */
static void *
attach_table(const char *name, Size size, bool *found)
{
	void	   *table = ShmemInitStruct(name, size, found);

	if (!*found)
		memset(table, 0, size);
	return table;
}

static void
backfill_shmem_startup(void)
{
	bool		found;
	LWLock	   *lane_lock;
	void	   *table;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("pg_backfill", sizeof(BackfillShared), &found);
	if (!found)
	{
		memset(shared, 0, sizeof(BackfillShared));
		SpinLockInit(&shared->mutex);
	}
	table = attach_table("pg_backfill lanes", backfill_lane_table_size, &found);
	lane_lock = backfill_lane_table_attach(table, !found);
	table = attach_table("pg_backfill pacers", backfill_pacers_size, &found);
	backfill_pacers_attach(table, !found, lane_lock);
	table = attach_table("pg_backfill asked probes", backfill_asked_probes_size, &found);
	backfill_asked_probes_attach(table, !found, lane_lock);
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
	if (other != 0 && other != MyProcPid && backfill_pid_alive(other))
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
 * The scheduler of slot leaves, and says why for the launcher
 * (SCHEDULER_EXIT_NONE: no reason to say, or not so after all: a mark
 * undone).  Absent: no pg_backfill in its database.  Idle: nothing to do;
 * its slot is released now, so that any wake from here on reaches the
 * launcher.  Only the slot's holder marks it; anyone may undo a mark.
 */
void
backfill_shmem_scheduler_exit(int slot, SchedulerExit why)
{
	BackfillSchedulerSlot *s;

	if (shared == NULL || slot < 0 || slot >= BACKFILL_MAX_DATABASES)
		return;
	s = &shared->slots[slot];
	SpinLockAcquire(&shared->mutex);
	if (why == SCHEDULER_EXIT_NONE)
	{
		s->exit = SCHEDULER_EXIT_NONE;
		s->exit_dboid = InvalidOid;
	}
	else if (s->pid == MyProcPid)
	{
		s->exit = why;
		s->exit_dboid = MyDatabaseId;
		if (why == SCHEDULER_EXIT_IDLE)
		{
			s->dboid = InvalidOid;
			s->pid = 0;
			s->latch = NULL;
		}
	}
	SpinLockRelease(&shared->mutex);
	if (why == SCHEDULER_EXIT_IDLE)
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
	if (*pid != 0 && backfill_pid_alive(*pid))
		return false;
	*dboid = InvalidOid;
	*pid = 0;
	return true;
}

/* Why did the last scheduler of slot i leave dboid?  (Cleared.) */
SchedulerExit
backfill_shmem_take_exit(int slot, Oid dboid)
{
	SchedulerExit why;

	SpinLockAcquire(&shared->mutex);
	why = shared->slots[slot].exit_dboid == dboid ? shared->slots[slot].exit : SCHEDULER_EXIT_NONE;
	shared->slots[slot].exit = SCHEDULER_EXIT_NONE;
	shared->slots[slot].exit_dboid = InvalidOid;
	SpinLockRelease(&shared->mutex);
	return why;
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

	n += backfill_lane_pids(dboid, pids + n);

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
				backfill_lane_wake(MyDatabaseId, pending_wakes[i].run_id, pending_wakes[i].interrupt);
				/* the scheduler ends a batch that outlives the cancel (terminate_overdue) */
				if (pending_wakes[i].interrupt && !wake_at_commit)
				{
					backfill_wake_scheduler(MyDatabaseId);
					wake_at_commit = true;
				}
			}
			if (wake_all_lanes)
				backfill_lane_wake(MyDatabaseId, 0, false);
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
