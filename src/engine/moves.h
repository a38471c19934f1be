/*-------------------------------------------------------------------------
 *
 * moves.h
 *	  A Citus shard move or split waits for the batches of a pass shard by
 *	  shard instead of failing (moves.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_MOVES_H
#define BACKFILL_MOVES_H

/* install the executor hook (from _PG_init, in every process) */
extern void moves_init(void);

#endif							/* BACKFILL_MOVES_H */
