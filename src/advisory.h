/*-------------------------------------------------------------------------
 *
 * advisory.h
 *	  The session advisory locks of a backend that runs a declarer's SQL in
 *	  its caller's session (CALL backfill_finalize).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_ADVISORY_H
#define BACKFILL_ADVISORY_H

#include "postgres.h"

/* _PG_init: the log hook that keeps counting a lock quiet */
extern void advisory_init(void);

/*
 * From advisory_guard_begin to advisory_guard_end, in a transaction: the
 * session advisory locks the caller holds, and how often, for backfill
 * name.  After each transaction of the declarer's SQL,
 * advisory_after_transaction (in the next transaction) lets the
 * declarer's locks go and gives the caller's back their counts; one the
 * declarer released raises BF032 when raise is true.
 */
extern void advisory_guard_begin(const char *name);
extern void advisory_after_transaction(bool raise);
extern void advisory_guard_end(void);

#endif							/* BACKFILL_ADVISORY_H */
