/*-------------------------------------------------------------------------
 *
 * kind_shard.c
 *	  A Citus shard's partition as a kind: each batch runs on the node
 *	  that holds the shard, with its checkpoint there (shards.c); the
 *	  lane's transaction only mirrors it in the partition's row and reads
 *	  the pass's state back.
 *
 * The node's checkpoint is read again before the first batch and after
 * any that failed (open); a split shard's partition ends there, its new
 * shards' partitions going on from its checkpoint.  No batch overlaps a
 * move or split of the table's colocation group (begin: the fence, or a
 * wait until it is over and no batch).  A row's fault is not isolated:
 * the cursor is the node's, which halving would not move.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "batch.h"
#include "kind.h"
#include "shards.h"
#include "worker.h"
#include "xact.h"

/* the node's checkpoint, read where the shard is now before a batch needs it */
static BatchOutcome
shard_open(Pass *pass, Claim *claim)
{
	if (claim->shard_ready || shards_open(pass, claim))
		return BATCH_DONE;
	/* split: its new shards' partitions go on from its checkpoint (shards.c) */
	return batch_end_partition(pass, claim, "pg_backfill lane: a split shard's partition ends");
}

/*
 * A move or split of the group goes first, and no batch starts after it
 * before the lane has looked again at what comes before a batch (a pause,
 * a cancel, a switch for all) and where the shard is now.
 */
static BatchOutcome
shard_begin(Pass *pass, Claim *claim)
{
	if (shards_fence_moves(pass))
		return BATCH_DONE;
	worker_statement_timeout_end();
	worker_commit_xact();
	shards_wait_out_move(pass, claim);
	claim->shard_ready = false;
	claim->health_fresh = false;
	return BATCH_AGAIN;
}

/* the batch, key scan and action, on the shard's node: its answer */
static void
shard_scan(Pass *pass, Claim *claim, int64 limit, Batch *batch)
{
	ShardAnswer answer;

	claim->shard_ready = false;
	shards_batch(pass, claim, (int) limit, &answer);
	claim->shard_ready = true;
	batch->none = answer.status == SHARD_DONE;
	batch->keys = answer.keys;
	batch->rows = answer.rows - claim->rows;
	batch->cursor = answer.cursor;
}

/* the node's cursor, out of the transaction's memory */
static void
shard_keep(Pass *pass, Claim *claim, Batch *batch)
{
	if (batch->cursor != NULL)
		batch->cursor = MemoryContextStrdup(pass->cxt, batch->cursor);
}

/* the answer taken as the claim's checkpoint (claim->rows counts the batch's already) */
static void
shard_end(Pass *pass, Claim *claim, Batch *batch)
{
	ShardAnswer answer = {SHARD_BATCH, batch->cursor, claim->rows, batch->keys};

	shards_took(pass, claim, &answer);
	if (batch->cursor != NULL)
		pfree(batch->cursor);
}

const BatchKind batch_kind_shard = {
	.name = "shard",
	.isolates_rows = false,
	.coordinated = false,		/* one local transaction on the shard's node */
	.prepare = NULL,			/* picked per partition: the pass's plans are its table's */
	.open = shard_open,
	.begin = shard_begin,
	.scan = shard_scan,
	.keep = shard_keep,
	.end = shard_end,
};
