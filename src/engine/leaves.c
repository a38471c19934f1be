/*-------------------------------------------------------------------------
 *
 * leaves.c
 *	  A partitioned table's leaves in key order: may a pass be planned leaf
 *	  by leaf, each leaf's interval of the leading key column, and that
 *	  interval as the partition row keeps it and as a scan of the parent
 *	  names it.
 *
 * A pass's partitions must cover disjoint key ranges, and a batch's action
 * (which names the parent) touches every row between the first and the
 * last key its scan found.  A partition may therefore keep to one leaf
 * only when that leaf is one interval of the key order that no other leaf
 * enters: when every level of the tree is partitioned by RANGE or LIST on
 * the leading key column alone, under the key's own btree operator family
 * and collation, with no DEFAULT partition (a default holds whatever falls
 * in the gaps, interleaved with the others).  A RANGE leaf is then the
 * interval of its bounds, met with those of its ancestors; a LIST leaf is
 * one interval per value: its values need not be neighbours (a leaf of 10
 * and 30 beside a leaf of 20), so each value is a piece of its own, and
 * a batch inside one value touches only that value's rows; values of one
 * leaf with no other leaf's value between them (4 and 5) make one piece,
 * since no key of another leaf lies inside it.  HASH
 * partitioning, a partition key of other or more columns, or a default
 * leaf keep the walk of the parent.
 *
 * The scan of a piece is a scan of the PARENT with the piece's bounds on
 * the leading column: the planner prunes it to the one leaf, which it
 * reads through the leaf's own index, and the parent's privileges and
 * row-level security policies hold (a leaf read directly would need
 * privileges of its own and would bypass the parent's policies).
 *
 * Nothing here runs SQL but the statistics and range probes of
 * leaves_single_bounds, as the lane's role.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "nodes/parsenodes.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/partcache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "leaves.h"
#include "names.h"
#include "stats.h"
#include "worker.h"

/* what the walk of the tree compares with */
typedef struct LeafWalk
{
	const char *lead_column;
	Oid			lead_type;
	Oid			lead_collation;
	FmgrInfo   *cmp;
	List	   *pieces;
	const char *why;			/* set: the table is not planned per leaf */
	bool		lenient;		/* covering leaves attached since the plan (see leaves_attached) */
} LeafWalk;

static int
compare_values(FmgrInfo *cmp, Oid collation, Datum a, Datum b)
{
	return DatumGetInt32(FunctionCall2Coll(cmp, collation, a, b));
}

static FmgrInfo *
type_cmp(Oid type)
{
	TypeCacheEntry *entry = lookup_type_cache(type, TYPECACHE_CMP_PROC_FINFO);

	if (!OidIsValid(entry->cmp_proc))
		elog(ERROR, "type %s has no btree comparison", format_type_be(type));
	return &entry->cmp_proc_finfo;
}

/* is the piece empty (its lower end above its upper)? */
static bool
piece_empty(const LeafPiece *p, FmgrInfo *cmp, Oid collation)
{
	int			c;

	if (!p->has_lo || !p->has_hi)
		return false;
	c = compare_values(cmp, collation, p->lo, p->hi);
	return c > 0 || (c == 0 && !(p->lo_incl && p->hi_incl));
}

/* a and b met: the higher lower end, the lower upper end */
static LeafPiece
piece_meet(const LeafPiece *a, const LeafPiece *b, FmgrInfo *cmp, Oid collation)
{
	LeafPiece	m = *b;
	int			c;

	if (a->has_lo && (!b->has_lo ||
					  (c = compare_values(cmp, collation, a->lo, b->lo)) > 0 ||
					  (c == 0 && !a->lo_incl)))
	{
		m.has_lo = true;
		m.lo = a->lo;
		m.lo_incl = a->lo_incl;
	}
	if (a->has_hi && (!b->has_hi ||
					  (c = compare_values(cmp, collation, a->hi, b->hi)) < 0 ||
					  (c == 0 && !a->hi_incl)))
	{
		m.has_hi = true;
		m.hi = a->hi;
		m.hi_incl = a->hi_incl;
	}
	return m;
}

/* a partition's bound, from pg_class.relpartbound; its reltuples */
static PartitionBoundSpec *
bound_spec(Oid child, double *tuples)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(child));
	Datum		d;
	bool		isnull;
	PartitionBoundSpec *spec;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", child);
	d = SysCacheGetAttr(RELOID, tuple, Anum_pg_class_relpartbound, &isnull);
	if (isnull)
		elog(ERROR, "relation %u has no partition bound", child);
	spec = castNode(PartitionBoundSpec, stringToNode(TextDatumGetCString(d)));
	*tuples = Max(((Form_pg_class) GETSTRUCT(tuple))->reltuples, 0);
	ReleaseSysCache(tuple);
	return spec;
}

/* one end of a RANGE bound of one column: false when it is MINVALUE or MAXVALUE */
static bool
range_end(List *datums, Datum *value)
{
	PartitionRangeDatum *prd = linitial_node(PartitionRangeDatum, datums);

	if (prd->kind != PARTITION_RANGE_DATUM_VALUE)
		return false;
	*value = castNode(Const, prd->value)->constvalue;
	return true;
}

/* why a level of the tree does not keep its leaves apart in key order, or NULL */
static const char *
level_refusal(Relation rel, LeafWalk *w)
{
	PartitionKey key = RelationGetPartitionKey(rel);
	AttrNumber	lead = get_attnum(RelationGetRelid(rel), w->lead_column);
	TypeCacheEntry *entry = lookup_type_cache(w->lead_type, TYPECACHE_BTREE_OPFAMILY);

	if (key->strategy == PARTITION_STRATEGY_HASH)
		return "leaves interleave in key order (hash)";
	if (key->partnatts != 1 || key->partattrs[0] != lead)
		return psprintf("%s is not partitioned on the leading key column alone",
						RelationGetRelationName(rel));
	if (key->partopfamily[0] != entry->btree_opf ||
		(OidIsValid(w->lead_collation) && key->partcollation[0] != w->lead_collation))
		return psprintf("%s orders its partitions by another operator class or collation "
						"than the key's", RelationGetRelationName(rel));
	return NULL;
}

static void walk_level(Oid relid, const LeafPiece *within, LeafWalk *w);

/* why a partitioned child's own tree is not walked leaf by leaf, or NULL */
static const char *
subtree_refusal(Oid child, LeafWalk *w)
{
	Relation	rel = relation_open(child, AccessShareLock);
	const char *why = level_refusal(rel, w);
	PartitionDesc pd = RelationGetPartitionDesc(rel, true);

	/* a table of no partitions has no bounds */
	if (why == NULL && pd->boundinfo != NULL && partition_bound_has_default(pd->boundinfo))
		why = "a default partition";
	relation_close(rel, AccessShareLock);
	return why;
}

/* one child's pieces (a LIST child: one per value), met with what its parent allows */
static void
walk_child(Oid child, bool is_leaf, const LeafPiece *within, LeafWalk *w)
{
	double		tuples;
	PartitionBoundSpec *spec = bound_spec(child, &tuples);
	List	   *mine = NIL;
	ListCell   *lc;
	int			n = 0;

	if (spec->strategy == PARTITION_STRATEGY_LIST)
	{
		foreach(lc, spec->listdatums)
		{
			Const	   *c = lfirst_node(Const, lc);
			LeafPiece  *p = palloc0(sizeof(LeafPiece));

			if (c->constisnull)
				continue;		/* a key has no NULL */
			p->has_lo = p->has_hi = p->lo_incl = p->hi_incl = true;
			p->lo = p->hi = c->constvalue;
			mine = lappend(mine, p);
		}
	}
	else
	{
		LeafPiece  *p = palloc0(sizeof(LeafPiece));

		p->has_lo = range_end(spec->lowerdatums, &p->lo);
		p->lo_incl = true;
		p->has_hi = range_end(spec->upperdatums, &p->hi);
		p->hi_incl = false;
		mine = lappend(mine, p);
	}
	foreach(lc, mine)
	{
		LeafPiece	met = piece_meet(within, (LeafPiece *) lfirst(lc), w->cmp, w->lead_collation);

		if (piece_empty(&met, w->cmp, w->lead_collation))
			continue;
		met.leaf = child;
		/*
		 * Covering: a partitioned child whose own tree does not keep its
		 * leaves apart (HASH below, a default) is one piece, its whole
		 * interval here; a scan of the parent with it prunes to that
		 * subtree, read in key order through its leaves' indexes.
		 */
		if (!is_leaf && w->lenient && subtree_refusal(child, w) != NULL)
			is_leaf = true;
		if (is_leaf)
		{
			LeafPiece  *keep = palloc(sizeof(LeafPiece));

			*keep = met;
			w->pieces = lappend(w->pieces, keep);
			n++;
		}
		else
			walk_level(child, &met, w);
	}
	/* the leaf's rows shared evenly among its values */
	for (int i = list_length(w->pieces) - n; i < list_length(w->pieces); i++)
		((LeafPiece *) list_nth(w->pieces, i))->tuples = tuples / n;
}

/* the pieces of one partitioned level and those below it */
static void
walk_level(Oid relid, const LeafPiece *within, LeafWalk *w)
{
	Relation	rel = relation_open(relid, AccessShareLock);
	PartitionDesc pd;

	if (w->why == NULL)
		w->why = level_refusal(rel, w);
	if (w->why == NULL)
	{
		pd = RelationGetPartitionDesc(rel, true);
		if (pd->boundinfo != NULL && partition_bound_has_default(pd->boundinfo) && !w->lenient)
			w->why = "a default partition holds what falls between the others";
		/* covering, a default is left to the count (its rows are among the others') */
		for (int i = 0; i < pd->nparts && w->why == NULL; i++)
			if (i != pd->boundinfo->default_index)
				walk_child(pd->oids[i], pd->is_leaf[i], within, w);
	}
	relation_close(rel, AccessShareLock);
}

/* qsort_arg's comparison of pieces by their lower ends (open first) */
static int
piece_order(const void *a, const void *b, void *arg)
{
	const LeafPiece *pa = *(LeafPiece *const *) a;
	const LeafPiece *pb = *(LeafPiece *const *) b;
	LeafWalk   *w = (LeafWalk *) arg;
	int			c;

	if (!pa->has_lo || !pb->has_lo)
		return (int) pa->has_lo - (int) pb->has_lo;
	c = compare_values(w->cmp, w->lead_collation, pa->lo, pb->lo);
	if (c != 0)
		return c;
	return (int) pb->lo_incl - (int) pa->lo_incl;
}

/* does a (lower in order) reach into b? */
static bool
pieces_overlap(const LeafPiece *a, const LeafPiece *b, FmgrInfo *cmp, Oid collation)
{
	int			c;

	if (!a->has_hi || !b->has_lo)
		return true;
	c = compare_values(cmp, collation, a->hi, b->lo);
	return c > 0 || (c == 0 && a->hi_incl && b->lo_incl);
}

/*
 * The pieces sorted by their lower ends; false when two overlap.  Pieces
 * of one leaf that follow each other with no other leaf's between them
 * (the values 4 and 5 of a LIST leaf) become one: no key of another leaf
 * lies between them.
 */
static bool
sort_pieces(List **pieces, LeafWalk *w)
{
	int			n = list_length(*pieces);
	LeafPiece **arr = palloc(sizeof(LeafPiece *) * Max(n, 1));
	List	   *sorted = NIL;
	LeafPiece  *last = NULL;

	for (int i = 0; i < n; i++)
		arr[i] = list_nth(*pieces, i);
	qsort_arg(arr, n, sizeof(LeafPiece *), piece_order, w);
	for (int i = 0; i < n; i++)
	{
		if (last != NULL && pieces_overlap(last, arr[i], w->cmp, w->lead_collation))
			return false;
		if (last != NULL && last->leaf == arr[i]->leaf)
		{
			last->has_hi = arr[i]->has_hi;
			last->hi = arr[i]->hi;
			last->hi_incl = arr[i]->hi_incl;
			last->tuples += arr[i]->tuples;
			continue;
		}
		sorted = lappend(sorted, arr[i]);
		last = arr[i];
	}
	*pieces = sorted;
	return true;
}

/* walk relid's whole tree into w (zeroed), comparing on its lead column */
static void
walk_tree(Oid relid, const char *lead_column, Oid lead_type, Oid lead_collation, bool lenient,
		  LeafWalk *w)
{
	LeafPiece	all = {0};

	w->lead_column = lead_column;
	w->lead_type = lead_type;
	w->lead_collation = lead_collation;
	w->cmp = type_cmp(lead_type);
	w->lenient = lenient;
	walk_level(relid, &all, w);
}

/*
 * The pieces of a partitioned table's leaves in key order, or NIL with
 * *why saying why the table is walked through its parent instead.
 * Partitions being detached (CONCURRENTLY) are left out.
 */
List *
leaves_pieces(Oid relid, const char *lead_column, Oid lead_type, Oid lead_collation,
			  const char **why)
{
	LeafWalk	w = {0};

	walk_tree(relid, lead_column, lead_type, lead_collation, false, &w);
	if (w.why == NULL && w.pieces == NIL)
		w.why = "it has no leaves";
	if (w.why == NULL && !sort_pieces(&w.pieces, &w))
		w.why = "its leaves overlap in key order";
	*why = w.why;
	return w.why ? NIL : w.pieces;
}

/*
 * The pieces of a tree planned per leaf as it is now, to find what was
 * attached since the plan (leaves_uncovered): as leaves_pieces, but one
 * leaf or subtree never keeps the others from being listed.  A
 * partitioned table attached whose own tree is not plannable leaf by leaf
 * (HASH, a default) is one piece for its whole interval; a default
 * partition attached is left out (the count finds its rows); pieces are
 * not sorted nor checked for overlap (leaves_uncovered keeps those that
 * overlap no planned piece).
 */
List *
leaves_attached(Oid relid, const char *lead_column, Oid lead_type, Oid lead_collation)
{
	LeafWalk	w = {0};

	walk_tree(relid, lead_column, lead_type, lead_collation, true, &w);
	return w.why ? NIL : w.pieces;
}

/*
 * Does b begin where a ends, with no key between them that a leaf could
 * hold: a RANGE bound shared ([d1,d2) and [d2,d3)), or, for an integer
 * key, values that follow each other ([4,4] and [5,5], values of LIST
 * leaves)?
 */
static bool
pieces_touch(const LeafPiece *a, const LeafPiece *b, Oid type, FmgrInfo *cmp, Oid collation)
{
	int64		hi;
	int64		lo;

	if (!a->has_hi || !b->has_lo)
		return false;
	if (a->hi_incl != b->lo_incl)
		return compare_values(cmp, collation, a->hi, b->lo) == 0;
	if (!a->hi_incl || (type != INT2OID && type != INT4OID && type != INT8OID))
		return false;
	hi = type == INT2OID ? DatumGetInt16(a->hi) : type == INT4OID ? DatumGetInt32(a->hi) :
		DatumGetInt64(a->hi);
	lo = type == INT2OID ? DatumGetInt16(b->lo) : type == INT4OID ? DatumGetInt32(b->lo) :
		DatumGetInt64(b->lo);
	return hi < PG_INT64_MAX && hi + 1 == lo;
}

/*
 * The sorted pieces with neighbours that hold few rows together merged:
 * consecutive pieces (in key order, of whatever leaves) that touch (no key
 * between them, pieces_touch) and whose reltuples sum to at most limit
 * become one piece over their union, its leaf InvalidOid (it spans
 * several).  The union has no gap, so no leaf can be attached inside it
 * but over a leaf detached from it (which the count finds, as for any
 * planned piece).  A scan of the parent within the union is pruned to
 * those leaves and reads them in key order through their indexes (an
 * ordered Append of RANGE leaves, a Merge Append of interleaved LIST
 * leaves), so one partition does them all in a few batches instead of
 * one batch (at least) per leaf or LIST value.  A piece above the limit
 * stays alone.  *merged: how many pieces were merged into others.
 */
List *
leaves_coalesce(List *pieces, double limit, Oid lead_type, Oid lead_collation, int *merged)
{
	FmgrInfo   *cmp = type_cmp(lead_type);
	List	   *out = NIL;
	LeafPiece  *group = NULL;
	ListCell   *lc;

	*merged = 0;
	foreach(lc, pieces)
	{
		LeafPiece  *p = lfirst(lc);

		if (group != NULL && group->tuples + p->tuples <= limit &&
			pieces_touch(group, p, lead_type, cmp, lead_collation))
		{
			group->has_hi = p->has_hi;
			group->hi = p->hi;
			group->hi_incl = p->hi_incl;
			group->tuples += p->tuples;
			group->leaf = InvalidOid;
			(*merged)++;
			continue;
		}
		group = palloc(sizeof(LeafPiece));
		*group = *p;
		out = lappend(out, group);
	}
	return out;
}

/* how many leaves the pieces come from */
int
leaves_count(List *pieces)
{
	List	   *seen = NIL;
	ListCell   *lc;

	foreach(lc, pieces)
		seen = list_append_unique_oid(seen, ((LeafPiece *) lfirst(lc))->leaf);
	return list_length(seen);
}

/*
 * The pieces that overlap none planned already: a leaf attached since the
 * plan, in a gap between the planned ones.  A leaf that overlaps a
 * planned piece (one attached where a detached one was) is left out: the
 * partitions of that piece cover its rows in their range, and two
 * partitions must never share a key.
 */
List *
leaves_uncovered(List *pieces, List *planned, Oid lead_type, Oid lead_collation)
{
	FmgrInfo   *cmp = type_cmp(lead_type);
	List	   *fresh = NIL;
	ListCell   *lc;
	ListCell   *pc;

	foreach(lc, pieces)
	{
		LeafPiece  *p = lfirst(lc);
		bool		covered = false;

		foreach(pc, planned)
		{
			LeafPiece	met = piece_meet(p, (LeafPiece *) lfirst(pc), cmp, lead_collation);

			covered |= !piece_empty(&met, cmp, lead_collation);
		}
		if (!covered)
			fresh = lappend(fresh, p);
	}
	return fresh;
}

/* a value as a range's bound writes it: quoted when empty or special */
static void
append_value(StringInfo buf, Datum value, Oid type)
{
	Oid			output;
	bool		varlena;

	getTypeOutputInfo(type, &output, &varlena);
	append_literal_field(buf, worker_key_output(output, value), "()[],", '\\');
}

/* a piece as text, as a range literal writes it: "[10,15)", "[7,7]", "(,100)" */
char *
leaves_range_text(const LeafPiece *piece, Oid lead_type)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, piece->has_lo && piece->lo_incl ? '[' : '(');
	if (piece->has_lo)
		append_value(&buf, piece->lo, lead_type);
	appendStringInfoChar(&buf, ',');
	if (piece->has_hi)
		append_value(&buf, piece->hi, lead_type);
	appendStringInfoChar(&buf, piece->has_hi && piece->hi_incl ? ']' : ')');
	return buf.data;
}

/* one bound of a range literal, or false when it is empty (open); p moved past it */
static bool
read_value(const char **p, Oid type, Datum *value)
{
	StringInfoData buf;
	bool		quoted = false;
	bool		any = false;
	Oid			input;
	Oid			ioparam;

	initStringInfo(&buf);
	while (**p != '\0' && (quoted || (**p != ',' && **p != ')' && **p != ']')))
	{
		char		ch = *(*p)++;

		any = true;
		if (ch == '\\' && quoted && **p != '\0')
			appendStringInfoChar(&buf, *(*p)++);
		else if (ch == '"')
			quoted = !quoted;
		else
			appendStringInfoChar(&buf, ch);
	}
	if (!any)
		return false;
	getTypeInputInfo(type, &input, &ioparam);
	*value = worker_key_input(input, buf.data, ioparam);
	return true;
}

/*
 * A piece back from its text, each bound through the type's input
 * function (as the lane's role: a domain's CHECK is the declarer's code),
 * under the fixed style keys are written in (worker.c);
 * false when the text is no range literal.
 */
bool
leaves_range_parse(const char *text, Oid lead_type, LeafPiece *piece)
{
	const char *p = text;

	memset(piece, 0, sizeof(LeafPiece));
	if (*p != '[' && *p != '(')
		return false;
	piece->lo_incl = (*p++ == '[');
	piece->has_lo = read_value(&p, lead_type, &piece->lo);
	if (*p++ != ',')
		return false;
	piece->has_hi = read_value(&p, lead_type, &piece->hi);
	if (*p != ']' && *p != ')')
		return false;
	piece->hi_incl = (*p++ == ']');
	return *p == '\0';
}

/*
 * The piece as a condition on the leading column, its bounds parameters
 * $first.. (into args; *nargs how many), "true" when it is open at both
 * ends: the planning probes' restriction.
 */
char *
leaves_piece_sql(const LeafPiece *piece, const char *lead_sql, Oid lead_type, int first_param,
				 Datum *args, int *nargs)
{
	StringInfoData sql;

	initStringInfo(&sql);
	*nargs = 0;
	appendStringInfoString(&sql, "true");
	if (piece->has_lo)
	{
		appendStringInfo(&sql, " AND %s %s $%d", lead_sql,
						 keyset_operator(lead_type, piece->lo_incl ? BTGreaterEqualStrategyNumber :
										 BTGreaterStrategyNumber), first_param + *nargs);
		args[(*nargs)++] = piece->lo;
	}
	if (piece->has_hi)
	{
		appendStringInfo(&sql, " AND %s %s $%d", lead_sql,
						 keyset_operator(lead_type, piece->hi_incl ? BTLessEqualStrategyNumber :
										 BTLessStrategyNumber), first_param + *nargs);
		args[(*nargs)++] = piece->hi;
	}
	return sql.data;
}

/*
 * The leaf condition of a key scan of a partitioned table, prepared once
 * per lane: LEAVES_SCAN_PARAMS parameters from $first (>=, >, <, <=), each
 * NULL when the claim's piece has no such end, or when the partition has
 * no piece (a walk of the parent).  The key scan of a partitioned table
 * is planned for each batch's values (a custom plan), so a NULL's
 * condition folds away and the others prune the leaves.
 */
char *
leaves_scan_sql(const char *lead_sql, Oid lead_type, int first_param)
{
	StringInfoData sql;
	int16		strategies[LEAVES_SCAN_PARAMS] = {BTGreaterEqualStrategyNumber,
		BTGreaterStrategyNumber, BTLessStrategyNumber, BTLessEqualStrategyNumber};

	initStringInfo(&sql);
	for (int i = 0; i < LEAVES_SCAN_PARAMS; i++)
		appendStringInfo(&sql, "($%d IS NULL OR %s %s $%d) AND ", first_param + i, lead_sql,
						 keyset_operator(lead_type, strategies[i]), first_param + i);
	return sql.data;
}

/* the values of leaves_scan_sql's parameters for a piece (NULL: no piece) */
void
leaves_scan_args(const LeafPiece *piece, Datum *values, char *nulls)
{
	for (int i = 0; i < LEAVES_SCAN_PARAMS; i++)
	{
		values[i] = (Datum) 0;
		nulls[i] = 'n';
	}
	if (piece == NULL)
		return;
	if (piece->has_lo)
	{
		values[piece->lo_incl ? 0 : 1] = piece->lo;
		nulls[piece->lo_incl ? 0 : 1] = ' ';
	}
	if (piece->has_hi)
	{
		values[piece->hi_incl ? 3 : 2] = piece->hi;
		nulls[piece->hi_incl ? 3 : 2] = ' ';
	}
}

/*
 * The versions of every relation in relid's tree below it, as
 * (oid << 32 | xmin of its pg_class row): an ATTACH writes the attached
 * table's pg_class row, so a leaf attached (or detached and attached
 * again) since an earlier look shows as a member that look did not have.
 * Read with a fresh catalog snapshot.  The caller compares two with
 * leaves_changed.
 */
List *
leaves_versions(Oid relid)
{
	List	   *members;
	List	   *versions = NIL;
	ListCell   *lc;

	InvalidateCatalogSnapshot();
	members = find_all_inheritors(relid, NoLock, NULL);
	foreach(lc, members)
	{
		Oid			member = lfirst_oid(lc);
		HeapTuple	tuple;

		if (member == relid)
			continue;
		tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(member));
		if (!HeapTupleIsValid(tuple))
			continue;			/* dropped since */
		versions = lappend(versions, psprintf("%u/%u", member,
											  HeapTupleHeaderGetXmin(tuple->t_data)));
		ReleaseSysCache(tuple);
	}
	list_free(members);
	return versions;
}

/* does now hold a member (a version of one) that before had not? */
bool
leaves_changed(List *before, List *now)
{
	ListCell   *lc;
	ListCell   *bc;

	foreach(lc, now)
	{
		bool		seen = false;

		foreach(bc, before)
			seen |= strcmp((char *) lfirst(lc), (char *) lfirst(bc)) == 0;
		if (!seen)
			return true;
	}
	return false;
}

/* is the leaf still in relid's tree (not detached, not dropped)? */
bool
leaves_still_partition(Oid leaf, Oid relid)
{
	List	   *ancestors;
	bool		found;

	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(leaf)) || !get_rel_relispartition(leaf))
		return false;
	ancestors = get_partition_ancestors(leaf);
	found = list_member_oid(ancestors, relid);
	list_free(ancestors);
	return found;
}

/* is the value strictly inside the piece? */
static bool
inside(const LeafPiece *p, Datum v, FmgrInfo *cmp, Oid collation)
{
	return (!p->has_lo || compare_values(cmp, collation, v, p->lo) > 0) &&
		(!p->has_hi || compare_values(cmp, collation, v, p->hi) < 0);
}

/* an integer key's range within the piece, read through the parent, cut evenly */
static List *
minmax_bounds(const LeafPiece *piece, const char *relation, const char *key, Oid key_type,
			  int nparts)
{
	Datum		args[2];
	Oid			types[2] = {key_type, key_type};
	int			nargs;
	char	   *where = leaves_piece_sql(piece, key, key_type, 1, args, &nargs);
	bool		isnull;
	int64		lo;
	int64		hi;
	List	   *bounds = NIL;

	if (key_type != INT2OID && key_type != INT4OID && key_type != INT8OID)
		return NIL;
	if (SPI_execute_with_args(psprintf("SELECT pg_catalog.min(%s)::pg_catalog.int8,"
									   " pg_catalog.max(%s)::pg_catalog.int8 FROM %s WHERE %s",
									   key, key, relation, where),
							  nargs, types, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the key range of a leaf");
	lo = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (isnull)
		return NIL;
	hi = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	for (int i = 1; i < nparts && hi - lo >= nparts; i++)
		bounds = lappend(bounds, psprintf(INT64_FORMAT, lo + (int64) ((double) (hi - lo) * i / nparts)));
	return bounds;
}

/*
 * The interior bounds of about nparts partitions of one piece of a key of
 * one column, as text[]: picked from the leaf's own histogram (pg_stats,
 * not inherited: what the role may see of the leaf), else from the
 * range of an integer key within the piece, read through the parent (the
 * role's privileges and policies on it); else none.  As the lane's role.
 */
Datum
leaves_single_bounds(const LeafPiece *piece, const char *relation, const char *key,
					 Oid key_type, Oid collation, int nparts, const char **method)
{
	FmgrInfo   *cmp = type_cmp(key_type);
	ColumnStats stats;
	List	   *bounds = NIL;
	List	   *within = NIL;
	Datum	   *elems;
	int			n = 0;
	ListCell   *lc;
	Oid			output;
	bool		varlena;

	*method = "single";
	getTypeOutputInfo(key_type, &output, &varlena);
	/* the leaf's own histogram (not inherited), as the lane's role sees pg_stats */
	memset(&stats, 0, sizeof(ColumnStats));
	if (nparts > 1)
		stats_read_column(piece->leaf, key, key_type, false, &stats);
	for (int i = 0; i < stats.nhist; i++)
		if (inside(piece, stats.hist[i], cmp, collation))
			within = lappend(within, DatumGetPointer(stats.hist[i]));
	if (list_length(within) >= nparts)
	{
		const char *last = NULL;

		for (int i = 1; i < nparts; i++)
		{
			char	   *text = worker_key_output(output, PointerGetDatum(
														 list_nth(within, (i * (list_length(within) - 1)) / nparts)));

			if (last == NULL || strcmp(last, text) != 0)
				bounds = lappend(bounds, text);
			last = text;
		}
		*method = "histogram";
	}
	else if (nparts > 1 && (bounds = minmax_bounds(piece, relation, quote_identifier(key),
												   key_type, nparts)) != NIL)
		*method = "minmax";
	elems = palloc(sizeof(Datum) * Max(list_length(bounds), 1));
	foreach(lc, bounds)
		elems[n++] = CStringGetTextDatum((char *) lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}
