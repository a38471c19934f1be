/*-------------------------------------------------------------------------
 *
 * askedprobes.c
 *	  The probes backfill_probe starts, in shared memory: one entry per
 *	  probe worker a call started (database, the backfill's name hash, the
 *	  calling role, its pid once started), so that a second call for the
 *	  same backfill waits for it, and a role holds at most
 *	  backfill.max_probes_per_role.  Under the lane table's lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "askedprobes.h"
#include "lanetable.h"

/*
 * A probe worker a backfill_probe call started: one per backfill at most,
 * at most backfill.max_probes_per_role per calling role.  Freed by its
 * starter once the worker stopped, or by any reservation once its pid is
 * gone (the caller left before it ended).
 */
typedef struct BackfillAskedProbe
{
	bool		in_use;
	uint64		token;
	Oid			dboid;
	Oid			caller;			/* the role whose call started it */
	int64		name_hash;		/* the backfill probed (drift_name_hash) */
	pid_t		pid;			/* 0 until it started */
	TimestampTz reserved_at;
} BackfillAskedProbe;

#define BACKFILL_MAX_ASKED_PROBES	64

typedef struct BackfillAskedProbes
{
	LWLock	   *lane_lock;		/* the lane table's */
	uint64		next_token;		/* changes with every reservation */
	BackfillAskedProbe probes[BACKFILL_MAX_ASKED_PROBES];
} BackfillAskedProbes;

static BackfillAskedProbes *shared = NULL;
static BackfillAskedProbe *asked_probes = NULL;

/* the table's size, for the shared memory request */
const Size backfill_asked_probes_size = sizeof(BackfillAskedProbes);

/* the table, zeroed when created (shmem.c, under AddinShmemInitLock) */
void
backfill_asked_probes_attach(void *table, bool created, LWLock *lane_lock)
{
	shared = table;
	if (created)
	{
		shared->lane_lock = lane_lock;
		shared->next_token = 1;
	}
	asked_probes = shared->probes;
}

/* an entry whose worker is gone, or never started within LANE_RESERVE_TIMEOUT_MS */
static bool
asked_probe_gone(BackfillAskedProbe *e, TimestampTz now)
{
	return e->pid != 0 ? !backfill_pid_alive(e->pid) :
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
