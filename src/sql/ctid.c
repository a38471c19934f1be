/*-------------------------------------------------------------------------
 *
 * ctid.c
 *	  key => 'ctid' at declaration: a table walked in block order.
 *
 * backfill_declare(..., key => 'ctid') declares a pass that walks the
 * heap in block order (engine/plan_blocks.c, engine/kind_blocks.c): for a
 * table whose physical order is far from its key order, or that has no
 * unique key at all.  The declaration keeps ctid as its key column (of
 * type tid); set => and delete => write UPDATE ONLY / DELETE FROM ONLY
 * the table (its own heap, never a child added later) and the batch's
 * range as ctid >= $1 AND ctid < $2 (a Tid Range Scan), and a hand-written action
 * gets $1 and $2 as the TIDs of that range: '(b,0)' and '(b+n,0)', the
 * first included, the second not.
 *
 * Refused, each with the way to go: a partitioned table (TIDs are a
 * leaf's), a table with inheritance children (the walk reads the parent's
 * own heap: each table is declared on its own), any relation that is not
 * a plain table, a Citus table (its rows are on its shards), a pages source (it names no relation: refused
 * as any key with pages is), max_failed_rows above 0 (a block is not
 * halved into rows), an action that is not guarded (a row moved
 * behind the walk is done by a sweep, which must not do a row twice), and
 * a revert: a revert pass does not sweep, and its own updates land in
 * blocks ahead of its walk, which would revert them twice.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "utils/lsyscache.h"

#include "citus.h"
#include "ctid.h"
#include "errors.h"
#include "key.h"
#include "plan_blocks.h"

bool
ctid_named(const char *name, const char *key)
{
	List	   *names;

	if (key == NULL)
		return false;
	names = key_names(name, key);
	return list_length(names) == 1 && strcmp(linitial(names), BLOCKS_KEY) == 0;
}

char *
ctid_target(const Declaration *d)
{
	if (!blocks_key(d->key_column, d->key_type))
		return d->relation;
	return psprintf("ONLY %s", d->relation);
}

char *
ctid_range_form(const Declaration *d)
{
	if (!blocks_key(d->key_column, d->key_type))
		return NULL;
	return pstrdup("ctid OPERATOR(pg_catalog.>=) $1 AND ctid OPERATOR(pg_catalog.<) $2");
}

/* the relation: a plain table of this node */
static void
check_relation(const Declaration *d)
{
	char		relkind = get_rel_relkind(d->relid);
	CitusTable	table;

	if (relkind == RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" cannot walk partitioned table %s in block order",
						d->name, d->relation),
				 errdetail("A TID names a row of one leaf; the parent has no heap of its own."),
				 errhint("Declare one backfill with key => 'ctid' per leaf, or use a key.")));
	if (relkind != RELKIND_RELATION)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" cannot walk %s in block order: it is not a table",
						d->name, d->relation),
				 errhint("Use key => 'ctid' with a plain table, or name a unique key.")));
	if (find_inheritance_children(d->relid, AccessShareLock) != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" cannot walk table %s in block order: it has "
						"inheritance children", d->name, d->relation),
				 errdetail("A walk in block order reads the parent's own heap; a child's rows "
						   "lie in the child's."),
				 errhint("Declare each table, the parent and each child, as a backfill of its "
						 "own with key => 'ctid', or use a key.")));
	citus_describe(d->relid, &table);
	if (table.kind != CITUS_NONE)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" cannot walk Citus table %s in block order",
						d->name, d->relation),
				 errdetail("Its rows live in its shards' heaps, on other nodes."),
				 errhint("Name the table's distribution column as the key.")));
}

void
ctid_check_declaration(const Declaration *d)
{
	if (!blocks_key(d->key_column, d->key_type))
		return;
	check_relation(d);
	if (d->max_failed_rows > 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("backfill \"%s\" walks its table in block order (key => 'ctid') and "
						"cannot isolate rows that fail alone", d->name),
				 errdetail("A batch is a range of blocks, not of rows: max_failed_rows is %d.",
						   d->max_failed_rows),
				 errhint("Leave max_failed_rows out, or use a unique key.")));
	if (d->revert != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("backfill \"%s\" walks its table in block order (key => 'ctid') and "
						"cannot have a revert", d->name),
				 errdetail("A revert pass walks the heap once and does not sweep: rows its own "
						   "updates move ahead of the walk would be reverted twice."),
				 errhint("Declare the way back as a backfill of its own with key => 'ctid' "
						 "(say set => 'c = NULL', predicate => 'c IS NOT NULL').")));
	if (!d->guarded && d->action_set == NULL && !d->action_delete)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("backfill \"%s\" walks its table in block order (key => 'ctid'), and its "
						"action is not guarded", d->name),
				 errdetail("Rows that updates move behind the walk are done by a further sweep, "
						   "which may give a row to the action again: only an action that "
						   "changes rows that still match is done once."),
				 errhint("Use set => or delete =>, or an UPDATE or DELETE of the table whose "
						 "WHERE clause repeats the predicate: WHERE ctid >= $1 AND ctid < $2 "
						 "AND (predicate).")));
}
