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
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "config.h"
#include "errors.h"
#include "probe.h"
#include "shmem.h"
#include "tenancy.h"

PG_FUNCTION_INFO_V1(backfill_probe);

/* the backfill to probe, as the caller may see it; raises when it may not */
static void
probe_target(const char *name, DriftTarget *target)
{
	CatalogScope scope;
	bool		found;
	bool		plain = false;
	Oid			owner = InvalidOid;

	catalog_enter(&scope);
	found = catalog_exec_named("SELECT d.owner, d.run_as, d.relid IS NOT NULL AND d.scope IS NULL"
							   " FROM backfill.declaration d WHERE d.name = $1", name) == 1;
	if (found)
	{
		owner = catalog_getoid(0, 1);
		target->run_as = catalog_getoid(0, 2);
		plain = catalog_getbool(0, 3);
	}
	catalog_leave(&scope);
	check_backfill_target(name, found, owner, "be probed");
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

/* the caller's timeout in ms: more than 0, checked before anything starts */
static int64
timeout_ms_of(const char *name, Interval *timeout)
{
	int64		ms = (timeout->time + (int64) timeout->day * USECS_PER_DAY +
					  (int64) timeout->month * DAYS_PER_MONTH * USECS_PER_DAY) / 1000;

	if (ms <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("timeout to probe backfill \"%s\" must be more than 0", name),
				 errdetail("The caller waits at most its timeout for the probe's answer; a "
						   "probe that could not be waited for would not be started."),
				 errhint("Pass an interval such as '30 seconds', or leave the timeout out for "
						 "its default of one minute.")));
	return ms;
}

/* this call's probe: its entry in shared memory (shmem.c), its own or joined */
typedef struct AskedProbe
{
	int			index;
	uint64		token;
	TimestampTz since;			/* its start: its answer is recorded after it */
	bool		joined;			/* another call's probe of the same backfill */
} AskedProbe;

/*
 * One probe per backfill, and backfill.max_probes_per_role per calling
 * role: reserve this call's, or join the running one (BF038 beyond the cap).
 */
static void
reserve_probe(const char *name, AskedProbe *ap)
{
	int			running = 0;

	switch (backfill_asked_probe_reserve(MyDatabaseId, GetUserId(), drift_name_hash(name),
										 backfill_max_probes_per_role, &ap->index, &ap->token,
										 &ap->since, &running))
	{
		case PROBE_RESERVED:
			return;
		case PROBE_RUNNING:
			ap->joined = true;
			return;
		case PROBE_ROLE_CAP:
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_NO_WORKER),
					 errmsg("role %s already has %d probes running; backfill \"%s\" is not "
							"probed", GetUserNameFromId(GetUserId(), false), running, name),
					 errdetail("backfill.max_probes_per_role (%d) bounds the probe workers the "
							   "backfill_probe calls of one role hold at once.",
							   backfill_max_probes_per_role),
					 errhint("Call it again once one has ended (each ends within "
							 "backfill.probe_timeout), or ask a superuser to raise "
							 "backfill.max_probes_per_role.")));
			break;
		case PROBE_TABLE_FULL:
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_NO_WORKER),
					 errmsg("no probe slot is free to probe backfill \"%s\"", name),
					 errdetail("The cluster has as many backfill_probe workers running as it "
							   "keeps track of."),
					 errhint("Call backfill_probe again later.")));
			break;
	}
}

/* Wait, at most until deadline, for the probe another call started to end. */
static void
wait_for_joined(const char *name, AskedProbe *ap, TimestampTz deadline)
{
	while (backfill_asked_probe_running(ap->index, ap->token))
	{
		if (GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_PROBE_FAILED),
					 errmsg("the probe of backfill \"%s\" did not answer in time", name),
					 errdetail("This call waited for the probe another call started (one probe "
							   "per backfill runs at once), bounded by backfill.probe_timeout "
							   "(%d ms).", backfill_probe_timeout),
					 errhint("backfill_pending() shows the answer once it is taken; or call "
							 "backfill_probe with a longer timeout.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 100L,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* Start this call's probe worker; its answer, waited for at most until deadline. */
static int64
run_probe(const char *name, DriftTarget *target, AskedProbe *ap, TimestampTz deadline)
{
	BackgroundWorkerHandle *handle = probe_start(DRIFT_ASKED, target, 0, CurrentMemoryContext);
	pid_t		pid = 0;
	int64		rows;

	if (handle == NULL)
	{
		backfill_asked_probe_started(ap->index, ap->token, 0);
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NO_WORKER),
				 errmsg("no background worker slot is free to probe backfill \"%s\"", name),
				 errdetail("A probe runs in a background worker of its own, as the "
						   "backfill's role; every slot (max_worker_processes) is in use."),
				 errhint("Call backfill_probe again later, or raise max_worker_processes "
						 "(a restart is needed).")));
	}
	if (WaitForBackgroundWorkerStartup(handle, &pid) != BGWH_STARTED)
		pid = 0;
	backfill_asked_probe_started(ap->index, ap->token, pid);
	rows = probe_wait_answer(name, handle, ap->since, deadline);
	(void) backfill_asked_probe_running(ap->index, ap->token);
	return rows;
}

/*
 * backfill_probe(name, timeout): the rows (at most 1,000) that a plain
 * table backfill's predicate matches now, read by a probe worker as its
 * run_as role, and recorded with the time it was taken.  A call while a
 * probe of the backfill runs waits for that one's answer.
 */
Datum
backfill_probe(PG_FUNCTION_ARGS)
{
	char	   *name;
	int64		timeout_ms;
	DriftTarget target;
	AskedProbe	ap;
	TimestampTz deadline;
	int64		rows;

	/* CALLED ON NULL INPUT: a NULL means nothing here, and says so */
	if (PG_ARGISNULL(0))
		check_backfill_name(NULL);
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	check_catalog_current("probe backfill", name);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("timeout to probe backfill \"%s\" must not be null", name),
				 errdetail("The caller waits at most its timeout for the probe's answer."),
				 errhint("Pass an interval such as '30 seconds', or leave the timeout out for "
						 "its default of one minute.")));
	timeout_ms = timeout_ms_of(name, PG_GETARG_INTERVAL_P(1));
	check_backfill_name(name);
	check_not_standby("probe backfill", name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	probe_target(name, &target);

	memset(&ap, 0, sizeof(ap));
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	reserve_probe(name, &ap);
	if (ap.joined)
	{
		wait_for_joined(name, &ap, deadline);
		rows = probe_wait_answer(name, NULL, ap.since, deadline);
	}
	else
		rows = run_probe(name, &target, &ap, deadline);
	SPI_finish();
	PG_RETURN_INT64(rows);
}
