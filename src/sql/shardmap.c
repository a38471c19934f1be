/*-------------------------------------------------------------------------
 *
 * shardmap.c
 *	  A shard whose columns sit at other attribute numbers than its
 *	  distributed table's: the map between the two, by column name, and a
 *	  batch's action re-pointed through it.
 *
 * A shard's batch (shard.c) parses the action against the distributed
 * table and points the table's range table entries at the shard.  Every
 * attribute number in that tree is the table's.  A shard Citus created
 * after a column of the table was dropped (a split's new shards, a move's
 * copy) has no hole where the dropped column was: its columns sit further
 * left.  So the table's live columns are found in the shard by name (the
 * same type, typmod and collation, else BF035), and where the numbers
 * differ the tree is rewritten for the shard: each Var of a re-pointed
 * entry (at its query level), the target columns of the statement that
 * writes it (INSERT, UPDATE, ON CONFLICT DO UPDATE, MERGE), the columns its
 * permissions are checked on, its column names, and the EXCLUDED row of an
 * ON CONFLICT.  A whole-row reference of such an entry (its row type is
 * the table's) is refused (BF035).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "access/table.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "parser/analyze.h"
#include "parser/parse_relation.h"
#include "parser/parsetree.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "errors.h"
#include "shardmap.h"

/* a column of the table as the shard must have it */
static bool
same_column(Form_pg_attribute ta, Form_pg_attribute sa)
{
	return !sa->attisdropped && strcmp(NameStr(ta->attname), NameStr(sa->attname)) == 0 &&
		ta->atttypid == sa->atttypid && ta->atttypmod == sa->atttypmod &&
		ta->attcollation == sa->attcollation;
}

static void
layout_refused(const char *shard_sql, const char *relation, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_SHARD_LAYOUT),
			 errmsg("shard %s does not have the columns of table %s", shard_sql, relation),
			 errdetail("%s", detail),
			 errhint("Run the backfill coordinator-side: set backfill.citus_per_shard to off "
					 "(ALTER DATABASE ... SET) and start a new pass with "
					 "backfill_run(name, force => true).")));
}

ShardMap *
shardmap_build(Oid table, Oid shard, const char *shard_sql, const char *relation)
{
	Relation	trel = table_open(table, AccessShareLock);
	Relation	srel = table_open(shard, AccessShareLock);
	TupleDesc	td = RelationGetDescr(trel);
	TupleDesc	sd = RelationGetDescr(srel);
	ShardMap   *map = palloc0(sizeof(ShardMap));
	int			live_shard = 0;
	int			live_table = 0;

	map->natts = td->natts;
	map->attno = palloc0(sizeof(AttrNumber) * Max(td->natts, 1));
	for (int j = 0; j < sd->natts; j++)
		live_shard += TupleDescAttr(sd, j)->attisdropped ? 0 : 1;
	for (int i = 0; i < td->natts; i++)
	{
		Form_pg_attribute ta = TupleDescAttr(td, i);

		if (ta->attisdropped)
			continue;
		live_table++;
		/* where it was, first: the usual case, the same layout */
		if (i < sd->natts && same_column(ta, TupleDescAttr(sd, i)))
			map->attno[i] = i + 1;
		for (int j = 0; map->attno[i] == 0 && j < sd->natts; j++)
			if (same_column(ta, TupleDescAttr(sd, j)))
				map->attno[i] = j + 1;
		if (map->attno[i] == 0)
			layout_refused(shard_sql, relation,
						   psprintf("Column \"%s\" of the table, of its type, is not a column "
									"of the shard.", NameStr(ta->attname)));
		if (map->attno[i] != i + 1)
			map->moved = true;
	}
	if (live_shard != live_table)
		layout_refused(shard_sql, relation,
					   psprintf("The shard has %d columns, the table %d.", live_shard,
								live_table));
	table_close(srel, AccessShareLock);
	table_close(trel, AccessShareLock);
	return map;
}

/* a table's attribute number as the shard's (system columns stay) */
static AttrNumber
map_attno(const ShardMap *map, AttrNumber attno)
{
	if (attno <= 0 || attno > map->natts || map->attno[attno - 1] == 0)
		return attno;
	return map->attno[attno - 1];
}

/* the members of a set of columns (offset by FirstLowInvalidHeapAttributeNumber) */
static Bitmapset *
map_columns(const ShardMap *map, Bitmapset *cols)
{
	Bitmapset  *out = NULL;
	int			i = -1;

	while ((i = bms_next_member(cols, i)) >= 0)
	{
		AttrNumber	attno = i + FirstLowInvalidHeapAttributeNumber;

		out = bms_add_member(out, map_attno(map, attno) - FirstLowInvalidHeapAttributeNumber);
	}
	return out;
}

typedef struct VarSite
{
	const ShardMap *map;
	Index		rti;
	int			depth;			/* query levels below the site's */
	const char *shard_sql;
} VarSite;

static bool
map_vars_walker(Node *node, VarSite *site)
{
	if (node == NULL)
		return false;
	if (IsA(node, Var))
	{
		Var		   *var = (Var *) node;

		if (var->varno != site->rti || var->varlevelsup != site->depth)
			return false;
		if (var->varattno == 0)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SHARD_LAYOUT),
					 errmsg("the action refers to a whole row of shard %s, whose columns are "
							"not laid out as its table's", site->shard_sql),
					 errhint("Name the columns instead, or run the backfill coordinator-side "
							 "(backfill.citus_per_shard off).")));
		if (var->varnosyn == var->varno && var->varattnosyn == var->varattno)
			var->varattnosyn = map_attno(site->map, var->varattno);
		var->varattno = map_attno(site->map, var->varattno);
		return false;
	}
	if (IsA(node, Query))
	{
		bool		r;

		site->depth++;
		r = query_tree_walker((Query *) node, map_vars_walker, site, 0);
		site->depth--;
		return r;
	}
	return expression_tree_walker(node, map_vars_walker, site);
}

/* the target columns of a list of target entries */
static void
map_resnos(const ShardMap *map, List *tlist)
{
	ListCell   *lc;

	foreach(lc, tlist)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);

		if (!tle->resjunk)
			tle->resno = map_attno(map, tle->resno);
	}
}

/* the entry's permissions and its column names, for the shard */
static void
map_entry(Query *query, RangeTblEntry *rte, Relation shard, const ShardMap *map)
{
	TupleDesc	sd = RelationGetDescr(shard);
	List	   *names = NIL;
#if PG_VERSION_NUM >= 160000
	RTEPermissionInfo *perm = rte->perminfoindex > 0 ?
		getRTEPermissionInfo(query->rteperminfos, rte) : NULL;

	if (perm != NULL)
	{
		perm->selectedCols = map_columns(map, perm->selectedCols);
		perm->insertedCols = map_columns(map, perm->insertedCols);
		perm->updatedCols = map_columns(map, perm->updatedCols);
	}
#else
	rte->selectedCols = map_columns(map, rte->selectedCols);
	rte->insertedCols = map_columns(map, rte->insertedCols);
	rte->updatedCols = map_columns(map, rte->updatedCols);
	rte->extraUpdatedCols = map_columns(map, rte->extraUpdatedCols);
#endif
	for (int j = 0; j < sd->natts; j++)
	{
		Form_pg_attribute sa = TupleDescAttr(sd, j);

		names = lappend(names, makeString(pstrdup(sa->attisdropped ? "" :
												  NameStr(sa->attname))));
	}
	rte->eref->colnames = names;
}

void
shardmap_apply(Query *query, Index rti, Oid shard, const ShardMap *map, const char *shard_sql)
{
	RangeTblEntry *rte = rt_fetch(rti, query->rtable);
	Relation	srel = table_open(shard, NoLock);
	VarSite		site = {map, rti, 0, shard_sql};

	(void) query_tree_walker(query, map_vars_walker, &site, 0);
	map_entry(query, rte, srel, map);
	if (query->resultRelation == (int) rti)
	{
		ListCell   *lc;

		map_resnos(map, query->targetList);
		if (query->onConflict != NULL)
			map_resnos(map, query->onConflict->onConflictSet);
		foreach(lc, query->mergeActionList)
			map_resnos(map, lfirst_node(MergeAction, lc)->targetList);
	}
	/* the EXCLUDED row of an ON CONFLICT: one column per attribute of the shard */
	if (query->onConflict != NULL && query->onConflict->exclRelIndex == (int) rti)
		query->onConflict->exclRelTlist = BuildOnConflictExcludedTargetlist(srel, rti);
	table_close(srel, NoLock);
}
