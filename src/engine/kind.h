/*-------------------------------------------------------------------------
 *
 * kind.h
 *	  The kinds of partition a batch works on, each a set of routines, as
 *	  PostgreSQL's foreign data wrappers and table access methods are: a
 *	  key range of a table (kind_range.c), a leaf's piece of a partitioned
 *	  table (kind_leaf.c), a Citus shard (kind_shard.c), a pages source
 *	  (kind_pages.c), a block range of a pass in block order (kind_blocks.c).
 *
 * A partition's kind is picked once, when it is claimed (batch_kind_for,
 * batch.c, called by pass_claim), and kept in the claim.  The driver
 * (batch.c batch_run) then calls the kind's routines in this order, and
 * keeps what every batch shares itself (the transaction, its timeouts,
 * the checkpoint statement, the partition's end):
 *
 *	  open?                 outside any transaction
 *	  [batch transaction begun, lock and statement timeouts set]
 *	  begin?                in it, before the key scan
 *	  scan                  the batch's keys (or rows)
 *	  act?                  the action on them
 *	  [statement timeout ended]
 *	  checkpoint?           what the checkpoint writes (texts, rows)
 *	  [checkpoint written]
 *	  keep?                 what outlives the commit, copied out of it
 *	  [commit]
 *	  end                   the claim moved on (its cursor, its rows)
 *
 * A routine marked ? may be NULL.  A new kind is one new file defining a
 * BatchKind, its extern line below, and one line in batch_kind_for.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_KIND_H
#define BACKFILL_KIND_H

#include "postgres.h"

#include "pass.h"

/* one batch as its kind's routines fill it in */
typedef struct Batch
{
	int64		keys;			/* keys (a page's rows) the scan found: claim->last_keys */
	bool		none;			/* the scan found none: the partition is done, no batch ran */
	bool		last;			/* the batch is the partition's last (a page source's end) */
	int64		rows;			/* the rows its checkpoint adds */
	bool		bare;			/* its key scan left the predicate out (kind_range.c) */
	char	   *first;			/* the first key as the batch history keeps it, or NULL */
	char	   *cursor;			/* the checkpoint's cursor */
	Datum		range[2 * DECLARATION_MAX_KEY_COLUMNS]; /* the first and the last key */
	Datum		next[DECLARATION_MAX_KEY_COLUMNS];	/* the next cursor, in the pass's memory */
	Datum		rows_found;		/* a page's rows (jsonb), 0 for none */
} Batch;

typedef struct BatchKind
{
	const char *name;

	/* a row's fault in its batches is isolated by halving them (poison.c, work.c) */
	bool		isolates_rows;

	/* a Citus table's batch here is one coordinated transaction (citus.c) */
	bool		coordinated;

	/*
	 * The pass's plans, in batch_prepare's transaction, as the declaring
	 * role: called for the kind batch_kind_for picks for the pass itself
	 * (a kind picked per partition only, a shard, prepares nothing).
	 */
	void		(*prepare) (Pass *pass);

	/*
	 * Before the batch's transaction: BATCH_DONE to go on, else the
	 * batch's outcome (the kind ended the partition in a transaction of
	 * its own).
	 */
	BatchOutcome (*open) (Pass *pass, Claim *claim);

	/*
	 * In the batch's transaction, before the scan: BATCH_DONE to go on;
	 * BATCH_PARTITION_DONE: nothing to do (the driver ends the partition);
	 * any other outcome: the kind ended the transaction, no batch ran.
	 */
	BatchOutcome (*begin) (Pass *pass, Claim *claim);

	/* the key scan: at most limit keys after the claim's cursor (keys, none, range) */
	void		(*scan) (Pass *pass, Claim *claim, int64 limit, Batch *batch);

	/* the action on what the scan found */
	void		(*act) (Pass *pass, Claim *claim, Batch *batch);

	/* what the checkpoint writes: first, cursor, rows (NULL: the scan set them) */
	void		(*checkpoint) (Pass *pass, Claim *claim, Batch *batch);

	/* before the commit: the next cursor copied into the pass's memory */
	void		(*keep) (Pass *pass, Claim *claim, Batch *batch);

	/* after the commit (claim->rows already counts the batch's rows): move the cursor */
	void		(*end) (Pass *pass, Claim *claim, Batch *batch);
} BatchKind;

extern const BatchKind batch_kind_range;
extern const BatchKind batch_kind_leaf;
extern const BatchKind batch_kind_shard;
extern const BatchKind batch_kind_pages;
extern const BatchKind batch_kind_blocks;

#endif							/* BACKFILL_KIND_H */
