/*-------------------------------------------------------------------------
 *
 * planpages.h
 *	  The planner of a pages source (planpages.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PLANPAGES_H
#define BACKFILL_PLANPAGES_H

#include "pass.h"
#include "passplan.h"

extern bool call_count_fn(Pass *pass, bool read_only);
extern void plan_pages(Pass *pass, PassPlan *plan);

#endif							/* BACKFILL_PLANPAGES_H */
