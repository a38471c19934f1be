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
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

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

void
worker_session_begin(Oid run_as, const char *search_path)
{
	in_session = true;
	session_role = run_as;
	session_search_path = (search_path && search_path[0]) ?
		MemoryContextStrdup(TopMemoryContext, search_path) : NULL;
	session_in_xact = false;
}

void
worker_session_end(void)
{
	in_session = false;
	session_in_xact = false;
	if (session_search_path)
		pfree(session_search_path);
	session_search_path = NULL;
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
	if (session_search_path)
		(void) set_config_option("search_path", session_search_path, PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
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
	/* a release keeps the role: the commit must start the next as the caller */
	SetUserIdAndSecContext(session_caller, session_caller_sec);
	ReleaseCurrentSubTransaction();
	session_in_xact = false;
	MemoryContextSwitchTo(outer_cxt);
	SPI_commit();
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
		MemoryContextSwitchTo(keep);
		return edata;
	}
	AbortCurrentTransaction();
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(keep);
	return edata;
}
