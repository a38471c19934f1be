/*-------------------------------------------------------------------------
 *
 * lane.c
 *	  A lane: the dynamic background worker that runs a pass's batches.
 *
 * A lane connects as the role that declared the backfill, so the
 * predicate and the action run with that role's privileges and no more.
 * It loads the pass, plans it if it is the first lane, and then claims
 * partitions one after another, working each (engine/work.c: paced
 * batches, failed ones retried with backoff or, when a row is at fault,
 * bisected down to that row) until it is exhausted: engine/drive.c's loop,
 * the one a finalizing session drives too.  An error no retry can
 * fix fails the pass.  The last lane out proves convergence and writes the
 * ledger's final word (pass.c).
 *
 * A lane never restarts by itself: if it dies, its lease points at a dead
 * backend and the scheduler starts a lane that reclaims it.
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
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "drive.h"
#include "errors.h"
#include "lane.h"
#include "pass.h"
#include "passend.h"
#include "plan.h"
#include "shmem.h"
#include "worker.h"
#include "xact.h"

/*
 * Load the pass; false when the lane has nothing to do (the pass ended, or
 * failed here: its declaration changed, or the role's sessions are
 * read-only, which no batch could write in).
 */
static bool
lane_load(Pass *pass, int64 run_id, MemoryContext lane_cxt, bool role_read_only)
{
	char	   *message;

	if (!pass_load(pass, run_id, lane_cxt))
		return false;
	if (!role_read_only)
		return true;
	/* the role's name is read in a transaction; the message outlives it */
	worker_begin_xact("naming the read-only role");
	message = MemoryContextStrdup(lane_cxt,
								  psprintf("backfill \"%s\" cannot write as role \"%s\": its "
										   "sessions are read-only "
										   "(default_transaction_read_only is on)",
										   pass->name, GetUserNameFromId(GetUserId(), false)));
	worker_commit_xact();
	pass_fail(pass, -1, ERRCODE_BACKFILL_PRIVILEGE, message);
	return false;
}

void
backfill_lane_main(Datum main_arg)
{
	LaneArgs	args;
	Pass		pass;
	MemoryContext lane_cxt;
	MemoryContext scratch;
	bool		role_read_only;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(LaneArgs));

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	worker_lower_priority();

	/* the entry its scheduler reserved: every scheduler counts it */
	if (!backfill_lane_attach(args.lane_index, args.lane_token))
	{
		ereport(LOG,
				(errmsg("pg_backfill lane for run " INT64_FORMAT " found its lane table entry "
						"taken; it exits", args.run_id)));
		proc_exit(0);
	}

	/* as the declaring role: never more privilege than it has */
	BackgroundWorkerInitializeConnectionByOid(args.dboid, args.roleoid, 0);
	worker_own_identity(PGC_S_SESSION);
	SetConfigOption("application_name", "pg_backfill lane", PGC_USERSET, PGC_S_OVERRIDE);
	/*
	 * No JIT: a batch's statements are too small for it, and compiling the
	 * convergence count of a big table would keep megabytes in the lane
	 * (a declaration's settings may still turn it on).
	 */
	SetConfigOption("jit", "off", PGC_USERSET, PGC_S_SESSION);
	/* keys become text and back under one style, whatever the role set */
	worker_key_text_settings(GUC_ACTION_SET);
	/*
	 * A role whose sessions are read-only can do no batch.  The lane's own
	 * bookkeeping must still write, to record why the pass ends.
	 */
	role_read_only = DefaultXactReadOnly;
	if (role_read_only)
		SetConfigOption("default_transaction_read_only", "off", PGC_USERSET, PGC_S_OVERRIDE);
	pgstat_report_appname("pg_backfill lane");

	lane_cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill lane",
									 ALLOCSET_DEFAULT_SIZES);
	scratch = AllocSetContextCreate(lane_cxt, "pg_backfill batch",
									ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(scratch);

	/* before pass_load: an error there is recorded against this run too */
	memset(&pass, 0, sizeof(Pass));
	pass.run_id = args.run_id;
	PG_TRY();
	{
		if (lane_load(&pass, args.run_id, lane_cxt, role_read_only))
			(void) drive_pass(&pass, DRIVE_LANE, scratch);
	}
	PG_CATCH();
	{
		/* an error no step caught: recorded (backfill_status shows it), then the lane dies */
		ErrorData  *edata = worker_abort_xact(lane_cxt);

		pass_note_lane_error(&pass, edata);
		ReThrowError(edata);
	}
	PG_END_TRY();
	proc_exit(0);
}
