/*-------------------------------------------------------------------------
 *
 * drive.c
 *	  The driver loop of a pass, written once for a lane (workers/lane.c)
 *	  and for a session of the lanes' role that works the pass itself
 *	  (sql/finalize.c): prepare and plan, claim and work each partition
 *	  (work.c), finish.
 *
 * What differs is who drives (PassDriver): a lane applies the
 * declaration's settings to its whole session before the plan (a session
 * that works a pass has none: finalize leaves a backfill with settings to
 * its lanes), and its plans die with it; a session runs each transaction
 * of work in xact.c's session mode, as the lanes' role, and frees the
 * plans it prepared when it is done.  Either holds its leases in its own
 * name (its pid and backend start, pass.c): a lane that dies, or a session
 * killed mid-way, leaves leases of a dead holder, which the next lane
 * reclaims and resumes from the checkpoints.
 *
 * The end may find leaves attached since the plan, with partitions of
 * their own (pass.c's count): the loop claims again, and ends again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "batch.h"
#include "claim.h"
#include "drive.h"
#include "pacing.h"
#include "pass.h"
#include "passend.h"
#include "plan.h"
#include "tenancy.h"
#include "work.h"
#include "xact.h"

/* a lane's steps before its first claim: its session's settings, the plans, the plan */
static void
lane_prepare_and_plan(Pass *pass)
{
	/* the tenant settings hold for every statement of the lane's role */
	tenancy_apply_settings(pass->name, pass->settings, pass->input);
	batch_prepare(pass);
	pass_plan(pass);
}

/* the steps of a pass outside any batch, as a lane does them (without session settings) */
static void
session_prepare_and_plan(Pass *pass)
{
	batch_prepare(pass);
	pass_plan(pass);
}

bool
drive_pass(Pass *pass, PassDriver driver, MemoryContext scratch)
{
	Claim		claim;
	bool		go;

	Assert(worker_in_session() == (driver == DRIVE_SESSION));
	/* errors outside a batch (preparing, planning, counting): retried, or fail the pass */
	go = work_step(pass, driver == DRIVE_LANE ? lane_prepare_and_plan : session_prepare_and_plan,
				   "preparing the pass");

	/* the end may find leaves attached since the plan, with partitions of their own */
	while (go)
	{
		while (go && pass_claim(pass, &claim))
		{
			pacing_start(pass, &claim);
			go = work_partition(pass, &claim, scratch);
		}
		go = go && work_step(pass, pass_finish, "ending the pass");
		if (!go || !pass->more_leaves)
			break;
	}
	if (driver == DRIVE_SESSION)
		batch_free_plans(pass);
	return go;
}
