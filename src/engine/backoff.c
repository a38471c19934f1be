/*-------------------------------------------------------------------------
 *
 * backoff.c
 *	  Doubling delays and waits until a time, as the workers use them: a
 *	  failed batch's retry (lane.c), a lane or scheduler that stopped soon
 *	  after it started (scheduler.c, launcher.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

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
