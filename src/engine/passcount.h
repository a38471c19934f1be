/*-------------------------------------------------------------------------
 *
 * passcount.h
 *	  The count that proves a pass done (passcount.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PASSCOUNT_H
#define BACKFILL_PASSCOUNT_H

#include "pass.h"

/* count_beyond counts at most this many rows beyond the bound */
#define DRIFT_BEYOND_LIMIT 1000

extern char *smallest_remaining_key(Pass *pass);
extern bool key_still_matches(Pass *pass, const char *key);
extern int64 count_beyond(Pass *pass);
extern int64 count_remaining(Pass *pass);

#endif							/* BACKFILL_PASSCOUNT_H */
