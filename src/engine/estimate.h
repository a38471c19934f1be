/*-------------------------------------------------------------------------
 *
 * estimate.h
 *	  How many rows a pass has to do, as the declaring role (estimate.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_ESTIMATE_H
#define BACKFILL_ESTIMATE_H

#include "postgres.h"

/*
 * The rows of relid matching predicate: the planner's estimate, or, where
 * the statistics cannot answer, a bounded sample's; *note then says so
 * (for plan_method), else NULL.  False when there is no estimate.
 */
extern bool estimate_pass_rows(const char *name, Oid relid, const char *relation,
							   const char *predicate, int64 *rows, char **note);

#endif							/* BACKFILL_ESTIMATE_H */
