/*-------------------------------------------------------------------------
 *
 * enqueue.c
 *	  The start of a pass: whether its declaration may run here, and its
 *	  ledger row (status running) and run row (phase queued), shared by
 *	  backfill_run, backfill_retry, backfill_revert and the scheduler's
 *	  drift check.
 *
 * The rows are written in the caller's transaction, and the database's
 * scheduler is woken when that transaction commits.  A transaction that
 * rolls back takes the rows with it, so the pass never starts.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "catalog.h"
#include "config.h"
#include "enqueue.h"
#include "errors.h"
#include "shmem.h"
#include "state.h"

/*
 * Refuse, before anything is written, a pass the declaration's
 * environments do not allow here.  envlist is NULL when it allows all.
 */
void
check_environment(const char *name, Datum environments, const char *envlist)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (envlist == NULL)
		return;
	arr = DatumGetArrayTypeP(environments);
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
		if (!nulls[i] && strcmp(TextDatumGetCString(elems[i]), backfill_environment) == 0)
			return;
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_ENVIRONMENT),
			 errmsg("backfill \"%s\" may not run in environment \"%s\"", name,
					backfill_environment),
			 errdetail("It is declared for: %s.", envlist),
			 errhint("Run it where backfill.environment is one of those, or declare it "
					 "with this environment in its list.")));
}

/*
 * The catalog holds at most one running pass per ledger name (the unique
 * index ledger_one_running_idx).  Callers check under the declaration's
 * lock first; an enqueue that still collides (a writer that took no such
 * lock) gets this error instead of the index's.  Returns when the error
 * being handled is another one.
 */
static void
refuse_second_running_pass(MemoryContext cxt, const char *name, const char *ledger_name)
{
	MemoryContext errcxt = MemoryContextSwitchTo(cxt);
	ErrorData  *edata = CopyErrorData();

	if (edata->sqlerrcode != ERRCODE_UNIQUE_VIOLATION || edata->constraint_name == NULL ||
		strcmp(edata->constraint_name, "ledger_one_running_idx") != 0)
	{
		FreeErrorData(edata);
		MemoryContextSwitchTo(errcxt);
		return;
	}
	FlushErrorState();
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_CONCURRENT),
			 errmsg("backfill \"%s\" is already running", ledger_name),
			 errdetail("A pass of it was enqueued by a concurrent transaction; a backfill has "
					   "at most one running pass."),
			 errhint("SELECT backfill_status('%s'); shows the running pass; "
					 "backfill_wait() waits for it.", name)));
}

/*
 * Write the ledger row (status running) and the run row of a new forward
 * pass, in the caller's transaction and SPI connection.  Returns the run id.
 */
int64
enqueue_pass(const char *ledger_name, const char *name, const char *checksum, bool force,
			 int64 previous_id, Oid owner, Jsonb *input)
{
	return enqueue_pass_as(ledger_name, name, checksum, force, previous_id, owner, input,
						   "forward", false);
}

/*
 * enqueue_pass, of a direction ("forward" or "revert"), and for watch a
 * catch-up pass the drift watch starts (state_pass_enqueue writes the rows).
 */
int64
enqueue_pass_as(const char *ledger_name, const char *name, const char *checksum, bool force,
				int64 previous_id, Oid owner, Jsonb *input, const char *direction, bool watch)
{
	bool		forward = strcmp(direction, "forward") == 0 && !watch;
	CatalogScope scope;
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int64		run_id = 0;
	MemoryContext cxt = CurrentMemoryContext;

	/*
	 * A pass that was answered with a run id survives a crash, whatever the
	 * caller's (or the role's) synchronous_commit says.
	 */
	ForceSyncCommit();
	/* the backstop of every start: a retired backfill never starts a pass */
	check_not_retired(name, forward ? "run" : watch ? "catch up" : "be reverted");
	values[0] = CStringGetTextDatum(ledger_name);
	values[1] = CStringGetTextDatum(checksum);
	values[2] = BoolGetDatum(force);
	values[3] = Int64GetDatum(previous_id);
	nulls[3] = previous_id == 0 ? 'n' : ' ';
	values[4] = ObjectIdGetDatum(owner);
	values[5] = CStringGetTextDatum(name);
	values[6] = input ? JsonbPGetDatum(input) : (Datum) 0;
	nulls[6] = input ? ' ' : 'n';
	values[7] = CStringGetTextDatum(direction);
	values[8] = BoolGetDatum(watch);
	catalog_enter(&scope);
	PG_TRY();
	{
		run_id = state_pass_enqueue(values, nulls);
	}
	PG_CATCH();
	{
		refuse_second_running_pass(cxt, name, ledger_name);
		PG_RE_THROW();
	}
	PG_END_TRY();
	catalog_leave(&scope);
	backfill_wake_scheduler_at_commit();
	return run_id;
}
