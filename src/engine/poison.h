/*-------------------------------------------------------------------------
 *
 * poison.h
 *	  Rows that fail on their own: bisecting a failing batch, recording the
 *	  row and skipping it (poison.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_POISON_H
#define BACKFILL_POISON_H

#include "postgres.h"

#include "pass.h"

extern bool poison_is_row_fault(int sqlerrcode);
extern bool poison_bisect(Claim *claim);
extern void poison_after_batch(Claim *claim, int64 nkeys);
extern BatchOutcome poison_record(Pass *pass, Claim *claim, const ErrorData *edata);

#endif							/* BACKFILL_POISON_H */
