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
 * commits the procedure's transaction.
 */
extern void worker_session_begin(Oid run_as, const char *search_path);
extern void worker_session_end(void);
extern bool worker_in_session(void);

#endif							/* BACKFILL_XACT_H */
