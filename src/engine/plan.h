/*-------------------------------------------------------------------------
 *
 * plan.h
 *	  Planning a pass (plan.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PLAN_H
#define BACKFILL_PLAN_H

#include "pass.h"

extern void pass_plan(Pass *pass);

#endif							/* BACKFILL_PLAN_H */
