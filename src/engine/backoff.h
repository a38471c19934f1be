/*-------------------------------------------------------------------------
 *
 * backoff.h
 *	  Doubling delays and waits until a time, as the workers use them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_BACKOFF_H
#define BACKFILL_BACKOFF_H

#include "postgres.h"

#include "utils/timestamp.h"

/* base_ms doubled step times, never above cap_ms */
extern int64 backoff_doubling_ms(int step, int64 base_ms, int64 cap_ms);

/* the doubling delay of a retry, with jitter: half to all of it */
extern int64 backoff_jittered_ms(int step, int64 base_ms, int64 cap_ms);

/* milliseconds from now until then, rounded up (at least 1) */
extern long backoff_ms_until(TimestampTz now, TimestampTz then);

/*
 * Sleep on the process latch until a time, answering signals and reloading
 * the configuration meanwhile; true when the latch was set first.
 */
extern bool backoff_sleep_until(TimestampTz until);

#endif							/* BACKFILL_BACKOFF_H */
