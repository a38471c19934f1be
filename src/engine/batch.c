/*-------------------------------------------------------------------------
 *
 * batch.c
 *	  One batch: read the next keys in key order, run the action on their
 *	  range, and write the checkpoint in the same transaction.
 *
 * The batch's keys are found with an index-ordered keyset scan,
 *
 *	  SELECT min(key), max(key), count(*) FROM (
 *	    SELECT key FROM rel WHERE key > cursor AND key <= hi AND (predicate)
 *	     ORDER BY key LIMIT batch_size) keys
 *
 * (or the keys themselves, for a key type without min and max)
 * and the action then runs once with $1 = the first and $2 = the last of
 * those keys (both inclusive).  A composite key of k columns scans by row
 * comparison (keyset.c) and its action gets $1..$k and $k+1..$2k.  The action never sees an
 * "IN (SELECT ... LIMIT n)" that the planner could turn into a full scan
 * per batch.  Because the action's writes and the checkpoint commit
 * together, a crash keeps both or loses both: each row is done once.
 *
 * What differs between the kinds of partition (a key range of a table, a
 * leaf's piece, a Citus shard, a pages source) is in the kind's own file,
 * as a set of routines picked once per claimed partition (kind.h); this
 * file keeps what every batch shares (its transaction and timeouts, the
 * checkpoint, the partition's end, a key's text and copy) and the driver
 * that calls the kind's routines in order (batch_run).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "catalog.h"
#include "config.h"
#include "errors.h"
#include "batch.h"
#include "citus.h"
#include "health.h"
#include "history.h"
#include "keyset.h"
#include "kind.h"
#include "shmem.h"
#include "state.h"
#include "worker.h"
#include "xact.h"

/* kept plans freed, NULL again */
static void
free_kept(SPIPlanPtr *plans, int n)
{
	for (int i = 0; i < n; i++)
	{
		if (plans[i] != NULL)
			SPI_freeplan(plans[i]);
		plans[i] = NULL;
	}
}

/* the key scans sized for one batch size (sized_key_scan, kind_range.c) */
void
batch_free_sized_plans(Pass *pass)
{
	free_kept(pass->keys_sized_plan, 4);
	free_kept(pass->keys_bare_plan, 4);
	pass->keys_sized_limit = 0;
}

/*
 * Free the plans an earlier, failed attempt at batch_prepare kept; or,
 * in a backend that worked a pass itself, the plans once it is done.
 */
void
batch_free_plans(Pass *pass)
{
	free_kept(pass->keys_plan, 4);
	batch_free_sized_plans(pass);
	free_kept(&pass->action_plan, 1);
	free_kept(&pass->page_plan, 1);
}

/*
 * One of the lane's plans, prepared and kept for the lane's life; what
 * names it in the error when it cannot be prepared.
 */
SPIPlanPtr
batch_prepare_kept(Pass *pass, const char *what, const char *sql, int nargs, Oid *types,
				   int cursor_options)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, types, cursor_options);

	if (plan == NULL)
		elog(ERROR, "could not prepare the %s of backfill \"%s\": %s",
			 what, pass->name, SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

/*
 * The routines of a partition's batches (kind.h), picked once when the
 * lane starts to work it (work.c); claim NULL: the pass's own, whose
 * plans batch_prepare makes.  A new kind is one line here.
 */
const BatchKind *
batch_kind_for(Pass *pass, Claim *claim)
{
	if (OidIsValid(pass->pages_fn))
		return &batch_kind_pages;
	if (claim != NULL && claim->shardid != 0)
		return &batch_kind_shard;
	if (pass->blocks)
		return &batch_kind_blocks;
	if (pass->partitioned)
		return &batch_kind_leaf;
	return &batch_kind_range;
}

/*
 * Prepare the lane's plans, as the declaring role, in a transaction of its
 * own.  The plans are kept for the lane's life; the plan cache replans them
 * when the table changes.  A failed attempt may be made again (lane.c).
 */
void
batch_prepare(Pass *pass)
{
	worker_begin_xact("pg_backfill lane: preparing");
	batch_free_plans(pass);
	batch_kind_for(pass, NULL)->prepare(pass);
	worker_commit_xact();
}

/* Mark the claimed partition done: nothing in it matches any more. */
static void
checkpoint_partition_done(Pass *pass, Claim *claim)
{
	CatalogScope scope;

	catalog_enter(&scope);
	if (!state_part_done(pass->run_id, claim->part_no, LANE_PID(), LANE_START()))
		pass_lost_lease(pass, claim);
	catalog_leave(&scope);
}

/*
 * Update the partition's row, at the version the lane's last checkpoint
 * wrote when it still is the row (a TID scan), else by its key; true when
 * the lane still holds the lease.
 *
 * Every checkpoint leaves a dead version of the row behind.  While
 * something holds back the xmin horizon (a long transaction, a waiting
 * backfill_wait, autovacuum analyzing the big table), pruning cannot
 * remove them, and a lookup by key walks all of them: a batch would cost
 * more the further the pass has come.  The TID goes to the newest
 * version at once.  It is only a hint: when anything else updated the
 * row since (a control, a throttle, another lane), the TID scan finds no
 * row with these conditions and the key finds the row as it is now.
 */
static bool
checkpoint_update(Claim *claim, Oid *types, Datum *values, const char *nulls)
{
	return state_part_checkpointed(&claim->checkpoint_tid, types, values, nulls);
}

/* a text column of the checkpoint's answer, by name; NULL when it is NULL */
static char *
checkpoint_text(const char *name)
{
	bool		isnull;
	Datum		d = state_answer_column(name, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/*
 * Write the checkpoint of a batch and read back what may have changed
 * meanwhile: the pass's status, whether it is paused, and the
 * declaration's checksum, rate, batch size and WAL budget.
 */
static BatchOutcome
checkpoint_batch(Pass *pass, Claim *claim, const char *first, const char *cursor, int64 rows)
{
	CatalogScope scope;
	Oid			types[10] = {INT8OID, INT4OID, TEXTOID, INT8OID, INT4OID, TIMESTAMPTZOID,
	INT4OID, FLOAT8OID, TEXTOID, TIDOID};
	Datum		values[10];
	char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	char	   *status;
	char	   *checksum;
	const char *why;
	bool		paused;
	bool		isnull;
	Datum		wal_budget;

	values[0] = Int64GetDatum(pass->run_id);
	values[1] = Int32GetDatum(claim->part_no);
	values[2] = cursor ? CStringGetTextDatum(cursor) : (Datum) 0;
	nulls[2] = cursor ? ' ' : 'n';
	values[3] = Int64GetDatum(rows);
	values[4] = Int32GetDatum(LANE_PID());
	values[5] = TimestampTzGetDatum(LANE_START());
	values[6] = Int32GetDatum(CLAIM_BATCH_LIMIT_AFTER(claim, rows));
	values[7] = Float8GetDatum(claim->last_batch_ms);
	why = claim->pace_reason[0] ? claim->pace_reason : claim->foreground_reason;
	values[8] = CStringGetTextDatum(why);
	nulls[8] = why[0] ? ' ' : 'n';

	/*
	 * One statement writes the checkpoint and reads back the pass's state.
	 * The server's health (health.c) is read separately, in the same
	 * transaction so that the locks it counts are this batch's, and at most
	 * once per backfill.throttle_delay: reading it costs more than a small
	 * batch.
	 */
	catalog_enter(&scope);
	if (!checkpoint_update(claim, types, values, nulls))
		pass_lost_lease(pass, claim);
	status = TextDatumGetCString(state_answer_column("status", &isnull));
	checksum = checkpoint_text("checksum");
	if (checksum == NULL || strcmp(checksum, pass->checksum) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CHANGED),
				 errmsg("backfill \"%s\" changed while run " INT64_FORMAT " was running",
						pass->name, pass->run_id),
				 errdetail("The pass started with checksum %s; the declaration now has %s.",
						   pass->checksum, checksum ? checksum : "none (dropped)"),
				 errhint("Run the backfill again to start a pass with the new definition.")));
	pass->rate = DatumGetFloat8(state_answer_column("rate", &isnull));
	pass->batch_size = DatumGetInt32(state_answer_column("batch_size", &isnull));
	paused = DatumGetBool(state_answer_column("paused", &isnull));
	wal_budget = state_answer_column("max_wal_rate", &isnull);
	pass->max_wal_rate = isnull ? 0 : DatumGetInt64(wal_budget);
	/* after the checkpoint's answer is read: it runs a statement of its own */
	history_record(pass, claim, first, cursor, rows, why);
	health_read_if_due(&claim->health, pass->relid, pass->name);
	health_sample_foreground(&claim->health);
	catalog_leave(&scope);
	if (strcmp(status, ledger_status_text(LEDGER_RUNNING)) != 0)
		return BATCH_STOP;
	return paused ? BATCH_PAUSED : BATCH_DONE;
}

/* What every batch transaction sets first: lock and statement timeouts. */
static void
begin_batch(Pass *pass, Claim *claim)
{
	worker_begin_xact(psprintf("pg_backfill lane: backfill \"%s\" partition %d",
							 pass->name, claim->part_no));
	/* a lane never queues long behind the application's locks */
	(void) set_config_option("lock_timeout", psprintf("%d", pass->lock_timeout_ms),
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	/*
	 * The batch and its checkpoint commit together: a crash that loses the
	 * commit loses both, and the batch is done again.  So the lane need not
	 * wait for the commit to reach disk (a transaction that emitted outbox
	 * messages is made synchronous by backfill_outbox_emit).
	 * async_commit => false makes the batch synchronous, also for a role or
	 * database whose synchronous_commit is off.
	 */
	if (pass->async_commit || synchronous_commit == SYNCHRONOUS_COMMIT_OFF)
		(void) set_config_option("synchronous_commit", pass->async_commit ? "off" : "on",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	/* a Citus table's batch: two-phase on the workers, synchronous here (citus.c) */
	if (pass->citus_remote && claim->kind->coordinated)
		citus_fence_batch();
	worker_statement_timeout(pass->batch_timeout_ms);
	/* SQL that catches that timeout's cancel ends with the lane (shmem.c) */
	backfill_lane_batch_deadline(pass->batch_timeout_ms);
}

/* A kind ends the claimed partition outside any batch (a split shard's, kind_shard.c). */
BatchOutcome
batch_end_partition(Pass *pass, Claim *claim, const char *activity)
{
	worker_begin_xact(activity);
	checkpoint_partition_done(pass, claim);
	worker_commit_xact();
	return BATCH_PARTITION_DONE;
}

/* nothing left in the partition (no key, its leaf gone, its shard done): it is done */
static BatchOutcome
nothing_left(Pass *pass, Claim *claim)
{
	worker_statement_timeout_end();
	checkpoint_partition_done(pass, claim);
	worker_commit_xact();
	return BATCH_PARTITION_DONE;
}

/* the partition's last batch (a page source's end): checkpointed if it did rows, and done */
static BatchOutcome
last_batch(Pass *pass, Claim *claim, Batch *batch)
{
	BatchOutcome outcome = BATCH_DONE;

	if (batch->rows > 0)
		outcome = checkpoint_batch(pass, claim, batch->first, batch->cursor, batch->rows);
	checkpoint_partition_done(pass, claim);
	worker_commit_xact();
	claim->rows += batch->rows;
	return outcome == BATCH_DONE ? BATCH_PARTITION_DONE : outcome;
}

/*
 * A key (k values) copied into the pass's memory.  The next cursor is the
 * last key itself, copied out of the batch's memory while the transaction
 * is still open: turning the text back into a key would run the key
 * type's input function (a domain's CHECK, which needs a transaction)
 * after the commit.
 */
void
batch_copy_key(Pass *pass, const Datum *last, Datum *next)
{
	MemoryContext old = MemoryContextSwitchTo(pass->cxt);

	if (pass->keyset.nkeys == 1)
		next[0] = datumCopy(last[0], pass->key_byval, pass->key_len);
	else
		for (int i = 0; i < pass->keyset.nkeys; i++)
			next[i] = datumCopy(last[i], pass->keyset.cols[i].byval, pass->keyset.cols[i].len);
	MemoryContextSwitchTo(old);
}

/* the checkpoint is durable: move the claim's cursor to a key (k values, the pass's memory) */
void
batch_move_cursor(Pass *pass, Claim *claim, const Datum *next)
{
	if (pass->keyset.nkeys == 1)
	{
		if (claim->has_cursor && !pass->key_byval)
			pfree(DatumGetPointer(claim->cursor));
		claim->cursor = next[0];
	}
	else
		for (int i = 0; i < pass->keyset.nkeys; i++)
		{
			if (claim->has_cursor && !pass->keyset.cols[i].byval)
				pfree(DatumGetPointer(claim->cursor_key[i]));
			claim->cursor_key[i] = next[i];
		}
	claim->has_cursor = true;
}

/* a key (k values) as the cursor writes it: its type's text, or a row literal */
char *
batch_key_text(Pass *pass, const Datum *key)
{
	return pass->keyset.nkeys > 1 ? keyset_row_text(&pass->keyset, key) :
		worker_key_output(pass->key_output, key[0]);
}

/* the claim's cursor (it has one) as text */
char *
batch_cursor_text(Pass *pass, Claim *claim)
{
	return batch_key_text(pass, pass->keyset.nkeys > 1 ? claim->cursor_key : &claim->cursor);
}

/*
 * One batch of the claimed partition, its kind's routines called in
 * order (kind.h): the shared steps here, what differs in the kind's file.
 */
BatchOutcome
batch_run(Pass *pass, Claim *claim)
{
	const BatchKind *kind = claim->kind;
	Batch		batch;
	BatchOutcome outcome;
	TimestampTz batch_start;

	memset(&batch, 0, sizeof(Batch));
	if (kind->open != NULL && (outcome = kind->open(pass, claim)) != BATCH_DONE)
		return outcome;
	batch_start = GetCurrentTimestamp();
	begin_batch(pass, claim);
	claim->scanned_keys = -1;
	if (kind->begin != NULL && (outcome = kind->begin(pass, claim)) != BATCH_DONE)
		return outcome == BATCH_PARTITION_DONE ? nothing_left(pass, claim) : outcome;
	kind->scan(pass, claim, CLAIM_BATCH_LIMIT(claim), &batch);
	claim->scanned_keys = batch.keys;
	if (batch.none)
		return nothing_left(pass, claim);
	if (kind->act != NULL)
		kind->act(pass, claim, &batch);
	worker_statement_timeout_end();
	claim->last_keys = batch.keys;
	claim->last_batch_ms = (GetCurrentTimestamp() - batch_start) / 1000.0;
	if (kind->checkpoint != NULL)
		kind->checkpoint(pass, claim, &batch);
	if (batch.last)
		return last_batch(pass, claim, &batch);

	outcome = checkpoint_batch(pass, claim, batch.first, batch.cursor, batch.rows);
	if (kind->keep != NULL)
		kind->keep(pass, claim, &batch);
	worker_commit_xact();

	claim->rows += batch.rows;
	kind->end(pass, claim, &batch);
	return outcome;
}

/*
 * The first key after the claim's cursor that still matches the predicate
 * (k values for a composite key), found in a batch transaction begun here
 * and left open: the caller (poison.c) records the row and moves the
 * cursor past it in the same transaction, and commits it.  false: no key
 * is left in the partition.  The key is copied into the pass's memory.
 */
bool
batch_first_key(Pass *pass, Claim *claim, Datum *key)
{
	const BatchKind *kind = claim->kind;
	Batch		batch;

	memset(&batch, 0, sizeof(Batch));
	begin_batch(pass, claim);
	if (kind->begin != NULL && kind->begin(pass, claim) != BATCH_DONE)
	{
		worker_statement_timeout_end();
		return false;
	}
	kind->scan(pass, claim, 1, &batch);
	worker_statement_timeout_end();
	if (batch.none)
		return false;			/* no key, or min() of no keys */
	batch_copy_key(pass, batch.range, key);
	return true;
}

/*
 * A rehearsal's batch (rehearse.c), in two steps in the transaction that
 * is open, with no checkpoint: the key scan from the claim's cursor,
 * which returns the keys it found and their range (2k values, valid until
 * the next statement), then the action on that range.  The rehearsal's
 * claim was never claimed: its kind is the pass's.
 */
int64
batch_scan_keys(Pass *pass, Claim *claim, Datum *range)
{
	const BatchKind *kind = claim->kind ? claim->kind : batch_kind_for(pass, claim);
	Batch		batch;

	memset(&batch, 0, sizeof(Batch));
	kind->scan(pass, claim, CLAIM_BATCH_LIMIT(claim), &batch);
	memcpy(range, batch.range, sizeof(Datum) * 2 * pass->keyset.nkeys);
	return batch.keys;
}

/* the action on a key range (2k values): a rehearsal's, and a key range's batch */
void
batch_act(Pass *pass, Datum *range)
{
	int			rc = SPI_execute_plan(pass->action_plan, range, NULL, false, 0);

	if (rc < 0)
		elog(ERROR, "action of backfill \"%s\" failed: %s", pass->name,
			 SPI_result_code_string(rc));
}
