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
 *	  key scan    SELECT min(ctid), max(ctid), count(*) FROM (SELECT ctid
 *	                FROM ONLY rel WHERE ctid >= '(cursor,0)'
 *	                AND ctid < '(w,0)' AND (predicate) LIMIT limit) s
 *	              the next limit rows that match, within a window of
 *	              BLOCKS_WINDOW blocks at most (w: the window's end, or hi):
 *	              a scan never reads more of the heap than that, however
 *	              much of it is done
 *	  action      its $1 '(b,0)' and $2 '(e,0)': the set/delete statement
 *	              the engine writes is
 *	              UPDATE ONLY rel SET ... WHERE ctid >= $1 AND ctid < $2
 *	              AND (predicate) (PostgreSQL's Tid Range Scan).  b is the
 *	              first block the scan found, e the block past the last row
 *	              it found when it found limit rows (the batch takes the
 *	              blocks of its batch size in rows, whatever pg_class says
 *	              of the rows per page: the last block's other rows are
 *	              all it may take beyond), else the window's end (no other
 *	              row matches before it).  No row found: the batch is an
 *	              empty step, [w, w): no action, 0 rows, its checkpoint
 *	              moves the cursor to the window's end
 *	  checkpoint  the cursor '(e,0)' and the rows the action changed,
 *	              committed with them: a crash keeps both or neither, and
 *	              the batch is done again from the checkpoint
 *	  end         the cursor moved; the batch that reaches the range's end
 *	              is its last, and ends the partition with its checkpoint;
 *	              a scan whose window reaches hi and finds nothing ends the
 *	              partition (none)
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

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "storage/itemptr.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "batch.h"
#include "kind.h"

/* the blocks one key scan reads at most, and a batch takes at most */
#define BLOCKS_WINDOW 4096

static void
blocks_prepare(Pass *pass)
{
	Oid			types[3] = {TIDOID, TIDOID, INT8OID};

	/* the key scan: keys_plan[0], freed with the others (batch_free_plans) */
	pass->keys_plan[0] =
		batch_prepare_kept(pass, "block scan",
					 psprintf("SELECT pg_catalog.min(ctid), pg_catalog.max(ctid),"
							  " pg_catalog.count(*) FROM (SELECT ctid FROM ONLY %s"
							  " WHERE ctid OPERATOR(pg_catalog.>=) $1"
							  " AND ctid OPERATOR(pg_catalog.<) $2 AND (\n%s\n) LIMIT $3) s",
							  pass->relation, pass->predicate), 3, types, 0);
	pass->keys_aggregated = false;
	pass->action_plan = batch_prepare_kept(pass, "action", pass->action, 2, types, 0);
}

/*
 * The key scan takes the first rows in block order: a sequential scan the
 * planner may pick for it (a custom plan over a wide range) must start at
 * the range's start, not where another scan of a large table stands.  A
 * lane's own setting (a lane in a caller's session drops it with the
 * batch's transaction, xact.c).
 */
static BatchOutcome
blocks_begin(Pass *pass, Claim *claim)
{
	SetConfigOption("synchronize_seqscans", "off", PGC_USERSET, PGC_S_SESSION);
	return BATCH_DONE;
}

static BlockNumber
tid_block(Datum tid)
{
	return ItemPointerGetBlockNumberNoCheck((ItemPointer) DatumGetPointer(tid));
}

/*
 * The key scan: the blocks of the next limit rows that match in [from,
 * to), into *first and *last (the first and last block holding one); the
 * rows found (0: none, first and last untouched).
 */
static int64
blocks_scan(Pass *pass, BlockNumber from, BlockNumber to, int64 limit, BlockNumber *first,
			BlockNumber *last)
{
	ItemPointerData lo;
	ItemPointerData hi;
	Datum		values[3] = {PointerGetDatum(&lo), PointerGetDatum(&hi),
	Int64GetDatum(Max(limit, 1))};
	bool		isnull;
	int64		found;
	int			rc;

	ItemPointerSet(&lo, from, 0);
	ItemPointerSet(&hi, to, 0);
	rc = SPI_execute_plan(pass->keys_plan[0], values, NULL, false, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "block scan of backfill \"%s\" failed: %s", pass->name,
			 SPI_result_code_string(rc));
	found = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3,
										&isnull));
	if (found == 0)
		return 0;
	*first = tid_block(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*last = tid_block(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	return found;
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
 * The key scan, within a window of at most BLOCKS_WINDOW blocks: the
 * batch's blocks, as block numbers (by value, so they outlive the commit)
 * in range[0] and range[1]; an empty step [w, w) when the window holds no
 * matching row; none when the window reaches the range's end and holds
 * none.
 */
static void
blocks_scan_batch(Pass *pass, Claim *claim, int64 limit, Batch *batch)
{
	BlockNumber from;
	BlockNumber to;
	BlockNumber window;
	BlockNumber first = 0;
	BlockNumber last = 0;

	claim_blocks(claim, &from, &to);
	batch->none = from >= to;
	if (batch->none)
		return;
	window = (BlockNumber) Min((uint64) from + BLOCKS_WINDOW, (uint64) to);
	batch->keys = blocks_scan(pass, from, window, limit, &first, &last);
	if (batch->keys == 0)
	{
		batch->none = window >= to;
		batch->range[0] = batch->range[1] = UInt32GetDatum(window);
		return;
	}
	/* limit rows found: up to the last one's block; fewer: none other before the window's end */
	batch->range[0] = UInt32GetDatum(first);
	batch->range[1] = UInt32GetDatum(batch->keys >= limit ? last + 1 : window);
}

/* the action over the batch's blocks (none for an empty step): the rows it changed */
static void
blocks_act_batch(Pass *pass, Claim *claim, Batch *batch)
{
	BlockNumber from = DatumGetUInt32(batch->range[0]);
	BlockNumber to = DatumGetUInt32(batch->range[1]);

	batch->rows = from < to ? blocks_act(pass, from, to) : 0;
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
	/* an empty step did no row: the history keeps no first key for it */
	batch->first = batch->keys > 0 ? psprintf("(%u,0)", DatumGetUInt32(batch->range[0])) : NULL;
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
	.begin = blocks_begin,
	.scan = blocks_scan_batch,
	.act = blocks_act_batch,
	.checkpoint = blocks_checkpoint,
	.end = blocks_end,
};
