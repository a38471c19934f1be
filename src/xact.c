/*-------------------------------------------------------------------------
 *
 * xact.c
 *	  One transaction of work in a background worker (scheduler, lane,
 *	  relay): start it with a snapshot and an SPI connection, commit it,
 *	  report the statistics and go idle; or, when it failed, keep its error
 *	  and roll it back.
 *
 * A transaction switches memory contexts; committing leaves the worker in
 * TopMemoryContext.  worker_commit_xact goes back to the context
 * worker_begin_xact was called in, so a worker's loop keeps allocating in
 * the scratch context it resets each time round.  An abort leaves the
 * worker in TopMemoryContext too: worker_abort_xact returns in the context
 * that keeps the error.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "utils/snapmgr.h"

#include "xact.h"

/* the memory context worker_begin_xact was called in, restored at commit */
static MemoryContext outer_cxt = NULL;

void
worker_begin_xact(const char *activity)
{
	outer_cxt = CurrentMemoryContext;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

void
worker_commit_xact(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	/* let autovacuum see the rows this worker changed */
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(outer_cxt);
}

ErrorData *
worker_abort_xact(MemoryContext keep)
{
	ErrorData  *edata;

	/* the error lives in ErrorContext, which the flush resets */
	MemoryContextSwitchTo(keep);
	edata = CopyErrorData();
	FlushErrorState();
	AbortCurrentTransaction();
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(keep);
	return edata;
}
