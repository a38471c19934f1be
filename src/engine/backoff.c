/*-------------------------------------------------------------------------
 *
 * backoff.c
 *	  Doubling delays and waits until a time, as the workers use them: a
 *	  failed batch's retry (lane.c), a lane or scheduler that stopped soon
 *	  after it started (scheduler.c, launcher.c), a lane waiting out its
 *	  rate or holding back (pacing.c).
 *
 * backoff_sleep_until is the one interruptible sleep of a lane: it uses
 * only the process's latch and signal flags, so the engine can wait
 * without knowing which worker it runs in.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/pg_prng.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"

#include "backoff.h"

int64
backoff_doubling_ms(int step, int64 base_ms, int64 cap_ms)
{
	int64		delay = base_ms;

	for (int i = 0; i < step && delay < cap_ms; i++)
		delay *= 2;
	return Min(delay, cap_ms);
}

long
backoff_ms_until(TimestampTz now, TimestampTz then)
{
	long		secs;
	int			usecs;

	TimestampDifference(now, then, &secs, &usecs);
	return secs * 1000L + usecs / 1000 + 1;
}

int64
backoff_jittered_ms(int step, int64 base_ms, int64 cap_ms)
{
	int64		delay_ms = backoff_doubling_ms(step, base_ms, cap_ms);

	return (int64) (delay_ms * (0.5 + 0.5 * pg_prng_double(&pg_global_prng_state)));
}

/*
 * Returns true when the latch was set first: a control (pause, cancel, a
 * new declaration) or the scheduler wants the lane to look at its pass
 * again.  A configuration reload sets the latch too; it is not a wake.
 */
bool
backoff_sleep_until(TimestampTz until)
{
	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		long		secs;
		int			usecs;
		int			rc;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (now >= until)
			return false;
		TimestampDifference(now, until, &secs, &usecs);
		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   Max(1L, secs * 1000L + usecs / 1000), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		if ((rc & WL_LATCH_SET) && !ConfigReloadPending)
			return true;
	}
}
