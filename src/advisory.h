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
 * session advisory locks the caller holds, and how often, while the SQL of
 * backfill name (NULL: SQL read as role) runs in its session, in
 * CALL backfill_finalize or evaluated as that role (asrole.c).  After each
 * transaction (or subtransaction) of that SQL, advisory_after_transaction
 * lets its locks go and gives the caller's back their counts; one it
 * released raises BF032 when raise is true.
 */
extern void advisory_guard_begin(const char *name, Oid role, bool finalize);
extern bool advisory_guard_on(void);
extern void advisory_after_transaction(bool raise);
extern void advisory_guard_end(void);

#endif							/* BACKFILL_ADVISORY_H */
