/*-------------------------------------------------------------------------
 *
 * kind_blocks.c
 *	  A batch of a pass in block order (key => 'ctid'): a few blocks of the
 *	  heap, in one TID range scan, with the checkpoint in the same
 *	  transaction.
 *
 * The claim's range is [cursor, hi): the cursor is the next block to do
 * ('(b,0)'; none: the partition's lo, none: block 0), hi the first block
 * past the partition (the top one's is the pass's bound, plan_blocks.c).
 * A batch, as a key batch is, in four steps:
 *
 *	  key scan    SELECT ctid FROM rel WHERE ctid >= '(cursor,0)'
 *	                AND ctid < '(hi,0)' AND (predicate) LIMIT 1
 *	              the first block left holding a matching row (none: the
 *	              partition is done); a sweep over a heap whose rows are
 *	              mostly done skips the blocks between at the cost of
 *	              reading them, not of a batch each
 *	  action      its $1 '(b,0)' and $2 '(b+n,0)': the set/delete
 *	              statement the engine writes is
 *	              UPDATE rel SET ... WHERE ctid >= $1 AND ctid < $2 AND (predicate)
 *	              (PostgreSQL's Tid Range Scan); n blocks from the batch
 *	              size and the table's tuples per page (pg_class reltuples
 *	              / relpages, BLOCKS_TUPLES_UNKNOWN before any ANALYZE or
 *	              VACUUM), at least 1
 *	  checkpoint  the cursor '(b+n,0)' and the rows the action changed,
 *	              committed with them: a crash keeps both or neither, and
 *	              the batch is done again from the checkpoint
 *	  end         the partition done once its range is walked
 *
 * A row's error is not isolated (a block cannot be halved into rows by
 * this walk): the batch is retried with backoff as any failed batch, and
 * the partition fails after max_attempts; declarations with ctid refuse
 * max_failed_rows (sql/ctid.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "storage/itemptr.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "kind_blocks.h"
#include "xact.h"

/* tuples per page assumed while pg_class knows none */
#define BLOCKS_TUPLES_UNKNOWN 50.0

static SPIPlanPtr
prepare_kept(Pass *pass, const char *what, const char *sql, int nargs, Oid *types)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);

	if (plan == NULL)
		elog(ERROR, "could not prepare the %s of backfill \"%s\": %s",
			 what, pass->name, SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

void
blocks_prepare(Pass *pass)
{
	Oid			types[2] = {TIDOID, TIDOID};

	/* the key scan: keys_plan[0], freed with the others (batch_free_plans) */
	pass->keys_plan[0] =
		prepare_kept(pass, "block scan",
					 psprintf("SELECT ctid FROM %s WHERE ctid OPERATOR(pg_catalog.>=) $1"
							  " AND ctid OPERATOR(pg_catalog.<) $2 AND (\n%s\n) LIMIT 1",
							  pass->relation, pass->predicate), 2, types);
	pass->keys_aggregated = false;
	pass->action_plan = prepare_kept(pass, "action", pass->action, 2, types);
}

/* the blocks a batch of limit rows takes: limit / tuples per page, at least 1 */
static BlockNumber
blocks_per_batch(Pass *pass, int limit)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(pass->relid));
	double		per_page = BLOCKS_TUPLES_UNKNOWN;
	double		n;

	if (HeapTupleIsValid(tuple))
	{
		Form_pg_class form = (Form_pg_class) GETSTRUCT(tuple);

		if (form->relpages > 0 && form->reltuples > 0)
			per_page = Max(form->reltuples / form->relpages, 1.0);
		ReleaseSysCache(tuple);
	}
	n = Max((double) limit, 1.0) / per_page;
	return (BlockNumber) Min(Max(n + 0.5, 1.0), (double) MaxBlockNumber / 2);
}

static BlockNumber
tid_block(Datum tid)
{
	return ItemPointerGetBlockNumberNoCheck((ItemPointer) DatumGetPointer(tid));
}

/*
 * The key scan: the first block in [from, to) holding a row that matches,
 * into *first; false when none does.
 */
static bool
blocks_scan(Pass *pass, BlockNumber from, BlockNumber to, BlockNumber *first)
{
	ItemPointerData lo;
	ItemPointerData hi;
	Datum		values[2] = {PointerGetDatum(&lo), PointerGetDatum(&hi)};
	bool		isnull;
	int			rc;

	ItemPointerSet(&lo, from, 0);
	ItemPointerSet(&hi, to, 0);
	rc = SPI_execute_plan(pass->keys_plan[0], values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "block scan of backfill \"%s\" failed: %s", pass->name,
			 SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;
	*first = tid_block(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	return true;
}

/* the action over blocks [from, to): the rows it changed */
static int64
blocks_act(Pass *pass, BlockNumber from, BlockNumber to)
{
	ItemPointerData lo;
	ItemPointerData hi;
	Datum		values[2] = {PointerGetDatum(&lo), PointerGetDatum(&hi)};
	int			rc;

	ItemPointerSet(&lo, from, 0);
	ItemPointerSet(&hi, to, 0);
	rc = SPI_execute_plan(pass->action_plan, values, NULL, false, 0);
	if (rc < 0)
		elog(ERROR, "action of backfill \"%s\" failed: %s", pass->name,
			 SPI_result_code_string(rc));
	return (int64) SPI_processed;
}

/* the checkpoint is durable: the claim's cursor is block next (the pass's memory) */
static void
blocks_move_cursor(Pass *pass, Claim *claim, BlockNumber next)
{
	ItemPointer cursor = MemoryContextAlloc(pass->cxt, sizeof(ItemPointerData));

	ItemPointerSet(cursor, next, 0);
	if (claim->has_cursor)
		pfree(DatumGetPointer(claim->cursor));
	claim->cursor = PointerGetDatum(cursor);
	claim->has_cursor = true;
}

/* the partition's walk ends: nothing left in [cursor, hi) */
static BatchOutcome
blocks_end(Pass *pass, Claim *claim, const BlocksSteps *steps)
{
	worker_statement_timeout_end();
	steps->done(pass, claim);
	worker_commit_xact();
	return BATCH_PARTITION_DONE;
}

BatchOutcome
blocks_batch_run(Pass *pass, Claim *claim, const BlocksSteps *steps)
{
	BlockNumber from = claim->has_cursor ? tid_block(claim->cursor) : 0;
	BlockNumber to = claim->has_hi ? tid_block(claim->hi) : MaxBlockNumber;
	BlockNumber first;
	BlockNumber next;
	TimestampTz batch_start = GetCurrentTimestamp();
	BatchOutcome outcome;
	int64		rows;

	steps->begin(pass, claim);
	claim->scanned_keys = -1;
	if (from >= to || !blocks_scan(pass, from, to, &first))
		return blocks_end(pass, claim, steps);
	next = first + Min(blocks_per_batch(pass, CLAIM_BATCH_LIMIT(claim)), to - first);
	rows = blocks_act(pass, first, next);
	worker_statement_timeout_end();
	claim->scanned_keys = rows;
	claim->last_keys = rows;
	claim->last_batch_ms = (GetCurrentTimestamp() - batch_start) / 1000.0;
	outcome = steps->checkpoint(pass, claim, psprintf("(%u,0)", first),
								psprintf("(%u,0)", next), rows);
	if (next >= to)
		steps->done(pass, claim);
	worker_commit_xact();
	blocks_move_cursor(pass, claim, next);
	claim->rows += rows;
	if (next >= to && outcome == BATCH_DONE)
		return BATCH_PARTITION_DONE;
	return outcome;
}
