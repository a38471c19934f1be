/*-------------------------------------------------------------------------
 *
 * leaves.h
 *	  A partitioned table's leaves in key order: whether a pass may plan
 *	  them one by one, each leaf's interval of the leading key column, and
 *	  that interval as text and as conditions of a scan of the parent
 *	  (leaves.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_LEAVES_H
#define BACKFILL_LEAVES_H

#include "postgres.h"

#include "nodes/pg_list.h"

#include "keyset.h"

/*
 * One interval of the leading key column that lies in one leaf: a RANGE
 * leaf's bounds (met with its ancestors'), or one value of a LIST leaf.
 * An end that is missing is open.
 */
typedef struct LeafPiece
{
	Oid			leaf;			/* InvalidOid: the union of neighbours of several leaves */
	bool		has_lo;
	bool		lo_incl;
	Datum		lo;
	bool		has_hi;
	bool		hi_incl;
	Datum		hi;
	double		tuples;			/* the leaf's reltuples, shared among its pieces */
} LeafPiece;

/* the four parameters a scan's leaf condition takes: >=, >, <, <= */
#define LEAVES_SCAN_PARAMS 4

extern List *leaves_pieces(Oid relid, const char *lead_column, Oid lead_type,
						   Oid lead_collation, const char **why);
extern List *leaves_attached(Oid relid, const char *lead_column, Oid lead_type,
							 Oid lead_collation);
extern List *leaves_coalesce(List *pieces, double limit, Oid lead_type, Oid lead_collation,
							 int *merged);
extern int	leaves_count(List *pieces);
extern List *leaves_uncovered(List *pieces, List *planned, Oid lead_type, Oid lead_collation);
extern char *leaves_range_text(const LeafPiece *piece, Oid lead_type);
extern bool leaves_range_parse(const char *text, Oid lead_type, LeafPiece *piece);
extern char *leaves_piece_sql(const LeafPiece *piece, const char *lead_sql, Oid lead_type,
							  int first_param, Datum *args, int *nargs);
extern char *leaves_scan_sql(const char *lead_sql, Oid lead_type, int first_param);
extern void leaves_scan_args(const LeafPiece *piece, Datum *values, char *nulls);
extern bool leaves_still_partition(Oid leaf, Oid relid);
extern List *leaves_versions(Oid relid);
extern bool leaves_changed(List *before, List *now);
extern Datum leaves_single_bounds(const LeafPiece *piece, const char *relation,
								  const char *key, Oid key_type, Oid collation, int nparts,
								  const char **method);

#endif							/* BACKFILL_LEAVES_H */
