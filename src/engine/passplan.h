/*-------------------------------------------------------------------------
 *
 * passplan.h
 *	  What planning a pass found (PassPlan), shared by the planners
 *	  (plan.c and plan*.c) and by attach.c; no functions of its own.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PASSPLAN_H
#define BACKFILL_PASSPLAN_H

#include "postgres.h"

#include "catalog.h"

/* what planning a pass found: its partitions' bounds and the rows to do */
typedef struct PassPlan
{
	const char *method;			/* histogram, minmax, single or pages; per leaf (n leaves) */
	Datum		bounds;			/* text[]: partition i covers (bounds[i-1], bounds[i]] */
	Datum		estimate;		/* int8 */
	bool		has_estimate;
	char	   *bound;			/* the largest key when planned (key text), or NULL */
	/* planned per leaf: partition i is (lo[i], hi[i]] within leaf_range[i] of leaf[i] */
	int			nleafparts;
	int			room;			/* allocated for that many */
	Datum	   *lo;
	bool	   *lo_null;
	Datum	   *hi;
	bool	   *hi_null;
	Datum	   *leaf;
	Datum	   *leaf_range;
	/* a Citus distributed table shard by shard: partition i is shard shards[i] (int8[]) */
	Datum		shards;
} PassPlan;

/* An int8 from the first row SPI returned, as the plan's estimate. */
static inline void
plan_take_estimate(PassPlan *plan)
{
	bool		isnull;

	plan->estimate = catalog_getdatum(0, 1, &isnull);
	plan->has_estimate = !isnull;
}

#endif							/* BACKFILL_PASSPLAN_H */
