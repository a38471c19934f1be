/*-------------------------------------------------------------------------
 *
 * planshard.h
 *	  The planner per Citus shard (planshard.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PLANSHARD_H
#define BACKFILL_PLANSHARD_H

#include "pass.h"
#include "passplan.h"

extern void plan_citus_estimate(Pass *pass, PassPlan *plan);
extern bool plan_per_shard(Pass *pass, PassPlan *plan, const char **why);

#endif							/* BACKFILL_PLANSHARD_H */
