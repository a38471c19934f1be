/*-------------------------------------------------------------------------
 *
 * lane.c
 *	  A lane: the dynamic background worker that runs a pass's batches.
 *
 * A lane connects as the role that declared the backfill, so the
 * predicate and the action run with that role's privileges and no more.
 * It loads the pass, plans it if it is the first lane, and then claims
 * partitions one after another, running paced batches in each until the
 * partition is exhausted.  A failed batch, or a failed step outside any
 * batch (preparing, planning, counting), is retried after a capped,
 * jittered, doubling delay; an error no retry can fix, or a batch that
 * fails max_attempts times in a row, fails the pass.  The last lane out
 * proves convergence and writes the ledger's final word (pass.c).
 *
 * A lane never restarts by itself: if it dies, its lease points at a dead
 * backend and the scheduler starts a lane that reclaims it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "backoff.h"
#include "batch.h"
#include "catalog.h"
#include "errors.h"
#include "lane.h"
#include "pacing.h"
#include "pass.h"
#include "shmem.h"
#include "tenancy.h"
#include "worker.h"
#include "xact.h"

/*
 * The pass was cancelled (shmem.c says so): a cancel of the batch in flight
 * may still be on its way, and must not hit whatever the lane does next.
 */
static bool
lane_must_stop(void)
{
	if (!backfill_lane_stop_requested())
		return false;
	pqsignal(SIGINT, SIG_IGN);
	QueryCancelPending = false;
	return true;
}

/* Errors that no retry fixes: the pass fails at once. */
static bool
error_is_final(int sqlerrcode)
{
	switch (sqlerrcode)
	{
		case ERRCODE_UNDEFINED_TABLE:
		case ERRCODE_UNDEFINED_COLUMN:
		case ERRCODE_UNDEFINED_FUNCTION:
		case ERRCODE_UNDEFINED_OBJECT:
		case ERRCODE_INSUFFICIENT_PRIVILEGE:
		case ERRCODE_SYNTAX_ERROR:
		case ERRCODE_FEATURE_NOT_SUPPORTED:
		case ERRCODE_WRONG_OBJECT_TYPE:
		case ERRCODE_BACKFILL_CHANGED:
		case ERRCODE_BACKFILL_SOURCE_INVALID:
		case ERRCODE_BACKFILL_OPTION_INVALID:
			return true;
		default:
			return false;
	}
}

/*
 * Wait out a retry's delay.  Woken early, a cancelled pass stops (false);
 * anything else waits on.
 */
static bool
lane_wait_to_retry(int64 delay_ms)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay_ms);

	while (backoff_sleep_until(until))
		if (lane_must_stop())
			return false;
	return true;
}

/*
 * A batch failed and its transaction is rolled back.  Returns what the
 * lane does next: RETRY the batch after the backoff, NEXT partition (this
 * one failed for good), or STOP (the pass failed, or the lease is gone).
 */
typedef enum FailureAction
{
	FAILURE_RETRY,
	FAILURE_NEXT,
	FAILURE_STOP
} FailureAction;

static FailureAction
batch_failed(Pass *pass, Claim *claim, ErrorData *edata, int failures)
{
	CatalogScope scope;
	Oid			types[3] = {INT8OID, INT4OID, TEXTOID};
	Datum		values[3];
	int64		delay_ms;

	/* lost lease (cancelled, or taken over): nothing of ours to record */
	if (edata->sqlerrcode == ERRCODE_BACKFILL_CONFLICT)
	{
		ereport(LOG, (errmsg("%s", edata->message)));
		return FAILURE_STOP;
	}

	/* no retry fixes it: end the lane at once and fail the pass */
	if (error_is_final(edata->sqlerrcode))
	{
		pass_fail(pass, claim->part_no, edata->sqlerrcode, edata->message);
		return FAILURE_STOP;
	}

	if (failures >= pass->max_attempts)
	{
		pass_fail_partition(pass, claim,
							psprintf("a batch failed %d times in a row: SQLSTATE %s: %s",
									 failures, unpack_sql_state(edata->sqlerrcode),
									 edata->message));
		return FAILURE_NEXT;
	}

	values[0] = Int64GetDatum(pass->run_id);
	values[1] = Int32GetDatum(claim->part_no);
	values[2] = CStringGetTextDatum(edata->message);
	worker_begin_xact("pg_backfill lane: recording a failed batch");
	catalog_enter(&scope);
	catalog_exec("UPDATE backfill.partition SET failures = failures + 1, last_error = $3"
				 " WHERE run_id = $1 AND part_no = $2",
				 3, types, values, NULL, SPI_OK_UPDATE);
	catalog_leave(&scope);
	worker_commit_xact();

	/* capped doubling delay with jitter: half to all of it */
	delay_ms = backoff_jittered_ms(failures - 1, pass->backoff_base_ms, pass->backoff_cap_ms);

	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": batch failed (attempt %d of %d), "
					"retrying in " INT64_FORMAT " ms",
					pass->name, pass->run_id, failures, pass->max_attempts, delay_ms),
			 errdetail("SQLSTATE %s: %s", unpack_sql_state(edata->sqlerrcode),
					   edata->message)));
	return lane_wait_to_retry(delay_ms) ? FAILURE_RETRY : FAILURE_STOP;
}

/* A paused pass: give the partition back at its checkpoint; the lane ends. */
static bool
leave_paused(Pass *pass, Claim *claim)
{
	pass_release(pass, claim);
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT " paused: lane leaves partition %d "
					"at its checkpoint", pass->name, pass->run_id, claim->part_no)));
	return false;
}

/*
 * Run batches on a claimed partition until it is exhausted (true) or the
 * lane must stop (false).
 */
static bool
work_partition(Pass *pass, Claim *claim, MemoryContext scratch)
{
	int			failures = 0;

	for (;;)
	{
		TimestampTz started = GetCurrentTimestamp();
		volatile BatchOutcome outcome = BATCH_DONE;
		volatile bool failed = false;
		bool		stopping;

		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(scratch);
		MemoryContextSwitchTo(scratch);

		if (lane_must_stop())
			return false;
		/* another role's pass waits for a lane: give this one up */
		if (backfill_lane_yield_requested())
		{
			pass_release(pass, claim);
			ereport(LOG,
					(errmsg("backfill \"%s\" run " INT64_FORMAT ": lane leaves partition %d at "
							"its checkpoint for another role's pass", pass->name, pass->run_id,
							claim->part_no),
					 errdetail("backfill.max_workers lanes are shared fairly between roles.")));
			return false;
		}

		/* backfill_cancel cancels a batch only while this says so (shmem.c) */
		backfill_lane_set_in_batch(true);
		PG_TRY();
		{
			outcome = batch_run(pass, claim);
		}
		PG_CATCH();
		{
			failed = true;
		}
		PG_END_TRY();
		backfill_lane_set_in_batch(false);
		/* cancelled: before anything that could take the cancel's signal */
		stopping = lane_must_stop();

		if (failed)
		{
			ErrorData  *edata;
			FailureAction next;

			disable_timeout(STATEMENT_TIMEOUT, false);
			edata = worker_abort_xact(pass->cxt);
			MemoryContextSwitchTo(scratch);
			/* cancelled: the batch rolled back, nothing of it is recorded */
			if (stopping)
			{
				ereport(LOG,
						(errmsg("backfill \"%s\" run " INT64_FORMAT " was cancelled: the batch in "
								"flight on partition %d rolled back",
								pass->name, pass->run_id, claim->part_no)));
				FreeErrorData(edata);
				return false;
			}
			failures++;
			if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED)
				pacing_after_timeout(pass, claim);
			next = batch_failed(pass, claim, edata, failures);
			FreeErrorData(edata);
			if (next == FAILURE_STOP)
				return false;
			if (next == FAILURE_NEXT)
				return true;
			continue;
		}

		failures = 0;
		if (outcome == BATCH_STOP || stopping)
			return false;
		if (outcome == BATCH_PAUSED)
			return leave_paused(pass, claim);
		if (outcome == BATCH_PARTITION_DONE)
			return true;

		outcome = pacing_after_batch(pass, claim, started);
		if (outcome == BATCH_STOP)
			return false;
		if (outcome == BATCH_PAUSED)
			return leave_paused(pass, claim);
	}
}

static void
lane_prepare_and_plan(Pass *pass)
{
	/* the tenant settings hold for every statement of the lane's role */
	tenancy_apply_settings(pass->name, pass->settings, pass->input);
	batch_prepare(pass);
	pass_plan(pass);
}

/*
 * One attempt at a step of the pass outside any batch.  Returns NULL when
 * it succeeded, else the error (in the pass's memory), its transaction
 * rolled back.
 */
static ErrorData *
try_step(Pass *pass, void (*step) (Pass *))
{
	MemoryContext cxt = CurrentMemoryContext;
	ErrorData  *volatile edata = NULL;

	PG_TRY();
	{
		step(pass);
	}
	PG_CATCH();
	{
		edata = worker_abort_xact(pass->cxt);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	return edata;
}

/*
 * Run a step of the pass outside any batch (preparing and planning it,
 * counting the rows left).  An error there that a retry may fix (a lock
 * timeout, a cancelled statement, a serialization failure or deadlock...)
 * is retried after the same capped, jittered, doubling delay as a batch,
 * up to max_attempts times in a row; an error no retry fixes, or the last
 * attempt's, fails the pass with its SQLSTATE (returns false) instead of
 * killing the lane, which the scheduler would only start again.
 */
static bool
run_or_fail(Pass *pass, void (*step) (Pass *), const char *what)
{
	for (int failures = 1;; failures++)
	{
		ErrorData  *edata = try_step(pass, step);
		int64		delay_ms;

		if (edata == NULL)
			return true;
		if (error_is_final(edata->sqlerrcode))
		{
			pass_fail(pass, -1, edata->sqlerrcode, edata->message);
			return false;
		}
		if (failures >= pass->max_attempts)
		{
			pass_fail(pass, -1, edata->sqlerrcode,
					  psprintf("%s failed %d times in a row: %s", what, failures,
							   edata->message));
			return false;
		}
		delay_ms = backoff_jittered_ms(failures - 1, pass->backoff_base_ms, pass->backoff_cap_ms);
		ereport(LOG,
				(errmsg("backfill \"%s\" run " INT64_FORMAT ": %s failed (attempt %d of %d), "
						"retrying in " INT64_FORMAT " ms",
						pass->name, pass->run_id, what, failures, pass->max_attempts, delay_ms),
				 errdetail("SQLSTATE %s: %s", unpack_sql_state(edata->sqlerrcode),
						   edata->message)));
		FreeErrorData(edata);
		if (!lane_wait_to_retry(delay_ms))
			return false;
	}
}

void
backfill_lane_main(Datum main_arg)
{
	LaneArgs	args;
	Pass		pass;
	Claim		claim;
	MemoryContext lane_cxt;
	MemoryContext scratch;
	bool		role_read_only;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(LaneArgs));

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* the entry its scheduler reserved: every scheduler counts it */
	if (!backfill_lane_attach(args.lane_index, args.lane_token))
	{
		ereport(LOG,
				(errmsg("pg_backfill lane for run " INT64_FORMAT " found its lane table entry "
						"taken; it exits", args.run_id)));
		proc_exit(0);
	}

	/* as the declaring role: never more privilege than it has */
	BackgroundWorkerInitializeConnectionByOid(args.dboid, args.roleoid, 0);
	SetConfigOption("application_name", "pg_backfill lane", PGC_USERSET, PGC_S_OVERRIDE);
	/*
	 * No JIT: a batch's statements are too small for it, and compiling the
	 * convergence count of a big table would keep megabytes in the lane
	 * (a declaration's settings may still turn it on).
	 */
	SetConfigOption("jit", "off", PGC_USERSET, PGC_S_SESSION);
	/*
	 * A role whose sessions are read-only can do no batch.  The lane's own
	 * bookkeeping must still write, to record why the pass ends.
	 */
	role_read_only = DefaultXactReadOnly;
	if (role_read_only)
		SetConfigOption("default_transaction_read_only", "off", PGC_USERSET, PGC_S_OVERRIDE);
	pgstat_report_appname("pg_backfill lane");

	lane_cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill lane",
									 ALLOCSET_DEFAULT_SIZES);
	scratch = AllocSetContextCreate(lane_cxt, "pg_backfill batch",
									ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(scratch);

	if (!pass_load(&pass, args.run_id, lane_cxt))
		proc_exit(0);
	if (role_read_only)
	{
		char	   *message;

		/* the role's name is read in a transaction; the message outlives it */
		worker_begin_xact("naming the read-only role");
		message = MemoryContextStrdup(lane_cxt,
									  psprintf("backfill \"%s\" cannot write as role \"%s\": its "
											   "sessions are read-only "
											   "(default_transaction_read_only is on)",
											   pass.name, GetUserNameFromId(GetUserId(), false)));
		worker_commit_xact();
		pass_fail(&pass, -1, ERRCODE_BACKFILL_PRIVILEGE, message);
		proc_exit(0);
	}

	/* errors outside a batch (preparing, planning, counting): retried, or fail the pass */
	if (!run_or_fail(&pass, lane_prepare_and_plan, "preparing the pass"))
		proc_exit(0);

	while (pass_claim(&pass, &claim))
	{
		pacing_start(&pass, &claim);
		if (!work_partition(&pass, &claim, scratch))
			proc_exit(0);
	}
	(void) run_or_fail(&pass, pass_finish, "ending the pass");
	proc_exit(0);
}
