/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared memory of pg_backfill: where each database's scheduler can be
 *	  found, so that a committed backfill_run wakes it at once.
 *
 * A scheduler fills its slot when it has connected (database OID, pid and
 * latch) and clears it on exit.  Backends only read the slots and set a
 * latch; a stale latch pointer at worst wakes another process once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "pg_backfill.h"
#include "shmem.h"

typedef struct BackfillSchedulerSlot
{
	Oid			dboid;			/* InvalidOid while no scheduler is connected */
	pid_t		pid;
	Latch	   *latch;
	int			nlanes;			/* lanes this scheduler has running */
} BackfillSchedulerSlot;

typedef struct BackfillShared
{
	slock_t		mutex;
	BackfillSchedulerSlot slots[BACKFILL_MAX_DATABASES];
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
	RequestAddinShmemSpace(MAXALIGN(sizeof(BackfillShared)));
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
	}
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

static void
detach_scheduler(int code, Datum arg)
{
	if (shared == NULL || my_slot < 0)
		return;
	SpinLockAcquire(&shared->mutex);
	shared->slots[my_slot].dboid = InvalidOid;
	shared->slots[my_slot].pid = 0;
	shared->slots[my_slot].latch = NULL;
	shared->slots[my_slot].nlanes = 0;
	SpinLockRelease(&shared->mutex);
	my_slot = -1;
}

void
backfill_shmem_attach_scheduler(int slot)
{
	Assert(slot >= 0 && slot < BACKFILL_MAX_DATABASES);
	SpinLockAcquire(&shared->mutex);
	shared->slots[slot].dboid = MyDatabaseId;
	shared->slots[slot].pid = MyProcPid;
	shared->slots[slot].latch = &MyProc->procLatch;
	shared->slots[slot].nlanes = 0;
	SpinLockRelease(&shared->mutex);
	my_slot = slot;
	before_shmem_exit(detach_scheduler, (Datum) 0);
}

void
backfill_shmem_set_lanes(int slot, int nlanes)
{
	SpinLockAcquire(&shared->mutex);
	shared->slots[slot].nlanes = nlanes;
	SpinLockRelease(&shared->mutex);
}

int
backfill_shmem_total_lanes(void)
{
	int			total = 0;

	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < BACKFILL_MAX_DATABASES; i++)
		total += shared->slots[i].nlanes;
	SpinLockRelease(&shared->mutex);
	return total;
}

void
backfill_wake_scheduler(Oid dboid)
{
	Latch	   *latch = NULL;

	if (shared == NULL)
		return;
	SpinLockAcquire(&shared->mutex);
	for (int i = 0; i < BACKFILL_MAX_DATABASES; i++)
		if (shared->slots[i].dboid == dboid)
			latch = shared->slots[i].latch;
	SpinLockRelease(&shared->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Wake this database's scheduler when the current transaction commits; a
 * transaction that rolls back wakes nobody.
 */
static bool wake_at_commit = false;
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
			wake_at_commit = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			wake_at_commit = false;
			break;
		default:
			break;
	}
}

void
backfill_wake_scheduler_at_commit(void)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(backfill_xact_callback, NULL);
		xact_callback_registered = true;
	}
	wake_at_commit = true;
}

