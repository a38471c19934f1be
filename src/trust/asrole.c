/*-------------------------------------------------------------------------
 *
 * asrole.c
 *	  Evaluating a role's SQL from a session that is not that role's,
 *	  leaving nothing of it behind.
 *
 * Some of a declaration's SQL is evaluated outside its lanes: a probe
 * worker (workers/probe.c) probes a predicate for drift and reads the
 * application's migrations table for requires (so does backfill_run in
 * the caller's session), and backfill_run evaluates a scoped backfill's
 * input casts and scope expression in the caller's session.  A probe
 * worker logs in as the backfill's run_as; the migrations table is read as
 * the owner, and the caller of backfill_run may be a superuser.  That SQL can reach the declarer's objects: functions,
 * views, casts, domains, policies.  Run with the session's role, one of
 * them would run with the privileges of whoever is calling (a superuser);
 * and a setting it changed with set_config(..., false) would outlive it,
 * so that the session's own SQL would afterwards resolve names through the
 * declarer's search_path.
 *
 * asrole_call() is the one way such SQL is evaluated: as the declaring
 * role, under SECURITY_RESTRICTED_OPERATION (no SET ROLE, no temporary
 * objects), with the declarer's search_path and pg_temp last (searchpath.c),
 * inside a subtransaction that is always rolled back, even when it
 * succeeded.  Whatever the SQL changed
 * (settings, rows, locks) ends with it; only the result the caller copied
 * out remains.  A session advisory lock outlives a rollback: around the
 * call the session's are counted and kept as they were (advisory.c), and
 * SQL that released one of them raises BF032.
 *
 * Rolled back or not, SQL evaluated in a session reaches what the session
 * holds: its cursors, prepared statements, temporary objects, advisory
 * locks.  asrole_own_session() says whether the session is the role's own;
 * in any other client session no SQL the role controls may run
 * (requires.c reads the migrations table there only when no user code can
 * run; finalize leaves the pass to the lanes).
 *
 * Every such evaluation is bounded: lock_timeout backfill.probe_lock_timeout
 * (1 s) for its lock waits, and a statement timeout of
 * backfill.probe_timeout (60 s), never later than the caller's own
 * statement_timeout, armed around it (a statement timeout set by SQL only
 * takes effect at the next top-level statement, so it is armed here).  In
 * a background worker, SQL that catches the timeout's cancel is ended by
 * the process's own end BACKFILL_TERMINATE_GRACE_MS later (deadline.c).  In
 * a report none of this runs: reports read the catalogs only.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/elog.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "advisory.h"
#include "asrole.h"
#include "config.h"
#include "deadline.h"
#include "searchpath.h"

/*
 * Arm the statement timeout of a declarer's SQL: backfill.probe_timeout
 * from now, or the caller's own end when that comes first.  Returns the
 * caller's end (0: none), for bound_end.
 */
static TimestampTz
bound_begin(void)
{
	TimestampTz caller_end = get_timeout_active(STATEMENT_TIMEOUT) ?
		get_timeout_finish_time(STATEMENT_TIMEOUT) : 0;
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  backfill_probe_timeout);

	if (caller_end != 0 && caller_end < end)
		end = caller_end;
	enable_timeout_at(STATEMENT_TIMEOUT, end);
	/* a worker whose SQL catches the timeout's cancel ends anyway (deadline.c) */
	deadline_arm(TimestampTzPlusMilliseconds(end, BACKFILL_TERMINATE_GRACE_MS));
	return caller_end;
}

/* the caller's statement timeout as it was before bound_begin */
static void
bound_end(TimestampTz caller_end)
{
	disable_timeout(STATEMENT_TIMEOUT, false);
	deadline_disarm();
	if (caller_end != 0)
		enable_timeout_at(STATEMENT_TIMEOUT, caller_end);
}

ErrorData *
asrole_call(const char *name, Oid role, const char *search_path, AsRoleFunc fn, void *arg,
			bool catch_errors)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Oid			save_user;
	int			save_sec;
	ErrorData  *volatile error = NULL;
	TimestampTz caller_end;
	/* inside CALL backfill_finalize's work, its own guard holds */
	bool		guard = !advisory_guard_on();

	if (guard)
		advisory_guard_begin(name, role, false);
	GetUserIdAndSecContext(&save_user, &save_sec);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	caller_end = bound_begin();

	PG_TRY();
	{
		int			nest;

		SetUserIdAndSecContext(role, save_sec | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		nest = NewGUCNestLevel();
		searchpath_apply(search_path, GUC_ACTION_SAVE);
		(void) set_config_option("lock_timeout", psprintf("%d", backfill_probe_lock_timeout),
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
		fn(arg);
		MemoryContextSwitchTo(cxt);
		/* discard every setting fn changed, whatever its scope */
		AtEOXact_GUC(false, nest);
		SetUserIdAndSecContext(save_user, save_sec);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		error = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
	bound_end(caller_end);

	/* success or not: nothing the SQL did survives the subtransaction */
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	SetUserIdAndSecContext(save_user, save_sec);
	/* a session advisory lock outlives the rollback: the caller's kept, the SQL's let go */
	if (guard)
	{
		PG_TRY();
		{
			advisory_after_transaction(true);
		}
		PG_FINALLY();
		{
			advisory_guard_end();
		}
		PG_END_TRY();
	}

	if (error != NULL && (!catch_errors || error->sqlerrcode == ERRCODE_QUERY_CANCELED))
		ReThrowError(error);
	return error;
}

/* what asrole_query hands to its callback, and gets back */
typedef struct AsRoleQuery
{
	const char *sql;
	int			nargs;
	Oid		   *types;
	Datum	   *values;
	const char *nulls;
	MemoryContext result_cxt;
	char	   *result;
} AsRoleQuery;

static void
run_query(void *arg)
{
	AsRoleQuery *q = (AsRoleQuery *) arg;
	int			rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute_with_args(q->sql, q->nargs, q->types, q->values, q->nulls, true, 1);
	if (rc < 0)
		elog(ERROR, "could not run a query as another role (SPI code %d)", rc);
	if (SPI_tuptable != NULL && SPI_processed > 0)
	{
		char	   *value = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

		if (value != NULL)
			q->result = MemoryContextStrdup(q->result_cxt, value);
	}
	SPI_finish();
}

char *
asrole_query(const char *name, Oid role, const char *search_path, const char *sql, int nargs,
			 Oid *types, Datum *values, const char *nulls, ErrorData **error)
{
	AsRoleQuery q = {.sql = sql, .nargs = nargs, .types = types, .values = values,
	.nulls = nulls, .result_cxt = CurrentMemoryContext};
	ErrorData  *caught;

	caught = asrole_call(name, role, search_path, run_query, &q, error != NULL);
	if (error != NULL)
		*error = caught;
	return caught ? NULL : q.result;
}

bool
asrole_own_session(Oid role)
{
	return GetAuthenticatedUserId() == role && GetSessionUserId() == role;
}
