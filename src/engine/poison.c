/*-------------------------------------------------------------------------
 *
 * poison.c
 *	  Rows that fail on their own: which errors are a row's fault, halving a
 *	  failing batch down to one row, and recording that row and moving the
 *	  cursor past it.
 *
 * A batch of a table that fails with an error about its data (a failed
 * cast, a violated constraint, a trigger's RAISE: the SQLSTATE classes
 * listed in poison_is_row_fault) is not retried whole: the same keys are
 * tried again at half the batch size, and again, until a batch of a single
 * row fails.  That row is recorded in backfill.failed_row (its key as the
 * cursor writes it, the cursor before it, the SQLSTATE and message, the
 * failed batches it took) and the cursor moves past it, in one
 * transaction: a crash keeps both or neither.  After it the batch size
 * doubles batch by batch within the keys the failing batch covered, and
 * once they are behind the cursor it is what it was before.  Each failed
 * attempt waits out the rate like any batch (work.c).
 *
 * Whether the pass may go on is decided in the same transaction, with the
 * ledger row locked (the first lock every writer of a pass takes): more
 * recorded rows than the declaration's max_failed_rows (default 0) fail
 * the pass with BF018, naming the count and the first keys.  The bound is
 * read from the declaration each time, so a re-declaration while the pass
 * runs applies at its next such row (and at its end).
 *
 * Errors that are not the data's (lock and statement timeouts,
 * serialization failures and deadlocks, a lost lease, a cancelled or
 * changed pass, a lack of resources) are never bisected: they keep the
 * retry with backoff (work.c).  A pages source is never bisected either: a
 * page cannot be halved.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/memutils.h"

#include "batch.h"
#include "catalog.h"
#include "errors.h"
#include "poison.h"
#include "state.h"
#include "xact.h"

/*
 * Is this error the data's fault, the same on every try of the same rows?
 * Data exceptions (22: a cast, a division by zero, a value out of range),
 * integrity violations (23: CHECK, NOT NULL, unique, foreign key),
 * triggered actions and their data changes (09, 27), errors raised by the
 * user's functions and triggers (2F, 38, 39, P0) and WITH CHECK OPTION
 * (44).  Anything else keeps today's retry with backoff.
 */
bool
poison_is_row_fault(int sqlerrcode)
{
	static const char *const classes[] = {"22", "23", "09", "27", "2F", "38", "39", "44", "P0",
	NULL};
	int			class = ERRCODE_TO_CATEGORY(sqlerrcode);

	for (int i = 0; classes[i] != NULL; i++)
		if (class == MAKE_SQLSTATE(classes[i][0], classes[i][1], '0', '0', '0'))
			return true;
	return false;
}

/*
 * A batch failed with a row's fault.  true: it held more than one row, so
 * its first half is tried next (the failing row is among the keys it
 * covered); false: it was a single row, which poison_record records.  A
 * failure before its keys were found (the predicate's) halves the limit.
 */
bool
poison_bisect(Claim *claim)
{
	int			limit = CLAIM_BATCH_LIMIT(claim);

	/* a batch shorter than its limit (the end of a range): halve what it held */
	if (claim->scanned_keys >= 0 && claim->scanned_keys < limit)
		limit = (int) claim->scanned_keys;
	claim->bisect_failures++;
	/* the first failure: the keys it covered stay suspect until behind the cursor */
	if (claim->bisect_size == 0)
		claim->suspect = limit;
	if (limit <= 1)
		return false;
	claim->bisect_size = (limit + 1) / 2;
	return true;
}

/* Stop halving: the batch size is the partition's again. */
static void
bisect_end(Claim *claim)
{
	claim->bisect_size = 0;
	claim->suspect = 0;
	claim->bisect_failures = 0;
}

/*
 * A batch of nkeys committed.  While halving, the keys it covered are no
 * longer suspect; when none is left, the batch size recovers.  Until a
 * row is isolated, the size stays (the other half holds the row); once
 * one is (no failure since), it doubles with each batch, never past the
 * keys still suspect, which may hold more such rows.
 */
void
poison_after_batch(Claim *claim, int64 nkeys)
{
	if (claim->bisect_size == 0)
		return;
	claim->suspect -= nkeys;
	if (claim->suspect <= 0)
	{
		bisect_end(claim);
		return;
	}
	if (claim->bisect_failures == 0)
		claim->bisect_size = (int) Min(Min((int64) claim->bisect_size * 2, claim->suspect),
									   (int64) claim->batch_size);
}

/*
 * The count of this pass's recorded rows and the first of their keys, for
 * a message (in the catalog scope).
 */
static void
recorded_rows(Pass *pass, int64 *count, char **first_keys)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(pass->run_id)};

	catalog_exec("SELECT pg_catalog.count(*),"
				 "  pg_catalog.string_agg(f.key, ', ') FILTER (WHERE f.n <= 5)"
				 " FROM (SELECT key, pg_catalog.row_number() OVER (ORDER BY at, part_no, key) n"
				 "         FROM backfill.failed_row WHERE run_id = $1) f",
				 1, types, values, NULL, SPI_OK_SELECT);
	*count = catalog_getint64(0, 1);
	*first_keys = catalog_gettext(0, 2);
}

/*
 * The pass has more failed rows than it tolerates: it fails with BF018
 * (the ledger row, then the run row; in the caller's catalog scope).
 */
static void
fail_over_bound(Pass *pass, const ErrorData *edata, int64 count, const char *keys)
{
	char	   *message = psprintf("backfill \"%s\" has " INT64_FORMAT " row(s) that failed alone, "
								   "more than max_failed_rows (%d): keys %s; the last: "
								   "SQLSTATE %s: %s",
								   pass->name, count, pass->max_failed_rows, keys,
								   unpack_sql_state(edata->sqlerrcode), edata->message);

	if (pass_end_failed(pass->run_id, -1, ERRCODE_BACKFILL_FAILED_ROWS, message))
		ereport(LOG,
				(errcode(ERRCODE_BACKFILL_FAILED_ROWS),
				 errmsg("%s", message),
				 errdetail("The rows are recorded and skipped; the pass ends failed."),
				 errhint("Fix the rows and call backfill_retry('%s'), or declare max_failed_rows "
						 "of " INT64_FORMAT " or more.", pass->name, count)));
}

/*
 * Record the row and move the partition's cursor to it, if the lease is
 * still this lane's (in the caller's catalog scope).  false: it is not.
 */
static bool
record_and_skip(Pass *pass, Claim *claim, const char *key, const ErrorData *edata)
{
	Oid			types[9] = {INT8OID, INT4OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT4OID,
	INT4OID, TIMESTAMPTZOID};
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	char	   *after = NULL;

	if (claim->has_cursor)
		after = batch_cursor_text(pass, claim);
	values[0] = Int64GetDatum(pass->run_id);
	values[1] = Int32GetDatum(claim->part_no);
	values[2] = CStringGetTextDatum(key);
	values[3] = after ? CStringGetTextDatum(after) : (Datum) 0;
	nulls[3] = after ? ' ' : 'n';
	values[4] = CStringGetTextDatum(unpack_sql_state(edata->sqlerrcode));
	values[5] = CStringGetTextDatum(edata->message ? edata->message : "");
	values[6] = Int32GetDatum(Max(claim->bisect_failures, 1));
	values[7] = Int32GetDatum(LANE_PID());
	values[8] = TimestampTzGetDatum(LANE_START());
	if (!state_part_skipped_to(pass->run_id, claim->part_no, key, LANE_PID(), LANE_START()))
		return false;
	catalog_exec("INSERT INTO backfill.failed_row"
				 " (run_id, part_no, key, after_key, sqlstate, message, attempts)"
				 " VALUES ($1, $2, $3, $4, $5, $6, $7)",
				 7, types, values, nulls, SPI_OK_INSERT);
	return true;
}

/*
 * A single row failed alone (edata): record it and move the cursor past
 * it, in one transaction with the ledger row locked.  Returns BATCH_DONE
 * to go on with the partition, BATCH_STOP when the pass has ended (here,
 * with more failed rows than it tolerates, or before) or the lease is
 * gone.
 */
BatchOutcome
poison_record(Pass *pass, Claim *claim, const ErrorData *edata)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(pass->run_id)};
	Datum		key[DECLARATION_MAX_KEY_COLUMNS];	/* k values for a composite key */
	char	   *key_text;
	int64		count;
	char	   *keys;
	BatchOutcome outcome = BATCH_DONE;

	if (!batch_first_key(pass, claim, key))
	{
		/* the row no longer matches: nothing to record, the partition goes on */
		worker_commit_xact();
		bisect_end(claim);
		return BATCH_DONE;
	}
	key_text = batch_key_text(pass, key);

	catalog_enter(&scope);
	if (catalog_exec("SELECT 1 FROM backfill.ledger WHERE run_id = $1 AND status = 'running'"
					 " FOR UPDATE", 1, types, values, NULL, SPI_OK_SELECT) == 0)
		outcome = BATCH_STOP;	/* it has ended */
	else
	{
		/* recorded before the pass may end: ending it takes every lease */
		if (!record_and_skip(pass, claim, key_text, edata))
			outcome = BATCH_STOP;	/* the lease is gone: the pass was cancelled */
		else
		{
			recorded_rows(pass, &count, &keys);
			pass_reread_max_failed_rows(pass);
			if (count > pass->max_failed_rows)
			{
				fail_over_bound(pass, edata, count, keys);
				outcome = BATCH_STOP;
			}
		}
	}
	catalog_leave(&scope);
	worker_commit_xact();
	if (outcome == BATCH_STOP)
		return outcome;

	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": the row with key %s failed alone "
					"and is skipped (" INT64_FORMAT " of at most %d)",
					pass->name, pass->run_id, key_text, count, pass->max_failed_rows),
			 errdetail("SQLSTATE %s: %s", unpack_sql_state(edata->sqlerrcode), edata->message),
			 errhint("backfill_failed_rows('%s') lists it; backfill_retry('%s') tries it again "
					 "once the pass has ended.", pass->name, pass->name)));

	/* the checkpoint is durable: the cursor is the skipped key */
	batch_move_cursor(pass, claim, key);
	/* isolated: the failed batches it took are its own (recorded above) */
	claim->bisect_failures = 0;
	poison_after_batch(claim, 1);
	return BATCH_DONE;
}
