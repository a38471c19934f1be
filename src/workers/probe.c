/*-------------------------------------------------------------------------
 *
 * probe.c
 *	  The probe worker: a declarer's SQL outside a batch, evaluated in a
 *	  short-lived background process of its own, as the declarer.
 *
 * A drift probe (engine/drift.c) runs a backfill's predicate.  Run in the
 * scheduler's loop it let one role's lock, or one slow predicate, hold
 * every other role's passes queued; run in a report it ran in the caller's
 * session, where the caller's cursors and temporary objects are within
 * reach.  So a probe is a "pg_backfill probe" dynamic background worker,
 * started like a lane (BGW_NEVER_RESTART, bgw_notify_pid = its starter),
 * that logs in as the backfill's run_as role, evaluates the predicate
 * under backfill.probe_lock_timeout and backfill.probe_timeout (asrole.c),
 * records the answer in backfill.probe and exits.  A slow or blocked probe
 * delays only the backfill it probes.
 *
 * Starters: the scheduler, for watches that are due and for a pass about
 * to start that requires another backfill (it keeps the pass queued until
 * the probe has ended) or a migration (the probe reads only the migrations
 * table; the pass waits until one has recorded it applied); backfill_probe(name) (sql/probe.c)
 * and backfill_finalize (sql/finalize.c), which wait for the answer
 * (probe_wait_answer).  The scheduler's probes are kept here: at most
 * PROBE_MAX at once, one per backfill and kind, and one that ended is not
 * started again for PROBE_RESTART_MS (a worker that died without an answer
 * is not restarted at every look).  The slots are shared fairly between
 * the roles whose probes are due (probe_share): a role holds at most its
 * share, never all four, and a role below its share gets one by ending
 * the longest-running watch probe of a role above its share.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "executor/spi.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "config.h"
#include "drift.h"
#include "errors.h"
#include "probe.h"
#include "worker.h"

/* the scheduler's probes running at once, at most */
#define PROBE_MAX			4
/* a probe of the scheduler's that ended is not started again sooner */
#define PROBE_RESTART_MS	1000

/* a probe the scheduler started */
typedef struct ProbeChild
{
	DriftKind	kind;
	int64		name_hash;
	int64		run_id;
	Oid			role;			/* the backfill's run_as: whose share it takes */
	BackgroundWorkerHandle *handle;
	TimestampTz started_at;
	TimestampTz stopped_at;		/* 0 while it runs */
} ProbeChild;

static List *children = NIL;

/*
 * The roles whose probe was due in the last PROBE_ROLE_MEMORY_MS: they share
 * the PROBE_MAX slots.  A role may hold at most PROBE_MAX / (the roles
 * running or due lately) of them, and never all: one is always left for
 * another role, so one role's slow probes delay no other role's.
 */
#define PROBE_MAX_ROLES		32
#define PROBE_ROLE_MEMORY_MS	10000

typedef struct ProbeRoles
{
	int			n;
	Oid			roles[PROBE_MAX_ROLES];
	TimestampTz at[PROBE_MAX_ROLES];	/* its probe was last due then */
} ProbeRoles;

static ProbeRoles wanting;

/* Note that role's probe is due at at (0: count it, without a time). */
static void
roles_add(ProbeRoles *set, Oid role, TimestampTz at)
{
	for (int i = 0; i < set->n; i++)
		if (set->roles[i] == role)
		{
			set->at[i] = Max(set->at[i], at);
			return;
		}
	if (set->n < PROBE_MAX_ROLES)
	{
		set->roles[set->n] = role;
		set->at[set->n++] = at;
	}
}

/* Forget the roles whose probe was due longer ago than PROBE_ROLE_MEMORY_MS. */
static void
roles_expire(ProbeRoles *set, TimestampTz now)
{
	int			k = 0;

	for (int i = 0; i < set->n; i++)
		if (!TimestampDifferenceExceeds(set->at[i], now, PROBE_ROLE_MEMORY_MS))
		{
			set->roles[k] = set->roles[i];
			set->at[k++] = set->at[i];
		}
	set->n = k;
}

BackgroundWorkerHandle *
probe_start(DriftKind kind, DriftTarget *target, int64 run_id, MemoryContext cxt)
{
	ProbeArgs	args;

	memset(&args, 0, sizeof(args));
	args.dboid = MyDatabaseId;
	args.roleoid = target->run_as;
	args.kind = (int32) kind;
	args.name_hash = drift_name_hash(target->name);
	args.run_id = run_id;
	return worker_start("backfill_probe_main", "pg_backfill probe", "pg_backfill probe",
						(Datum) 0, &args, sizeof(args), cxt);
}

/* Wait for the probe worker to stop, at most until deadline (BF039 then). */
static void
wait_for_probe(const char *name, BackgroundWorkerHandle *handle, TimestampTz deadline)
{
	pid_t		pid = 0;

	while (GetBackgroundWorkerPid(handle, &pid) != BGWH_STOPPED)
	{
		TimestampTz now = GetCurrentTimestamp();
		long		left_ms;

		if (now >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_PROBE_FAILED),
					 errmsg("the probe of backfill \"%s\" did not answer in time", name),
					 errdetail("Its worker (PID %d) goes on, bounded by backfill.probe_timeout "
							   "(%d ms) and backfill.probe_lock_timeout (%d ms), and records "
							   "its answer in backfill.probe.", (int) pid,
							   backfill_probe_timeout, backfill_probe_lock_timeout),
					 errhint("backfill_pending() shows the answer once it is taken; or call "
							 "backfill_probe with a longer timeout.")));
		left_ms = (long) Min((deadline - now) / 1000 + 1, 1000);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, left_ms,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* the probe recorded since `since`: its rows, or BF039 with its error */
static int64
probe_answer(const char *name, TimestampTz since)
{
	CatalogScope scope;
	Oid			types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		values[2] = {CStringGetTextDatum(name), TimestampTzGetDatum(since)};
	bool		found;
	char	   *code = NULL;
	char	   *message = NULL;
	int64		rows = 0;

	catalog_enter(&scope);
	found = catalog_exec_latest("SELECT p.found, p.error_code, p.error_message"
								" FROM backfill.probe p"
								" WHERE p.declaration = $1 AND p.taken_at >= $2",
								2, types, values, NULL) == 1;
	if (found)
	{
		code = catalog_gettext(0, 2);
		message = catalog_gettext(0, 3);
		if (code == NULL)
			rows = catalog_getint64(0, 1);
	}
	catalog_leave(&scope);
	if (!found || code != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PROBE_FAILED),
				 errmsg("the probe of backfill \"%s\" failed", name),
				 found ? errdetail("It ended with SQLSTATE %s: %s (recorded in backfill.probe; "
								   "lock_timeout %d ms, statement timeout %d ms).", code, message,
								   backfill_probe_lock_timeout, backfill_probe_timeout) :
				 errdetail("Its worker ended without recording an answer (the backfill was "
						   "dropped or declared again meanwhile, or the worker failed: see "
						   "the server log)."),
				 errhint("Release what the predicate waits for, or make it cheaper (an index "
						 "on the predicate), then call backfill_probe again.")));
	return rows;
}

int64
probe_wait_answer(const char *name, BackgroundWorkerHandle *handle, TimestampTz since,
				  TimestampTz deadline)
{
	if (handle != NULL)
		wait_for_probe(name, handle, deadline);
	return probe_answer(name, since);
}

static ProbeChild *
child_for(DriftKind kind, int64 name_hash, int64 run_id)
{
	ListCell   *lc;

	foreach(lc, children)
	{
		ProbeChild *c = lfirst(lc);

		if (c->kind == kind && c->name_hash == name_hash && c->run_id == run_id)
			return c;
	}
	return NULL;
}

bool
probes_reap(void)
{
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();
	bool		running = false;

	foreach(lc, children)
	{
		ProbeChild *c = lfirst(lc);
		pid_t		pid;

		if (c->stopped_at == 0 && GetBackgroundWorkerPid(c->handle, &pid) == BGWH_STOPPED)
			c->stopped_at = now;
		if (c->stopped_at == 0)
		{
			running = true;
			continue;
		}
		if (TimestampDifferenceExceeds(c->stopped_at, now, PROBE_RESTART_MS))
		{
			pfree(c->handle);
			pfree(c);
			children = foreach_delete_current(children, lc);
		}
	}
	return running;
}

/* the scheduler's probes running: of one role (InvalidOid: all) */
static int
probes_running(Oid role)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, children)
	{
		ProbeChild *c = lfirst(lc);

		if (c->stopped_at == 0 && (!OidIsValid(role) || c->role == role))
			n++;
	}
	return n;
}

/* How many of the PROBE_MAX slots may role hold now?  (At least one.) */
static int
probe_share(Oid role)
{
	ProbeRoles	roles;
	ListCell   *lc;

	roles_expire(&wanting, GetCurrentTimestamp());
	roles = wanting;
	foreach(lc, children)
		if (((ProbeChild *) lfirst(lc))->stopped_at == 0)
			roles_add(&roles, ((ProbeChild *) lfirst(lc))->role, 0);
	roles_add(&roles, role, 0);
	return Max(1, Min(PROBE_MAX - 1, PROBE_MAX / roles.n));
}

/*
 * Every slot is taken and role holds less than its share: the watch probe
 * that has run longest, of a role holding more than its share, is ended (terminated;
 * a watch is probed again later).  A required backfill's probe is never
 * ended: the pass that waits for it would start without it.
 */
static void
probe_make_room(Oid role)
{
	ListCell   *lc;
	ProbeChild *pick = NULL;

	if (probes_running(role) >= probe_share(role))
		return;
	foreach(lc, children)
	{
		ProbeChild *c = lfirst(lc);

		if (c->stopped_at != 0 || c->kind != DRIFT_WATCH || c->role == role ||
			probes_running(c->role) <= probe_share(c->role))
			continue;
		if (pick == NULL || c->started_at < pick->started_at)
			pick = c;
	}
	if (pick == NULL)
		return;
	TerminateBackgroundWorker(pick->handle);
	ereport(LOG,
			(errmsg("pg_backfill: a watch probe is ended for another role's probe"),
			 errdetail("Its role holds more than its share of the scheduler's %d probe slots.",
					   PROBE_MAX)));
}

bool
probe_done(DriftKind kind, DriftTarget *target, int64 run_id, MemoryContext cxt)
{
	int64		name_hash = drift_name_hash(target->name);
	ProbeChild *c = child_for(kind, name_hash, run_id);
	BackgroundWorkerHandle *handle;
	MemoryContext old;

	if (c != NULL)
		return c->stopped_at != 0;
	roles_add(&wanting, target->run_as, GetCurrentTimestamp());
	if (probes_running(target->run_as) >= probe_share(target->run_as))
		return false;
	if (probes_running(InvalidOid) >= PROBE_MAX)
	{
		probe_make_room(target->run_as);
		return false;
	}
	handle = probe_start(kind, target, run_id, cxt);
	if (handle == NULL)
		return false;
	old = MemoryContextSwitchTo(cxt);
	c = palloc0(sizeof(ProbeChild));
	c->kind = kind;
	c->name_hash = name_hash;
	c->run_id = run_id;
	c->role = target->run_as;
	c->started_at = GetCurrentTimestamp();
	c->handle = handle;
	children = lappend(children, c);
	MemoryContextSwitchTo(old);
	return false;
}

void
backfill_probe_main(Datum main_arg)
{
	ProbeArgs	args;
	MemoryContext cxt;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(ProbeArgs));

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	worker_lower_priority();

	/* as the backfill's role, as its lanes: never more privilege than it has */
	BackgroundWorkerInitializeConnectionByOid(args.dboid, args.roleoid, 0);
	worker_own_identity(PGC_S_SESSION);
	SetConfigOption("application_name", "pg_backfill probe", PGC_USERSET, PGC_S_OVERRIDE);
	pgstat_report_appname("pg_backfill probe");
	SetConfigOption("jit", "off", PGC_USERSET, PGC_S_SESSION);
	/* it records its answer, whatever the role's sessions default to */
	SetConfigOption("default_transaction_read_only", "off", PGC_USERSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_isolation", "read committed", PGC_USERSET,
					PGC_S_OVERRIDE);
	/* its own statements (a catch-up pass's enqueue) wait no longer than the probe */
	SetConfigOption("lock_timeout", psprintf("%d", backfill_probe_lock_timeout), PGC_USERSET,
					PGC_S_OVERRIDE);

	cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill probe", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);
	drift_probe_worker((DriftKind) args.kind, args.name_hash, args.run_id, cxt);
	proc_exit(0);
}
