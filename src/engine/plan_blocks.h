/*-------------------------------------------------------------------------
 *
 * plan_blocks.h
 *	  A pass in block order (key => 'ctid'): its plan of the heap into
 *	  block ranges, its bound, and what its convergence sweeps look at
 *	  (plan_blocks.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PLAN_BLOCKS_H
#define BACKFILL_PLAN_BLOCKS_H

#include "postgres.h"

/* the key a declaration stores for block order */
#define BLOCKS_KEY "ctid"

/* sweeps of a pass in block order at most, each while the count falls */
#define BLOCKS_MAX_SWEEPS 10

/* does a declaration's key (column, type) walk the heap in block order? */
extern bool blocks_key(const char *column, Oid type);

/* a rehearsal of a backfill in block order is refused (BF001) */
extern void blocks_refuse_rehearsal(const char *name, const char *column, Oid type);

/*
 * The heap of relid split into about nparts block ranges: the interior
 * bounds as text[] ('(b,0)', each the first block of a range), the method,
 * and the bound: the first block past the heap when planned.
 */
extern Datum blocks_plan_bounds(Oid relid, int nparts, const char **method, char **bound);

/* a further sweep walks to the heap's end as it is now: run.bound grows to it */
extern void blocks_sweep_bound(int64 run_id, Oid relid);

/*
 * The probe of a sweep: the first row still matching, in block order, and
 * the heap's file it lies in, as "(b,o) xmin x in heap file f", or NULL
 */
extern char *blocks_probe_row(Oid relid, const char *relation, const char *predicate);

/*
 * After sweep sweep (its probe): does the action not fix what it is given?
 * The probe row still there, the same version in the same heap file, and
 * matching (*row: "(b,o) xmin x").
 */
extern bool blocks_stalled(Oid relid, const char *relation, const char *predicate,
						   int sweep, const char *probe, char **row);

/*
 * After sweep sweep (its probe), does remaining call for another?  The
 * count fell, or the heap was rewritten since the probe (within
 * BLOCKS_MAX_SWEEPS).
 */
extern bool blocks_sweep_falls(int64 run_id, Oid relid, int sweep, const char *probe,
							   int64 remaining);

#endif							/* BACKFILL_PLAN_BLOCKS_H */
