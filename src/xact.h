/*-------------------------------------------------------------------------
 *
 * xact.h
 *	  One transaction of work in a background worker (or a backend working a
 *	  pass itself), and its abort.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_XACT_H
#define BACKFILL_XACT_H

#include "postgres.h"

extern void worker_begin_xact(const char *activity);
extern void worker_commit_xact(void);

/*
 * In a PG_CATCH of a worker: keep the error (a copy in keep), roll the
 * transaction back and go idle.  Returns with keep current.
 */
extern ErrorData *worker_abort_xact(MemoryContext keep);

/*
 * A backend that works a pass itself, inside a procedure (CALL, not
 * atomic, SPI connected non-atomic): until worker_session_end, each
 * transaction of work runs as run_as (restricted) with search_path, and
 * commits the procedure's transaction; the caller's session advisory
 * locks stay as they were, and the declarer's SQL of backfill name that
 * released one ends the work (BF032, advisory.h).
 */
extern void worker_session_begin(Oid run_as, const char *search_path, const char *name);
extern void worker_session_end(void);
extern bool worker_in_session(void);

/*
 * In a PG_CATCH of a session, for an error that ends its work: keep the
 * error, roll back what is open; the session stays on (interrupts held by
 * the caller) to give back what it holds before raising it again.
 */
extern ErrorData *worker_session_abort(MemoryContext keep);

/*
 * A batch's statement timeout, and its end.  In a session, no later than
 * the caller's statement_timeout, which holds again after it.
 */
extern void worker_statement_timeout(int ms);
extern void worker_statement_timeout_end(void);

#endif							/* BACKFILL_XACT_H */
