/*-------------------------------------------------------------------------
 *
 * deadline.c
 *	  A background worker's hard bound on a declarer's SQL: past it, the
 *	  worker terminates itself.
 *
 * A declarer's SQL evaluated outside a batch runs under a statement
 * timeout (asrole.c), and a batch under its batch_timeout; but a timeout,
 * like a cancel, is only an error, and PL/pgSQL that catches
 * query_canceled (EXCEPTION WHEN query_canceled THEN ...) in a loop
 * outlives it.  So a worker (a probe worker, a scope worker, a lane in
 * asrole.c) arms this deadline with the bound plus
 * BACKFILL_TERMINATE_GRACE_MS: when it passes, the process sends itself
 * SIGTERM, whose handler (die) makes the next interrupt check a FATAL
 * error, which no handler catches: the transaction aborts and the process
 * exits.  deadline_fired() tells an exit callback (drift.c, scope.c) to
 * record the termination.  Lanes' batches are watched from outside, by
 * their scheduler (shmem.c, backfill_lane_terminate_overdue), since a
 * cancel's bound starts when the cancel is sent.  A worker that answers a
 * waiting caller (a rehearsal) also watches that the caller still exists:
 * one whose caller is gone terminates itself.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <signal.h>

#include "miscadmin.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "deadline.h"

static TimeoutId deadline_id = MAX_TIMEOUTS;
static volatile sig_atomic_t fired = false;
static TimestampTz armed_at = 0;

/* in the SIGALRM handler: as pg_terminate_backend would */
static void
deadline_handler(void)
{
	fired = true;
	(void) kill(MyProcPid, SIGTERM);
}

void
deadline_arm(TimestampTz at)
{
	if (!IsBackgroundWorker)
		return;
	if (deadline_id == MAX_TIMEOUTS)
		deadline_id = RegisterTimeout(USER_TIMEOUT, deadline_handler);
	armed_at = GetCurrentTimestamp();
	enable_timeout_at(deadline_id, at);
}

static TimeoutId watch_id = MAX_TIMEOUTS;
static volatile pid_t watched_pid = 0;

/* in the SIGALRM handler: kill(pid, 0) is async-signal-safe, a lock is not */
static void
watch_handler(void)
{
	int			save_errno = errno;

	if (watched_pid != 0 && kill(watched_pid, 0) != 0 && errno == ESRCH)
	{
		fired = true;
		(void) kill(MyProcPid, SIGTERM);
	}
	errno = save_errno;
}

void
deadline_watch_pid(int pid)
{
	if (!IsBackgroundWorker || pid <= 0)
		return;
	if (watch_id == MAX_TIMEOUTS)
		watch_id = RegisterTimeout(USER_TIMEOUT, watch_handler);
	watched_pid = pid;
	enable_timeout_every(watch_id, TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000),
						 1000);
}

void
deadline_disarm(void)
{
	if (deadline_id != MAX_TIMEOUTS)
		disable_timeout(deadline_id, false);
}

bool
deadline_fired(int *elapsed_ms)
{
	if (!fired)
		return false;
	if (elapsed_ms != NULL)
		*elapsed_ms = (int) ((GetCurrentTimestamp() - armed_at) / 1000);
	return true;
}
