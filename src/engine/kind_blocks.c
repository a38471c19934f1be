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
 *	  end         the cursor moved; the batch that reaches the range's end
 *	              is its last, and ends the partition with its checkpoint
 *
 * The driver (batch.c batch_run) begins and commits the batch's
 * transaction and writes the checkpoint; this file is the kind's part.
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

#include "kind.h"

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

static void
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

/* the claim's range: [from, to) in blocks, from its cursor (none: 0) to its hi */
static void
claim_blocks(Claim *claim, BlockNumber *from, BlockNumber *to)
{
	*from = claim->has_cursor ? tid_block(claim->cursor) : 0;
	*to = claim->has_hi ? tid_block(claim->hi) : MaxBlockNumber;
}

/*
 * The key scan: the first block left holding a matching row and the
 * blocks the batch takes after it, as block numbers (by value, so they
 * outlive the commit) in range[0] and range[1]; none when no block does.
 */
static void
blocks_scan_batch(Pass *pass, Claim *claim, int64 limit, Batch *batch)
{
	BlockNumber from;
	BlockNumber to;
	BlockNumber first;

	claim_blocks(claim, &from, &to);
	batch->none = from >= to || !blocks_scan(pass, from, to, &first);
	if (batch->none)
		return;
	batch->range[0] = UInt32GetDatum(first);
	batch->range[1] = UInt32GetDatum(first + Min(blocks_per_batch(pass, (int) limit), to - first));
}

/* the action over the batch's blocks: the rows it changed are its keys and rows */
static void
blocks_act_batch(Pass *pass, Claim *claim, Batch *batch)
{
	batch->keys = blocks_act(pass, DatumGetUInt32(batch->range[0]),
							 DatumGetUInt32(batch->range[1]));
	batch->rows = batch->keys;
}

/*
 * The checkpoint: the next block as the cursor, the first for the batch
 * history; the batch that reaches the range's end is its last (the
 * partition ends with its checkpoint).
 */
static void
blocks_checkpoint(Pass *pass, Claim *claim, Batch *batch)
{
	BlockNumber from;
	BlockNumber to;
	BlockNumber next = DatumGetUInt32(batch->range[1]);

	claim_blocks(claim, &from, &to);
	batch->first = psprintf("(%u,0)", DatumGetUInt32(batch->range[0]));
	batch->cursor = psprintf("(%u,0)", next);
	batch->last = next >= to;
}

/* the checkpoint is durable: the claim's cursor is the next block (the pass's memory) */
static void
blocks_end(Pass *pass, Claim *claim, Batch *batch)
{
	ItemPointer cursor = MemoryContextAlloc(pass->cxt, sizeof(ItemPointerData));

	ItemPointerSet(cursor, DatumGetUInt32(batch->range[1]), 0);
	if (claim->has_cursor)
		pfree(DatumGetPointer(claim->cursor));
	claim->cursor = PointerGetDatum(cursor);
	claim->has_cursor = true;
}

/* a row's error is not isolated: a block range cannot be halved into rows here */
const BatchKind batch_kind_blocks = {
	.name = "blocks",
	.isolates_rows = false,
	.coordinated = false,
	.prepare = blocks_prepare,
	.scan = blocks_scan_batch,
	.act = blocks_act_batch,
	.checkpoint = blocks_checkpoint,
	.end = blocks_end,
};
