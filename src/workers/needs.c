/*-------------------------------------------------------------------------
 *
 * needs.c
 *	  Which passes need lanes, as a database's scheduler (scheduler.c) reads
 *	  them at each look: the running passes, how many lanes each wants, why
 *	  one gets none (its windows, its role that cannot log in, what it
 *	  requires, its rate); whether the database has work at all, and
 *	  whether it is still served.
 *
 * One look reads the catalogs in one transaction (read_running_passes): it
 * first fails the passes whose declaration is gone or no longer names its
 * table and roles, pauses every running pass of a database no longer
 * served (with the reason), then reads each running pass with its
 * partitions: a queued pass wants max_parallel lanes, a running one as
 * many as it has partitions to claim (pending, or held by a dead holder
 * that is not cooling down), and one whose partitions are all done but
 * which nobody finished wants one.  The columns are read by name.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "config.h"
#include "backoff.h"
#include "catalog.h"
#include "errors.h"
#include "launcher.h"
#include "needs.h"
#include "pacing.h"
#include "pass.h"
#include "relay.h"
#include "shmem.h"
#include "spicols.h"
#include "state.h"
#include "tenancy.h"
#include "windows.h"
#include "xact.h"

bool		outbox_pending = false;
bool		extension_present = true;
bool		catalogs_current = true;	/* at the library's version (catalogs_at_version) */
bool		database_busy = true;	/* has work that needs the scheduler (database_has_work) */
const char *database_refusal = NULL;	/* why this database is no longer served */

/*
 * The passes fail_unbound_passes has just failed (their ledger rows end
 * at this transaction's start) may still have lanes, started before
 * their table or roles changed: at commit they are told to stop, as the
 * lanes of a pass a lane fails (a batch in flight is cancelled), instead
 * of retrying what can no longer work until their attempts run out.
 */
static void
stop_lanes_of_failed_passes(void)
{
	if (SPI_execute("SELECT l.run_id FROM backfill.ledger l"
					" WHERE l.status = 'failed' AND l.finished_at = pg_catalog.now()",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the passes that failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		backfill_wake_lanes_at_commit(DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
																  SPI_tuptable->tupdesc, 1,
																  &isnull)), true);
	}
}

/*
 * A pass whose declaration is gone, or no longer names its table and
 * roles (identity.c), gets no lane: it fails here, so no lane ever logs in
 * as a role the declaration does not name.
 */
static void
fail_unbound_passes(void)
{
	bool		isnull;

	if (SPI_execute("SELECT backfill.fail_unbound_passes()", false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not fail the passes that cannot start");
	if (DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
									&isnull)) == 0)
		return;
	stop_lanes_of_failed_passes();
	ereport(LOG,
			(errmsg("pg_backfill: failed passes whose declaration is gone or no longer "
					"names its table and roles"),
			 errhint("backfill_ledger shows why (BF007, BF016 or BF001).")));
}

/* the columns of the running passes (read_running_passes), read by name */
typedef enum NeedColumn
{
	NEED_RUN_ID,
	NEED_RUN_AS,
	NEED_MAX_PARALLEL,
	NEED_PHASE,
	NEED_LIVE,
	NEED_CLAIMABLE,
	NEED_CHECK_DRIFT,
	NEED_NAME,
	NEED_COOLING,
	NEED_CHECK_MIGRATION,
	NEED_WINDOWS,
	NEED_WINDOW_TIME_ZONE,
	NEED_COLUMNS
} NeedColumn;

static const char *const need_column_names[NEED_COLUMNS] = {
	"run_id", "run_as", "max_parallel", "phase", "live", "claimable", "check_drift",
	"declaration", "cooling", "check_migration", "windows", "window_time_zone"
};

/*
 * Outside every time window of its declaration (windows.c, no SQL): the
 * pass gets no lane until the next window starts, which need->window_next
 * says.
 */
static void
need_window(RunNeed *need, HeapTuple tup, TupleDesc desc, const int *col)
{
	bool		isnull;
	Datum		windows = SPI_getbinval(tup, desc, col[NEED_WINDOWS], &isnull);
	TimestampTz next;

	if (isnull)
		return;
	if (!windows_inside(windows_parse(need->name, DatumGetArrayTypeP(windows),
									  SPI_getvalue(tup, desc, col[NEED_WINDOW_TIME_ZONE])),
						GetCurrentTimestamp(), &next))
		need->window_next = next;
}

/*
 * Row i of the running passes (read_running_passes; col: its columns'
 * numbers): what the pass needs, in result_cxt.
 */
static RunNeed *
need_from_row(uint64 i, const int *col, MemoryContext result_cxt)
{
	HeapTuple	tup = SPI_tuptable->vals[i];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		isnull;
	int			max_parallel = DatumGetInt32(SPI_getbinval(tup, desc, col[NEED_MAX_PARALLEL],
														   &isnull));
	char	   *phase = SPI_getvalue(tup, desc, col[NEED_PHASE]);
	int			live = (int) DatumGetInt64(SPI_getbinval(tup, desc, col[NEED_LIVE], &isnull));
	int			claimable = (int) DatumGetInt64(SPI_getbinval(tup, desc, col[NEED_CLAIMABLE],
															  &isnull));
	int			cooling = (int) DatumGetInt64(SPI_getbinval(tup, desc, col[NEED_COOLING],
															&isnull));
	RunNeed    *need = MemoryContextAllocZero(result_cxt, sizeof(RunNeed));
	char	   *problem;

	need->run_id = DatumGetInt64(SPI_getbinval(tup, desc, col[NEED_RUN_ID], &isnull));
	need->owner = DatumGetObjectId(SPI_getbinval(tup, desc, col[NEED_RUN_AS], &isnull));
	need->lanes_live = live;
	need->claimable = claimable;
	need->check_drift = DatumGetBool(SPI_getbinval(tup, desc, col[NEED_CHECK_DRIFT], &isnull));
	need->check_migration = DatumGetBool(SPI_getbinval(tup, desc, col[NEED_CHECK_MIGRATION],
													   &isnull));
	need->name = MemoryContextStrdup(result_cxt, SPI_getvalue(tup, desc, col[NEED_NAME]));
	problem = tenancy_login_problem(need->owner);
	need->login_problem = problem ? MemoryContextStrdup(result_cxt, problem) : NULL;
	need_window(need, tup, desc, col);
	if (strcmp(phase, "queued") == 0)
		need->lanes_wanted = max_parallel;
	else if (claimable > 0)
		need->lanes_wanted = Min(max_parallel, live + claimable);
	else if (live == 0 && cooling == 0)
		need->lanes_wanted = 1; /* all done, nobody finished the pass */
	else
		need->lanes_wanted = 0;
	return need;
}

/*
 * A database that became a template or stopped taking connections after
 * its scheduler started is served no longer (ALTER DATABASE ends no
 * session): the reason, or NULL while it is still served.
 */
static const char *
database_no_longer_served(void)
{
	HeapTuple	tuple;
	const char *why = NULL;

	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
	if (!HeapTupleIsValid(tuple))
		return "the database is being dropped";
	if (((Form_pg_database) GETSTRUCT(tuple))->datistemplate)
		why = "the database is now a template";
	else if (!((Form_pg_database) GETSTRUCT(tuple))->datallowconn)
		why = "the database no longer allows connections";
	ReleaseSysCache(tuple);
	return why;
}

/*
 * The database is no longer served (why): every running pass is paused,
 * with the reason in its last_error (backfill_status shows it), and its
 * lanes are woken at commit, so that each leaves at its checkpoint after
 * the batch in flight instead of working on where no scheduler watches.
 * Resumed once the database is served again (backfill_resume refuses
 * before, BF013).  The ledger rows are locked first, as every writer of a
 * pass's state locks them.
 */
static void
pause_unserved_passes(const char *why)
{
	char	   *dbname = get_database_name(MyDatabaseId);
	int			n;

	n = state_passes_paused_all(psprintf(BACKFILL_UNSERVED_PAUSE "%s, and no scheduler serves "
										 "it; ALTER DATABASE %s IS_TEMPLATE false (or "
										 "ALLOW_CONNECTIONS true), then backfill_resume",
										 why, dbname ? quote_identifier(dbname) : "..."));
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		int64		run_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
														 SPI_tuptable->tupdesc, 1, &isnull));

		backfill_wake_lanes_at_commit(run_id, false);
		ereport(LOG,
				(errmsg("pg_backfill: run " INT64_FORMAT " paused: %s", run_id, why),
				 errhint("ALTER DATABASE ... IS_TEMPLATE false (or ALLOW_CONNECTIONS true), "
						 "then backfill_resume.")));
	}
}

/*
 * Has the database work that needs its scheduler: a pass running (paused
 * and queued ones too: a resume wakes, but a requirement met does not), a
 * watched backfill, an outbox message pending or dead (a sink set or a
 * requeue wakes nobody)?  In the caller's transaction.
 */
bool
database_has_work(void)
{
	if (catalog_ask("look for running passes",
					"SELECT EXISTS (SELECT 1 FROM backfill.ledger WHERE status = 'running')",
					0, NULL, NULL))
		return true;
	/* a retired backfill is watched no more */
	if (catalog_ask("look for watched backfills",
					psprintf("SELECT EXISTS (SELECT 1 FROM backfill.declaration d"
							 " WHERE d.watch_ms IS NOT NULL AND NOT %s)", retired_sql("d")),
					0, NULL, NULL))
		return true;
	return catalog_ask("look for outbox messages",
					"SELECT EXISTS (SELECT 1 FROM backfill.outbox WHERE state IN ('pending', 'dead'))",
					0, NULL, NULL);
}

/*
 * A queued pass whose declaration requires a migration waits for a probe
 * worker (probe.c) to read it applied, after the pass was enqueued
 * (backfill.requirement): the scheduler's look reads no migrations table.
 */
static const char *
migration_unread_sql(void)
{
	return "r.phase = 'queued' AND d.requires IS NOT NULL"
		"  AND NOT coalesce((SELECT q.unmet IS NULL AND q.checked_at >= l.started_at"
		"                      FROM backfill.requirement q"
		"                     WHERE q.declaration = l.declaration), false)";
}

/* what keeps a queued pass from starting, read from the catalogs */
static const char *
required_unmet_sql(void)
{
	return "backfill.unmet_required_backfill(l.declaration)";
}

/*
 * Are the database's catalogs at the library's version?  When not (the
 * library was updated, ALTER EXTENSION ... UPDATE not yet run) the scheduler
 * does no work here and looks again at each naptime; it says so once, with
 * the way out.  In the caller's transaction, the extension present.
 */
static bool
catalogs_at_version(void)
{
	static bool warned = false;
	char	   *version;

	if (catalog_is_current(&version))
		return true;
	if (!warned)
		ereport(WARNING,
				(errcode(ERRCODE_BACKFILL_CATALOG_VERSION),
				 errmsg("pg_backfill scheduler for database \"%s\" does no work: the catalogs "
						"of pg_backfill are at version %s",
						get_database_name(MyDatabaseId), version ? version : "unknown"),
				 errdetail("The installed library is version %s and works only with its catalogs "
						   "at that version.", BACKFILL_CATALOG_VERSION),
				 errhint("Run ALTER EXTENSION pg_backfill UPDATE; in this database.")));
	warned = true;
	return false;
}

/*
 * Read the running passes and how many lanes each wants.  Runs in its own
 * transaction; the result is allocated in the caller's memory context.
 */
List *
read_running_passes(MemoryContext result_cxt)
{
	List	   *needs = NIL;

	worker_begin_xact("pg_backfill scheduler: reading running passes");

	database_refusal = database_no_longer_served();
	extension_present = OidIsValid(get_extension_oid(BACKFILL_EXTENSION_NAME, true));
	catalogs_current = extension_present && catalogs_at_version();
	if (catalogs_current)
	{
		int			rc;
		int			col[NEED_COLUMNS];
		const char *windows_sql = "d.windows, d.window_time_zone";
		const char *windows_group = ", d.windows, d.window_time_zone";

		fail_unbound_passes();
		if (database_refusal != NULL)
			pause_unserved_passes(database_refusal);
		rc = SPI_execute(psprintf("SELECT l.run_id, coalesce(d.run_as, l.owner) AS run_as,"
						 "  coalesce(d.max_parallel, 1) AS max_parallel,"
						 "  r.phase,"
						 "  pg_catalog.count(*) FILTER (WHERE p.state = 'running' AND p.alive) AS live,"
						 "  pg_catalog.count(*) FILTER (WHERE p.state = 'pending'"
						 "                     OR (p.state = 'running' AND NOT p.alive AND NOT p.cooling))"
						 "    AS claimable,"
						 "  r.phase = 'queued' AND d.requires_backfill IS NOT NULL AS check_drift, l.declaration,"
						 "  pg_catalog.count(*) FILTER (WHERE p.state = 'running' AND NOT p.alive AND p.cooling)"
						 "    AS cooling,"
						 "  (%s) AS check_migration, %s"
						 " FROM backfill.ledger l"
						 " JOIN backfill.run r ON r.run_id = l.run_id"
						 " LEFT JOIN backfill.declaration d ON d.name = l.declaration"
						 " LEFT JOIN LATERAL ("
						 "   SELECT q.state, backfill.lease_live(q.holder_pid, q.holder_start) AS alive,"
						 /* as backfill.claim_partition: a dead holder that died at once cools down */
						 "     backfill.lease_cooling(q.renewed_at, q.holder_start, q.reclaims) AS cooling"
						 "     FROM backfill.partition q WHERE q.run_id = l.run_id) p ON true"
						 " WHERE l.status = 'running' AND NOT r.paused"
						 "   AND (r.phase <> 'queued'"
						 "        OR %s IS NULL)"
						 " GROUP BY l.run_id, l.owner, d.run_as, d.max_parallel, r.phase,"
						 "   d.requires_backfill, l.declaration, d.requires, l.started_at%s"
						 " ORDER BY l.run_id", migration_unread_sql(), windows_sql,
						 required_unmet_sql(), windows_group),
						 false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "could not read the running passes: SPI code %d", rc);

		spi_columns(SPI_tuptable->tupdesc, need_column_names, NEED_COLUMNS, col);
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			RunNeed    *need = need_from_row(i, col, result_cxt);
			MemoryContext old = MemoryContextSwitchTo(result_cxt);

			needs = lappend(needs, need);
			MemoryContextSwitchTo(old);
		}
	}

	/* is there outbox work (delivery or pruning) for the relay? */
	outbox_pending = catalogs_current && relay_has_work();
	/* catalogs older than the library: no work, but no idle exit (it looks again) */
	database_busy = extension_present && (!catalogs_current || database_has_work());

	worker_commit_xact();
	return needs;
}

/*
 * End a pass whose lanes cannot log in (tenancy_login_problem): failed,
 * with BF016 and the reason, which backfill_status shows.  Its own
 * transaction; the ledger row first, then the run row, as every writer of
 * a pass's state.
 */
void
fail_pass_cannot_login(RunNeed *need)
{
	CatalogScope scope;
	char	   *message = psprintf("lanes cannot connect: %s", need->login_problem);

	worker_begin_xact("pg_backfill scheduler: failing a pass whose lanes cannot log in");
	catalog_enter(&scope);
	if (pass_end_failed(need->run_id, -1, ERRCODE_BACKFILL_PRIVILEGE, message))
		ereport(LOG,
				(errmsg("backfill \"%s\" run " INT64_FORMAT " failed: %s", need->name,
						need->run_id, message),
				 errdetail("SQLSTATE BF016."),
				 errhint("Let the role log in again (ALTER ROLE ... LOGIN, GRANT CONNECT), "
						 "then backfill_retry('%s') resumes the pass.", need->name)));
	catalog_leave(&scope);
	worker_commit_xact();
}

/*
 * Is the next batch of this pass, by its rate (shmem.c, its pacer), further
 * off than LANE_IDLE_GIVE_BACK_MS?  Then it gets a lane only when no other
 * pass waits for one (next_pass_for_a_lane), and its wait is not one that
 * takes lanes back (need_waits): a lane of it given back to a waiting pass
 * (pacing.c) is not taken again before that pass has it.  *sleep_ms is
 * lowered to when its next batch is near.
 */
bool
pass_batch_far_off(RunNeed *need, TimestampTz now, long *sleep_ms)
{
	TimestampTz next = backfill_pace_next_start(MyDatabaseId, need->run_id);
	TimestampTz near = TimestampTzPlusMilliseconds(now, LANE_IDLE_GIVE_BACK_MS);

	/* a pass to plan or to finish runs no batch: its lane starts now */
	if (need->claimable == 0 || next <= near)
		return false;
	*sleep_ms = Min(*sleep_ms,
					backoff_ms_until(now, next - (TimestampTz) LANE_IDLE_GIVE_BACK_MS * 1000));
	return true;
}
