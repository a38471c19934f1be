/*-------------------------------------------------------------------------
 *
 * planleaf.c
 *	  The planner of a partitioned table, per leaf: each leaf's piece of the
 *	  key range (leaves.c), split by its share of the rows.
 *
 * Each function that writes runs one transaction of its own (or says
 * whose it runs in).  Bookkeeping runs as the extension's owner
 * (catalog.c); what reads the table runs as the lane's own role.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/lmgr.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/regproc.h"
#include "utils/lsyscache.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

#include "catalog.h"
#include "citus.h"
#include "config.h"
#include "declaration.h"
#include "errors.h"
#include "estimate.h"
#include "identity.h"
#include "keyset.h"
#include "pass.h"
#include "passplan.h"
#include "planleaf.h"
#include "searchpath.h"
#include "shmem.h"
#include "state.h"
#include "xact.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"

/* the leading key column: its name, type, collation and how a scan names it */
void
pass_lead(Pass *pass, const char **column, Oid *type, Oid *collation, char **sql)
{
	if (pass->keyset.nkeys > 1)
	{
		*column = pass->keyset.cols[0].name;
		*type = pass->keyset.cols[0].type;
		*collation = pass->keyset.cols[0].collation;
		*sql = keyset_lead_sql(&pass->keyset);
	}
	else
	{
		int32		typmod;

		*column = pass->key;
		get_atttypetypmodcoll(pass->relid, get_attnum(pass->relid, pass->key), type, &typmod,
							  collation);
		*type = pass->keytype;
		*sql = (char *) quote_identifier(pass->key);
	}
}

/* how many partitions a piece gets: its leaf's share of the rows, at least one */
static int
piece_parts(LeafPiece *piece, double total, int npieces, int nparts)
{
	if (nparts <= 1)
		return 1;
	if (total <= 0)
		return Max(1, nparts / npieces);
	return Max(1, (int) (nparts * piece->tuples / total + 0.5));
}

/* the interior bounds of one piece, as text[], from its leaf's statistics */
static Datum
piece_bounds(Pass *pass, LeafPiece *piece, int n, const char *lead_sql, Oid lead_type,
			 Oid collation)
{
	const char *method;

	if (pass->keyset.nkeys > 1)
	{
		KeyPlanScope scope = {0};

		scope.stats_relid = piece->leaf;
		scope.where = leaves_piece_sql(piece, lead_sql, lead_type, 3, scope.args, &scope.nargs);
		return keyset_plan_bounds(&pass->keyset, n, &scope, &method);
	}
	return leaves_single_bounds(piece, pass->relation, pass->key, pass->keytype, collation, n,
								&method);
}

/* the partitions of one piece into the plan: (NULL, b1], (b1, b2], ... (bn, NULL] */
void
plan_add_piece(PassPlan *plan, LeafPiece *piece, Datum bounds, Oid lead_type)
{
	ArrayType  *arr = DatumGetArrayTypeP(bounds);
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	Datum		range = CStringGetTextDatum(leaves_range_text(piece, lead_type));

	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (plan->nleafparts + n + 1 > plan->room)
	{
		plan->room = 2 * (plan->nleafparts + n + 1);
		plan->lo = repalloc(plan->lo, sizeof(Datum) * plan->room);
		plan->hi = repalloc(plan->hi, sizeof(Datum) * plan->room);
		plan->lo_null = repalloc(plan->lo_null, sizeof(bool) * plan->room);
		plan->hi_null = repalloc(plan->hi_null, sizeof(bool) * plan->room);
		plan->leaf = repalloc(plan->leaf, sizeof(Datum) * plan->room);
		plan->leaf_range = repalloc(plan->leaf_range, sizeof(Datum) * plan->room);
	}
	for (int i = 0; i <= n; i++)
	{
		int			j = plan->nleafparts++;

		plan->lo_null[j] = (i == 0);
		plan->lo[j] = i > 0 ? elems[i - 1] : (Datum) 0;
		plan->hi_null[j] = (i == n);
		plan->hi[j] = i < n ? elems[i] : (Datum) 0;
		plan->leaf[j] = ObjectIdGetDatum(piece->leaf);
		plan->leaf_range[j] = range;
	}
}

/*
 * A partitioned table whose leaves keep apart in key order (leaves.c) is
 * planned leaf by leaf: each piece of a leaf gets partitions in
 * proportion to the leaf's reltuples, split from that leaf's own
 * statistics, every bound inside the piece.  Returns false, with *why
 * when the table is partitioned, when the pass walks the parent instead.
 * Needs the 0.5 catalog (partition.leaf).
 */
bool
plan_per_leaf(Pass *pass, PassPlan *plan, int nparts, const char **why)
{
	const char *column;
	Oid			type;
	Oid			collation;
	char	   *lead_sql;
	List	   *pieces;
	double		total = 0;
	int			nleaves;
	int			nintervals;
	int			merged = 0;
	ListCell   *lc;

	if (!pass->partitioned)
		return false;
	pass_lead(pass, &column, &type, &collation, &lead_sql);
	pieces = leaves_pieces(pass->relid, column, type, collation, why);
	if (pieces == NIL)
		return false;
	foreach(lc, pieces)
		total += ((LeafPiece *) lfirst(lc))->tuples;
	nleaves = leaves_count(pieces);
	nintervals = list_length(pieces);
	/*
	 * Neighbours with few rows together share a partition: no more than a
	 * partition's share of the rows (what a walk of the parent gives each
	 * of its nparts), nor fewer than a few batches' worth.  Without
	 * statistics (reltuples unknown) every piece stays apart.
	 */
	if (total > 0)
		pieces = leaves_coalesce(pieces, Max(total / nparts, 4.0 * pass->batch_size), type,
								 collation, &merged);
	/* each piece's partitions are its bounds and one more (grown as needed) */
	plan->room = list_length(pieces) * 2;
	plan->lo = palloc(sizeof(Datum) * plan->room);
	plan->hi = palloc(sizeof(Datum) * plan->room);
	plan->lo_null = palloc(sizeof(bool) * plan->room);
	plan->hi_null = palloc(sizeof(bool) * plan->room);
	plan->leaf = palloc(sizeof(Datum) * plan->room);
	plan->leaf_range = palloc(sizeof(Datum) * plan->room);
	foreach(lc, pieces)
	{
		LeafPiece  *piece = lfirst(lc);
		int			n = Min(piece_parts(piece, total, list_length(pieces), nparts), nparts);

		/* a union of several leaves' pieces is small: one partition, no bounds */
		plan_add_piece(plan, piece, OidIsValid(piece->leaf) ?
					   piece_bounds(pass, piece, n, lead_sql, type, collation) :
					   PointerGetDatum(construct_empty_array(TEXTOID)), type);
	}
	plan->method = psprintf("per leaf (%d %s", nleaves, nleaves == 1 ? "leaf" : "leaves");
	if (nintervals != nleaves)
		plan->method = psprintf("%s, %d intervals", plan->method, nintervals);
	if (merged > 0)
		plan->method = psprintf("%s; small neighbours merged: %d partition%s", plan->method,
								plan->nleafparts, plan->nleafparts == 1 ? "" : "s");
	plan->method = psprintf("%s)", plan->method);
	plan->bounds = PointerGetDatum(construct_empty_array(TEXTOID));
	return true;
}

/* an array of n values of a type, NULL where nulls says so */
static Datum
plan_array(Datum *values, bool *nulls, int n, Oid type)
{
	int			dims[1] = {n};
	int			lbs[1] = {1};
	int16		len;
	bool		byval;
	char		align;

	get_typlenbyvalalign(type, &len, &byval, &align);
	return PointerGetDatum(construct_md_array(values, nulls, 1, dims, lbs, type, len, byval,
											  align));
}

/* the partitions of a plan per leaf, numbered from first, pending (in the catalog scope) */
void
insert_leaf_partitions(Pass *pass, PassPlan *plan, int first)
{
	state_parts_planned_leaves(pass->run_id, first,
							   plan_array(plan->lo, plan->lo_null, plan->nleafparts, TEXTOID),
							   plan_array(plan->hi, plan->hi_null, plan->nleafparts, TEXTOID),
							   plan_array(plan->leaf, NULL, plan->nleafparts, OIDOID),
							   plan_array(plan->leaf_range, NULL, plan->nleafparts, TEXTOID));
}
