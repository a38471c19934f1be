/*-------------------------------------------------------------------------
 *
 * run.c
 *	  backfill_run() and backfill_wait(): enqueueing a pass and waiting for
 *	  its end.
 *
 * backfill_run checks what the declaration requires and enqueues the pass
 * (enqueue.c) in the caller's transaction: a transaction that rolls back
 * takes the pass with it, so it never starts.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/jsonb.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "config.h"
#include "catalog.h"
#include "declaration.h"
#include "errors.h"
#include "identity.h"
#include "launcher.h"
#include "requires.h"
#include "enqueue.h"
#include "scope.h"
#include "shmem.h"
#include "tenancy.h"

PG_FUNCTION_INFO_V1(backfill_run);
PG_FUNCTION_INFO_V1(backfill_wait);

/* what backfill_run reads of the declaration, with its row locked */
typedef struct RunDeclaration
{
	Oid			owner;
	Oid			run_as;
	char	   *checksum;
	Datum		environments;
	char	   *envlist;		/* NULL: every environment */
	Jsonb	   *shape;			/* NULL: not scoped */
	char	   *scope_expr;
	char	   *unmet;			/* NULL: what it requires is done */
	char	   *search_path;
	char	   *requires_backfill;
} RunDeclaration;

/* what the ledger holds of a ledger name: 0 for none */
typedef struct LedgerState
{
	int64		running_id;
	int64		completed_id;	/* by a pass of the declaration's owner */
	int64		previous_id;
	bool		reverting;		/* the running pass is a revert */
} LedgerState;

/*
 * Lock the declaration's row, which serializes concurrent runs of one
 * backfill, and read it; UNKNOWN when it is not declared.
 */
static void
lock_declaration(const char *name, RunDeclaration *d)
{
	CatalogScope scope;
	Declaration decl;
	Oid			types[2] = {TEXTOID, TEXTARRAYOID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};

	catalog_enter(&scope);
	if (!declaration_lock(name, &decl))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_UNKNOWN),
				 errmsg("backfill \"%s\" is not declared", name),
				 errhint("Declare it first with backfill_declare(name => '%s', ...).", name)));
	d->owner = decl.owner;
	d->checksum = decl.checksum;
	d->environments = PointerGetDatum(decl.environments);
	d->shape = decl.input_shape;
	d->scope_expr = decl.scope;
	d->run_as = decl.run_as;
	d->search_path = decl.search_path;
	d->requires_backfill = decl.requires_backfill;

	values[0] = CStringGetTextDatum(name);
	values[1] = d->environments;
	if (decl.environments == NULL)
		nulls[1] = 'n';
	catalog_exec("SELECT backfill.unmet_requirement($1), pg_catalog.array_to_string($2, ', ')",
				 2, types, values, nulls, SPI_OK_SELECT);
	d->unmet = catalog_gettext(0, 1);
	d->envlist = catalog_gettext(0, 2);
	catalog_leave(&scope);
}

/*
 * With the declaration locked, read the ledger as it is now: a REPEATABLE
 * READ or SERIALIZABLE caller's snapshot may predate the pass that the
 * transaction we waited for has just enqueued.  Only a pass of the
 * declaration's owner completed it: a name another role declared, ran
 * and dropped before must not turn this backfill's runs into skips, a
 * forward pass that a completed revert undid no longer completes it, and
 * neither does one followed by a pass that failed or was cancelled (a
 * forced pass, or a revert): backfill_pending then says failed, and a
 * run starts a new pass, as it would after any failed one.
 */
static void
read_ledger_state(const char *ledger_name, Oid owner, LedgerState *state)
{
	CatalogScope scope;
	Oid			types[2] = {TEXTOID, OIDOID};
	Datum		values[2] = {CStringGetTextDatum(ledger_name), ObjectIdGetDatum(owner)};

	catalog_enter(&scope);
	catalog_exec_latest("SELECT"
						"  (SELECT max(l.run_id) FROM backfill.ledger l"
						"    WHERE l.ledger_name = $1 AND l.status = 'running'),"
						"  (SELECT max(l.run_id) FROM backfill.ledger l"
						"    WHERE l.ledger_name = $1 AND l.status = 'completed'"
						"      AND l.direction = 'forward'"
						"      AND l.owner::pg_catalog.oid OPERATOR(pg_catalog.=) $2"
						"      AND l.run_id > coalesce((SELECT max(v.run_id)"
						"            FROM backfill.ledger v WHERE v.ledger_name = $1"
						"             AND v.status = 'completed' AND v.direction = 'revert'), 0)"
						"      AND l.run_id > coalesce((SELECT max(f.run_id)"
						"            FROM backfill.ledger f WHERE f.ledger_name = $1"
						"             AND f.status IN ('failed', 'cancelled')), 0)),"
						"  (SELECT max(l.run_id) FROM backfill.ledger l WHERE l.ledger_name = $1),"
						"  EXISTS (SELECT 1 FROM backfill.ledger l WHERE l.ledger_name = $1"
						"           AND l.status = 'running' AND l.direction = 'revert')",
						2, types, values, NULL);
	state->running_id = catalog_getint64(0, 1);
	state->completed_id = catalog_getint64(0, 2);
	state->previous_id = catalog_getint64(0, 3);
	state->reverting = catalog_getbool(0, 4);
	catalog_leave(&scope);
}

/*
 * The pass that answers this run without a new one: the running pass, or
 * (unless forced) the completed one, said in a NOTICE.  0: enqueue one.
 */
static int64
existing_pass(const char *ledger_name, LedgerState *state, bool force)
{
	if (state->running_id != 0 && state->reverting)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_DIRECTION),
				 errmsg("backfill \"%s\" cannot run forward while its revert pass runs",
						ledger_name),
				 errdetail("Run %lld is undoing what the forward passes did.",
						   (long long) state->running_id),
				 errhint("Wait for it to end (SELECT backfill_wait(%lld);), or cancel it, then "
						 "run the backfill again.", (long long) state->running_id)));
	if (state->running_id != 0)
	{
		ereport(NOTICE,
				(errmsg("backfill \"%s\" is already running as run %lld", ledger_name,
						(long long) state->running_id),
				 errhint("SELECT backfill_wait(%lld); waits for it to end.",
						 (long long) state->running_id)));
		return state->running_id;
	}
	if (state->completed_id != 0 && !force)
	{
		ereport(NOTICE,
				(errmsg("backfill \"%s\" skipped: run %lld already completed it", ledger_name,
						(long long) state->completed_id),
				 errhint("Pass force => true to run it again as a new pass.")));
		return state->completed_id;
	}
	return 0;
}

/*
 * A pass whose requirement is not met: refused unless the caller waits,
 * then enqueued with a NOTICE, and started once it is met.
 */
static void
check_requirement(const char *name, const char *unmet, bool wait)
{
	if (unmet == NULL)
		return;
	if (!wait)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_REQUIRES),
				 errmsg("backfill \"%s\" is blocked: %s", name, unmet),
				 errdetail("Its pass may start only once what it requires is done."),
				 errhint("Apply the migration or complete the required backfill, or run with "
						 "wait => true to enqueue the pass until then.")));
	ereport(NOTICE,
			(errmsg("backfill \"%s\" is blocked: %s", name, unmet),
			 errdetail("The pass is enqueued and starts once that is done.")));
}

Datum
backfill_run(PG_FUNCTION_ARGS)
{
	char	   *name;
	bool		force = PG_ARGISNULL(1) ? false : PG_GETARG_BOOL(1);
	Jsonb	   *input = PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2);
	bool		wait = PG_ARGISNULL(3) ? true : PG_GETARG_BOOL(3);
	RunDeclaration d;
	LedgerState state;
	char	   *ledger_name;
	int64		run_id;

	if (PG_ARGISNULL(0))
		check_backfill_name(NULL);
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	check_backfill_name(name);
	check_not_standby("run backfill", name);
	check_catalog_current("run backfill", name);
	backfill_check_database_served(name);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	lock_declaration(name, &d);

	check_backfill_member(name, d.owner);
	check_not_retired(name, "run");
	check_environment(name, d.environments, d.envlist);
	/* what was allowed at declaration may not be any more */
	tenancy_check_run_as(name, d.owner, d.run_as);
	requires_check_backfill(name, d.owner, d.requires_backfill);

	/* a scoped backfill keeps one history per scope, evaluated as its owner */
	ledger_name = scope_ledger_name(name, d.shape, d.scope_expr, input, d.owner, d.search_path);

	read_ledger_state(ledger_name, d.owner, &state);
	run_id = existing_pass(ledger_name, &state, force);
	if (run_id != 0)
	{
		SPI_finish();
		PG_RETURN_INT64(run_id);
	}
	check_requirement(name, d.unmet, wait);

	/* its table and roles are the ones it names (not oids left by a restore) */
	identity_check(name);
	check_role_can_login(name, d.run_as);

	run_id = enqueue_pass(ledger_name, name, d.checksum, force, state.previous_id, d.owner, input);

	SPI_finish();
	PG_RETURN_INT64(run_id);
}

/*
 * backfill_wait's arguments: the run (not NULL), and the deadline its
 * timeout (not NULL, not negative) sets; from a READ COMMITTED transaction
 * only.
 */
static TimestampTz
wait_arguments(FunctionCallInfo fcinfo, int64 *run)
{
	int64		run_id;
	Interval   *timeout;
	int64		timeout_ms;

	check_catalog_current(NULL, NULL);
	/* CALLED ON NULL INPUT (0.6): a NULL run or timeout is refused, not answered NULL */
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_UNKNOWN),
				 errmsg("run to wait for must not be null"),
				 errhint("Pass the run id backfill_run returned, e.g. "
						 "SELECT backfill_wait(backfill_run('name')).")));
	run_id = PG_GETARG_INT64(0);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("timeout to wait for run %lld must not be null", (long long) run_id),
				 errhint("Pass an interval such as '10 minutes', or leave the timeout out for "
						 "its default of one hour.")));
	timeout = PG_GETARG_INTERVAL_P(1);

	timeout_ms = (timeout->time + (int64) timeout->day * USECS_PER_DAY +
				  (int64) timeout->month * DAYS_PER_MONTH * USECS_PER_DAY) / 1000;
	if (timeout_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("timeout to wait for run %lld must not be negative", (long long) run_id),
				 errhint("Pass an interval such as '10 minutes'.")));
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_WAIT_INVALID),
				 errmsg("cannot wait for run %lld in a %s transaction", (long long) run_id,
						IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ"),
				 errdetail("Its snapshot would never see the pass end."),
				 errhint("Wait from a READ COMMITTED transaction.")));

	*run = run_id;
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
}

/*
 * One look at the run's ledger row, as the caller (the ledger's row
 * security hides other roles' runs): its status, in SPI's memory.  A run
 * that does not exist, or whose row this transaction wrote, is refused.
 */
static char *
wait_look(int64 run_id)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(run_id)};
	TransactionId xmin;

	if (catalog_exec("SELECT status, xmin::pg_catalog.text, declaration FROM backfill.ledger"
					 " WHERE run_id = $1",
					 1, types, values, NULL, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_UNKNOWN),
				 errmsg("backfill run %lld does not exist", (long long) run_id),
				 errhint("backfill_run() returns the run id; the backfill_ledger view lists them.")));
	xmin = (TransactionId) strtoul(catalog_gettext(0, 2), NULL, 10);
	if (TransactionIdIsCurrentTransactionId(xmin))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_WAIT_INVALID),
				 errmsg("run %lld of backfill \"%s\" has not been committed yet",
						(long long) run_id, catalog_gettext(0, 3)),
				 errdetail("A pass starts only when the transaction that enqueued it commits."),
				 errhint("COMMIT, then call backfill_wait(%lld).", (long long) run_id)));
	return catalog_gettext(0, 1);
}

/*
 * backfill_wait(run_id, timeout): the ledger status once the pass has
 * ended, or 'running' when the timeout passes first.
 */
Datum
backfill_wait(PG_FUNCTION_ARGS)
{
	int64		run_id;
	TimestampTz deadline = wait_arguments(fcinfo, &run_id);
	char	   *status = NULL;
	MemoryContext callercxt = CurrentMemoryContext;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	for (;;)
	{
		status = wait_look(run_id);
		if (strcmp(status, "running") != 0)
			break;
		if (GetCurrentTimestamp() >= deadline)
			break;
		pfree(status);
		SPI_freetuptable(SPI_tuptable);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	status = MemoryContextStrdup(callercxt, status);
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(status));
}
