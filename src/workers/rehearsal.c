/*-------------------------------------------------------------------------
 *
 * rehearsal.c
 *	  The rehearsal worker: backfill_rehearse's batches run in a
 *	  short-lived background process of their own, as the declarer.
 *
 * A rehearsal runs real batches of a declaration (engine/rehearse.c),
 * the declarer's SQL: never in the caller's session, whose cursors,
 * temporary objects and locks would be within its reach.  The caller
 * (sql/rehearse.c) fills a Rehearsal in a dynamic shared memory segment
 * and starts a "pg_backfill rehearsal" worker (BGW_NEVER_RESTART,
 * bgw_notify_pid = the caller) with the segment's handle.  The worker
 * logs in as the declaration's run_as, with the settings a lane takes,
 * rehearses, writes its answer (or the error that ended it) into the
 * segment, and exits.  Each batch it ran was rolled back.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "config.h"
#include "deadline.h"
#include "errors.h"
#include "rehearsal.h"
#include "rehearse.h"
#include "worker.h"

BackgroundWorkerHandle *
rehearsal_start(dsm_segment *seg, MemoryContext cxt)
{
	Rehearsal  *r = (Rehearsal *) dsm_segment_address(seg);

	return worker_start("backfill_rehearsal_main", "pg_backfill rehearsal",
						"pg_backfill rehearsal", UInt32GetDatum(dsm_segment_handle(seg)),
						&r->run_as, sizeof(Oid), cxt);
}

/*
 * At exit: a worker that terminated itself (a batch outlived its
 * batch_timeout by the grace, its SQL catching the cancel; or its caller
 * went away) says so in the answer, for a caller still waiting.
 */
static Rehearsal *answer_to = NULL;	/* the segment's answer, while attached */

static void
rehearsal_at_exit(int code, Datum arg)
{
	Rehearsal  *r = answer_to;
	int			ms;

	if (r == NULL || r->state != 0 || !deadline_fired(&ms))
		return;
	r->sqlerrcode = ERRCODE_QUERY_CANCELED;
	snprintf(r->message, sizeof(r->message),
			 "the rehearsal of backfill \"%s\" was terminated after %d ms", r->name, ms);
	strlcpy(r->detail, "A batch outlived its batch_timeout by more than the grace: the "
			"backfill's SQL went on after its cancel (it catches query_canceled).",
			sizeof(r->detail));
	strlcpy(r->hint, "Make the backfill's SQL end when it is cancelled, or its batches "
			"shorter than batch_timeout.", sizeof(r->hint));
	r->state = 2;
}

/* the error that ended the rehearsal, into the answer */
static void
rehearsal_failed(Rehearsal *r, ErrorData *edata)
{
	r->sqlerrcode = edata->sqlerrcode;
	strlcpy(r->message, edata->message ? edata->message : "", sizeof(r->message));
	strlcpy(r->detail, edata->detail ? edata->detail : "", sizeof(r->detail));
	strlcpy(r->hint, edata->hint ? edata->hint : "", sizeof(r->hint));
	r->state = 2;
}

void
backfill_rehearsal_main(Datum main_arg)
{
	dsm_segment *seg;
	Rehearsal  *r;
	MemoryContext cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	r = (Rehearsal *) worker_attach_caller(main_arg, &seg);
	worker_lower_priority();
	answer_to = r;
	before_shmem_exit(rehearsal_at_exit, (Datum) 0);
	/* nobody waits for the answer any more: stop (a caller terminated, say) */
	deadline_watch_pid(MyBgworkerEntry->bgw_notify_pid);

	/* as the backfill's role, as its lanes: never more privilege than it has */
	BackgroundWorkerInitializeConnectionByOid(r->dboid, r->run_as, 0);
	worker_own_identity(PGC_S_SESSION);
	SetConfigOption("application_name", "pg_backfill rehearsal", PGC_USERSET, PGC_S_OVERRIDE);
	pgstat_report_appname("pg_backfill rehearsal");
	SetConfigOption("jit", "off", PGC_USERSET, PGC_S_SESSION);
	worker_key_text_settings(GUC_ACTION_SET);

	cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill rehearsal worker",
								ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		rehearse_run(r);
		r->state = 1;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		rehearsal_failed(r, edata);
	}
	PG_END_TRY();
	answer_to = NULL;
	dsm_detach(seg);
	proc_exit(0);
}
