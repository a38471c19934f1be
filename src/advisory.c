/*-------------------------------------------------------------------------
 *
 * advisory.c
 *	  The session advisory locks of a backend that runs a declarer's SQL in
 *	  its caller's session: the caller's kept exactly, as often as it held
 *	  them, and the declarer's own ended with each of its transactions.
 *
 * CALL backfill_finalize runs a pass's batches in the calling session
 * (xact.c's session mode).  A session advisory lock outlives every
 * transaction, so what the declarer's SQL does with one would change the
 * caller's session: a migration tool that holds a session lock while it
 * migrates would keep it once more than it knows after an action's
 * pg_advisory_lock(its key), and lose it to pg_advisory_unlock_all().
 *
 * PostgreSQL keeps how often a session holds a lock in the backend's own
 * lock table, which it does not show (pg_locks says held or not).  So the
 * count is found by taking the session's counts off the lock one by one
 * (LockRelease until it says there are none; its warning then is not
 * shown) while a count of the current transaction keeps the lock held, so
 * that no other session can take it in between, and by giving them back.
 * When the guard begins, this counts the caller's locks; after each
 * transaction of the declarer's SQL, every caller's lock still held is
 * kept by a transaction count, all the session's advisory locks are let
 * go (the declarer's own with them), and the caller's are given back with
 * the counts it had: a lock the declarer took again, or took of its own,
 * leaves nothing behind.  A caller's lock the declarer released (one count
 * or all) cannot be undone: it is taken back if it is free, and the work
 * ends with BF032, which says whether the session holds it again.  A lock
 * released and taken again within one of the declarer's transactions goes
 * unseen (its count is the same after it).
 *
 * The same guard holds around the declarer's SQL that asrole.c evaluates
 * in a session not its own (backfill_run's scope in the caller's session,
 * backfill_pending's drift probe, a requirement read): its subtransaction
 * is rolled back, which ends no session lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/elog.h"
#include "utils/memutils.h"

#include "advisory.h"
#include "compat.h"
#include "errors.h"

/* a session advisory lock of the caller's: tag, mode and how often it holds it */
typedef struct CallerLock
{
	LOCKTAG		tag;
	LOCKMODE	mode;
	int			count;
} CallerLock;

static bool guard_on = false;
static bool guard_finalize = false;	/* CALL backfill_finalize, else asrole.c */
static char *guard_name = NULL;		/* the backfill, or NULL */
static Oid	guard_role = InvalidOid;	/* as whom its SQL runs */
static CallerLock *caller_locks = NULL;
static int	caller_nlocks = 0;

/* while counting: LockRelease's warning that no count is left is not shown */
static bool counting = false;
static emit_log_hook_type prev_emit_log_hook = NULL;

static void
quiet_count_warning(ErrorData *edata)
{
	if (counting && edata->elevel == WARNING && edata->message_id != NULL &&
		strcmp(edata->message_id, "you don't own a lock of type %s") == 0)
	{
		edata->output_to_client = false;
		edata->output_to_server = false;
	}
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

void
advisory_init(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = quiet_count_warning;
}

/*
 * Take the session's counts off a lock and say how many there were.  The
 * caller holds a count of the current transaction's on it, which keeps it.
 */
static int
take_session_counts(const LOCKTAG *tag, LOCKMODE mode)
{
	int			n = 0;

	counting = true;
	PG_TRY();
	{
		while (LockRelease(tag, mode, true))
			n++;
	}
	PG_FINALLY();
	{
		counting = false;
	}
	PG_END_TRY();
	return n;
}

static void
give_session_counts(const LOCKTAG *tag, LOCKMODE mode, int n)
{
	for (int i = 0; i < n; i++)
		(void) LockAcquire(tag, mode, true, true);
}

/* a count of the current transaction on a lock this backend holds */
static void
keep_in_transaction(const LOCKTAG *tag, LOCKMODE mode)
{
	(void) LockAcquire(tag, mode, false, true);
}

static void
end_in_transaction(const LOCKTAG *tag, LOCKMODE mode)
{
	(void) LockRelease(tag, mode, false);
}

/* The advisory locks this backend holds, each with a count of 0, in TopMemoryContext. */
static CallerLock *
held_advisory_locks(int *count)
{
	LockData   *data = GetLockStatusData();
	CallerLock *held = MemoryContextAllocZero(TopMemoryContext,
											  sizeof(CallerLock) * (data->nelements + 1));
	int			n = 0;

	for (int i = 0; i < data->nelements; i++)
	{
		LockInstanceData *lock = &data->locks[i];

		if (lock->pid != MyProcPid || lock->locktag.locktag_type != LOCKTAG_ADVISORY)
			continue;
		for (LOCKMODE mode = 1; mode <= MaxLockMode; mode++)
			if (lock->holdMask & LOCKBIT_ON(mode))
			{
				held[n].tag = lock->locktag;
				held[n].mode = mode;
				n++;
			}
	}
	pfree(data->locks);
	pfree(data);
	*count = n;
	return held;
}

/* an advisory lock's key as the functions that take it write it */
static char *
lock_key(const LOCKTAG *tag)
{
	if (tag->locktag_field4 == 1)
		return psprintf(INT64_FORMAT,
						(int64) (((uint64) tag->locktag_field2 << 32) | tag->locktag_field3));
	return psprintf("%d, %d", (int32) tag->locktag_field2, (int32) tag->locktag_field3);
}

void
advisory_guard_begin(const char *name, Oid role, bool finalize)
{
	CallerLock *held;
	int			n;

	advisory_guard_end();
	held = held_advisory_locks(&n);
	caller_nlocks = 0;
	for (int i = 0; i < n; i++)
	{
		keep_in_transaction(&held[i].tag, held[i].mode);
		held[i].count = take_session_counts(&held[i].tag, held[i].mode);
		give_session_counts(&held[i].tag, held[i].mode, held[i].count);
		end_in_transaction(&held[i].tag, held[i].mode);
		/* a transaction's own lock is not the session's */
		if (held[i].count > 0)
			held[caller_nlocks++] = held[i];
	}
	caller_locks = held;
	guard_name = name ? MemoryContextStrdup(TopMemoryContext, name) : NULL;
	guard_role = role;
	guard_finalize = finalize;
	guard_on = true;
}

bool
advisory_guard_on(void)
{
	return guard_on;
}

/* BF032: the declarer's SQL released a lock of the caller's */
static void
raise_released(const CallerLock *lock, int left, bool taken_back)
{
	const char *again = taken_back ? "The session holds it again as often as before." :
		"Another session holds it now: this session no longer does.";

	if (guard_finalize)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SESSION_LOCK),
				 errmsg("backfill \"%s\" released an advisory lock of the session that finalizes it",
						guard_name),
				 errdetail_plural("Its SQL released advisory lock %s, which the calling session "
								  "held %d time, while CALL backfill_finalize ran its batches "
								  "there (%d left). %s Finalize stopped; the pass goes on.",
								  "Its SQL released advisory lock %s, which the calling session "
								  "held %d times, while CALL backfill_finalize ran its batches "
								  "there (%d left). %s Finalize stopped; the pass goes on.",
								  lock->count,
								  lock_key(&lock->tag), lock->count, left, again),
				 errhint("Release only the backfill's own locks in its SQL, or use transaction-level "
						 "locks (pg_advisory_xact_lock); or call backfill_finalize from a session "
						 "that holds no advisory lock.")));
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_SESSION_LOCK),
			 guard_name ?
			 errmsg("backfill \"%s\" released an advisory lock of the session that evaluated its SQL",
					guard_name) :
			 errmsg("SQL read as role \"%s\" released an advisory lock of the session that ran it",
					GetUserNameFromId(guard_role, true)),
			 errdetail_plural("Its SQL, evaluated as role %s in this session, released advisory "
							  "lock %s, which the session held %d time (%d left). %s",
							  "Its SQL, evaluated as role %s in this session, released advisory "
							  "lock %s, which the session held %d times (%d left). %s",
							  lock->count,
							  GetUserNameFromId(guard_role, true), lock_key(&lock->tag),
							  lock->count, left, again),
			 errhint("Release only the locks that SQL takes itself, or use transaction-level locks "
					 "(pg_advisory_xact_lock).")));
}

/*
 * After a transaction of the declarer's SQL, in the transaction that
 * follows it: the declarer's session advisory locks let go, the caller's
 * kept with the counts it had.  A caller's lock the declarer released is
 * taken back if it is free, and raises BF032 when raise is true.
 */
void
advisory_after_transaction(bool raise)
{
	int			released = -1;
	int			left = 0;
	bool		taken_back = true;

	if (!guard_on)
		return;
	if (caller_nlocks == 0)
	{
		LockReleaseSession(USER_LOCKMETHOD);
		return;
	}
	for (int i = 0; i < caller_nlocks; i++)
	{
		CallerLock *lock = &caller_locks[i];
		int			now = 0;

		if (compat_lock_held_by_me(&lock->tag, lock->mode))
		{
			keep_in_transaction(&lock->tag, lock->mode);
			now = take_session_counts(&lock->tag, lock->mode);
		}
		if (now < lock->count && released < 0)
		{
			released = i;
			left = now;
		}
	}
	/* every session advisory lock: the caller's are held by the transaction meanwhile */
	LockReleaseSession(USER_LOCKMETHOD);
	for (int i = 0; i < caller_nlocks; i++)
	{
		CallerLock *lock = &caller_locks[i];

		if (compat_lock_held_by_me(&lock->tag, lock->mode))
		{
			give_session_counts(&lock->tag, lock->mode, lock->count);
			end_in_transaction(&lock->tag, lock->mode);
		}
		else if (LockAcquire(&lock->tag, lock->mode, true, true) != LOCKACQUIRE_NOT_AVAIL)
			give_session_counts(&lock->tag, lock->mode, lock->count - 1);
		else if (i == released)
			taken_back = false;
	}
	if (released >= 0 && raise)
		raise_released(&caller_locks[released], left, taken_back);
}

void
advisory_guard_end(void)
{
	guard_on = false;
	guard_finalize = false;
	guard_role = InvalidOid;
	if (caller_locks)
		pfree(caller_locks);
	caller_locks = NULL;
	caller_nlocks = 0;
	if (guard_name)
		pfree(guard_name);
	guard_name = NULL;
}
