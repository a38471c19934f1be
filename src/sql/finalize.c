/*-------------------------------------------------------------------------
 *
 * finalize.c
 *	  CALL backfill_finalize(name, timeout): return once the backfill is
 *	  complete with its current definition and a count after its pass finds
 *	  no row left; the lanes work the pass, or a session of the lanes' own
 *	  role works it itself when no lane does.
 *
 * What a schema migration calls before it drops the old column.  The
 * newest pass of the backfill decides:
 *	  completed, with the declaration's checksum     a table backfill: counts the
 *	                                                 rows its predicate matches now
 *	                                                 (a probe worker as run_as, or
 *	                                                 this session if it is run_as's
 *	                                                 own; recorded, kind finalize):
 *	                                                 none: returns; some (drift since
 *	                                                 the pass): a catch-up pass, as
 *	                                                 the watch's, then as below
 *	  retired (backfill_retire)                      returns at once
 *	  running, with a live lane                      waits (lanes work it)
 *	  running, no live lane for 2 s (no worker       the lanes' role's own session:
 *	    slot free, lanes not started yet)            works it here, beside any lane
 *	                                                 that starts meanwhile; any other
 *	                                                 session waits for the lanes, or
 *	                                                 raises BF038 when the scheduler
 *	                                                 finds no worker slot for one
 *	  never run, or completed with another checksum  backfill_run (forced when
 *	                                                 changed), then as above
 *	  failed, cancelled, completed_with_failures     raises its SQLSTATE
 *	  a revert (running or ended)                    BF008: it undoes the backfill
 * and when the pass ends, completed returns, anything else raises its code.
 * The timeout passing first is BF019; the pass goes on.
 *
 * The declarer's SQL never runs in another role's session: a superuser's
 * or a member's session holds cursors, prepared statements, temporary
 * objects, advisory locks and LISTEN channels that SQL could reach, rolled
 * back or not (asrole_own_session).  Such a caller only waits.
 *
 * Working the pass here reuses the lane's engine (work.c, batch.c,
 * pass.c): the same leases (this backend's pid and start time), batches
 * committed one by one with their checkpoints, pacing and the convergence
 * count.  Each transaction of work runs as the role a lane logs in as,
 * under SECURITY_RESTRICTED_OPERATION with the declaration's search_path
 * (xact.c), with none of the session's settings.  A backfill with settings
 * or a scope is left to its lanes (their settings hold for a whole
 * session).  Killed mid-way, this backend leaves leases held by a dead
 * backend, which a lane reclaims and resumes from the checkpoints.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "asrole.h"
#include "catalog.h"
#include "declaration.h"
#include "drift.h"
#include "drive.h"
#include "newest.h"
#include "errors.h"
#include "pacing.h"
#include "claim.h"
#include "pass.h"
#include "passend.h"
#include "plan.h"
#include "probe.h"
#include "shards.h"
#include "shmem.h"
#include "tenancy.h"
#include "work.h"
#include "xact.h"

PG_FUNCTION_INFO_V1(backfill_finalize);

/* how long a running pass may go without a live lane before this session works it */
#define FINALIZE_JOIN_AFTER_MS	2000
#define FINALIZE_POLL_MS		200

/* the backfill and its newest pass, as finalize reads them */
typedef struct Final
{
	char	   *name;
	Oid			owner;
	Oid			run_as;
	char	   *checksum;
	char	   *search_path;
	bool		scoped;
	bool		has_settings;
	int64		run_id;			/* 0: never run */
	char	   *status;
	char	   *run_checksum;
	char	   *error_code;
	char	   *error_message;
	int64		rows;
	int			catch_ups;		/* catch-up passes this call enqueued */
	int64		live;			/* partitions held by a live backend */
	char	   *unmet;			/* what it requires that is not done, or NULL */
	bool		revert;			/* the newest pass is a revert */
	bool		plain;			/* a table backfill, not scoped: its predicate is counted */
	bool		retired;		/* backfill_retire ended its life: complete for good */
	bool		worked;			/* this call has said that it works the pass */
	bool		waited;			/* this call has said that it waits for the lanes */
} Final;

#define FINAL_SQL \
	"SELECT d.owner, d.run_as, d.checksum, d.search_path," \
	"  d.input_shape IS NOT NULL AS scoped, d.settings IS NOT NULL AS has_settings," \
	"  l.run_id, l.status, l.checksum AS run_checksum, l.error_code, l.error_message," \
	"  CASE WHEN l.status = 'running' OR l.rows IS NULL" \
	"       THEN coalesce((SELECT pg_catalog.sum(p.rows) FROM backfill.partition p" \
	"                       WHERE p.run_id = l.run_id), 0)" \
	"       ELSE l.rows END::pg_catalog.int8 AS rows," \
	"  (SELECT pg_catalog.count(*) FROM backfill.partition p" \
	"    WHERE p.run_id = l.run_id AND p.state = 'running'" \
	"      AND backfill.lease_live(p.holder_pid, p.holder_start))" \
	"    AS live," \
	"  backfill.unmet_requirement(d.name) AS unmet, l.direction = 'revert' AS revert," \
	"  d.relid IS NOT NULL AND d.scope IS NULL AS plain, (%s) AS retired" \
	" FROM backfill.declaration d" \
	" LEFT JOIN LATERAL (SELECT * FROM backfill.ledger l WHERE l.ledger_name = d.name" \
	"                     ORDER BY l.run_id DESC LIMIT 1) l ON true" \
	" WHERE d.name = $1"

/* FINAL_SQL's columns, by name, and the fields they fill */
static const CatalogColumn final_columns[] = {
	CATALOG_FIELD(Final, owner, CATALOG_OID),
	CATALOG_FIELD(Final, run_as, CATALOG_OID),
	CATALOG_FIELD(Final, checksum, CATALOG_TEXT),
	CATALOG_FIELD(Final, search_path, CATALOG_TEXT),
	CATALOG_FIELD(Final, scoped, CATALOG_BOOL),
	CATALOG_FIELD(Final, has_settings, CATALOG_BOOL),
	CATALOG_FIELD(Final, run_id, CATALOG_INT64),
	CATALOG_FIELD(Final, status, CATALOG_TEXT),
	CATALOG_FIELD(Final, run_checksum, CATALOG_TEXT),
	CATALOG_FIELD(Final, error_code, CATALOG_TEXT),
	CATALOG_FIELD(Final, error_message, CATALOG_TEXT),
	CATALOG_FIELD(Final, rows, CATALOG_INT64),
	CATALOG_FIELD(Final, live, CATALOG_INT64),
	CATALOG_FIELD(Final, unmet, CATALOG_TEXT),
	CATALOG_FIELD(Final, revert, CATALOG_BOOL),
	CATALOG_FIELD(Final, plain, CATALOG_BOOL),
	CATALOG_FIELD(Final, retired, CATALOG_BOOL),
};

/* Read the backfill and its newest pass (copied into the current context). */
static void
final_read(Final *f)
{
	pgstat_clear_snapshot();
	newest_read(psprintf(FINAL_SQL, retired_sql("d")), f->name, final_columns,
				lengthof(final_columns), f);
	f->revert = f->run_id != 0 && f->revert;
}

/*
 * What to do about a pass that ended stalled (BF006), true for its case:
 * an action that left the probe key matching is to be fixed; a guarded
 * one is swept again by backfill_retry; an unguarded one is run again.
 */
static char *
stalled_hint(const Final *f)
{
	CatalogScope scope;
	bool		sweeps;

	if (f->error_message != NULL && strstr(f->error_message, "(the action does not fix it)"))
		return psprintf("The action does not fix the rows it is given: fix it, declare the "
						"backfill again, run it with backfill_run('%s', force => true), then "
						"finalize again.", f->name);
	catalog_enter(&scope);
	sweeps = declaration_sweeps(f->name);
	catalog_leave(&scope);
	if (sweeps)
		return psprintf("Its pass could not sweep again (rows it recorded as failed alone, a "
						"Citus table's shards), or it ended stalled before this version, which "
						"completes a pass whose sweeps no longer reduce the rows left and "
						"records them as drift: backfill_retry('%s') starts a pass that sweeps "
						"the table again, then finalize again.", f->name);
	return psprintf("Its pass does not sweep again (an action not guarded, a pages source): "
					"once the writers stop, backfill_run('%s', force => true) (or "
					"backfill_retry('%s') for a pages source), then finalize again.",
					f->name, f->name);
}

/* The pass ended otherwise than completed: its SQLSTATE, to the caller. */
static void
raise_pass_end(const Final *f)
{
	const char *code = ended_code(f->status, f->error_code);
	const char *detail = "The pass ended without a message.";
	char	   *hint;

	/* backfill_retry takes up a failed pass only; a cancelled one is run again */
	if (strcmp(f->status, "cancelled") == 0)
	{
		detail = "The pass was cancelled.";
		hint = psprintf("Run it again with backfill_run('%s', force => true), then finalize "
						"again.", f->name);
	}
	else if (strcmp(code, "BF006") == 0)
	{
		detail = "It stalled.";
		hint = stalled_hint(f);
	}
	else
		hint = psprintf("Fix the cause and call backfill_retry('%s') (backfill_failed_rows('%s') "
						"lists rows that failed alone), then finalize again.", f->name, f->name);
	ereport(ERROR,
			(errcode(MAKE_SQLSTATE(code[0], code[1], code[2], code[3], code[4])),
			 errmsg("backfill \"%s\" is not complete: run " INT64_FORMAT " ended %s",
					f->name, f->run_id, f->status),
			 errdetail("%s", f->error_message ? f->error_message : detail),
			 errhint("%s", hint)));
}

static void
raise_timeout(const Final *f, const char *timeout_text)
{
	const char *status = f->status ? f->status : "queued";

	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_FINALIZE_TIMEOUT),
			 errmsg("backfill \"%s\" was not complete within %s", f->name, timeout_text),
			 f->catch_ups > 0 ?
			 errdetail("%d catch-up passes found rows matching its predicate again; run "
					   INT64_FORMAT " is %s with " INT64_FORMAT " rows done; it goes on.",
					   f->catch_ups, f->run_id, status, f->rows) :
			 errdetail("Run " INT64_FORMAT " is %s with " INT64_FORMAT " rows done; it goes on.",
					   f->run_id, status, f->rows),
			 f->catch_ups > 0 ?
			 errhint("Code that still writes rows the old way keeps them coming: deploy the "
					 "code that writes the new way first, then call backfill_finalize('%s') "
					 "again.", f->name) :
			 errhint("Call backfill_finalize('%s') again, or with a longer timeout.", f->name)));
}

/* Start a pass as the caller would (backfill_run: its checks, its NOTICEs), and commit it. */
static void
final_enqueue(const Final *f, bool force)
{
	Oid			types[2] = {TEXTOID, BOOLOID};
	Datum		values[2] = {CStringGetTextDatum(f->name), BoolGetDatum(force)};
	char	   *schema;

	catalog_exec("SELECT n.nspname FROM pg_catalog.pg_extension e"
				 " JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace"
				 " WHERE e.extname = 'pg_backfill'", 0, NULL, NULL, NULL, SPI_OK_SELECT);
	schema = catalog_gettext(0, 1);

	/* wait => false: a backfill whose requirement is not met is refused (BF005) */
	if (SPI_execute_with_args(psprintf("SELECT %s.backfill_run($1, $2, NULL, false)",
									   quote_identifier(schema)),
							  2, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not start a pass of backfill \"%s\"", f->name);
	SPI_commit();
}

/*
 * After an error in the session's work: the declarer's transaction aborted
 * and every lease the session holds given back, its session mode ended
 * whatever happens; returns the error.  A function of its own: a PG_TRY
 * inside the caller's PG_CATCH would shadow the caller's, which PostgreSQL
 * 16 and later build with -Wshadow=compatible-local (an error there).
 */
static ErrorData *
abandon_session_work(Final *f, MemoryContext old)
{
	ErrorData  *volatile edata = NULL;

	PG_TRY();
	{
		edata = worker_session_abort(old);
		pass_release_held(f->run_id);
	}
	PG_FINALLY();
	{
		worker_session_end();
	}
	PG_END_TRY();
	return edata;
}

/*
 * Work run run_id here: claim partitions and run their batches until none
 * is left to claim, then end the pass if no other holder still works one;
 * stop at the deadline (the partition given back at its checkpoint).  An
 * error that ends the work (a cancel, the caller's statement_timeout,
 * BF032) gives back every lease this session holds before it is raised:
 * the session lives on, and a lane takes the pass up from its checkpoints.
 */
static void
work_in_session(Final *f, TimestampTz deadline)
{
	MemoryContext old = CurrentMemoryContext;
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill finalize",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext scratch = AllocSetContextCreate(cxt, "pg_backfill finalize batch",
												  ALLOCSET_DEFAULT_SIZES);
	Pass		pass;

	/* once per call, however often it takes the pass up again (after a pause, say) */
	if (!f->worked)
		ereport(NOTICE,
				(errmsg("backfill \"%s\": this session works run " INT64_FORMAT " itself",
						f->name, f->run_id),
				 errdetail("No lane holds any of its partitions.")));
	f->worked = true;
	MemoryContextSwitchTo(scratch);
	worker_session_begin(f->run_as, f->search_path, f->name);
	work_set_deadline(deadline);
	PG_TRY();
	{
		if (pass_load(&pass, f->run_id, cxt))
			(void) drive_pass(&pass, DRIVE_SESSION, scratch);
		/* no connection to a Citus node outlives the call (shards.c) */
		shards_disconnect();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		work_set_deadline(0);
		HOLD_INTERRUPTS();
		shards_disconnect();
		edata = abandon_session_work(f, old);
		RESUME_INTERRUPTS();
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
		ReThrowError(edata);
	}
	PG_END_TRY();
	work_set_deadline(0);
	worker_session_end();
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
}

/*
 * May this session work the pass itself?  Only when it is a session of the
 * role its lanes log in as: logged in as that role, and still it (no SET
 * SESSION AUTHORIZATION).  Any other session (a superuser's, a member's,
 * one inside a SECURITY DEFINER function of the declarer's) holds what the
 * declarer's SQL must not reach: its cursors, prepared statements, temporary
 * objects, advisory locks, LISTEN channels.  Such a caller only waits for the
 * lanes, which run that SQL in sessions of their own.
 */
static bool
session_is_lanes(const Final *f)
{
	return asrole_own_session(f->run_as);
}

/*
 * No live lane holds a partition of the pass, and this session may not work
 * it: wait for the scheduler's lanes, unless it has found no worker slot to
 * start one in (BF038).
 */
static void
wait_for_lanes(Final *f)
{
	TimestampTz no_slot = backfill_shmem_no_worker_slot_since(MyDatabaseId);
	const char *role = GetUserNameFromId(f->run_as, true);

	if (no_slot != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NO_WORKER),
				 errmsg("backfill \"%s\" cannot be finalized: no background worker slot is free "
						"for its lanes", f->name),
				 errdetail("Run " INT64_FORMAT " has no live lane, and the scheduler has found no "
						   "free worker slot since %s.  This session does not work the pass itself: "
						   "its SQL runs as role %s, and only in that role's own sessions.",
						   f->run_id, timestamptz_to_str(no_slot), role ? role : "(dropped)"),
				 errhint("Raise max_worker_processes (a restart is needed), or stop other background "
						 "workers, then call backfill_finalize('%s') again; or call it in a session "
						 "logged in as role %s, which works the pass itself.", f->name,
						 role ? quote_identifier(role) : "(dropped)")));
	if (!f->waited)
		ereport(NOTICE,
				(errmsg("backfill \"%s\": this session waits for the lanes of run " INT64_FORMAT,
						f->name, f->run_id),
				 errdetail("No lane holds any of its partitions yet; its SQL runs as role %s, in "
						   "the lanes' sessions, never in this one.", role ? role : "(dropped)")));
	f->waited = true;
}

/*
 * The count in a probe worker logged in as run_as (this session is not
 * run_as's own: the predicate does not run here), waited for at most
 * until the deadline; BF038 when no worker slot is free.
 */
static int64
final_probe(Final *f, TimestampTz deadline)
{
	DriftTarget target;
	BackgroundWorkerHandle *handle;
	TimestampTz since = GetCurrentTimestamp();

	target.name = f->name;
	target.run_as = f->run_as;
	check_role_can_login(f->name, f->run_as);
	handle = probe_start(DRIFT_FINALIZE, &target, 0, CurrentMemoryContext);
	if (handle == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NO_WORKER),
				 errmsg("backfill \"%s\" cannot be finalized: no background worker slot is free "
						"to count what its predicate matches", f->name),
				 errdetail("Run " INT64_FORMAT " completed; finalize counts the rows its predicate "
						   "matches now in a probe worker logged in as its role, never in this "
						   "session.", f->run_id),
				 errhint("Call backfill_finalize('%s') again later, or in a session logged in as "
						 "the backfill's role, which counts itself.", f->name)));
	SPI_commit();				/* hold no snapshot while the worker counts */
	return probe_wait_answer(f->name, handle, since, deadline);
}

/*
 * The newest pass completed: count the rows its predicate matches now (at
 * most 1,000; drift.c), in this session when it is the lanes' role's own
 * and the backfill has no settings, else in a probe worker; either records
 * the count in backfill.probe (kind finalize).  None: complete, true.
 * Some (rows inserted or changed since the pass so that they match
 * again): a catch-up pass, enqueued as the watch enqueues one (ledger:
 * forced, watch, after the completed pass), committed, and worked like
 * any pass; false.  A pages source's pass ended on its own count: true.
 */
static bool
final_count(Final *f, TimestampTz deadline, TimestampTz *no_lane_since)
{
	int64		found;
	int64		last = f->run_id;
	int64		run_id;

	if (!f->plain)
		return true;
	/* a backfill with settings is counted under them: in a probe worker */
	found = session_is_lanes(f) && !f->has_settings ?
		drift_probe_here(f->name) : final_probe(f, deadline);
	if (found == 0)
		return true;
	run_id = drift_catch_up(f->name, last);
	if (run_id == 0)
		return false;			/* another pass came first: read it at the next look */
	f->catch_ups++;
	ereport(NOTICE,
			(errmsg("backfill \"%s\": %s" INT64_FORMAT " rows match its predicate again since "
					"run " INT64_FORMAT " completed; catch-up pass run " INT64_FORMAT, f->name,
					found >= 1000 ? "at least " : "", found, last, run_id),
			 errdetail("Finalize returns once a count after a completed pass finds no row.")));
	SPI_commit();
	final_read(f);
	*no_lane_since = 0;
	if (!f->has_settings && f->status != NULL && strcmp(f->status, "running") == 0 &&
		session_is_lanes(f))
		work_in_session(f, deadline);
	return false;
}

/* Refuse a call that cannot commit: finalize commits every batch. */
static void
check_call_context(FunctionCallInfo fcinfo, const char *name)
{
	if (fcinfo->context != NULL && IsA(fcinfo->context, CallContext) &&
		!castNode(CallContext, fcinfo->context)->atomic)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_WAIT_INVALID),
			 errmsg("backfill_finalize of \"%s\" must be called with CALL outside a transaction "
					"block", name),
			 errdetail("It commits each batch it runs, and waits for the pass to end."),
			 errhint("Run CALL backfill_finalize('%s') as a statement of its own.", name)));
}

/* One look at the pass: true when it is complete and finalize returns. */
static bool
final_step(Final *f, TimestampTz deadline, TimestampTz *no_lane_since)
{
	final_read(f);
	check_backfill_member(f->name, f->owner);
	if (f->retired)
	{
		ereport(NOTICE,
				(errmsg("backfill \"%s\" is retired: its work is done for good", f->name),
				 errdetail("backfill_retire ended its life; nothing of it runs any more.")));
		return true;
	}
	if (f->revert)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CONFLICT),
				 errmsg("backfill \"%s\" is not complete: its newest pass, run " INT64_FORMAT
						", is a revert (%s)", f->name, f->run_id, f->status),
				 errdetail("Finalize waits for the forward pass; a revert undoes it."),
				 errhint("Run it forward again with backfill_run('%s', force => true), then "
						 "finalize.", f->name)));
	if (f->run_id != 0 && strcmp(f->status, "completed") == 0 &&
		strcmp(f->run_checksum, f->checksum) == 0)
		return final_count(f, deadline, no_lane_since);
	if (f->run_id != 0 && strcmp(f->status, "running") != 0 &&
		strcmp(f->status, "completed") != 0 && strcmp(f->run_checksum, f->checksum) == 0)
		raise_pass_end(f);
	if (f->unmet != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_REQUIRES),
				 errmsg("backfill \"%s\" is blocked: %s", f->name, f->unmet),
				 errdetail("Its pass may run only once what it requires is done."),
				 errhint("Apply the migration or complete the required backfill first.")));
	if (f->scoped)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("backfill \"%s\" is scoped: finalize it by its runs", f->name),
				 errdetail("Each scope keeps a history of its own."),
				 errhint("Wait for each scope's run with backfill_wait(run_id).")));
	if (f->run_id == 0 || strcmp(f->status, "running") != 0)
	{
		/* never run, or its last pass had another definition */
		final_enqueue(f, f->run_id != 0 && strcmp(f->status, "completed") == 0);
		final_read(f);
		*no_lane_since = 0;
		if (!f->has_settings && strcmp(f->status, "running") == 0 && session_is_lanes(f))
			work_in_session(f, deadline);
		return false;
	}
	if (f->live > 0 || f->has_settings)
		*no_lane_since = 0;
	else if (*no_lane_since == 0)
		*no_lane_since = GetCurrentTimestamp();
	else if (TimestampDifferenceExceeds(*no_lane_since, GetCurrentTimestamp(),
										FINALIZE_JOIN_AFTER_MS))
	{
		if (session_is_lanes(f))
			work_in_session(f, deadline);
		else
			wait_for_lanes(f);
		*no_lane_since = 0;
	}
	return false;
}

/* The timeout argument in milliseconds (NULL refused), and as text for the messages. */
static int64
final_timeout(FunctionCallInfo fcinfo, char **timeout_text)
{
	Interval   *timeout;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("timeout to finalize backfill \"%s\" must not be null",
						text_to_cstring(PG_GETARG_TEXT_PP(0))),
				 errdetail("Finalize waits at most its timeout for the pass to end."),
				 errhint("Pass an interval such as '10 minutes', or leave the timeout out for "
						 "its default of one hour.")));
	timeout = PG_GETARG_INTERVAL_P(1);
	*timeout_text = DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(timeout)));
	return (timeout->time + (int64) timeout->day * USECS_PER_DAY +
			(int64) timeout->month * DAYS_PER_MONTH * USECS_PER_DAY) / 1000;
}

Datum
backfill_finalize(PG_FUNCTION_ARGS)
{
	Final		f;
	char	   *timeout_text;
	int64		timeout_ms;
	TimestampTz deadline;
	TimestampTz no_lane_since = 0;
	MemoryContext cxt;

	/* CALLED ON NULL INPUT (a procedure cannot be STRICT): refuse a NULL first */
	if (PG_ARGISNULL(0))
		check_backfill_name(NULL);
	timeout_ms = final_timeout(fcinfo, &timeout_text);
	cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill finalize call",
								ALLOCSET_DEFAULT_SIZES);

	memset(&f, 0, sizeof(f));
	f.name = MemoryContextStrdup(cxt, text_to_cstring(PG_GETARG_TEXT_PP(0)));
	check_backfill_name(f.name);
	check_not_standby("finalize backfill", f.name);
	check_call_context(fcinfo, f.name);
	if (timeout_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("timeout to finalize backfill \"%s\" must not be negative", f.name),
				 errhint("Pass an interval such as '10 minutes'.")));
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PG_TRY();
	{
		MemoryContext look = AllocSetContextCreate(cxt, "pg_backfill finalize look",
												   ALLOCSET_DEFAULT_SIZES);

		for (;;)
		{
			MemoryContext old;
			bool		done;

			MemoryContextReset(look);
			old = MemoryContextSwitchTo(look);
			done = final_step(&f, deadline, &no_lane_since);
			MemoryContextSwitchTo(old);
			if (done)
			{
				ereport(NOTICE,
						(errmsg("backfill \"%s\" is complete: run " INT64_FORMAT,
								f.name, f.run_id)));
				break;
			}
			if (GetCurrentTimestamp() >= deadline)
			{
				/* what the pass has done now, this session's batches included */
				MemoryContextSwitchTo(look);
				final_read(&f);
				raise_timeout(&f, timeout_text);
			}
			SPI_commit();		/* hold no snapshot while waiting */
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 FINALIZE_POLL_MS, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_FINALLY();
	{
		MemoryContextDelete(cxt);
	}
	PG_END_TRY();
	SPI_finish();
	PG_RETURN_VOID();
}
