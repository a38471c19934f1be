/*-------------------------------------------------------------------------
 *
 * history.h
 *	  The batch history: the last backfill.batch_history batches of each
 *	  pass, recorded with their checkpoint (history.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_HISTORY_H
#define BACKFILL_HISTORY_H

#include "postgres.h"

#include "pass.h"

/*
 * Record the batch the claim's lane is checkpointing (first and last key
 * as text, or NULL; its rows) in backfill.batch and prune the pass's
 * older ones, inside the checkpoint's catalog scope (catalog.h), so in
 * the batch's own transaction.  Nothing with backfill.batch_history 0.
 */
extern void history_record(Pass *pass, Claim *claim, const char *first_key,
						   const char *last_key, int64 rows, const char *throttle);

#endif							/* BACKFILL_HISTORY_H */
