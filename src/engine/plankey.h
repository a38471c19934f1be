/*-------------------------------------------------------------------------
 *
 * plankey.h
 *	  The planner of a key of one column, and the pass's bound (plankey.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PLANKEY_H
#define BACKFILL_PLANKEY_H

#include "pass.h"
#include "passplan.h"

extern char *plan_upper_bound(Pass *pass);
extern void plan_key_bounds(Pass *pass, PassPlan *plan, int nparts);

#endif							/* BACKFILL_PLANKEY_H */
