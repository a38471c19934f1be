/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The cluster's launcher: one static background worker that keeps a
 *	  scheduler (scheduler.c) running for each database named in
 *	  backfill.database_names.
 *
 * The launcher connects to no database; it reads the shared catalog
 * pg_database to see which of the named databases exist.  For each that
 * does it starts a scheduler (a dynamic worker that tells the launcher when
 * it stops) and starts it again when it stops: at once if it had run a
 * while, after a doubling delay (up to a minute) if it stopped soon after
 * starting.  A named database that does not exist is reported once, as a
 * WARNING with a hint, and looked for again every naptime; it is never a
 * FATAL error repeated every few seconds.  The postmaster restarts the
 * launcher itself if it exits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "config.h"
#include "backoff.h"
#include "launcher.h"
#include "worker.h"

/* a stop sooner than this after the start counts as a quick one */
#define SCHEDULER_QUICK_STOP_MS		10000
#define SCHEDULER_RETRY_MIN_MS		1000
#define SCHEDULER_RETRY_MAX_MS		60000

/* what the launcher keeps for each named database */
typedef struct SchedulerSlot
{
	char		dbname[NAMEDATALEN];
	BackgroundWorkerHandle *handle; /* NULL: not running */
	TimestampTz started_at;
	TimestampTz next_start;		/* not before then */
	int			quick_stops;	/* in a row */
	bool		missing_reported;	/* the database is missing and we said so */
} SchedulerSlot;

static SchedulerSlot slots[BACKFILL_MAX_DATABASES];
static int	nslots = 0;

static List *
database_name_list(void)
{
	char	   *raw = pstrdup(backfill_database_names);
	List	   *names = NIL;

	if (!SplitGUCList(raw, ',', &names))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid list syntax in backfill.database_names"),
				 errhint("List database names separated by commas, quoting names with commas.")));
	return names;
}

bool
backfill_database_is_listed(const char *dbname)
{
	ListCell   *lc;

	if (dbname == NULL)
		return false;
	foreach(lc, database_name_list())
		if (strcmp((char *) lfirst(lc), dbname) == 0)
			return true;
	return false;
}

void
backfill_register_launcher(void)
{
	List	   *names = database_name_list();
	ListCell   *lc;
	BackgroundWorker worker;

	if (list_length(names) > BACKFILL_MAX_DATABASES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("backfill.database_names lists %d databases; at most %d are allowed",
						list_length(names), BACKFILL_MAX_DATABASES),
				 errhint("Serve fewer databases from one cluster.")));
	foreach(lc, names)
		if (strlen((char *) lfirst(lc)) >= NAMEDATALEN)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("database name \"%s\" in backfill.database_names is too long",
							(char *) lfirst(lc)),
					 errhint("Database names have at most %d bytes.", NAMEDATALEN - 1)));

	worker_describe(&worker, "backfill_launcher_main", "pg_backfill launcher",
					"pg_backfill launcher");
	worker.bgw_restart_time = 10;
	RegisterBackgroundWorker(&worker);
}

/*
 * Does the database exist?  pg_database is a shared catalog, readable
 * without a database.  Its heap is scanned rather than its name index: an
 * unconnected process cannot open an index before the shared relcache
 * init file exists, which it does not on a freshly created cluster.
 */
static bool
database_exists(const char *dbname)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;
	bool		exists = false;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		if (strcmp(NameStr(((Form_pg_database) GETSTRUCT(tuple))->datname), dbname) == 0)
		{
			exists = true;
			break;
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return exists;
}

/*
 * Start the scheduler of slot i; its slot number is its main argument, its
 * database's name its bgw_extra.
 */
static void
start_scheduler(int i, MemoryContext cxt)
{
	SchedulerSlot *slot = &slots[i];
	char		name[BGW_MAXLEN];

	snprintf(name, BGW_MAXLEN, "pg_backfill scheduler for %s", slot->dbname);
	slot->handle = worker_start("backfill_scheduler_main", name, "pg_backfill scheduler",
								Int32GetDatum(i), slot->dbname, strlen(slot->dbname) + 1,
								cxt);
	slot->started_at = GetCurrentTimestamp();
	if (slot->handle == NULL)
	{
		slot->next_start = TimestampTzPlusMilliseconds(slot->started_at, SCHEDULER_RETRY_MAX_MS);
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("pg_backfill could not start the scheduler of database \"%s\"",
						slot->dbname),
				 errdetail("Every background worker slot is in use."),
				 errhint("Raise max_worker_processes (a restart is needed); the launcher tries "
						 "again in a minute.")));
	}
}

/*
 * One look: note stopped schedulers, start the missing ones that may start.
 * Returns how long to sleep.
 */
static long
launcher_tick(MemoryContext cxt)
{
	TimestampTz now = GetCurrentTimestamp();
	long		sleep_ms = backfill_naptime * 1000L;

	for (int i = 0; i < nslots; i++)
	{
		SchedulerSlot *slot = &slots[i];
		pid_t		pid;

		if (slot->handle != NULL &&
			GetBackgroundWorkerPid(slot->handle, &pid) == BGWH_STOPPED)
		{
			int64		delay = 0;

			pfree(slot->handle);
			slot->handle = NULL;
			if (TimestampDifferenceExceeds(slot->started_at, now, SCHEDULER_QUICK_STOP_MS))
				slot->quick_stops = 0;
			else
				delay = backoff_doubling_ms(slot->quick_stops++, SCHEDULER_RETRY_MIN_MS,
											SCHEDULER_RETRY_MAX_MS);
			slot->next_start = TimestampTzPlusMilliseconds(now, delay);
		}
		if (slot->handle != NULL)
			continue;
		if (slot->next_start > now)
		{
			sleep_ms = Min(sleep_ms, backoff_ms_until(now, slot->next_start));
			continue;
		}
		if (!database_exists(slot->dbname))
		{
			if (!slot->missing_reported)
				ereport(WARNING,
						(errcode(ERRCODE_UNDEFINED_DATABASE),
						 errmsg("database \"%s\" in backfill.database_names does not exist",
								slot->dbname),
						 errdetail("Its backfills run once it is created."),
						 errhint("Create the database, or remove it from backfill.database_names "
								 "and restart the server.")));
			slot->missing_reported = true;
			continue;
		}
		slot->missing_reported = false;
		start_scheduler(i, cxt);
	}
	return sleep_ms;
}

void
backfill_launcher_main(Datum main_arg)
{
	MemoryContext cxt;
	ListCell   *lc;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* no database: the launcher reads only the shared catalog pg_database */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("pg_backfill launcher");

	cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill launcher",
								ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);
	memset(slots, 0, sizeof(slots));
	nslots = 0;
	foreach(lc, database_name_list())
		strlcpy(slots[nslots++].dbname, (char *) lfirst(lc), NAMEDATALEN);
	ereport(LOG, (errmsg("pg_backfill launcher started for %d database(s): %s", nslots,
						 backfill_database_names)));

	for (;;)
	{
		long		sleep_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		sleep_ms = launcher_tick(cxt);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
