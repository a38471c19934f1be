/*-------------------------------------------------------------------------
 *
 * work.c
 *	  Working on a claimed partition: batch after batch until it is
 *	  exhausted, a failed batch retried with backoff or, when a row is at
 *	  fault, halved until the row is isolated (poison.c); and a step of the
 *	  pass outside any batch, retried the same way.
 *
 * What a lane does per partition, in a form any process that holds a
 * lease can call: the engine never calls back into the process that runs
 * it.  An error no retry fixes, or a batch that fails max_attempts times
 * in a row, fails the pass (or the partition).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "backoff.h"
#include "batch.h"
#include "catalog.h"
#include "citus.h"
#include "errors.h"
#include "kind.h"
#include "pacing.h"
#include "claim.h"
#include "pass.h"
#include "poison.h"
#include "shmem.h"
#include "state.h"
#include "work.h"
#include "xact.h"

/* the lane leaves when asked to: a cancel's signal still on its way is ignored */
static bool
leaving_if(bool asked)
{
	if (!asked)
		return false;
	pqsignal(SIGINT, SIG_IGN);
	QueryCancelPending = false;
	return true;
}

/*
 * The pass was cancelled (shmem.c says so): a cancel of the batch in flight
 * may still be on its way, and must not hit whatever the lane does next.
 */
static bool
work_must_stop(void)
{
	return leaving_if(backfill_lane_stop_requested());
}

/*
 * The scheduler cancelled this lane's batch for another role's pass
 * (backfill.preempt_after): the lane leaves, so a cancel's signal still on
 * its way must not hit what it does before it goes.
 */
static bool
work_preempted(void)
{
	return leaving_if(backfill_lane_preempted());
}

/*
 * A preempted batch rolled back with its checkpoint: the partition goes back
 * to pending there, for a lane later, and nothing is recorded against it (no
 * failed attempt: the batch did nothing wrong).
 */
static bool
leave_preempted(Pass *pass, Claim *claim, TimestampTz started)
{
	pass_release(pass, claim);
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": the batch on partition %d was cancelled "
					"after %ld ms for another role's pass and rolled back; the partition is "
					"pending at its checkpoint", pass->name, pass->run_id, claim->part_no,
					(long) ((GetCurrentTimestamp() - started) / 1000)),
			 errdetail("backfill.preempt_after bounds how long a role holding more than its "
					   "share of the lanes keeps a lane another role's pass waits for.")));
	return false;
}

/*
 * A backend working the pass itself: a cancel (the caller's, or a
 * statement timeout) ends its call with that error, never a retry; so does
 * BF032 (the declarer's SQL released an advisory lock of the caller's),
 * SQL a lane may run.
 */
static void
rethrow_if_session_stop(ErrorData *edata)
{
	if (worker_in_session() && (edata->sqlerrcode == ERRCODE_QUERY_CANCELED ||
								edata->sqlerrcode == ERRCODE_BACKFILL_SESSION_LOCK))
		ReThrowError(edata);
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
 * anything else waits on.  Then, before the next attempt, the pass must
 * still be running: one that ended meanwhile however it was ended (by a
 * lane, a control, or the scheduler, which fails a pass whose table or
 * roles changed) is not tried again.
 */
static bool
wait_to_retry(Pass *pass, int64 delay_ms)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay_ms);

	while (backoff_sleep_until(until))
		if (work_must_stop())
			return false;
	if (work_must_stop() || !pacing_pass_running(pass))
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

/* a failed attempt on the partition's row: its failures and last error */
static void
record_failed_attempt(Pass *pass, Claim *claim, ErrorData *edata)
{
	CatalogScope scope;

	worker_begin_xact("pg_backfill lane: recording a failed batch");
	catalog_enter(&scope);
	state_part_attempt_failed(pass->run_id, claim->part_no, edata->message);
	catalog_leave(&scope);
	/* rows a worker's crash left locked in a prepared batch are freed (citus.c) */
	if (pass->citus_remote)
		citus_recover_prepared(pass->name);
	worker_commit_xact();
}

static FailureAction
batch_failed(Pass *pass, Claim *claim, ErrorData *edata, int failures)
{
	int64		delay_ms;
	bool		unreadable = edata->sqlerrcode == ERRCODE_BACKFILL_KEY_UNREADABLE;

	rethrow_if_session_stop(edata);
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

	if (failures >= pass->max_attempts && !unreadable)
	{
		pass_fail_partition(pass, claim,
							psprintf("a batch failed %d times in a row: SQLSTATE %s: %s",
									 failures, unpack_sql_state(edata->sqlerrcode),
									 edata->message));
		return FAILURE_NEXT;
	}

	record_failed_attempt(pass, claim, edata);

	/* a cursor or bound that no longer reads as a key: the pass fails, with the hint */
	if (failures >= pass->max_attempts)
	{
		pass_fail(pass, claim->part_no, edata->sqlerrcode,
				  psprintf("%s (%d attempts). %s", edata->message, failures,
						   edata->hint ? edata->hint : ""));
		return FAILURE_STOP;
	}

	/* capped doubling delay with jitter: half to all of it */
	delay_ms = backoff_jittered_ms(failures - 1, pass->backoff_base_ms, pass->backoff_cap_ms);

	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": %s failed (attempt %d of %d), "
					"retrying in " INT64_FORMAT " ms",
					pass->name, pass->run_id, unreadable ? "reading a partition's keys" : "batch",
					failures, pass->max_attempts, delay_ms),
			 errdetail("SQLSTATE %s: %s", unpack_sql_state(edata->sqlerrcode),
					   edata->message),
			 edata->hint ? errhint("%s", edata->hint) : 0));
	return wait_to_retry(pass, delay_ms) ? FAILURE_RETRY : FAILURE_STOP;
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
 * A batch of more than one row failed with a row's fault: try its first
 * half next.  A single row: record it and move past it (poison.c).  If
 * recording fails (a lock timeout, say), that failure is retried like a
 * failed batch's.
 */
static FailureAction
isolate_row(Pass *pass, Claim *claim, ErrorData *edata, int *failures)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile BatchOutcome outcome = BATCH_DONE;
	ErrorData  *volatile failure = NULL;
	FailureAction next;
	bool		starting = claim->bisect_size == 0;

	if (poison_bisect(claim))
	{
		/* said once per failing batch; each row isolated is said by poison.c */
		ereport(starting ? LOG : DEBUG1,
				(errmsg("backfill \"%s\" run " INT64_FORMAT ": a batch of partition %d failed on "
						"a row; trying %d rows at a time to isolate it",
						pass->name, pass->run_id, claim->part_no, claim->bisect_size),
				 errdetail("SQLSTATE %s: %s", unpack_sql_state(edata->sqlerrcode),
						   edata->message)));
		return FAILURE_RETRY;
	}
	PG_TRY();
	{
		outcome = poison_record(pass, claim, edata);
	}
	PG_CATCH();
	{
		failure = worker_abort_xact(pass->cxt);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	if (failure == NULL)
		return outcome == BATCH_STOP ? FAILURE_STOP : FAILURE_RETRY;
	(*failures)++;
	next = batch_failed(pass, claim, failure, *failures);
	FreeErrorData(failure);
	return next;
}

/*
 * a row's fault in a table's batch: isolated (a page cannot be halved, and
 * a Citus shard's cursor is its node's, which isolating would not move:
 * such a batch is retried, and fails its partition after max_attempts)
 */
static bool
is_row_fault(Pass *pass, Claim *claim, const ErrorData *edata)
{
	return claim->kind->isolates_rows && poison_is_row_fault(edata->sqlerrcode);
}

/*
 * A batch failed (its transaction rolled back): a row's fault in a table's
 * batch is isolated, without counting against max_attempts (each halving
 * is progress, and ends at one row); anything else is retried with backoff
 * (batch_failed).
 */
static FailureAction
batch_error(Pass *pass, Claim *claim, ErrorData *edata, int *failures, TimestampTz started)
{
	if (is_row_fault(pass, claim, edata))
	{
		FailureAction next = isolate_row(pass, claim, edata, failures);
		BatchOutcome outcome;

		if (next != FAILURE_RETRY)
			return next;
		/* every attempt at isolating the row waits out the rate, as a batch does */
		outcome = pacing_after_attempt(pass, started);
		if (outcome == BATCH_PAUSED)
			(void) leave_paused(pass, claim);
		return outcome == BATCH_DONE ? FAILURE_RETRY : FAILURE_STOP;
	}
	(*failures)++;
	if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED)
		pacing_after_timeout(pass, claim);
	return batch_failed(pass, claim, edata, *failures);
}

/* a backend working for a bounded time (finalize): 0 for none */
static TimestampTz work_deadline = 0;

void
work_set_deadline(TimestampTz deadline)
{
	work_deadline = deadline;
}


/* another role's pass waits for a lane: give this one up at its checkpoint */
static bool
yield_for_fair_share(Pass *pass, Claim *claim)
{
	if (!backfill_lane_yield_requested())
		return false;
	pass_release(pass, claim);
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": lane leaves partition %d at "
					"its checkpoint for another role's pass", pass->name, pass->run_id,
					claim->part_no),
			 errdetail("backfill.max_workers lanes are shared fairly between roles.")));
	return true;
}

/* cancelled: the batch in flight rolled back, nothing of it recorded (false) */
static bool
leave_cancelled(Pass *pass, Claim *claim)
{
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT " was cancelled: the batch in "
					"flight on partition %d rolled back",
					pass->name, pass->run_id, claim->part_no)));
	return false;
}

/*
 * Must the lane leave before its next batch: cancelled, past the deadline of
 * a backend working for a bounded time, or yielding for another role's pass
 * (the partition given back at its checkpoint in the last two)?
 */
static bool
leave_before_batch(Pass *pass, Claim *claim)
{
	if (work_must_stop())
		return true;
	if (work_deadline != 0 && GetCurrentTimestamp() >= work_deadline)
	{
		pass_release(pass, claim);
		return true;
	}
	return yield_for_fair_share(pass, claim);
}

/* what the lane does after a batch: the next batch, or leave the partition */
typedef enum WorkNext
{
	WORK_NEXT_BATCH,
	WORK_EXHAUSTED,				/* the partition is done (or failed for good): the next */
	WORK_LEAVE					/* the lane stops: cancelled, paused, yielding, failed */
} WorkNext;

/*
 * A batch failed and its transaction is rolled back: cancelled (nothing of
 * it is recorded), preempted (not a failed attempt), else retried, isolated
 * or failed (batch_error).
 */
static WorkNext
after_failed_batch(Pass *pass, Claim *claim, MemoryContext scratch, bool stopping,
				   bool preempted, int *failures, TimestampTz started)
{
	ErrorData  *edata;
	FailureAction next;

	worker_statement_timeout_end();
	edata = worker_abort_xact(pass->cxt);
	MemoryContextSwitchTo(scratch);
	rethrow_if_session_stop(edata);
	/* cancelled: the batch rolled back, nothing of it is recorded */
	if (stopping)
	{
		FreeErrorData(edata);
		return leave_cancelled(pass, claim) ? WORK_EXHAUSTED : WORK_LEAVE;
	}
	/* cancelled for another role's pass: rolled back, not a failed attempt */
	if (preempted)
	{
		FreeErrorData(edata);
		return leave_preempted(pass, claim, started) ? WORK_EXHAUSTED : WORK_LEAVE;
	}
	next = batch_error(pass, claim, edata, failures, started);
	FreeErrorData(edata);
	if (next == FAILURE_STOP)
		return WORK_LEAVE;
	if (next == FAILURE_NEXT)
		return WORK_EXHAUSTED;
	return WORK_NEXT_BATCH;
}

/* A batch committed (or none ran): what its outcome, then the rate, say. */
static WorkNext
after_batch(Pass *pass, Claim *claim, BatchOutcome outcome, bool stopping, int *failures,
			TimestampTz started)
{
	/* no batch ran (it waited out a shard move): the checks before a batch again */
	if (outcome == BATCH_AGAIN && !stopping)
		return WORK_NEXT_BATCH;
	*failures = 0;
	poison_after_batch(claim, claim->last_keys);
	if (outcome == BATCH_STOP || stopping)
		return WORK_LEAVE;
	if (outcome == BATCH_PAUSED)
		return leave_paused(pass, claim) ? WORK_EXHAUSTED : WORK_LEAVE;
	if (outcome == BATCH_PARTITION_DONE)
		return WORK_EXHAUSTED;

	outcome = pacing_after_batch(pass, claim, started);
	if (outcome == BATCH_STOP)
		return WORK_LEAVE;
	if (outcome == BATCH_PAUSED)
		return leave_paused(pass, claim) ? WORK_EXHAUSTED : WORK_LEAVE;
	return WORK_NEXT_BATCH;
}

/*
 * Run batches on a claimed partition until it is exhausted (true) or the
 * lane must stop (false): cancelled, paused, yielding, or past the deadline
 * of a backend working for a bounded time (the partition is given back at
 * its checkpoint).  The partition's kind (kind.h) is picked here, once for
 * all its batches: a lane works each partition it claims once.
 */
bool
work_partition(Pass *pass, Claim *claim, MemoryContext scratch)
{
	int			failures = 0;

	claim->kind = batch_kind_for(pass, claim);
	claim->bisect_size = 0;
	claim->suspect = 0;
	claim->bisect_failures = 0;
	claim->scanned_keys = -1;

	for (;;)
	{
		TimestampTz started;
		volatile BatchOutcome outcome = BATCH_DONE;
		volatile bool failed = false;
		bool		stopping;
		bool		preempted;
		WorkNext	next;

		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(scratch);
		MemoryContextSwitchTo(scratch);

		/* the pass's rate, shared by all its lanes */
		outcome = pacing_before_batch(pass, claim);
		if (outcome != BATCH_DONE)
			return outcome == BATCH_PAUSED ? leave_paused(pass, claim) : false;
		started = GetCurrentTimestamp();
		if (leave_before_batch(pass, claim))
			return false;

		/* backfill_cancel cancels a batch only while this says so (shmem.c) */
		backfill_lane_set_in_batch(true);
		PG_TRY();
		{
			/* its cursor and bounds as keys first: a failure is this partition's (BF033) */
			if (!claim->keys_read)
				pass_claim_read_keys(pass, claim);
			outcome = batch_run(pass, claim);
		}
		PG_CATCH();
		{
			failed = true;
		}
		PG_END_TRY();
		backfill_lane_set_in_batch(false);
		/* cancelled: before anything that could take the cancel's signal */
		stopping = work_must_stop();
		preempted = !stopping && work_preempted();

		/* the WAL it wrote, committed or not, against the WAL budgets */
		pacing_charge_wal(pass, claim, started);

		next = failed ?
			after_failed_batch(pass, claim, scratch, stopping, preempted, &failures, started) :
			after_batch(pass, claim, outcome, stopping, &failures, started);
		if (next != WORK_NEXT_BATCH)
			return next == WORK_EXHAUSTED;
	}
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
bool
work_step(Pass *pass, void (*step) (Pass *), const char *what)
{
	for (int failures = 1;; failures++)
	{
		ErrorData  *edata = try_step(pass, step);
		int64		delay_ms;

		if (edata == NULL)
			return true;
		rethrow_if_session_stop(edata);
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
		if (!wait_to_retry(pass, delay_ms))
			return false;
	}
}

