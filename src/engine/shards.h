/*-------------------------------------------------------------------------
 *
 * shards.h
 *	  A Citus distributed table's pass shard by shard, from the
 *	  coordinator: each batch sent to the node that holds its shard, and
 *	  the partition's checkpoint there (shards.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_SHARDS_H
#define BACKFILL_SHARDS_H

#include "postgres.h"

#include "pass.h"

/* what a shard's batch on its node answered (backfill.shard_batch) */
typedef enum ShardStatus
{
	SHARD_BATCH,				/* a batch done: cursor, rows, keys */
	SHARD_DONE,					/* nothing left in the shard */
	SHARD_ADOPT					/* the node's checkpoint is elsewhere: taken, nothing done */
} ShardStatus;

typedef struct ShardAnswer
{
	ShardStatus status;
	char	   *cursor;			/* the node's checkpoint after it (NULL: none yet) */
	int64		rows;
	int64		keys;
} ShardAnswer;

/*
 * Take the node's checkpoint of the claimed shard partition before its
 * first batch (and after any failed one): open it there, or take it over
 * from the shard's old node after a move; in transactions of its own.
 * False when Citus split the shard: the claimed partition then ends (done),
 * and new partitions, one per shard that covers its hash range, go on from
 * its checkpoint.
 */
extern bool shards_open(Pass *pass, Claim *claim);

/*
 * In a batch's transaction, before anything else: the table's colocation
 * group's rebalance lock in ShareLock, without waiting.  False when a move
 * or split of the group holds it or waits for it: the batch must not start.
 */
extern bool shards_fence_moves(Pass *pass);

/*
 * Outside any transaction: wait until the move or split that kept a batch
 * from starting is over; the lane says so (backfill_status), holding
 * nothing.
 */
extern void shards_wait_out_move(Pass *pass, Claim *claim);

/* one batch on the shard's node (inside the lane's transaction, which mirrors it) */
extern void shards_batch(Pass *pass, Claim *claim, int limit, ShardAnswer *answer);

/* the answer taken as the claim's checkpoint */
extern void shards_took(Pass *pass, Claim *claim, const ShardAnswer *answer);

/* close the lane's connections to the workers */
extern void shards_disconnect(void);

#endif							/* BACKFILL_SHARDS_H */
