/*-------------------------------------------------------------------------
 *
 * pacing.h
 *	  How fast a lane goes: the pass's rate, WAL budgets, adaptive batch
 *	  size, health and the switches that pause all (pacing.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PACING_H
#define BACKFILL_PACING_H

#include "postgres.h"

#include "utils/timestamp.h"

#include "pass.h"

extern void pacing_start(Pass *pass, Claim *claim);
extern BatchOutcome pacing_before_batch(Pass *pass, Claim *claim);
extern void pacing_charge_wal(Pass *pass, Claim *claim, TimestampTz started);
extern BatchOutcome pacing_after_attempt(Pass *pass, TimestampTz started);
extern BatchOutcome pacing_after_batch(Pass *pass, Claim *claim, TimestampTz started);
extern void pacing_after_timeout(Pass *pass, Claim *claim);

/* Is the pass still running (paused or not)?  In a transaction of its own. */
extern bool pacing_pass_running(Pass *pass);

/* why the claim's lane holds back (NULL: it does not), for backfill_status */
extern void pacing_say_throttle(Pass *pass, Claim *claim, const char *reason);

/* a lane whose next batch is further off than this gives its lane to a waiting pass */
#define LANE_IDLE_GIVE_BACK_MS	5000

#endif							/* BACKFILL_PACING_H */
