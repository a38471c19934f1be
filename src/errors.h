/*-------------------------------------------------------------------------
 *
 * errors.h
 *	  Every SQLSTATE pg_backfill raises, in the extension's own class "BF".
 *
 * The codes are stable: scripts and deploy gates may match on them.  The
 * README's error table lists the same codes with their meaning and fix.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_ERRORS_H
#define BACKFILL_ERRORS_H

#include "utils/elog.h"

/* the source (relation, key, predicate, action) cannot be used */
#define ERRCODE_BACKFILL_SOURCE_INVALID	MAKE_SQLSTATE('B','F','0','0','1')
/* no such declaration (or run) visible to the caller */
#define ERRCODE_BACKFILL_UNKNOWN		MAKE_SQLSTATE('B','F','0','0','2')
/* the name is declared by another role */
#define ERRCODE_BACKFILL_DUPLICATE		MAKE_SQLSTATE('B','F','0','0','3')
/* backfill.environment is not one the declaration may run in */
#define ERRCODE_BACKFILL_ENVIRONMENT	MAKE_SQLSTATE('B','F','0','0','4')
/* a required schema migration is not applied */
#define ERRCODE_BACKFILL_REQUIRES		MAKE_SQLSTATE('B','F','0','0','5')
/* the source is exhausted but rows still match the predicate */
#define ERRCODE_BACKFILL_STALLED		MAKE_SQLSTATE('B','F','0','0','6')
/* the definition differs from the one the running pass started with */
#define ERRCODE_BACKFILL_CHANGED		MAKE_SQLSTATE('B','F','0','0','7')
/* lanes are still at work */
#define ERRCODE_BACKFILL_CONFLICT		MAKE_SQLSTATE('B','F','0','0','8')
/* the backfill has written rows and declares no way back */
#define ERRCODE_BACKFILL_IRREVERSIBLE	MAKE_SQLSTATE('B','F','0','0','9')
/* the pass was cancelled */
#define ERRCODE_BACKFILL_CANCELLED		MAKE_SQLSTATE('B','F','0','1','0')
/* an option (batch size, rate, attempts, timeouts...) is out of range */
#define ERRCODE_BACKFILL_OPTION_INVALID	MAKE_SQLSTATE('B','F','0','1','1')
/* the backfill name is empty, too long or malformed */
#define ERRCODE_BACKFILL_NAME_INVALID	MAKE_SQLSTATE('B','F','0','1','2')
/* no scheduler serves this database: not in backfill.database_names, a template, no connections */
#define ERRCODE_BACKFILL_NOT_SERVED		MAKE_SQLSTATE('B','F','0','1','3')
/* a batch kept failing until its attempts were used up */
#define ERRCODE_BACKFILL_BATCH_FAILED	MAKE_SQLSTATE('B','F','0','1','4')
/* the pass cannot be waited for from this transaction */
#define ERRCODE_BACKFILL_WAIT_INVALID	MAKE_SQLSTATE('B','F','0','1','5')
/* the caller is not a member of the role that owns the backfill */
#define ERRCODE_BACKFILL_PRIVILEGE		MAKE_SQLSTATE('B','F','0','1','6')
/* the ledger is append-only (raised by the ledger trigger, in SQL) */
#define ERRCODE_BACKFILL_LEDGER_READONLY MAKE_SQLSTATE('B','F','0','1','7')
/* more rows failed alone (and were skipped) than the declaration's max_failed_rows */
#define ERRCODE_BACKFILL_FAILED_ROWS	MAKE_SQLSTATE('B','F','0','1','8')
/* backfill_finalize's timeout passed before the backfill was complete */
#define ERRCODE_BACKFILL_FINALIZE_TIMEOUT MAKE_SQLSTATE('B','F','0','1','9')
/* another transaction started or ended a pass after this one's snapshot */
#define ERRCODE_BACKFILL_CONCURRENT	MAKE_SQLSTATE('B','F','0','2','0')
/* a revert is asked of a backfill that declares none */
#define ERRCODE_BACKFILL_NO_REVERT		MAKE_SQLSTATE('B','F','0','2','1')
/* a pass of the other direction (forward or revert) is running */
#define ERRCODE_BACKFILL_DIRECTION		MAKE_SQLSTATE('B','F','0','2','2')

/* the server is a standby: what would write belongs on the primary */
#define ERRCODE_BACKFILL_STANDBY		MAKE_SQLSTATE('B','F','0','2','6')
#define ERRCODE_BACKFILL_CATALOG_VERSION MAKE_SQLSTATE('B','F','0','2','7')
/* a scoped backfill's revert names the scope it undoes (its input) */
#define ERRCODE_BACKFILL_SCOPED			MAKE_SQLSTATE('B','F','0','2','8')
/* the relation is one shard of a Citus distributed table */
#define ERRCODE_BACKFILL_CITUS_SHARD	MAKE_SQLSTATE('B','F','0','3','0')
/* a Citus distributed or reference table, on a node that is not the coordinator */
#define ERRCODE_BACKFILL_CITUS_NODE		MAKE_SQLSTATE('B','F','0','3','1')
/* the declarer's SQL would take or release an advisory lock of the session finalizing it */
#define ERRCODE_BACKFILL_SESSION_LOCK	MAKE_SQLSTATE('B','F','0','3','2')
/* a partition's cursor or bound, kept as text, no longer reads as a key of its type */
#define ERRCODE_BACKFILL_KEY_UNREADABLE	MAKE_SQLSTATE('B','F','0','3','3')
/* a shard's batch found the shard no longer placed on its node (moved, split) */
#define ERRCODE_BACKFILL_SHARD_MOVED	MAKE_SQLSTATE('B','F','0','3','4')
/* a shard table whose columns are not laid out as its distributed table's */
#define ERRCODE_BACKFILL_SHARD_LAYOUT	MAKE_SQLSTATE('B','F','0','3','5')
/* a shard's checkpoint row missing on its node, or opened by another role */
#define ERRCODE_BACKFILL_SHARD_CHECKPOINT MAKE_SQLSTATE('B','F','0','3','6')
/* a shard's batch on a worker reached another relation than its shard */
#define ERRCODE_BACKFILL_SHARD_REACH	MAKE_SQLSTATE('B','F','0','3','7')
/* no background worker slot is free for work a caller waits for: another
 * role's finalize with no lane at work, a scope worker, a probe, a rehearsal */
#define ERRCODE_BACKFILL_NO_WORKER		MAKE_SQLSTATE('B','F','0','3','8')
/* a probe ended with an error, gave no answer, or did not answer within the caller's timeout */
#define ERRCODE_BACKFILL_PROBE_FAILED	MAKE_SQLSTATE('B','F','0','3','9')
/* a shard gone mid-pass whose hash range no split's shards cover (or none kept) */
#define ERRCODE_BACKFILL_SHARD_SPLIT	MAKE_SQLSTATE('B','F','0','4','0')
/* a retired backfill (backfill_retire) asked to run, retry, revert or be probed */
#define ERRCODE_BACKFILL_RETIRED		MAKE_SQLSTATE('B','F','0','4','1')
/* backfill_rehearse asked for fewer than 1 or more than 100 batches */
#define ERRCODE_BACKFILL_REHEARSAL_BATCHES MAKE_SQLSTATE('B','F','0','4','3')
/* a backfill's work is not done for good: backfill_ensure_complete, backfill_retire */
#define ERRCODE_BACKFILL_INCOMPLETE		MAKE_SQLSTATE('B','F','0','4','4')
/* events => topic: the declarer neither owns the topic nor was granted it */
#define ERRCODE_BACKFILL_EVENTS_DENIED	MAKE_SQLSTATE('B','F','0','4','2')
/* events => topic: the topic has no sink, so it has no owner to allow the events */
#define ERRCODE_BACKFILL_EVENTS_NO_SINK	MAKE_SQLSTATE('B','F','0','4','5')

/*
 * In a PG_CATCH block of a backend, before raising the caught error again
 * as one of the above: the error, copied into cxt (the context the TRY
 * began in), and the error state cleared.
 */
static inline ErrorData *
backfill_take_error(MemoryContext cxt)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	return edata;
}

/*
 * In the caller of a worker that answered an error through shared memory
 * (scope, rehearsal): that error raised again, its detail and hint when it
 * had them (empty strings: none).
 */
static inline void
backfill_raise_answer(int sqlerrcode, const char *message, const char *detail,
					  const char *hint)
{
	ereport(ERROR,
			(errcode(sqlerrcode),
			 errmsg("%s", message),
			 detail[0] ? errdetail("%s", detail) : 0,
			 hint[0] ? errhint("%s", hint) : 0));
}

#endif							/* BACKFILL_ERRORS_H */
