/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The cluster's launcher: one static background worker that keeps a
 *	  scheduler (scheduler.c) running for each database where pg_backfill
 *	  is installed.
 *
 * The launcher connects to no database; it reads the shared catalog
 * pg_database.  Every database that allows connections and is not a
 * template (and, when backfill.database_names is set, is one it names) is
 * looked at: a scheduler is started there.  A scheduler that finds no
 * pg_backfill in its database says so and exits at once: that is the
 * whole cost of a database without the extension, a short-lived check,
 * repeated after a doubling delay (from backfill.naptime up to ten
 * minutes), at most two at a time so that checks never take the worker
 * slots lanes need.  A committed backfill_run (or anything else that
 * wakes a scheduler) in a database no scheduler serves wakes the launcher
 * instead, which looks at that database at once: CREATE EXTENSION and the
 * first run need no restart.  A scheduler that was serving is started
 * again when it stops: at once if it had run a while, after a doubling
 * delay (up to a minute) if it stopped soon after starting.  A scheduler
 * that left because it had nothing to do (backfill.scheduler_idle_exit) is
 * not started again until a wake for its database comes.  DROP
 * EXTENSION makes the scheduler exit at its next look; DROP DATABASE asks
 * it (and the database's lanes) to exit before it runs, and keeps the
 * launcher off the database meanwhile (the ProcessUtility hook below).
 *
 * At most BACKFILL_MAX_DATABASES schedulers run at once (their slots in
 * shared memory); a database beyond that is reported, once a minute, as a
 * WARNING with a hint.  A scheduler that cannot start for want of a
 * background worker slot (max_worker_processes) is reported once, as a
 * WARNING with what pg_backfill needs, tried again every minute and at
 * each wake, and its start after that is logged.  A database named in backfill.database_names that
 * does not exist is reported once, as a WARNING with a hint, and looked
 * for again every naptime; it is never a FATAL error repeated every few
 * seconds.  The postmaster restarts the launcher itself if it exits.
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
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/guc.h"
#include "utils/syscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "config.h"
#include "backoff.h"
#include "errors.h"
#include "launcher.h"
#include "shmem.h"
#include "worker.h"

/* a stop sooner than this after the start counts as a quick one */
#define SCHEDULER_QUICK_STOP_MS		10000
#define SCHEDULER_RETRY_MIN_MS		1000
#define SCHEDULER_RETRY_MAX_MS		60000
/* a database without pg_backfill is looked at again after this, doubling */
#define CHECK_RETRY_MAX_MS			600000
/* schedulers not yet known to serve (checks) running at once */
#define MAX_CHECKS_AT_ONCE			2

/*
 * The launcher's view of a database, as src/README.md draws it.  Whether a
 * scheduler of it runs is its handle; each change of view is a function
 * below (database_checking ... database_gone) that asserts the view it
 * leaves.
 */
typedef enum DatabaseView
{
	DATABASE_UNKNOWN,			/* in pg_database, no scheduler started there yet */
	DATABASE_CHECKING,			/* a scheduler started, not yet seen to serve (a check) */
	DATABASE_WAITING,			/* its check found no pg_backfill: again at next_start */
	DATABASE_SERVING,			/* its scheduler ran a while: started again when it stops */
	DATABASE_IDLE,				/* its scheduler left with nothing to do: none until a wake */
	DATABASE_GONE				/* not in pg_database any more: forgotten once stopped */
} DatabaseView;

/* what the launcher keeps for each database it looks at */
typedef struct DatabaseState
{
	Oid			dboid;
	char		dbname[NAMEDATALEN];
	DatabaseView view;
	BackgroundWorkerHandle *handle; /* NULL: not running */
	int			slot;			/* its shared-memory slot while running */
	TimestampTz started_at;
	TimestampTz next_start;		/* not before then */
	int			quick_stops;	/* in a row */
	int			absent_checks;	/* checks in a row that found no pg_backfill */
	bool		woken;			/* a wake came for it, not taken yet: a scheduler now */
	bool		no_slot_reported;	/* no worker slot for its scheduler, said */
	bool		other_reported; /* served by an older launcher's scheduler, said */
} DatabaseState;

/* a row of pg_database, as one look reads it */
typedef struct DatabaseRow
{
	Oid			dboid;
	char		dbname[NAMEDATALEN];
	bool		allowconn;
	bool		istemplate;
} DatabaseRow;

static List *databases = NIL;
static bool listed_missing_reported[BACKFILL_MAX_DATABASES];
static TimestampTz last_full_warning = 0;
static ProcessUtility_hook_type prev_process_utility = NULL;

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
	List	   *names = database_name_list();

	if (names == NIL)
		return dbname != NULL;
	if (dbname == NULL)
		return false;
	foreach(lc, names)
		if (strcmp((char *) lfirst(lc), dbname) == 0)
			return true;
	return false;
}

/*
 * Refuse to start or restart a pass (backfill_run, backfill_resume,
 * backfill_retry, backfill_revert) in a database no scheduler serves: one
 * that backfill.database_names leaves out, a template, or one that takes
 * no connections (the databases this launcher never starts a scheduler
 * in).  Any other database with pg_backfill is served: the launcher starts
 * its scheduler when the caller commits, if none runs yet.
 */
void
backfill_check_database_served(const char *name)
{
	char	   *dbname = get_database_name(MyDatabaseId);
	HeapTuple	tuple;
	bool		istemplate = false;
	bool		allowconn = true;

	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
	if (HeapTupleIsValid(tuple))
	{
		istemplate = ((Form_pg_database) GETSTRUCT(tuple))->datistemplate;
		allowconn = ((Form_pg_database) GETSTRUCT(tuple))->datallowconn;
		ReleaseSysCache(tuple);
	}
	if (!backfill_database_is_listed(dbname))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NOT_SERVED),
				 errmsg("backfill \"%s\" cannot run in database \"%s\"", name, dbname),
				 errdetail("backfill.database_names is \"%s\"; no scheduler serves this database.",
						   backfill_database_names),
				 errhint("Add the database to backfill.database_names, or empty the setting to "
						 "serve every database that has pg_backfill, and restart the server.")));
	if (istemplate || !allowconn)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NOT_SERVED),
				 errmsg("backfill \"%s\" cannot run in database \"%s\"", name, dbname),
				 errdetail(istemplate ?
						   "The database is a template; no scheduler serves templates." :
						   "The database does not allow connections; no scheduler can connect."),
				 errhint(istemplate ?
						 "Run it in a database created from the template, or ALTER DATABASE "
						 "... IS_TEMPLATE false." :
						 "ALTER DATABASE ... ALLOW_CONNECTIONS true, then run it again.")));
}

/*
 * The database a statement needs no other session in: DROP DATABASE,
 * ALTER DATABASE ... RENAME TO, and CREATE DATABASE ... TEMPLATE (of its
 * template).  NULL for any other statement.
 */
static const char *
database_needing_it_alone(Node *stmt)
{
	ListCell   *lc;

	if (IsA(stmt, DropdbStmt))
		return ((DropdbStmt *) stmt)->dbname;
	if (IsA(stmt, RenameStmt) && ((RenameStmt *) stmt)->renameType == OBJECT_DATABASE)
		return ((RenameStmt *) stmt)->subname;
	if (IsA(stmt, CreatedbStmt))
		foreach(lc, ((CreatedbStmt *) stmt)->options)
		{
			DefElem    *option = lfirst(lc);

			if (strcmp(option->defname, "template") == 0 && option->arg != NULL)
				return defGetString(option);
		}
	return NULL;
}

/*
 * DROP DATABASE, RENAME or a copy of a database as a template: before the
 * statement runs, the launcher is kept off the database (30 s) and its
 * scheduler and lanes are asked to exit, so that they do not hold it up
 * ("database is being accessed by other users").  A pass there resumes
 * from its checkpoints when the database is served again.
 */
static void
backfill_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
						 ProcessUtilityContext context, ParamListInfo params,
						 QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	const char *dbname = database_needing_it_alone(pstmt->utilityStmt);

	if (dbname != NULL)
	{
		Oid			dboid = get_database_oid(dbname, true);

		if (OidIsValid(dboid))
			backfill_shmem_database_going(dboid);
	}
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv,
							 dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv,
								dest, qc);
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
				 errhint("Serve fewer databases from one cluster, or leave the setting empty "
						 "to serve every database that has pg_backfill.")));
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

	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = backfill_process_utility;
}

/*
 * The rows of pg_database, in cxt.  pg_database is a shared catalog,
 * readable without a database.  Its heap is scanned rather than its name
 * index: an unconnected process cannot open an index before the shared
 * relcache init file exists, which it does not on a freshly created
 * cluster.
 */
static List *
read_databases(MemoryContext cxt)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;
	List	   *rows = NIL;
	MemoryContext old = CurrentMemoryContext;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);
		MemoryContext xact = MemoryContextSwitchTo(cxt);
		DatabaseRow *row = palloc0(sizeof(DatabaseRow));

		row->dboid = db->oid;
		strlcpy(row->dbname, NameStr(db->datname), NAMEDATALEN);
		row->allowconn = db->datallowconn;
		row->istemplate = db->datistemplate;
		rows = lappend(rows, row);
		MemoryContextSwitchTo(xact);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	/* a commit leaves TopMemoryContext current */
	MemoryContextSwitchTo(old);
	return rows;
}

/* Each name of backfill.database_names that no database has: a WARNING, once. */
static void
report_missing_listed(List *rows)
{
	ListCell   *lc;
	int			i = 0;

	foreach(lc, database_name_list())
	{
		const char *name = lfirst(lc);
		bool		found = false;
		ListCell   *r;

		foreach(r, rows)
			if (strcmp(((DatabaseRow *) lfirst(r))->dbname, name) == 0)
				found = true;
		if (!found && !listed_missing_reported[i])
			ereport(WARNING,
					(errcode(ERRCODE_UNDEFINED_DATABASE),
					 errmsg("database \"%s\" in backfill.database_names does not exist", name),
					 errdetail("Its backfills run once it is created."),
					 errhint("Create the database, or remove it from backfill.database_names "
							 "and restart the server.")));
		listed_missing_reported[i] = !found;
		if (++i >= BACKFILL_MAX_DATABASES)
			break;
	}
}

/* a set of views, for the transitions' assertions */
#define VIEW(v)		(1 << (v))

/* Every transition: the database leaves a view of from (a set) for to. */
static void
database_move(DatabaseState *st, int from, DatabaseView to)
{
	Assert((VIEW(st->view) & from) != 0);
	st->view = to;
}

/* unknown or waiting ──a scheduler started there──► checking */
static void
database_checking(DatabaseState *st)
{
	database_move(st, VIEW(DATABASE_UNKNOWN) | VIEW(DATABASE_WAITING), DATABASE_CHECKING);
}

/* checking ──its scheduler runs SCHEDULER_QUICK_STOP_MS──► serving */
static void
database_serving(DatabaseState *st)
{
	database_move(st, VIEW(DATABASE_CHECKING), DATABASE_SERVING);
	st->absent_checks = 0;
}

/*
 * checking or serving ──its scheduler found no pg_backfill (absent)──►
 * waiting, for a doubling delay (from backfill.naptime up to ten minutes)
 */
static void
database_waiting(DatabaseState *st, TimestampTz now)
{
	database_move(st, VIEW(DATABASE_CHECKING) | VIEW(DATABASE_SERVING), DATABASE_WAITING);
	st->quick_stops = 0;
	st->next_start = TimestampTzPlusMilliseconds(now,
												 backoff_doubling_ms(st->absent_checks++,
																	 backfill_naptime * 1000L,
																	 CHECK_RETRY_MAX_MS));
}

/* checking or serving ──its scheduler left with nothing to do──► idle (no timed look) */
static void
database_idle(DatabaseState *st)
{
	database_move(st, VIEW(DATABASE_CHECKING) | VIEW(DATABASE_SERVING), DATABASE_IDLE);
	st->quick_stops = 0;
}

/* idle ──a wake for the database──► serving at once */
static void
database_idle_woken(DatabaseState *st)
{
	database_move(st, VIEW(DATABASE_IDLE), DATABASE_SERVING);
	st->next_start = 0;
}

/* any ──not in pg_database any more──► gone */
static void
database_gone(DatabaseState *st)
{
	database_move(st, ~VIEW(DATABASE_GONE), DATABASE_GONE);
}

static DatabaseState *
state_of(const DatabaseRow *row, MemoryContext cxt)
{
	ListCell   *lc;
	DatabaseState *st;

	foreach(lc, databases)
	{
		st = lfirst(lc);
		if (st->dboid == row->dboid)
			return st;
	}
	st = MemoryContextAllocZero(cxt, sizeof(DatabaseState));
	st->dboid = row->dboid;
	st->view = DATABASE_UNKNOWN;
	st->slot = -1;
	databases = lappend(databases, st);
	return st;
}

/*
 * A free slot: no running scheduler of ours in it, none left in shared
 * memory by a launcher before this one.  -1 when all are taken.
 */
static int
free_slot(void)
{
	for (int i = 0; i < BACKFILL_MAX_DATABASES; i++)
	{
		ListCell   *lc;
		bool		ours = false;
		Oid			holder;
		pid_t		pid;

		foreach(lc, databases)
			if (((DatabaseState *) lfirst(lc))->handle != NULL &&
				((DatabaseState *) lfirst(lc))->slot == i)
				ours = true;
		if (!ours && backfill_shmem_slot_free(i, &holder, &pid))
			return i;
	}
	return -1;
}

/*
 * Does a scheduler that this launcher did not start (a launcher before it
 * did) still serve the database?  Said once: the launcher leaves it be.
 */
static bool
served_by_another(DatabaseState *st)
{
	for (int i = 0; i < BACKFILL_MAX_DATABASES; i++)
	{
		Oid			holder;
		pid_t		pid;

		if (!backfill_shmem_slot_free(i, &holder, &pid) && holder == st->dboid)
		{
			if (!st->other_reported)
				ereport(LOG,
						(errmsg("pg_backfill scheduler for database \"%s\" is already running "
								"as PID %d", st->dbname, (int) pid),
						 errdetail("A launcher before this one started it; it goes on.")));
			st->other_reported = true;
			return true;
		}
	}
	st->other_reported = false;
	return false;
}

/* schedulers running that have not yet been seen to serve: checks */
static int
checks_running(void)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, databases)
		if (((DatabaseState *) lfirst(lc))->handle != NULL &&
			((DatabaseState *) lfirst(lc))->view == DATABASE_CHECKING)
			n++;
	return n;
}

/*
 * Start the scheduler of a database in slot i; its slot number is its main
 * argument, its database's oid its bgw_extra.
 */
static void
start_scheduler(DatabaseState *st, int i, MemoryContext cxt)
{
	char		name[BGW_MAXLEN];

	snprintf(name, BGW_MAXLEN, "pg_backfill scheduler for %s", st->dbname);
	st->handle = worker_start("backfill_scheduler_main", name, "pg_backfill scheduler",
							  Int32GetDatum(i), &st->dboid, sizeof(Oid), cxt);
	st->started_at = GetCurrentTimestamp();
	st->slot = i;
	if (st->handle != NULL)
	{
		if (st->view == DATABASE_UNKNOWN || st->view == DATABASE_WAITING)
			database_checking(st);
		if (st->no_slot_reported)
			ereport(LOG,
					(errmsg("pg_backfill started the scheduler of database \"%s\": a background "
							"worker slot is free again", st->dbname)));
		st->no_slot_reported = false;
		return;
	}
	st->next_start = TimestampTzPlusMilliseconds(st->started_at, SCHEDULER_RETRY_MAX_MS);
	/* said once: the launcher tries again every minute and at each wake */
	if (!st->no_slot_reported)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("pg_backfill cannot start the scheduler of database \"%s\": no "
						"background worker slot is free", st->dbname),
				 errdetail("max_worker_processes is %d.  pg_backfill takes one for its launcher, "
						   "one for the scheduler of each database with the extension, up to "
						   "backfill.max_workers (%d) for lanes, and one for a database's outbox "
						   "relay while messages wait.", max_worker_processes,
						   backfill_max_workers),
				 errhint("Raise max_worker_processes (a restart is needed).  Until then the "
						 "launcher tries again every minute and at each backfill_run there; "
						 "its success is logged.")));
	st->no_slot_reported = true;
}

/*
 * Its scheduler stopped: when to start one again.  A check that found no
 * pg_backfill waits longest; a scheduler that left with nothing to do waits
 * for a wake; a serving scheduler that ran a while is started again at
 * once, one that stopped soon after a doubling delay.  A database gone
 * keeps its view: it is forgotten.
 */
static void
note_stop(DatabaseState *st, TimestampTz now)
{
	SchedulerExit why = backfill_shmem_take_exit(st->slot, st->dboid);

	st->next_start = now;
	if (st->view == DATABASE_GONE)
		;
	else if (why == SCHEDULER_EXIT_IDLE)
		database_idle(st);
	else if (why == SCHEDULER_EXIT_ABSENT)
		database_waiting(st, now);
	else if (TimestampDifferenceExceeds(st->started_at, now, SCHEDULER_QUICK_STOP_MS))
		st->quick_stops = 0;
	else
		st->next_start = TimestampTzPlusMilliseconds(now,
													 backoff_doubling_ms(st->quick_stops++,
																		 SCHEDULER_RETRY_MIN_MS,
																		 SCHEDULER_RETRY_MAX_MS));
	pfree(st->handle);
	st->handle = NULL;
	st->slot = -1;
}

/* May a scheduler run in this database at all? */
static bool
database_eligible(const DatabaseRow *row)
{
	return row->allowconn && !row->istemplate && backfill_database_is_listed(row->dbname);
}

/* One database at one look: start its scheduler if it is due; the sleep shortened. */
static void
look_at_database(const DatabaseRow *row, TimestampTz now, long *sleep_ms, MemoryContext cxt)
{
	DatabaseState *st = state_of(row, cxt);
	pid_t		pid;
	int			slot;

	strlcpy(st->dbname, row->dbname, NAMEDATALEN);
	if (st->handle != NULL)
	{
		if (GetBackgroundWorkerPid(st->handle, &pid) != BGWH_STOPPED)
		{
			/* it has run long enough to be serving, not checking */
			if (st->view == DATABASE_CHECKING &&
				TimestampDifferenceExceeds(st->started_at, now, SCHEDULER_QUICK_STOP_MS))
				database_serving(st);
			return;
		}
		note_stop(st, now);
	}
	/* a wake (backfill_run...) for the database: a scheduler now, whatever its delay */
	if (st->woken)
	{
		st->woken = false;
		if (st->view == DATABASE_IDLE)
			database_idle_woken(st);
		st->next_start = 0;
		st->absent_checks = 0;
	}
	if (!database_eligible(row) || backfill_shmem_database_is_going(row->dboid) ||
		served_by_another(st) || st->view == DATABASE_IDLE)
		return;
	if (st->next_start > now)
	{
		*sleep_ms = Min(*sleep_ms, backoff_ms_until(now, st->next_start));
		return;
	}
	if (st->view != DATABASE_SERVING && checks_running() >= MAX_CHECKS_AT_ONCE)
	{
		*sleep_ms = Min(*sleep_ms, 1000L);
		return;
	}
	if ((slot = free_slot()) < 0)
	{
		if (TimestampDifferenceExceeds(last_full_warning, now, 60000))
		{
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("pg_backfill cannot serve database \"%s\": %d databases are "
							"served already", row->dbname, BACKFILL_MAX_DATABASES),
					 errhint("List the databases to serve in backfill.database_names, or drop "
							 "pg_backfill where it is not used.")));
			last_full_warning = now;
		}
		return;
	}
	start_scheduler(st, slot, cxt);
}

/*
 * The database a wake asked about is looked at now, whatever its delay;
 * if its scheduler is still stopping (it just left idle), once it stopped.
 */
static void
take_wakes(void)
{
	bool		all;
	Oid			dboid = backfill_shmem_take_look_at(&all);
	ListCell   *lc;

	foreach(lc, databases)
	{
		DatabaseState *st = lfirst(lc);

		if (all || st->dboid == dboid)
			st->woken = true;
	}
}

/* Is the database of dboid among the rows of pg_database? */
static bool
database_listed(List *rows, Oid dboid)
{
	ListCell   *lc;

	foreach(lc, rows)
		if (((DatabaseRow *) lfirst(lc))->dboid == dboid)
			return true;
	return false;
}

/*
 * The databases gone from pg_database: their scheduler reaped once it
 * stopped, then forgotten.
 */
static void
forget_dropped(List *rows, TimestampTz now)
{
	ListCell   *lc;

	foreach(lc, databases)
	{
		DatabaseState *st = lfirst(lc);
		pid_t		pid;

		if (st->view != DATABASE_GONE && !database_listed(rows, st->dboid))
			database_gone(st);
		if (st->view != DATABASE_GONE)
			continue;
		if (st->handle != NULL && GetBackgroundWorkerPid(st->handle, &pid) == BGWH_STOPPED)
			note_stop(st, now);
		if (st->handle == NULL)
		{
			pfree(st);
			databases = foreach_delete_current(databases, lc);
		}
	}
}

/*
 * One look: note stopped schedulers, start those that are due.  Returns how
 * long to sleep.
 */
static long
launcher_tick(MemoryContext cxt, MemoryContext scratch)
{
	TimestampTz now = GetCurrentTimestamp();
	long		sleep_ms = backfill_naptime * 1000L;
	List	   *rows = read_databases(scratch);
	ListCell   *lc;

	take_wakes();
	report_missing_listed(rows);
	foreach(lc, rows)
		look_at_database(lfirst(lc), now, &sleep_ms, cxt);
	forget_dropped(rows, now);
	return sleep_ms;
}

void
backfill_launcher_main(Datum main_arg)
{
	MemoryContext cxt;
	MemoryContext scratch;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* no database: the launcher reads only the shared catalog pg_database */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("pg_backfill launcher");
	backfill_shmem_attach_launcher();

	cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill launcher",
								ALLOCSET_DEFAULT_SIZES);
	scratch = AllocSetContextCreate(cxt, "pg_backfill launcher look", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);
	databases = NIL;
	memset(listed_missing_reported, 0, sizeof(listed_missing_reported));
	ereport(LOG, (errmsg("pg_backfill launcher started for %s",
						 backfill_database_names[0] != '\0' ?
						 psprintf("the databases %s", backfill_database_names) :
						 "every database where pg_backfill is installed")));

	for (;;)
	{
		long		sleep_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MemoryContextReset(scratch);
		sleep_ms = launcher_tick(cxt, scratch);
		Assert(CurrentMemoryContext == cxt);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
