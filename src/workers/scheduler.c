/*-------------------------------------------------------------------------
 *
 * scheduler.c
 *	  A database's scheduler: the background worker that starts and
 *	  supervises the lanes (and the outbox relay) of one served database.
 *
 * The cluster's launcher (launcher.c) starts a scheduler in each database
 * that may be served and starts it again if it stops.  A scheduler first
 * looks for pg_backfill in its database: with none there it says so (in
 * its shared-memory slot) and exits at once, and so it does when the
 * extension is dropped under it, or when its database becomes a template
 * or stops taking connections.  A scheduler sleeps on its latch.  It
 * wakes when a backfill_run commits (run.c sets the latch through shared
 * memory), when one of its lanes starts or stops
 * (the postmaster signals the notify pid), and every backfill.naptime.
 * Each time it reads the passes still running and starts lanes for those
 * that need them: a queued pass, a pass with a partition whose lease
 * holder is dead (a crashed lane: the new lane resumes from the
 * checkpoint), or a pass whose partitions are all done but which nobody
 * has finished.
 *
 * A scheduler with nothing to do (no pass running, paused or queued, no
 * watched backfill, no outbox message pending or dead, no child of its
 * own) for backfill.scheduler_idle_exit exits, so that a database whose
 * backfills are done holds no worker slot: it gives its slot up first, so
 * that a wake from then on reaches the launcher, which starts it again at
 * once, looks one last time, and says so in the slot.
 *
 * The scheduler runs no declarer's SQL in its loop: a drift probe (a watch
 * that is due; the backfill a queued pass requires, probed before the pass
 * starts) runs in a probe worker it starts (probe.c), as the declarer, and
 * only the backfill probed waits for it.  So is the read of the migrations
 * table that `requires` names: a queued pass waits for a probe worker to
 * record its migration applied (backfill.requirement).
 *
 * Lanes never restart by themselves.  A lane that dies quickly is started
 * again only after a doubling delay, so a pass that cannot start never
 * floods the log.  See src/README.md for the state machine.
 *
 * backfill.max_workers holds for the cluster: the lanes are counted in the
 * shared lane table (shmem.c), whoever started them, so a scheduler that
 * is started again does not forget its predecessor's.  Lanes are handed
 * out round robin, the next to the waiting pass whose role holds the
 * fewest; when all are taken and a role holds less than its share, a lane
 * of the role holding the most gives its place up after its batch, or at
 * once when that batch has run longer than backfill.preempt_after (the
 * batch is cancelled and rolled back).
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
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "config.h"
#include "backoff.h"
#include "catalog.h"
#include "drift.h"
#include "errors.h"
#include "pacing.h"
#include "pass.h"
#include "launcher.h"
#include "probe.h"
#include "relay.h"
#include "scheduler.h"
#include "shmem.h"
#include "state.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"
#include "xact.h"

/* a lane this scheduler started */
typedef struct LaneHandle
{
	int64		run_id;
	TimestampTz started_at;
	BackgroundWorkerHandle *handle;
	int			index;			/* its entry in the lane table */
	uint64		token;
} LaneHandle;

/* what the scheduler remembers of a running pass between ticks */
typedef struct RunMemo
{
	int64		run_id;
	int			quick_exits;	/* lanes that died soon after starting, in a row */
	TimestampTz next_start;		/* no lane for this pass before then */
	bool		seen;			/* still running at the last tick */
	bool		drift_checked;	/* the backfill it requires was probed (probe.c) */
} RunMemo;

/* a running pass as one tick sees it */
typedef struct RunNeed
{
	int64		run_id;
	Oid			owner;
	int			lanes_wanted;
	int			lanes_live;
	int			claimable;		/* partitions a lane could claim */
	bool		check_drift;	/* queued, and requires another backfill */
	bool		check_migration;	/* queued, its migration not yet read applied since */
	char	   *name;			/* the declaration's name */
	char	   *login_problem;	/* why its lanes could not log in, or NULL */
	int			have;			/* lanes it has, by the lane table or its leases */
	bool		eligible;		/* may get a lane this tick */
	TimestampTz window_next;	/* outside its windows: when the next starts; else 0 */
	bool		idle;			/* its next batch is far off: a lane only if none else waits */
} RunNeed;

/*
 * The cluster's lanes as one tick sees them: the lane table's entries, plus
 * the lanes this tick started.
 */
typedef struct LaneCensus
{
	int			n;
	LaneInfo	lanes[BACKFILL_MAX_LANES];
} LaneCensus;

/* a lane that stops sooner than this after its start counts as a quick exit */
#define QUICK_EXIT_MS	5000
#define LANE_RETRY_MIN_MS	1000
#define LANE_RETRY_MAX_MS	60000

static List *lanes = NIL;
static List *memos = NIL;
static MemoryContext scheduler_cxt = NULL;
static TimestampTz last_slot_warning = 0;
static BackgroundWorkerHandle *relay = NULL;
static bool outbox_pending = false;
static bool extension_present = true;
static bool database_busy = true;	/* has work that needs the scheduler (database_has_work) */
static const char *database_refusal = NULL;	/* why this database is no longer served */

static RunMemo *
memo_for(int64 run_id)
{
	ListCell   *lc;
	RunMemo    *memo;
	MemoryContext old;

	foreach(lc, memos)
	{
		memo = lfirst(lc);
		if (memo->run_id == run_id)
			return memo;
	}
	old = MemoryContextSwitchTo(scheduler_cxt);
	memo = palloc0(sizeof(RunMemo));
	memo->run_id = run_id;
	memos = lappend(memos, memo);
	MemoryContextSwitchTo(old);
	return memo;
}

/* Forget lanes that have stopped; note those that stopped too soon. */
static void
reap_lanes(void)
{
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();

	foreach(lc, lanes)
	{
		LaneHandle *lane = lfirst(lc);
		pid_t		pid;

		if (GetBackgroundWorkerPid(lane->handle, &pid) != BGWH_STOPPED)
			continue;
		if (TimestampDifferenceExceeds(lane->started_at, now, QUICK_EXIT_MS))
			memo_for(lane->run_id)->quick_exits = 0;
		else
		{
			RunMemo    *memo = memo_for(lane->run_id);

			memo->next_start = TimestampTzPlusMilliseconds(now,
														   backoff_doubling_ms(memo->quick_exits,
																			   LANE_RETRY_MIN_MS,
																			   LANE_RETRY_MAX_MS));
			memo->quick_exits++;
		}
		backfill_lane_forget(lane->index, lane->token);
		pfree(lane->handle);
		pfree(lane);
		lanes = foreach_delete_current(lanes, lc);
	}
}

static int
lanes_of_run(int64 run_id)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, lanes)
		if (((LaneHandle *) lfirst(lc))->run_id == run_id)
			n++;
	return n;
}

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
 * as a role the declaration does not name.  Versions before 0.3 lack the
 * function; their lanes find out after they log in.
 */
static void
fail_unbound_passes(void)
{
	bool		isnull;

	if (SPI_execute("SELECT pg_catalog.to_regprocedure('backfill.fail_unbound_passes()')"
					" IS NOT NULL", true, 1) != SPI_OK_SELECT ||
		!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		return;
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

/*
 * Outside every time window of its declaration (columns 11 and 12 of the
 * running passes; windows.c, no SQL): the pass gets no lane until the
 * next window starts, which need->window_next says.
 */
static void
need_window(RunNeed *need, HeapTuple tup, TupleDesc desc)
{
	bool		isnull;
	Datum		windows = SPI_getbinval(tup, desc, 11, &isnull);
	TimestampTz next;

	if (isnull)
		return;
	if (!windows_inside(windows_parse(need->name, DatumGetArrayTypeP(windows),
									  SPI_getvalue(tup, desc, 12)),
						GetCurrentTimestamp(), &next))
		need->window_next = next;
}

/*
 * Row i of the running passes (read_running_passes): what the pass needs,
 * in result_cxt.
 */
static RunNeed *
need_from_row(uint64 i, MemoryContext result_cxt)
{
	HeapTuple	tup = SPI_tuptable->vals[i];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		isnull;
	int			max_parallel = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
	char	   *phase = SPI_getvalue(tup, desc, 4);
	int			live = (int) DatumGetInt64(SPI_getbinval(tup, desc, 5, &isnull));
	int			claimable = (int) DatumGetInt64(SPI_getbinval(tup, desc, 6, &isnull));
	int			cooling = (int) DatumGetInt64(SPI_getbinval(tup, desc, 9, &isnull));
	RunNeed    *need = MemoryContextAllocZero(result_cxt, sizeof(RunNeed));
	char	   *problem;

	need->run_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	need->owner = DatumGetObjectId(SPI_getbinval(tup, desc, 2, &isnull));
	need->lanes_live = live;
	need->claimable = claimable;
	need->check_drift = DatumGetBool(SPI_getbinval(tup, desc, 7, &isnull));
	need->check_migration = DatumGetBool(SPI_getbinval(tup, desc, 10, &isnull));
	need->name = MemoryContextStrdup(result_cxt, SPI_getvalue(tup, desc, 8));
	problem = tenancy_login_problem(need->owner);
	need->login_problem = problem ? MemoryContextStrdup(result_cxt, problem) : NULL;
	need_window(need, tup, desc);
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
static bool
database_has_work(void)
{
	if (catalog_ask("look for running passes",
					"SELECT EXISTS (SELECT 1 FROM backfill.ledger WHERE status = 'running')",
					0, NULL, NULL))
		return true;
	/* a retired backfill is watched no more */
	if (catalog_has_column("declaration", "watch_ms") &&
		catalog_ask("look for watched backfills",
					psprintf("SELECT EXISTS (SELECT 1 FROM backfill.declaration d"
							 " WHERE d.watch_ms IS NOT NULL AND NOT %s)", retired_sql("d")),
					0, NULL, NULL))
		return true;
	return catalog_has_column("outbox", "state") &&
		catalog_ask("look for outbox messages",
					"SELECT EXISTS (SELECT 1 FROM backfill.outbox WHERE state IN ('pending', 'dead'))",
					0, NULL, NULL);
}

/*
 * A queued pass whose declaration requires a migration waits for a probe
 * worker (probe.c) to read it applied, after the pass was enqueued
 * (backfill.requirement): the scheduler's look reads no migrations table.
 * Catalogs older than 0.6 have no such record: read there as before.
 */
static const char *
migration_unread_sql(void)
{
	if (!catalog_has_column("requirement", "unmet"))
		return "false";
	return "r.phase = 'queued' AND d.requires IS NOT NULL"
		"  AND NOT coalesce((SELECT q.unmet IS NULL AND q.checked_at >= l.started_at"
		"                      FROM backfill.requirement q"
		"                     WHERE q.declaration = l.declaration), false)";
}

/* what keeps a queued pass from starting, read from the catalogs (0.6) */
static const char *
required_unmet_sql(void)
{
	if (!catalog_has_column("requirement", "unmet"))
		return "backfill.unmet_requirement(l.declaration)";
	return "backfill.unmet_required_backfill(l.declaration)";
}

/*
 * Read the running passes and how many lanes each wants.  Runs in its own
 * transaction; the result is allocated in the caller's memory context.
 */
static List *
read_running_passes(MemoryContext result_cxt)
{
	List	   *needs = NIL;

	worker_begin_xact("pg_backfill scheduler: reading running passes");

	database_refusal = database_no_longer_served();
	extension_present = OidIsValid(get_extension_oid(BACKFILL_EXTENSION_NAME, true));
	if (extension_present)
	{
		int			rc;
		/* the windows, under catalogs that have them (0.6) */
		bool		has_windows = catalog_has_column("declaration", "windows");
		const char *windows_sql = has_windows ? "d.windows, d.window_time_zone" :
			"NULL::pg_catalog.text[], NULL::pg_catalog.text";
		const char *windows_group = has_windows ? ", d.windows, d.window_time_zone" : "";

		fail_unbound_passes();
		if (database_refusal != NULL)
			pause_unserved_passes(database_refusal);
		rc = SPI_execute(psprintf("SELECT l.run_id, coalesce(d.run_as, l.owner), coalesce(d.max_parallel, 1),"
						 "  r.phase,"
						 "  pg_catalog.count(*) FILTER (WHERE p.state = 'running' AND p.alive),"
						 "  pg_catalog.count(*) FILTER (WHERE p.state = 'pending'"
						 "                     OR (p.state = 'running' AND NOT p.alive AND NOT p.cooling)),"
						 "  r.phase = 'queued' AND d.requires_backfill IS NOT NULL, l.declaration,"
						 "  pg_catalog.count(*) FILTER (WHERE p.state = 'running' AND NOT p.alive AND p.cooling),"
						 "  %s, %s"
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

		for (uint64 i = 0; i < SPI_processed; i++)
		{
			RunNeed    *need = need_from_row(i, result_cxt);
			MemoryContext old = MemoryContextSwitchTo(result_cxt);

			needs = lappend(needs, need);
			MemoryContextSwitchTo(old);
		}
	}

	/* is there outbox work (delivery or pruning) for the relay? (0.3 and later) */
	outbox_pending = OidIsValid(get_extension_oid(BACKFILL_EXTENSION_NAME, true)) &&
		relay_has_work();
	database_busy = extension_present && database_has_work();

	worker_commit_xact();
	return needs;
}

/*
 * Start a child worker (lane or relay) that tells this scheduler when it
 * stops.  The handle lives in the scheduler's context.  No free slot is a
 * WARNING with a hint, at most once a minute, and NULL: the scheduler tries
 * again later and never dies of it.
 */
static BackgroundWorkerHandle *
start_child(const char *function, const char *name, const char *type, LaneArgs *args)
{
	BackgroundWorkerHandle *handle;

	handle = worker_start(function, name, type, (Datum) 0, args, sizeof(LaneArgs),
						  scheduler_cxt);
	/* a backend waiting for lanes (finalize) reads whether there was a slot */
	backfill_shmem_note_worker_slot(handle != NULL);
	if (handle != NULL)
		return handle;

	/* at most one warning a minute: a full slot table is not news every tick */
	if (TimestampDifferenceExceeds(last_slot_warning, GetCurrentTimestamp(), 60000))
	{
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start a %s worker", type),
				 errdetail("Every background worker slot is in use."),
				 errhint("Raise max_worker_processes (a restart is needed) or lower "
						 "backfill.max_workers; pg_backfill keeps retrying.")));
		last_slot_warning = GetCurrentTimestamp();
	}
	return NULL;
}

/*
 * Start a lane for a pass.  Its entry in the lane table is reserved first
 * and holds the lane's pid once the postmaster has started it, so that
 * every scheduler counts it, even after this one is gone.
 */
static bool
start_lane(RunNeed *need)
{
	BackgroundWorkerHandle *handle;
	LaneArgs	args;
	LaneHandle *lane;
	pid_t		pid;

	memset(&args, 0, sizeof(args));
	args.dboid = MyDatabaseId;
	args.roleoid = need->owner;
	args.run_id = need->run_id;
	args.lane_index = backfill_lane_reserve(MyDatabaseId, need->owner, need->run_id,
											&args.lane_token);
	if (args.lane_index < 0)
		return false;
	handle = start_child("backfill_lane_main",
						 psprintf("pg_backfill lane for run " INT64_FORMAT, need->run_id),
						 "pg_backfill lane", &args);
	if (handle == NULL)
	{
		backfill_lane_forget(args.lane_index, args.lane_token);
		return false;
	}
	switch (WaitForBackgroundWorkerStartup(handle, &pid))
	{
		case BGWH_STARTED:
			backfill_lane_started(args.lane_index, args.lane_token, pid);
			break;
		case BGWH_POSTMASTER_DIED:
			proc_exit(1);
			break;
		default:
			/* it stopped already: reap_lanes counts it */
			break;
	}
	lane = MemoryContextAlloc(scheduler_cxt, sizeof(LaneHandle));
	lane->run_id = need->run_id;
	lane->started_at = GetCurrentTimestamp();
	lane->handle = handle;
	lane->index = args.lane_index;
	lane->token = args.lane_token;
	{
		MemoryContext old = MemoryContextSwitchTo(scheduler_cxt);

		lanes = lappend(lanes, lane);
		MemoryContextSwitchTo(old);
	}
	return true;
}

/* Start the outbox relay if messages wait and it is not running. */
static void
start_relay_if_needed(void)
{
	LaneArgs	args;
	pid_t		pid;

	if (relay != NULL && GetBackgroundWorkerPid(relay, &pid) == BGWH_STOPPED)
	{
		pfree(relay);
		relay = NULL;
	}
	if (relay != NULL || !outbox_pending)
		return;
	memset(&args, 0, sizeof(args));
	args.dboid = MyDatabaseId;
	args.lane_index = -1;
	relay = start_child("backfill_relay_main", "pg_backfill outbox relay",
						"pg_backfill relay", &args);
}

/* Lanes in the census matching a database, role and pass (0 / InvalidOid: any). */
static int
census_count(LaneCensus *census, Oid dboid, Oid roleoid, int64 run_id)
{
	int			n = 0;

	for (int i = 0; i < census->n; i++)
	{
		LaneInfo   *l = &census->lanes[i];

		if ((!OidIsValid(dboid) || l->dboid == dboid) &&
			(!OidIsValid(roleoid) || l->roleoid == roleoid) &&
			(run_id == 0 || l->run_id == run_id))
			n++;
	}
	return n;
}

static void
census_add(LaneCensus *census, RunNeed *need)
{
	LaneInfo   *l;

	if (census->n >= BACKFILL_MAX_LANES)
		return;
	l = &census->lanes[census->n++];
	memset(l, 0, sizeof(LaneInfo));
	l->dboid = MyDatabaseId;
	l->roleoid = need->owner;
	l->run_id = need->run_id;
	l->index = -1;
}

/* the most lanes one role may hold: backfill.max_workers_per_role, or all */
static int
role_cap(void)
{
	return backfill_max_workers_per_role > 0 ?
		Min(backfill_max_workers_per_role, backfill_max_workers) : backfill_max_workers;
}

/*
 * End a pass whose lanes cannot log in (tenancy_login_problem): failed,
 * with BF016 and the reason, which backfill_status shows.  Its own
 * transaction; the ledger row first, then the run row, as every writer of
 * a pass's state.
 */
static void
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
 * Does a pass wait for a lane: eligible, with fewer than it wants, and not
 * idle (its next batch far off: it would only sleep in it)?
 */
static bool
need_waits(RunNeed *need)
{
	return need->eligible && !need->idle && need->have < need->lanes_wanted;
}

/*
 * The next pass to get a lane, round robin: the one whose role holds the
 * fewest lanes in the cluster, then the one with the fewest lanes, then the
 * oldest; a pass whose next batch is far off (idle) after all others.
 * NULL when no pass may have one.
 */
static RunNeed *
next_pass_for_a_lane(List *needs, LaneCensus *census)
{
	ListCell   *lc;
	RunNeed    *best = NULL;
	int			best_role_lanes = 0;

	foreach(lc, needs)
	{
		RunNeed    *need = lfirst(lc);
		int			role_lanes;

		if (!need->eligible || need->have >= need->lanes_wanted)
			continue;
		role_lanes = census_count(census, InvalidOid, need->owner, 0);
		if (role_lanes >= role_cap())
			continue;
		/* a pass whose next batch is far off comes after every other */
		if (best != NULL && need->idle != best->idle)
		{
			if (need->idle)
				continue;
			best = NULL;
		}
		if (best == NULL || role_lanes < best_role_lanes ||
			(role_lanes == best_role_lanes && need->have < best->have))
		{
			best = need;
			best_role_lanes = role_lanes;
		}
	}
	return best;
}

/* Add a role to a set of at most BACKFILL_MAX_LANES + 64 roles. */
static void
add_role(Oid *roles, int *nroles, Oid role)
{
	for (int k = 0; k < *nroles; k++)
		if (roles[k] == role)
			return;
	if (*nroles < BACKFILL_MAX_LANES + 64)
		roles[(*nroles)++] = role;
}

/*
 * The roles that hold lanes or have a pass here waiting for one, in roles;
 * true when such a pass's role holds less than its share (*share).
 */
static bool
fair_share_starved(List *needs, LaneCensus *census, Oid *roles, int *nroles, int *share)
{
	bool		starved = false;
	ListCell   *lc;

	for (int i = 0; i < census->n; i++)
		add_role(roles, nroles, census->lanes[i].roleoid);
	foreach(lc, needs)
	{
		RunNeed    *need = lfirst(lc);

		if (!need_waits(need))
			continue;
		add_role(roles, nroles, need->owner);
	}
	*share = Max(1, backfill_max_workers / Max(*nroles, 1));
	foreach(lc, needs)
	{
		RunNeed    *need = lfirst(lc);

		if (need_waits(need) &&
			census_count(census, InvalidOid, need->owner, 0) < Min(*share, role_cap()))
			starved = true;
	}
	return starved;
}

/*
 * Of the victim role's lanes, the one to give its place up: the one whose
 * batch has run longest, else one of the pass with the most lanes.
 */
static int
pick_yielding_lane(LaneCensus *census, Oid victim)
{
	int			pick = -1;
	int			pick_run_lanes = 0;

	for (int i = 0; i < census->n; i++)
	{
		LaneInfo   *l = &census->lanes[i];
		int			run_lanes;

		if (l->roleoid != victim || l->index < 0)
			continue;
		run_lanes = census_count(census, l->dboid, InvalidOid, l->run_id);
		if (pick < 0 ||
			(l->in_batch && (!census->lanes[pick].in_batch ||
							 l->batch_since < census->lanes[pick].batch_since)) ||
			(!l->in_batch && !census->lanes[pick].in_batch && run_lanes > pick_run_lanes))
		{
			pick = i;
			pick_run_lanes = run_lanes;
		}
	}
	return pick;
}

/*
 * The lane asked to give its place up is still in a batch that has run
 * longer than backfill.preempt_after: cancel that batch.  It rolls back
 * with its checkpoint, its partition goes back to pending (not counted as
 * a failed attempt: work.c), and the lane leaves.
 */
static void
preempt_if_overdue(LaneInfo *lane)
{
	if (backfill_preempt_after <= 0 || !lane->in_batch ||
		!TimestampDifferenceExceeds(lane->batch_since, GetCurrentTimestamp(),
									backfill_preempt_after))
		return;
	if (backfill_lane_preempt(lane->index, lane->batch_since))
		ereport(LOG,
				(errmsg("pg_backfill: the batch of a lane of run " INT64_FORMAT " is cancelled for a "
						"waiting pass of another role", lane->run_id),
				 errdetail("It has run longer than backfill.preempt_after (%d ms) while its role "
						   "holds more than its share of the lanes.", backfill_preempt_after)));
}

/*
 * Fair share: when every lane is taken and a pass here waits whose role
 * holds less than its share (backfill.max_workers divided among the roles
 * that hold or want lanes), ask one lane of the role that holds the most,
 * above its share, to give its lane up after its batch; a batch of it that
 * runs longer than backfill.preempt_after is cancelled.  One at a time: no
 * new request while a lane is still leaving.
 */
static void
ask_for_fair_share(List *needs, LaneCensus *census)
{
	Oid			roles[BACKFILL_MAX_LANES + 64];
	int			nroles = 0;
	int			share;
	Oid			victim = InvalidOid;
	int			victim_lanes = 0;
	int			pick;

	if (census->n < backfill_max_workers ||
		!fair_share_starved(needs, census, roles, &nroles, &share))
		return;
	for (int i = 0; i < census->n; i++)
	{
		if (census->lanes[i].yield)
		{
			preempt_if_overdue(&census->lanes[i]);
			return;
		}
	}

	for (int k = 0; k < nroles; k++)
	{
		int			held = census_count(census, InvalidOid, roles[k], 0);

		if (held > share && held > victim_lanes)
		{
			victim = roles[k];
			victim_lanes = held;
		}
	}
	if (!OidIsValid(victim))
		return;

	pick = pick_yielding_lane(census, victim);
	if (pick < 0 || !backfill_lane_request_yield(census->lanes[pick].index))
		return;
	ereport(LOG,
			(errmsg("pg_backfill: a lane of run " INT64_FORMAT " gives its place to a waiting pass",
					census->lanes[pick].run_id),
			 errdetail("Its role holds %d of the %d lanes (backfill.max_workers); "
					   "%d roles share them.", victim_lanes, backfill_max_workers, nroles)));
	preempt_if_overdue(&census->lanes[pick]);
}

/*
 * Has the backfill this queued pass requires been probed since the pass
 * was first seen?  The probe (a worker of its own, probe.c) reopens it if
 * it drifted, and the pass waits for that; until the probe ends the pass
 * stays queued, and only it: a slow or blocked probe delays no other pass.
 */
static bool
required_probed(RunNeed *need, RunMemo *memo)
{
	DriftTarget target;

	if (memo->drift_checked)
		return true;
	if (!drift_required_target(need->run_id, &target, CurrentMemoryContext) ||
		probe_done(DRIFT_REQUIRED, &target, need->run_id, scheduler_cxt))
		memo->drift_checked = true;
	return memo->drift_checked;
}

/*
 * Is the next batch of this pass, by its rate (shmem.c, its pacer), further
 * off than LANE_IDLE_GIVE_BACK_MS?  Then it gets a lane only when no other
 * pass waits for one (next_pass_for_a_lane), and its wait is not one that
 * takes lanes back (need_waits): a lane of it given back to a waiting pass
 * (pacing.c) is not taken again before that pass has it.  *sleep_ms is
 * lowered to when its next batch is near.
 */
static bool
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

/*
 * Which passes may get a lane now: those with fewer than they want whose
 * role can log in, whose requirement has not drifted, and whose restart
 * delay has passed.  A pass that cannot log in and has no lane left fails.
 * Lowers *sleep_ms to the end of the nearest restart delay.
 */
static void
mark_eligible(List *needs, LaneCensus *census, TimestampTz now, long *sleep_ms)
{
	ListCell   *lc;

	foreach(lc, memos)
		((RunMemo *) lfirst(lc))->seen = false;

	foreach(lc, needs)
	{
		RunNeed    *need = lfirst(lc);
		RunMemo    *memo = memo_for(need->run_id);

		memo->seen = true;
		need->have = Max(census_count(census, MyDatabaseId, InvalidOid, need->run_id),
						 need->lanes_live);
		if (need->have >= need->lanes_wanted)
			continue;
		/* outside its windows: no lane until the next starts, the lease not held */
		if (need->window_next != 0)
		{
			*sleep_ms = Min(*sleep_ms, backoff_ms_until(now, need->window_next));
			continue;
		}

		/*
		 * A lane that cannot log in would die at start-up, again and again:
		 * start none.  Once no lane of the pass is left, the pass fails.
		 */
		if (need->login_problem != NULL)
		{
			if (need->have == 0)
				fail_pass_cannot_login(need);
			continue;
		}
		/* its migration is read by a probe worker; this pass waits for the record */
		if (need->check_migration)
		{
			DriftTarget target = {need->name, need->owner};

			(void) probe_done(DRIFT_MIGRATION, &target, need->run_id, scheduler_cxt);
			continue;
		}
		/* a required backfill that drifted is reopened first; this pass waits */
		if (need->check_drift && !required_probed(need, memo))
			continue;
		if (memo->next_start > now)
		{
			*sleep_ms = Min(*sleep_ms, backoff_ms_until(now, memo->next_start));
			continue;
		}
		/* its next batch is far off (its rate): a lane would only sleep, or be given back */
		need->idle = pass_batch_far_off(need, now, sleep_ms);
		need->eligible = true;
	}
}

/* Start lanes, round-robin over the eligible passes, while slots are free. */
static void
start_lanes(List *needs, LaneCensus *census)
{
	RunNeed    *need;

	while (census->n < backfill_max_workers &&
		   (need = next_pass_for_a_lane(needs, census)) != NULL)
	{
		if (!start_lane(need))
			break;
		need->have++;
		census_add(census, need);
		/* waiting for the lane's start may have eaten a wake meant for the next tick */
		SetLatch(MyLatch);
	}
}

/* does an eligible pass still wait for a lane (need_waits)? */
static bool
passes_waiting(List *needs)
{
	ListCell   *lc;

	foreach(lc, needs)
	{
		RunNeed    *need = lfirst(lc);

		if (need_waits(need))
			return true;
	}
	return false;
}

/* Forget the memos of passes that have ended and have no lane left. */
static void
forget_ended_passes(void)
{
	ListCell   *lc;

	foreach(lc, memos)
	{
		RunMemo    *memo = lfirst(lc);

		if (!memo->seen && lanes_of_run(memo->run_id) == 0)
		{
			pfree(memo);
			memos = foreach_delete_current(memos, lc);
		}
	}
}

/*
 * A lane whose batch outlives its bound (its batch_timeout, a cancel, a
 * preemption) by more than BACKFILL_TERMINATE_GRACE_MS is terminated
 * (shmem.c): a declarer's PL/pgSQL that catches query_canceled ignores a
 * statement's cancel, not the end of its process.  Its batch rolls back
 * with its checkpoint; its lease, held by a dead process, is reclaimed by a
 * lane later (or stays cancelled).  Lowers *sleep_ms to the next such end.
 */
static void
terminate_overdue_lanes(long *sleep_ms)
{
	int64		runs[BACKFILL_MAX_LANES];
	int			n = backfill_lane_terminate_overdue(MyDatabaseId, BACKFILL_TERMINATE_GRACE_MS,
													runs, sleep_ms);

	for (int i = 0; i < n; i++)
		ereport(LOG,
				(errmsg("pg_backfill: a lane of run " INT64_FORMAT " is terminated: its batch "
						"outlived its batch_timeout, a cancel or a preemption by %d ms",
						runs[i], BACKFILL_TERMINATE_GRACE_MS),
				 errdetail("Its batch's transaction rolls back with its checkpoint; the "
						   "partition's lease, held by a process that is gone, is taken "
						   "again by a lane unless the pass was cancelled."),
				 errhint("The batch's SQL caught the cancel (EXCEPTION WHEN query_canceled): "
						 "let it end instead.")));
}

/*
 * One look at the database: start the lanes that running passes want,
 * sharing backfill.max_workers fairly between roles, and the relay.
 * Returns how long to sleep before looking again.
 */
static long
scheduler_tick(MemoryContext scratch)
{
	List	   *needs = read_running_passes(scratch);
	TimestampTz now = GetCurrentTimestamp();
	long		sleep_ms = backfill_naptime * 1000L;
	LaneCensus *census = palloc0(sizeof(LaneCensus));

	/* every live lane of the cluster, whoever started it */
	backfill_lane_sweep();
	census->n = backfill_lane_snapshot(census->lanes);
	terminate_overdue_lanes(&sleep_ms);

	mark_eligible(needs, census, now, &sleep_ms);
	start_lanes(needs, census);
	if (passes_waiting(needs))
	{
		/* every lane taken: one that only sleeps out its rate gives its place up (pacing.c) */
		if (census->n >= backfill_max_workers)
			backfill_lane_wanted();
		ask_for_fair_share(needs, census);
		sleep_ms = Min(sleep_ms, 1000L);
	}

	start_relay_if_needed();
	if (outbox_pending && relay == NULL)
		sleep_ms = Min(sleep_ms, 1000L);

	/* completed backfills with a watch: a probe worker for each due, wake for the next */
	{
		long		watch_ms;
		ListCell   *lc;

		foreach(lc, drift_watch_due(scratch, &watch_ms))
			(void) probe_done(DRIFT_WATCH, lfirst(lc), 0, scheduler_cxt);
		if (watch_ms >= 0)
			sleep_ms = Min(sleep_ms, Max(watch_ms, 50L));
	}

	forget_ended_passes();
	return sleep_ms;
}

/*
 * No pg_backfill in this database (never installed, or just dropped): say
 * so for the launcher, which looks again later, and exit.
 */
static void
exit_without_extension(const char *dbname, bool dropped)
{
	backfill_shmem_scheduler_absent();
	ereport(dropped ? LOG : DEBUG1,
			(errmsg("pg_backfill scheduler for database \"%s\" stops: %s", dbname,
					dropped ? "the extension was dropped" : "the extension is not installed")));
	proc_exit(0);
}

/*
 * Nothing to do for backfill.scheduler_idle_exit: leave.  The slot is given
 * up first, so that a wake from here on reaches the launcher; then one last
 * look finds what a wake that reached this scheduler just before brought,
 * and if there is work the slot is not marked idle: the launcher starts a
 * scheduler again at once, as after any stop of one that ran a while.
 */
static void
exit_idle(const char *dbname, int slot)
{
	bool		work;

	backfill_shmem_scheduler_idle(slot, true);
	worker_begin_xact("pg_backfill scheduler: a last look before it leaves");
	work = OidIsValid(get_extension_oid(BACKFILL_EXTENSION_NAME, true)) && database_has_work();
	worker_commit_xact();
	if (work)
		backfill_shmem_scheduler_idle(slot, false);
	ereport(LOG,
			(errmsg("pg_backfill scheduler for database \"%s\" stops: %s", dbname,
					work ? "work came as it left; the launcher starts it again" :
					psprintf("nothing to do for %d s (backfill.scheduler_idle_exit)",
							 backfill_scheduler_idle_exit)),
			 errdetail("A backfill_run, backfill_resume, backfill_retry or "
					   "backfill_outbox_emit in the database starts it again at once.")));
	proc_exit(0);
}

/*
 * Idle bookkeeping after a look (busy: it found work, or failed): exits
 * when the scheduler has had nothing to do for backfill.scheduler_idle_exit,
 * else returns sleep_ms, lowered to that moment.
 */
static long
note_idle(bool busy, TimestampTz *idle_since, const char *dbname, int slot, long sleep_ms)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz leave_at;

	if (busy || lanes != NIL || relay != NULL || probes_reap() ||
		backfill_scheduler_idle_exit <= 0)
	{
		*idle_since = 0;
		return sleep_ms;
	}
	if (*idle_since == 0)
		*idle_since = now;
	leave_at = TimestampTzPlusMilliseconds(*idle_since, backfill_scheduler_idle_exit * 1000L);
	if (now >= leave_at)
		exit_idle(dbname, slot);
	return Min(sleep_ms, Max(backoff_ms_until(now, leave_at), 10L));
}

/* is pg_backfill installed here?  (its own transaction) */
static bool
extension_installed(void)
{
	bool		installed;

	worker_begin_xact("pg_backfill scheduler: looking for the extension");
	installed = OidIsValid(get_extension_oid(BACKFILL_EXTENSION_NAME, true));
	worker_commit_xact();
	return installed;
}

/* the database's name, for the log (its own transaction) */
static void
read_database_name(char *dbname)
{
	char	   *name;

	worker_begin_xact("pg_backfill scheduler: starting");
	name = get_database_name(MyDatabaseId);
	strlcpy(dbname, name ? name : "?", NAMEDATALEN);
	worker_commit_xact();
}

void
backfill_scheduler_main(Datum main_arg)
{
	int			slot = DatumGetInt32(main_arg);
	Oid			dboid;
	char		dbname[NAMEDATALEN];
	MemoryContext scratch;
	TimestampTz idle_since = 0;

	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	worker_own_identity(PGC_S_OVERRIDE);
	pgstat_report_appname("pg_backfill scheduler");
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("application_name", "pg_backfill scheduler", PGC_USERSET, PGC_S_OVERRIDE);
	worker_own_settings();
	/*
	 * In a deadlock with a session's DDL (DROP EXTENSION while a look reads
	 * the catalogs) the scheduler gives way: it notices first, its look
	 * fails and is tried again after the naptime.
	 */
	SetConfigOption("deadlock_timeout", "100ms", PGC_SUSET, PGC_S_OVERRIDE);
	read_database_name(dbname);

	{
		pid_t		holder = 0;

		if (!backfill_shmem_attach_scheduler(slot, &holder))
		{
			/* a restarted launcher: the scheduler it replaces still runs */
			ereport(LOG,
					(errmsg("pg_backfill scheduler for database \"%s\" is already running "
							"as PID %d", dbname, (int) holder)));
			proc_exit(0);
		}
	}
	if (!extension_installed())
		exit_without_extension(dbname, false);
	ereport(LOG, (errmsg("pg_backfill scheduler started for database \"%s\"", dbname)));

	scheduler_cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill scheduler",
										  ALLOCSET_DEFAULT_SIZES);
	scratch = AllocSetContextCreate(scheduler_cxt, "pg_backfill scheduler tick",
									ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		volatile long sleep_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		MemoryContextReset(scratch);
		MemoryContextSwitchTo(scratch);
		reap_lanes();
		(void) probes_reap();

		/*
		 * A failed look (the extension being dropped or upgraded under us,
		 * say) is logged and tried again after the naptime; the scheduler
		 * itself stays up.
		 */
		PG_TRY();
		{
			sleep_ms = scheduler_tick(scratch);
		}
		PG_CATCH();
		{
			/* logged as it was raised; its copy goes with the next tick's scratch */
			EmitErrorReport();
			(void) worker_abort_xact(scratch);
			sleep_ms = backfill_naptime * 1000L;
			database_busy = true;	/* a failed look found out nothing */
		}
		PG_END_TRY();
		MemoryContextSwitchTo(scheduler_cxt);
		if (!extension_present)
			exit_without_extension(dbname, true);
		if (database_refusal != NULL)
		{
			ereport(LOG,
					(errmsg("pg_backfill scheduler for database \"%s\" stops: %s",
							dbname, database_refusal)));
			proc_exit(0);
		}
		sleep_ms = note_idle(database_busy, &idle_since, dbname, slot, sleep_ms);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
