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
 * and the declaration's search_path with pg_temp last, both undone with
 * it), and committed
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
 * advisory lock outlives any transaction: after each one (error or not)
 * the declarer's are let go and the caller's kept as often as it held them
 * (advisory.c); one the declarer released ends the work with BF032.  The
 * caller's statement_timeout bounds the whole call: a batch's timeout ends
 * no later, and is followed by the caller's again.  An error that ends the work (a cancel, a
 * timeout, BF032) leaves the session on until what it holds is given back
 * (worker_session_abort).
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
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "advisory.h"
#include "searchpath.h"
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

/* the end of the caller's statement_timeout, or 0 when it has none */
static TimestampTz session_statement_end = 0;

void
worker_session_begin(Oid run_as, const char *search_path, const char *name)
{
	in_session = true;
	session_role = run_as;
	session_search_path = (search_path && search_path[0]) ?
		MemoryContextStrdup(TopMemoryContext, search_path) : NULL;
	session_in_xact = false;
	session_statement_end = get_timeout_active(STATEMENT_TIMEOUT) ?
		get_timeout_finish_time(STATEMENT_TIMEOUT) : 0;
	advisory_guard_begin(name, run_as, true);
}

void
worker_session_end(void)
{
	advisory_guard_end();
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
	/* every setting changed from here on is thrown away at its end */
	session_guc_nest = NewGUCNestLevel();
	/* never the caller's temporary objects first (searchpath.c) */
	searchpath_apply(session_search_path, GUC_ACTION_SAVE);
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
	MemoryContextSwitchTo(outer_cxt);
	advisory_after_transaction(true);
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

/*
 * A session's subtransaction of work (if one is open) rolled back, then
 * the procedure's transaction committed (commit) or rolled back, and the
 * advisory locks put as they were (advisory.c); memory in keep.
 */
static void
session_roll_back(MemoryContext keep, bool commit)
{
	if (session_in_xact)
		RollbackAndReleaseCurrentSubTransaction();
	session_in_xact = false;
	MemoryContextSwitchTo(keep);
	if (commit)
		SPI_commit();
	else
		SPI_rollback();
	MemoryContextSwitchTo(keep);
	advisory_after_transaction(commit);
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
		session_roll_back(keep, true);
		return edata;
	}
	AbortCurrentTransaction();
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(keep);
	return edata;
}

/*
 * In a session, for an error that ends the work: whatever of the
 * procedure's transaction is open is rolled back (SPI_rollback starts the
 * next), the caller's statement timeout is off (it has already ended the
 * call, or will not be waited for) and the session stays on, so that what
 * it holds can be given back in a transaction of work before the error is
 * raised again.  The caller holds interrupts off until then.
 */
ErrorData *
worker_session_abort(MemoryContext keep)
{
	ErrorData  *edata;

	Assert(in_session);
	MemoryContextSwitchTo(keep);
	edata = CopyErrorData();
	FlushErrorState();
	disable_timeout(STATEMENT_TIMEOUT, false);
	QueryCancelPending = false;
	session_roll_back(keep, false);
	/* the declarer's SQL is over: what gives back the leases is the extension's */
	advisory_guard_end();
	return edata;
}

/*
 * A batch's statement timeout.  In a session it ends no later than the
 * caller's statement_timeout, which worker_statement_timeout_end sets
 * again (a deadline already past cancels at once): the caller's bound
 * holds across every batch.
 */
void
worker_statement_timeout(int ms)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);

	if (!in_session)
	{
		enable_timeout_after(STATEMENT_TIMEOUT, ms);
		return;
	}
	if (session_statement_end != 0 && session_statement_end < end)
		end = session_statement_end;
	enable_timeout_at(STATEMENT_TIMEOUT, end);
}

void
worker_statement_timeout_end(void)
{
	disable_timeout(STATEMENT_TIMEOUT, false);
	if (in_session && session_statement_end != 0)
		enable_timeout_at(STATEMENT_TIMEOUT, session_statement_end);
}
