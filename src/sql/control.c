/*-------------------------------------------------------------------------
 *
 * control.c
 *	  Steering a backfill: backfill_pause, backfill_resume, backfill_cancel,
 *	  backfill_retry, backfill_revert and backfill_drop.
 *
 * Each is safe to call twice and answers whether it changed anything.
 * Each locks the declaration's row first, so two controls of one backfill
 * (or a control and a backfill_run) happen one after the other, and checks
 * that the caller may act for the role that owns the backfill.  Then it
 * locks the running pass (its ledger row, then its run row), so that a
 * lane counting, ending or planning the pass finishes first, and the
 * control acts on the pass as it is afterwards.  The state of the passes
 * is read as it is once the lock is held, whatever the caller's snapshot;
 * a REPEATABLE READ or SERIALIZABLE caller whose snapshot is behind it is
 * refused (BF020).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "catalog.h"
#include "declaration.h"
#include "errors.h"
#include "identity.h"
#include "launcher.h"
#include "enqueue.h"
#include "scope.h"
#include "shmem.h"
#include "state.h"
#include "tenancy.h"

PG_FUNCTION_INFO_V1(backfill_pause);
PG_FUNCTION_INFO_V1(backfill_resume);
PG_FUNCTION_INFO_V1(backfill_cancel);
PG_FUNCTION_INFO_V1(backfill_retry);
PG_FUNCTION_INFO_V1(backfill_drop);
PG_FUNCTION_INFO_V1(backfill_revert);

/* the backfill a control acts on */
typedef struct Target
{
	char	   *name;
	Oid			owner;
	char	   *checksum;
	Datum		environments;
	char	   *envlist;		/* NULL: every environment */
	int64		running_id;		/* 0: no pass running */
	int64		last_id;		/* 0: never run */
	char	   *last_status;
	char	   *last_checksum;
	char	   *last_ledger_name;
	Jsonb	   *last_input;
	Oid			run_as;
} Target;

/* the state of a backfill's passes that the controls act on */
#define TARGET_STATE_SQL \
	"SELECT d.owner, d.checksum, d.environments," \
	"  array_to_string(d.environments, ', ')," \
	"  (SELECT max(l.run_id) FROM backfill.ledger l" \
	"    WHERE l.declaration = d.name AND l.status = $2)," \
	"  last.run_id, last.status, last.checksum, last.ledger_name," \
	"  (SELECT r.input FROM backfill.run r WHERE r.run_id = last.run_id)," \
	"  d.run_as" \
	" FROM backfill.declaration d" \
	" LEFT JOIN LATERAL (SELECT l.run_id, l.status, l.checksum, l.ledger_name" \
	"    FROM backfill.ledger l WHERE l.declaration = d.name" \
	"   ORDER BY l.run_id DESC LIMIT 1) last ON true" \
	" WHERE d.name = $1"

/*
 * A REPEATABLE READ or SERIALIZABLE caller acts on its snapshot: if a pass
 * of the backfill started or ended after it was taken, the control would
 * act on a state that is gone (start a second pass, steer an ended one).
 * Refuse instead.  Inside the catalog scope, with the declaration locked.
 */
static void
check_snapshot_current(Target *t, const char *control)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {CStringGetTextDatum(t->name), ledger_status_datum(LEDGER_RUNNING)};
	int64		snap_running;
	int64		snap_last;

	if (!IsolationUsesXactSnapshot())
		return;
	catalog_exec("SELECT"
				 "  (SELECT max(l.run_id) FROM backfill.ledger l"
				 "    WHERE l.declaration = $1 AND l.status = $2),"
				 "  (SELECT max(l.run_id) FROM backfill.ledger l WHERE l.declaration = $1)",
				 2, types, values, NULL, SPI_OK_SELECT);
	snap_running = catalog_getint64(0, 1);
	snap_last = catalog_getint64(0, 2);
	if (snap_running == t->running_id && snap_last == t->last_id)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_CONCURRENT),
			 errmsg("backfill \"%s\" changed after this transaction's snapshot was taken",
					t->name),
			 errdetail("Run " INT64_FORMAT " was started or ended by a transaction that committed "
					   "after this %s transaction began; %s would act on a state that is gone.",
					   snap_last != t->last_id ? t->last_id : Max(snap_running, t->running_id),
					   IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ",
					   control),
			 errhint("Roll back and call %s again, or call it from a READ COMMITTED transaction.",
					 control)));
}

/*
 * Lock and read the declaration.  Returns false when it is not declared
 * (and missing_ok), else raises UNKNOWN.  The state of its passes is read
 * as it is once the lock is held, whatever the caller's snapshot.  Must be
 * called inside SPI.
 */
static bool
target_load(const char *name, Target *t, bool missing_ok, const char *control)
{
	CatalogScope scope;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		isnull;
	bool		found;

	check_backfill_name(name);
	check_not_standby("control backfill", name);
	check_catalog_current("control backfill", name);
	/* what a control answers must survive a crash, whatever the session's synchronous_commit */
	ForceSyncCommit();
	memset(t, 0, sizeof(Target));
	t->name = pstrdup(name);
	values[0] = CStringGetTextDatum(name);
	values[1] = ledger_status_datum(LEDGER_RUNNING);

	catalog_enter(&scope);
	/* the row lock serializes the controls and runs of one backfill */
	found = catalog_exec("SELECT 1 FROM backfill.declaration d WHERE d.name = $1 FOR UPDATE",
						 1, types, values, NULL, SPI_OK_SELECT) > 0;
	if (found)
	{
		catalog_exec_latest(TARGET_STATE_SQL, 2, types, values, NULL);
		t->owner = catalog_getoid(0, 1);
		t->checksum = catalog_gettext(0, 2);
		t->environments = catalog_getcopy(0, 3);
		t->envlist = catalog_gettext(0, 4);
		t->running_id = catalog_getint64(0, 5);
		t->last_id = catalog_getint64(0, 6);
		t->last_status = catalog_gettext(0, 7);
		t->last_checksum = catalog_gettext(0, 8);
		t->last_ledger_name = catalog_gettext(0, 9);
		{
			Datum		d = catalog_getdatum(0, 10, &isnull);

			t->last_input = isnull ? NULL : DatumGetJsonbPCopy(d);
		}
		t->run_as = catalog_getoid(0, 11);
	}
	catalog_leave(&scope);

	if (!found && !missing_ok)
		report_not_declared(name);
	if (found)
	{
		check_backfill_member(name, t->owner);
		catalog_enter(&scope);
		check_snapshot_current(t, control);
		catalog_leave(&scope);
	}
	return found;
}

/*
 * Lock the running pass: its ledger row, then its run row, in the order
 * every writer of a pass's state takes them (ledger, run, partitions; see
 * src/README.md).  Waiting for the ledger row waits out a lane that is
 * counting or ending the pass, waiting for the run row a lane that is
 * planning it, so a control acts on the pass as it is after them.  Returns
 * false, and clears running_id, when the pass ended meanwhile.
 */
static bool
lock_running_pass(Target *t)
{
	CatalogScope scope;
	bool		running;

	if (t->running_id == 0)
		return false;
	catalog_enter(&scope);
	running = state_pass_lock(t->running_id);
	catalog_leave(&scope);
	if (!running)
		t->running_id = 0;
	return running;
}

/*
 * The direction of a pass ("forward" or "revert"), read as it is now;
 * "forward" for run 0 and under a catalog older than 0.5.
 */
static char *
pass_direction(int64 run_id)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(run_id)};
	char	   *direction = NULL;

	catalog_enter(&scope);
	if (run_id != 0 &&
		catalog_exec_latest(psprintf("SELECT %s FROM backfill.ledger l WHERE l.run_id = $1",
									 "l.direction"),
							1, types, values, NULL) > 0)
		direction = catalog_gettext(0, 1);
	catalog_leave(&scope);
	return direction ? direction : pstrdup("forward");
}

/* lock_running_pass, saying in a NOTICE when there is none to act on */
static bool
lock_running_pass_or_say(Target *t, const char *verb)
{
	if (lock_running_pass(t))
		return true;
	ereport(NOTICE,
			(errmsg("backfill \"%s\" has no running pass to %s", t->name, verb)));
	return false;
}

/* Move the target's running pass (a transition of state/), in the catalog scope. */
static bool
on_running_pass(Target *t, bool (*move) (int64 run_id))
{
	CatalogScope scope;
	bool		changed;

	catalog_enter(&scope);
	changed = move(t->running_id);
	catalog_leave(&scope);
	return changed;
}

/* paused -> running, clearing why a scheduler paused it */
static bool
pass_resumed(int64 run_id)
{
	return state_pass_resumed(run_id, BACKFILL_UNSERVED_PAUSE);
}

/*
 * Cancelled by the current user (BF010): the same end as a lane's
 * (state_pass_end), every open partition cancelled.
 */
static bool
pass_cancelled(int64 run_id)
{
	return state_pass_end(run_id, LEDGER_CANCELLED, -1,
						  unpack_sql_state(ERRCODE_BACKFILL_CANCELLED),
						  psprintf("cancelled by %s", GetUserNameFromId(GetUserId(), false)),
						  -1);
}

/* failed -> pending: the failed partitions of the running pass */
static bool
pass_parts_retried(int64 run_id)
{
	return state_parts_retried(run_id) > 0;
}

static void
connect_spi(void)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

/* what a control does to its loaded target; true when it changed anything */
typedef bool (*ControlAction) (Target *t);

/*
 * The frame of pause, resume, cancel and retry: load (and lock) the
 * backfill named by the first argument, act on it, answer whether
 * anything changed.
 */
static bool
run_control(FunctionCallInfo fcinfo, const char *control, ControlAction act)
{
	Target		t;
	bool		changed;

	connect_spi();
	target_load(text_to_cstring(PG_GETARG_TEXT_PP(0)), &t, false, control);
	changed = act(&t);
	SPI_finish();
	return changed;
}

/* an SQL control: backfill_x(name) answers run_control(..., x_pass) */
#define CONTROL_ENTRY(fn, act) \
	Datum fn(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(run_control(fcinfo, #fn, act)); }

/*
 * A control that stops the lanes of the running pass: the pass locked (or
 * a NOTICE that there is none to verb), moved by transition; when it
 * moved, at commit its lanes are woken (a lane waiting out its rate leaves
 * at once, not after the sleep) and, with cancel, the statements of their
 * batches in flight cancelled.
 */
static bool
stop_lanes(Target *t, const char *verb, bool (*transition) (int64 run_id), bool cancel)
{
	bool		changed;

	if (!lock_running_pass_or_say(t, verb))
		return false;
	changed = on_running_pass(t, transition);
	if (changed)
		backfill_wake_lanes_at_commit(t->running_id, cancel);
	return changed;
}

static bool
pause_pass(Target *t)
{
	return stop_lanes(t, "pause", state_pass_paused, false);
}

CONTROL_ENTRY(backfill_pause, pause_pass)

static bool
resume_pass(Target *t)
{
	bool		changed = false;

	/* no lane would take it up: refused, as backfill_run is (BF013) */
	backfill_check_database_served(t->name);
	/* the reason a scheduler paused it (the database was no longer served) is over */
	if (lock_running_pass(t))
		changed = on_running_pass(t, pass_resumed);
	if (changed)
		backfill_wake_scheduler_at_commit();
	return changed;
}

CONTROL_ENTRY(backfill_resume, resume_pass)

/*
 * Cancelling locks the pass (a lane counting or planning it finishes
 * first), then marks its open partitions cancelled.  That waits for
 * batches that are committing their checkpoint, and makes any later
 * checkpoint of the pass find no lease, so its batch rolls back: the
 * ledger's counts are exactly what committed.  A pass that ended while
 * the cancel waited is left as it ended.  When the cancel commits, the
 * lanes of the pass are told to stop and the statement of a batch in
 * flight is cancelled (shmem.c), so a long batch ends now, rolled back.
 */
static bool
cancel_pass(Target *t)
{
	return stop_lanes(t, "cancel", pass_cancelled, true);
}

CONTROL_ENTRY(backfill_cancel, cancel_pass)

/*
 * A forward pass that failed STALLED (BF006), retried: does the retry sweep
 * it again?  A guarded action over a table (declaration_sweeps), not a
 * Citus table's shards (their checkpoints live on the nodes): true, and
 * the new pass works every partition again from its start.  A pages
 * source, shards, or rows recorded as failed alone: false, the pass
 * resumes from its checkpoints as any failed one.  An unguarded action
 * (guard => false, or a statement the guard does not check): refused, a
 * sweep could do a row twice.  Not stalled: false.
 */
static bool
retry_sweeps(Target *t, const char *direction)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(t->last_id)};
	bool		stalled;
	bool		resumes = false;
	bool		sweeps;
	bool		table;

	if (strcmp(direction, "forward") != 0)
		return false;			/* a revert */
	catalog_enter(&scope);
	stalled = catalog_exec("SELECT 1 FROM backfill.ledger WHERE run_id = $1"
						   " AND error_code = 'BF006'", 1, types, values, NULL,
						   SPI_OK_SELECT) > 0;
	if (stalled)
		resumes = catalog_exec("SELECT 1 FROM backfill.partition WHERE run_id = $1"
							   " AND shard IS NOT NULL LIMIT 1", 1, types, values, NULL,
							   SPI_OK_SELECT) > 0;
	/* rows recorded as failed alone are retried as partitions of their own */
	if (stalled && !resumes)
		resumes = catalog_exec("SELECT 1 FROM backfill.failed_row WHERE run_id = $1 LIMIT 1",
							   1, types, values, NULL, SPI_OK_SELECT) > 0;
	sweeps = stalled && declaration_sweeps(t->name);
	values[0] = CStringGetTextDatum(t->name);
	types[0] = TEXTOID;
	table = stalled && catalog_exec("SELECT 1 FROM backfill.declaration WHERE name = $1"
									" AND pages_fn IS NULL", 1, types, values, NULL,
									SPI_OK_SELECT) > 0;
	catalog_leave(&scope);
	if (stalled && table && !sweeps && !resumes)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_STALLED),
				 errmsg("backfill \"%s\" cannot retry stalled run " INT64_FORMAT, t->name,
						t->last_id),
				 errdetail("Its action is not guarded (guard => false, or a statement other "
						   "than an UPDATE or DELETE of its table): its checkpoints are all "
						   "done, and a sweep over them again could do a row twice."),
				 errhint("Once the writers stop, start a new pass with backfill_run('%s', "
						 "force => true).", t->name)));
	return sweeps && !resumes;
}

/*
 * A new pass resuming the failed pass t->last_id from its checkpoints, and
 * trying again exactly the rows it recorded as failed alone.  A
 * pass that failed before it was planned has no partitions: the new one
 * stays queued, and its first lane plans it.
 */
static int64
retry_failed_pass(Target *t)
{
	CatalogScope scope;
	int64		run_id;
	int			copied;
	int			rows;
	char	   *direction = pass_direction(t->last_id);
	bool		sweep;

	if (strcmp(t->last_checksum, t->checksum) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CHANGED),
				 errmsg("backfill \"%s\" changed since run " INT64_FORMAT " failed",
						t->name, t->last_id),
				 errdetail("Its checkpoints belong to the old definition."),
				 errhint("Start a new pass with backfill_run('%s', force => true).", t->name)));
	check_environment(t->name, t->environments, t->envlist);
	identity_check(t->name);
	check_role_can_login(t->name, t->run_as);
	sweep = retry_sweeps(t, direction);

	/* a failed revert resumes as a revert */
	run_id = enqueue_pass_as(t->last_ledger_name, t->name, t->checksum, false, t->last_id,
							 t->owner, t->last_input, direction, false);
	catalog_enter(&scope);
	copied = state_parts_copied(run_id, t->last_id);
	/* a stalled pass that sweeps: every partition again from its start */
	if (sweep)
		state_parts_restarted(run_id);
	rows = state_parts_of_failed_rows(run_id, t->last_id);
	copied += rows;
	/*
	 * The resumed pass keeps its bound: it converges within the same key
	 * range.  Its plan_method and estimate are its first lane's, as the
	 * table is then (pass.c plan_resumed), not the failed pass's.
	 */
	if (copied > 0)
		state_pass_retried(run_id, t->last_id);
	catalog_leave(&scope);
	ereport(NOTICE,
			(errmsg(sweep ?
					"backfill \"%s\" sweeps stalled run " INT64_FORMAT " again as run "
					INT64_FORMAT :
					strcmp(t->last_status,
						   ledger_status_text(LEDGER_COMPLETED_WITH_FAILURES)) == 0 ?
					"backfill \"%s\" retries the rows that failed alone in run " INT64_FORMAT
					" as run " INT64_FORMAT :
					"backfill \"%s\" resumes failed run " INT64_FORMAT " as run " INT64_FORMAT,
					t->name, t->last_id, run_id),
			 copied == 0 ?
			 errdetail("Run " INT64_FORMAT " failed before it was planned; run " INT64_FORMAT
					   " plans it again.", t->last_id, run_id) :
			 rows > 0 ?
			 errdetail("It tries again the %d row(s) that failed alone in run " INT64_FORMAT ".",
					   rows, t->last_id) : 0));
	return run_id;
}

/*
 * Retry: failed partitions of the running pass go back to pending.  When
 * the newest pass has ended failed (or completed with rows that failed
 * alone), a new pass (a new ledger row: history
 * is never rewritten) resumes it from its checkpoints.  The running pass
 * is locked first, so a lane that is ending it (its partitions failed)
 * ends it before, or finds the partitions pending after.
 */
static bool
retry_pass(Target *t)
{
	bool		changed = false;

	check_not_retired(t->name, "be retried");
	backfill_check_database_served(t->name);
	if (t->running_id != 0 && !lock_running_pass(t))
		target_load(t->name, t, false, "backfill_retry");	/* it ended meanwhile */
	/* a retry starts lanes as run_as: the owner must still be a member */
	tenancy_check_run_as(t->name, t->owner, t->run_as);
	if (t->running_id != 0)
	{
		changed = on_running_pass(t, pass_parts_retried);
	}
	else if (t->last_id != 0 &&
			 (strcmp(t->last_status, ledger_status_text(LEDGER_FAILED)) == 0 ||
			  strcmp(t->last_status, ledger_status_text(LEDGER_COMPLETED_WITH_FAILURES)) == 0))
	{
		(void) retry_failed_pass(t);
		changed = true;
	}
	if (changed)
		backfill_wake_scheduler_at_commit();
	return changed;
}

CONTROL_ENTRY(backfill_retry, retry_pass)

/*
 * Does a ledger name of this backfill (its own, or one per scope) still
 * hold forward rows that no completed revert of it came after?
 */
static bool
has_unreverted_rows(const char *name)
{
	CatalogScope scope;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {CStringGetTextDatum(name), ledger_status_datum(LEDGER_COMPLETED)};
	bool		found;

	catalog_enter(&scope);
	found = catalog_exec("SELECT 1 FROM backfill.ledger l"
						 " WHERE l.declaration = $1 AND l.direction = 'forward'"
						 "   AND coalesce(l.rows, 0) > 0"
						 "   AND l.run_id > coalesce((SELECT pg_catalog.max(v.run_id)"
						 "         FROM backfill.ledger v WHERE v.ledger_name = l.ledger_name"
						 "          AND v.status = $2 AND v.direction = 'revert'), 0)"
						 " LIMIT 1",
						 2, types, values, NULL, SPI_OK_SELECT) > 0;
	catalog_leave(&scope);
	return found;
}

/*
 * A backfill that has written rows may be dropped once a completed revert
 * came after every forward pass that wrote some: for a scoped backfill,
 * one per scope that ran.  Else IRREVERSIBLE, whose hint says how to go
 * back: run the declared revert (per scope), or declare one.
 */
static void
check_dropped_after_revert(Target *t, int64 rows)
{
	CatalogScope scope;
	Declaration decl;
	bool		has_revert;

	if (!has_unreverted_rows(t->name))
		return;
	catalog_enter(&scope);
	has_revert = declaration_lock(t->name, &decl) && decl.revert != NULL;
	catalog_leave(&scope);
	if (has_revert && decl.scope != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_IRREVERSIBLE),
				 errmsg("backfill \"%s\" cannot be dropped: it has written " INT64_FORMAT " rows",
						t->name, rows),
				 errdetail("It is scoped, and a scope that wrote rows has no completed revert "
						   "after them."),
				 errhint("Run SELECT backfill_revert('%s', input => '...'); for each scope that "
						 "ran (backfill_pending lists them), and drop it once those reverts have "
						 "completed.", t->name)));
	if (has_revert)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_IRREVERSIBLE),
				 errmsg("backfill \"%s\" cannot be dropped: it has written " INT64_FORMAT " rows",
						t->name, rows),
				 errdetail("Its newest pass is not a completed revert, so the table still holds "
						   "what it did."),
				 errhint("Run SELECT backfill_revert('%s'); and drop it once the revert pass has "
						 "completed.", t->name)));
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_IRREVERSIBLE),
			 errmsg("backfill \"%s\" cannot be dropped: it has written " INT64_FORMAT " rows",
					t->name, rows),
			 errdetail("It declares no way back; the declaration documents what was done."),
			 errhint("Declare it again with revert => '...' (the SQL that undoes the action), "
					 "run backfill_revert('%s'), then drop it; or keep the declaration. When "
					 "nothing is left to undo (its table or column is gone), "
					 "backfill_drop('%s', abandon => true) drops it as it is.",
					 t->name, t->name)));
}

/*
 * Withdraw a declaration.  Refused while a pass runs (CONFLICT), and once
 * any pass has written rows (IRREVERSIBLE), unless its newest pass is a
 * completed revert: the declaration then explains what happened to the
 * table.  abandon => true drops it anyway, as its owner's word that
 * nothing is left to undo (its table dropped, say), with a NOTICE; a
 * retired backfill stays.  Its ledger rows stay, orphaned.
 */
Datum
backfill_drop(PG_FUNCTION_ARGS)
{
	Target		t;
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	int64		rows;
	bool		abandon = PG_NARGS() > 1 && PG_GETARG_BOOL(1);

	connect_spi();
	if (!target_load(text_to_cstring(PG_GETARG_TEXT_PP(0)), &t, true, "backfill_drop"))
	{
		ereport(NOTICE, (errmsg("backfill \"%s\" is not declared; nothing to drop", t.name)));
		SPI_finish();
		PG_RETURN_BOOL(false);
	}
	if (t.running_id != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CONFLICT),
				 errmsg("backfill \"%s\" cannot be dropped while run " INT64_FORMAT " is running",
						t.name, t.running_id),
				 errdetail("Its lanes are still at work."),
				 errhint("Call backfill_cancel('%s') first, or wait for the pass to end.", t.name)));

	values[0] = CStringGetTextDatum(t.name);
	catalog_enter(&scope);
	catalog_exec("SELECT coalesce(sum(p.rows), 0)::bigint FROM backfill.partition p"
				 " JOIN backfill.ledger l ON l.run_id = p.run_id WHERE l.declaration = $1",
				 1, types, values, NULL, SPI_OK_SELECT);
	rows = DatumGetInt64(catalog_getdatum(0, 1, &isnull));
	catalog_leave(&scope);
	if (rows > 0)
	{
		/* a retired backfill's declaration is the record of its work (never reverted) */
		check_not_retired(t.name, "be dropped: its declaration stays as the record of its work");
		if (!abandon)
			check_dropped_after_revert(&t, rows);
		else
			ereport(NOTICE,
					(errmsg("backfill \"%s\" is dropped with " INT64_FORMAT " rows written and "
							"not reverted", t.name, rows),
					 errdetail("Its ledger rows stay, shown as orphaned.")));
	}
	catalog_enter(&scope);
	catalog_exec("DELETE FROM backfill.declaration WHERE name = $1",
				 1, types, values, NULL, SPI_OK_DELETE);
	catalog_leave(&scope);
	SPI_finish();
	PG_RETURN_BOOL(true);
}

/*
 * What backfill_revert answers without a new pass: the revert running
 * now, or the completed revert that is the newest pass (a revert twice
 * would undo twice).  BF022 while a forward pass runs.  0: start one;
 * -1: the running pass ended while we waited for it, read the state again.
 */
static int64
existing_revert(Target *t)
{
	if (t->running_id != 0 && lock_running_pass(t))
	{
		if (strcmp(pass_direction(t->running_id), "revert") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_DIRECTION),
					 errmsg("backfill \"%s\" cannot be reverted while run " INT64_FORMAT
							" is running forward", t->name, t->running_id),
					 errdetail("A revert undoes what the forward passes did; one of them is "
							   "still at work."),
					 errhint("Wait for run " INT64_FORMAT " to end, or call backfill_cancel('%s'), "
							 "then revert.", t->running_id, t->name)));
		ereport(NOTICE,
				(errmsg("backfill \"%s\" is already reverting as run " INT64_FORMAT, t->name,
						t->running_id),
				 errhint("SELECT backfill_wait(" INT64_FORMAT "); waits for it to end.",
						 t->running_id)));
		return t->running_id;
	}
	if (t->running_id != 0)
		return -1;				/* it ended meanwhile: load the state again */
	if (t->last_id != 0 && strcmp(t->last_status, ledger_status_text(LEDGER_COMPLETED)) == 0 &&
		strcmp(pass_direction(t->last_id), "revert") == 0)
	{
		ereport(NOTICE,
				(errmsg("backfill \"%s\" skipped: run " INT64_FORMAT " already reverted it",
						t->name, t->last_id),
				 errhint("Run it forward again with backfill_run('%s') first.", t->name)));
		return t->last_id;
	}
	return 0;
}

/*
 * The declaration's revert, which a revert pass needs (BF021 without),
 * read into decl.
 */
static void
check_revert_declared(Target *t, Declaration *decl)
{
	CatalogScope scope;

	catalog_enter(&scope);
	(void) declaration_lock(t->name, decl);
	catalog_leave(&scope);
	if (decl->revert == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NO_REVERT),
				 errmsg("backfill \"%s\" declares no revert", t->name),
				 errdetail("A revert pass runs the declaration's revert SQL; it has none."),
				 errhint("Declare it again with revert => 'UPDATE ... WHERE id BETWEEN $1 AND $2' "
						 "(and revert_predicate => the rows still to undo), then revert.")));
}

/*
 * The history a revert undoes: the backfill's, or (scoped) the one of the
 * scope its input names, as backfill_run names it (evaluated as the owner).
 * A scoped backfill reverts one scope at a time, so the state of that
 * scope's passes takes the place of the declaration's in t.  Returns the
 * ledger name.
 */
static char *
target_scope(Target *t, const Declaration *decl, Jsonb *input)
{
	CatalogScope scope;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	char	   *ledger_name;

	if (decl->scope != NULL && input == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SCOPED),
				 errmsg("backfill \"%s\" is scoped: its revert undoes one scope at a time",
						t->name),
				 errdetail("Each scope has a history of its own; a revert pass undoes one."),
				 errhint("Call backfill_revert('%s', input => '...') with the input each scope "
						 "ran with (backfill_pending lists the scopes).", t->name)));
	ledger_name = scope_ledger_name(t->name, decl->input_shape, decl->scope, input, t->owner,
									decl->search_path);
	if (decl->scope == NULL)
		return ledger_name;

	values[0] = CStringGetTextDatum(ledger_name);
	values[1] = ledger_status_datum(LEDGER_RUNNING);
	catalog_enter(&scope);
	catalog_exec_latest("SELECT (SELECT max(l.run_id) FROM backfill.ledger l"
						"         WHERE l.ledger_name = $1 AND l.status = $2),"
						"  last.run_id, last.status, last.checksum"
						" FROM (SELECT 1) one LEFT JOIN LATERAL"
						"  (SELECT l.run_id, l.status, l.checksum FROM backfill.ledger l"
						"    WHERE l.ledger_name = $1 ORDER BY l.run_id DESC LIMIT 1) last ON true",
						2, types, values, NULL);
	t->running_id = catalog_getint64(0, 1);
	t->last_id = catalog_getint64(0, 2);
	t->last_status = catalog_gettext(0, 3);
	t->last_checksum = catalog_gettext(0, 4);
	catalog_leave(&scope);
	t->last_ledger_name = ledger_name;
	t->last_input = input;
	return ledger_name;
}

/*
 * The rows the forward passes wrote since the last completed revert (none
 * runs now), and those a revert that ended unfinished still has in its
 * history: what a revert pass may have to undo.
 */
static int64
forward_rows_to_undo(const char *ledger_name)
{
	CatalogScope scope;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {CStringGetTextDatum(ledger_name),
	ledger_status_datum(LEDGER_COMPLETED)};
	int64		rows;

	catalog_enter(&scope);
	catalog_exec_latest("SELECT coalesce(pg_catalog.sum(l.rows), 0)::pg_catalog.int8"
						"  FROM backfill.ledger l WHERE l.ledger_name = $1"
						"   AND l.direction = 'forward' AND l.run_id > coalesce("
						"     (SELECT pg_catalog.max(v.run_id) FROM backfill.ledger v"
						"       WHERE v.ledger_name = $1 AND v.status = $2"
						"         AND v.direction = 'revert'), 0)",
						2, types, values, NULL);
	rows = catalog_getint64(0, 1);
	catalog_leave(&scope);
	return rows;
}

/*
 * backfill_revert(name): a revert pass, a new ledger row of direction
 * revert, run like any pass (lanes, leases, checkpoints, pacing, the
 * convergence count of its revert_predicate) with the declared revert as
 * its action.  A revert that failed or was cancelled is resumed from its
 * checkpoints, so no row is undone twice.  Returns the run id.
 */
Datum
backfill_revert(PG_FUNCTION_ARGS)
{
	Target		t;
	Declaration decl;
	Jsonb	   *input = PG_NARGS() > 1 ? PG_GETARG_JSONB_P(1) : NULL;
	char	   *ledger_name;
	int64		run_id;

	connect_spi();
	target_load(text_to_cstring(PG_GETARG_TEXT_PP(0)), &t, false, "backfill_revert");
	check_not_retired(t.name, "be reverted");
	check_revert_declared(&t, &decl);
	ledger_name = target_scope(&t, &decl, input);
	while ((run_id = existing_revert(&t)) < 0)
	{
		target_load(t.name, &t, false, "backfill_revert");
		ledger_name = target_scope(&t, &decl, input);
	}
	if (run_id != 0)
	{
		SPI_finish();
		PG_RETURN_INT64(run_id);
	}
	if (forward_rows_to_undo(ledger_name) == 0)
	{
		ereport(NOTICE,
				(errmsg("backfill \"%s\" has nothing to revert", t.name),
				 errdetail("No forward pass has written a row since its last completed revert.")));
		SPI_finish();
		PG_RETURN_NULL();
	}
	tenancy_check_run_as(t.name, t.owner, t.run_as);
	backfill_check_database_served(t.name);
	if (t.last_id != 0 && strcmp(t.last_status, ledger_status_text(LEDGER_COMPLETED)) != 0 &&
		strcmp(pass_direction(t.last_id), "revert") == 0)
		run_id = retry_failed_pass(&t);	/* its checkpoints: no row undone twice */
	else
	{
		check_environment(t.name, t.environments, t.envlist);
		identity_check(t.name);
		check_role_can_login(t.name, t.run_as);
		run_id = enqueue_pass_as(ledger_name, t.name, t.checksum, false, t.last_id, t.owner,
								 input, "revert", false);
	}
	SPI_finish();
	PG_RETURN_INT64(run_id);
}
