/*-------------------------------------------------------------------------
 *
 * probe.c
 *	  backfill_probe(name, timeout): a drift probe asked for, run by a probe
 *	  worker as the backfill's role; the caller only waits for the answer.
 *
 * The caller's session evaluates none of the backfill's SQL: it checks
 * that the caller may act for the backfill's owner, starts a "pg_backfill
 * probe" worker (workers/probe.c) that logs in as the backfill's run_as
 * role, and waits, at most timeout, for it to end.  The worker records its
 * answer (rows found, at most 1,000, or the error that ended it) with its
 * time in backfill.probe, which backfill_pending shows; this function
 * returns the rows, or raises BF039 with the probe's error.  No free
 * background worker slot is BF038.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "config.h"
#include "errors.h"
#include "probe.h"
#include "tenancy.h"

PG_FUNCTION_INFO_V1(backfill_probe);

/* the backfill to probe, as the caller may see it; raises when it may not */
static void
probe_target(const char *name, DriftTarget *target)
{
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	bool		found;
	bool		plain = false;
	Oid			owner = InvalidOid;

	catalog_enter(&scope);
	found = catalog_exec("SELECT d.owner, d.run_as, d.relid IS NOT NULL AND d.scope IS NULL"
						 " FROM backfill.declaration d WHERE d.name = $1",
						 1, types, values, NULL, SPI_OK_SELECT) == 1;
	if (found)
	{
		owner = catalog_getoid(0, 1);
		target->run_as = catalog_getoid(0, 2);
		plain = catalog_getbool(0, 3);
	}
	catalog_leave(&scope);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_UNKNOWN),
				 errmsg("backfill \"%s\" is not declared", name),
				 errhint("backfill_pending() lists the declared backfills.")));
	check_backfill_member(name, owner);
	check_not_retired(name, "be probed");
	if (!plain)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" has no predicate over a table to probe", name),
				 errdetail("It is a pages source or a scoped backfill: drift is probed only "
						   "for a plain table backfill."),
				 errhint("Its passes' convergence count says what is left at their end "
						 "(backfill_status).")));
	check_role_can_login(name, target->run_as);
	target->name = pstrdup(name);
}

static int64
timeout_ms_of(const char *name, Interval *timeout)
{
	int64		ms = (timeout->time + (int64) timeout->day * USECS_PER_DAY +
					  (int64) timeout->month * DAYS_PER_MONTH * USECS_PER_DAY) / 1000;

	if (ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("timeout to probe backfill \"%s\" must not be negative", name),
				 errhint("Pass an interval such as '30 seconds'.")));
	return ms;
}

/*
 * backfill_probe(name, timeout): the rows (at most 1,000) that a plain
 * table backfill's predicate matches now, read by a probe worker as its
 * run_as role, and recorded with the time it was taken.
 */
Datum
backfill_probe(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	int64		timeout_ms = timeout_ms_of(name, PG_GETARG_INTERVAL_P(1));
	DriftTarget target;
	BackgroundWorkerHandle *handle;
	TimestampTz since;
	int64		rows;

	check_backfill_name(name);
	check_not_standby("probe backfill", name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	probe_target(name, &target);

	since = GetCurrentTimestamp();
	handle = probe_start(DRIFT_ASKED, &target, 0, CurrentMemoryContext);
	if (handle == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NO_WORKER),
				 errmsg("no background worker slot is free to probe backfill \"%s\"", name),
				 errdetail("A probe runs in a background worker of its own, as the "
						   "backfill's role; every slot (max_worker_processes) is in use."),
				 errhint("Call backfill_probe again later, or raise max_worker_processes "
						 "(a restart is needed).")));
	rows = probe_wait_answer(name, handle, since, TimestampTzPlusMilliseconds(since, timeout_ms));
	SPI_finish();
	PG_RETURN_INT64(rows);
}
