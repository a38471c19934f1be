/*-------------------------------------------------------------------------
 *
 * xact.c
 *	  One transaction of work in a background worker (scheduler, lane,
 *	  relay): start it with a snapshot and an SPI connection, commit it,
 *	  report the statistics and go idle; or, when it failed, keep its error
 *	  and roll it back.
 *
 * A transaction switches memory contexts; committing leaves the worker in
 * TopMemoryContext.  worker_commit_xact goes back to the context
 * worker_begin_xact was called in, so a worker's loop keeps allocating in
 * the scratch context it resets each time round.  An abort leaves the
 * worker in TopMemoryContext too: worker_abort_xact returns in the context
 * that keeps the error.
 *
 * The same three calls serve a backend that works a pass itself (CALL
 * backfill_finalize): between worker_session_begin and _end, each
 * transaction of work is a subtransaction of the procedure's transaction,
 * run as the role a lane would log in as (with SECURITY_RESTRICTED_OPERATION
 * and the declaration's search_path, both undone with it), and committed
 * by committing the procedure's transaction (SPI_commit), back as the
 * caller.  A failed one rolls back its subtransaction, which undoes the
 * role, the settings and the SPI connections made inside it.
 *
 * Nothing of the declarer's SQL may outlive its transaction in the
 * caller's session.  A released subtransaction would keep every setting
 * changed without LOCAL (set_config(..., false)) and commit it with the
 * procedure's transaction: each transaction of work therefore opens a GUC
 * nest level of its own and throws it away, committed or not, so the
 * caller's search_path, statement_timeout, DateStyle, custom settings and
 * default_transaction_read_only are back before the commit.  A session
 * advisory lock outlives any transaction: after each one (and at the end,
 * error or not) the session keeps only the advisory locks the caller held
 * when the work began.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/lock.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "worker.h"
#include "xact.h"

/* the memory context worker_begin_xact was called in, restored at commit */
static MemoryContext outer_cxt = NULL;

/* a backend working a pass itself (worker_session_begin) */
static bool in_session = false;
static Oid	session_role = InvalidOid;
static char *session_search_path = NULL;
static bool session_in_xact = false;
static Oid	session_caller = InvalidOid;
static int	session_caller_sec = 0;
static int	session_guc_nest = 0;

/* the advisory locks (tag and mode) the caller held when the work began */
typedef struct HeldLock
{
	LOCKTAG		tag;
	LOCKMODE	mode;
} HeldLock;

static HeldLock *caller_locks = NULL;
static int	caller_nlocks = 0;

/* The advisory locks this backend holds, in TopMemoryContext. */
static HeldLock *
held_advisory_locks(int *count)
{
	LockData   *data = GetLockStatusData();
	HeldLock   *held = MemoryContextAllocZero(TopMemoryContext,
											  sizeof(HeldLock) * (data->nelements + 1));
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

static bool
caller_held(const HeldLock *lock)
{
	for (int i = 0; i < caller_nlocks; i++)
		if (caller_locks[i].mode == lock->mode &&
			memcmp(&caller_locks[i].tag, &lock->tag, sizeof(LOCKTAG)) == 0)
			return true;
	return false;
}

/*
 * Release the session advisory locks the declarer's SQL took: all of them
 * when the caller held none (the common case), else each lock the caller
 * did not hold, as often as it was taken.
 */
static void
release_declarer_locks(void)
{
	HeldLock   *now;
	int			n;

	if (caller_nlocks == 0)
	{
		LockReleaseSession(USER_LOCKMETHOD);
		return;
	}
	now = held_advisory_locks(&n);
	for (int i = 0; i < n; i++)
		if (!caller_held(&now[i]))
			while (compat_lock_held_by_me(&now[i].tag, now[i].mode) &&
				   LockRelease(&now[i].tag, now[i].mode, true))
				;
	pfree(now);
}

void
worker_session_begin(Oid run_as, const char *search_path)
{
	in_session = true;
	session_role = run_as;
	session_search_path = (search_path && search_path[0]) ?
		MemoryContextStrdup(TopMemoryContext, search_path) : NULL;
	session_in_xact = false;
	caller_locks = held_advisory_locks(&caller_nlocks);
}

void
worker_session_end(void)
{
	if (in_session)
		release_declarer_locks();
	in_session = false;
	session_in_xact = false;
	if (session_search_path)
		pfree(session_search_path);
	session_search_path = NULL;
	if (caller_locks)
		pfree(caller_locks);
	caller_locks = NULL;
	caller_nlocks = 0;
}

bool
worker_in_session(void)
{
	return in_session;
}

/* In a session: a subtransaction as the lane's role, with its search_path. */
static void
session_begin_xact(void)
{
	BeginInternalSubTransaction(NULL);
	session_in_xact = true;
	/* every setting changed from here on is thrown away at its end */
	session_guc_nest = NewGUCNestLevel();
	if (session_search_path)
		(void) set_config_option("search_path", session_search_path, PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	worker_key_text_settings(GUC_ACTION_SAVE);
	GetUserIdAndSecContext(&session_caller, &session_caller_sec);
	SetUserIdAndSecContext(session_role, session_caller_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
}

/*
 * In a session: back as the caller, the subtransaction released, and the
 * procedure's transaction committed (a new one begins: PostgreSQL 15's
 * SPI_commit), in a context that outlives it.
 */
static void
session_commit_xact(void)
{
	SPI_finish();
	PopActiveSnapshot();
	/* a release keeps non-local settings: discard them, the caller's are back */
	AtEOXact_GUC(false, session_guc_nest);
	/* a release keeps the role: the commit must start the next as the caller */
	SetUserIdAndSecContext(session_caller, session_caller_sec);
	ReleaseCurrentSubTransaction();
	session_in_xact = false;
	MemoryContextSwitchTo(outer_cxt);
	SPI_commit();
	release_declarer_locks();
	MemoryContextSwitchTo(outer_cxt);
}

void
worker_begin_xact(const char *activity)
{
	outer_cxt = CurrentMemoryContext;
	if (in_session)
	{
		session_begin_xact();
		return;
	}
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

void
worker_commit_xact(void)
{
	if (in_session)
	{
		session_commit_xact();
		return;
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	/* let autovacuum see the rows this worker changed */
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(outer_cxt);
}

ErrorData *
worker_abort_xact(MemoryContext keep)
{
	ErrorData  *edata;

	/* the error lives in ErrorContext, which the flush resets */
	MemoryContextSwitchTo(keep);
	edata = CopyErrorData();
	FlushErrorState();
	if (in_session)
	{
		/* undoes the role, the settings, the SPI connections made in it */
		if (session_in_xact)
			RollbackAndReleaseCurrentSubTransaction();
		session_in_xact = false;
		MemoryContextSwitchTo(keep);
		SPI_commit();
		release_declarer_locks();
		MemoryContextSwitchTo(keep);
		return edata;
	}
	AbortCurrentTransaction();
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(keep);
	return edata;
}
