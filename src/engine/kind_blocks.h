/*-------------------------------------------------------------------------
 *
 * kind_blocks.h
 *	  A batch of a pass in block order (key => 'ctid'): its key scan (the
 *	  first block left that holds a matching row), the action over a TID
 *	  range of a few blocks, its checkpoint (the next block) and its end
 *	  (kind_blocks.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_KIND_BLOCKS_H
#define BACKFILL_KIND_BLOCKS_H

#include "postgres.h"

#include "pass.h"

/*
 * What every kind of batch shares, the batch's caller's (batch.c): the
 * batch's transaction begun with its timeouts, the checkpoint written
 * with the pass's state read back, the partition marked done.
 */
typedef struct BlocksSteps
{
	void		(*begin) (Pass *pass, Claim *claim);
	BatchOutcome (*checkpoint) (Pass *pass, Claim *claim, const char *first,
								const char *cursor, int64 rows);
	void		(*done) (Pass *pass, Claim *claim);
} BlocksSteps;

/* the block scan and the action, prepared as the declaring role */
extern void blocks_prepare(Pass *pass);

/* one batch of the claim's block range */
extern BatchOutcome blocks_batch_run(Pass *pass, Claim *claim, const BlocksSteps *steps);

#endif							/* BACKFILL_KIND_BLOCKS_H */
