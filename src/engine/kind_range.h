/*-------------------------------------------------------------------------
 *
 * kind_range.h
 *	  A key range of a table as a kind of partition (kind_range.c): its
 *	  routines, which a leaf's piece (kind_leaf.c) shares, and its key
 *	  scan, which takes what another kind adds to it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_KIND_RANGE_H
#define BACKFILL_KIND_RANGE_H

#include "postgres.h"

#include "kind.h"

/* parameters a key scan may take after its bounds */
#define KEY_SCAN_MAX_EXTRA 4

/* the most parameters of a key scan: the limit, the cursor, the upper bound, the extra */
#define KEY_SCAN_NARGS (1 + 2 * DECLARATION_MAX_KEY_COLUMNS + KEY_SCAN_MAX_EXTRA)

/* the variant of the key scan a claim takes (a lower bound: 1, an upper bound: 2) */
#define KEY_SCAN_VARIANT(claim) (((claim)->has_cursor ? 1 : 0) | ((claim)->has_hi ? 2 : 0))

/*
 * What another kind adds to a key range's scan: a condition on the
 * leading key column (sql: its lead_sql, its type, the number of its first
 * parameter), of nparams parameters of that column's type after the
 * bounds, and how its plans are made (the plan cache's cursor options).
 */
typedef struct KeyScanExtra
{
	char	   *(*sql) (const char *lead_sql, Oid lead_type, int first_param);
	int			nparams;
	int			cursor_options;
} KeyScanExtra;

extern void range_prepare(Pass *pass, const KeyScanExtra *extra);
extern void range_scan_args(Pass *pass, Claim *claim, int64 limit, Datum *values, char *nulls);
extern void range_found(Pass *pass, int rc, Batch *batch);
extern void range_act(Pass *pass, Claim *claim, Batch *batch);
extern void range_checkpoint(Pass *pass, Claim *claim, Batch *batch);
extern void range_keep(Pass *pass, Claim *claim, Batch *batch);
extern void range_end(Pass *pass, Claim *claim, Batch *batch);

#endif							/* BACKFILL_KIND_RANGE_H */
