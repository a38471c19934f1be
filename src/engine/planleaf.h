/*-------------------------------------------------------------------------
 *
 * planleaf.h
 *	  The planner per leaf of a partitioned table (planleaf.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PLANLEAF_H
#define BACKFILL_PLANLEAF_H

#include "pass.h"
#include "passplan.h"

extern void pass_lead(Pass *pass, const char **column, Oid *type, Oid *collation, char **sql);
extern void plan_add_piece(PassPlan *plan, LeafPiece *piece, Datum bounds, Oid lead_type);
extern bool plan_per_leaf(Pass *pass, PassPlan *plan, int nparts, const char **why);
extern void insert_leaf_partitions(Pass *pass, PassPlan *plan, int first);

#endif							/* BACKFILL_PLANLEAF_H */
