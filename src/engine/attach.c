/*-------------------------------------------------------------------------
 *
 * attach.c
 *	  A leaf attached while a pass planned per leaf runs: before the count the
 *	  leaves are listed again, and a leaf in a gap no planned piece reaches
 *	  gets a partition of its own; a tree changed since that look makes the
 *	  lane count again.
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
#include "attach.h"
#include "searchpath.h"
#include "shmem.h"
#include "state.h"
#include "xact.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"

/* a leaf's schema-qualified name for the log, "?" when it is gone */
static char *
leaf_name(Oid leaf)
{
	char	   *name = get_rel_name(leaf);

	if (name == NULL)
		return "?";
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(leaf)), name);
}

/*
 * A pass planned per leaf, before it is counted: the leaves are listed
 * again, and a leaf attached since the plan, in a gap no partition's piece
 * reaches, gets a partition of its own (pending: lanes cover it, each row
 * once, up to the pass's bound).  A leaf attached where a planned piece
 * lies is covered by that piece's partitions; one attached after this
 * look is found by the count (STALLED).  A partition over the union of
 * small neighbours (leaf NULL, leaves_coalesce) is planned like any: the
 * union has no gap a leaf could be attached in.  Called with the ledger
 * row locked, outside the catalog scope: the planned pieces become
 * values as the lane's role.  True when partitions were added.
 */
bool
cover_new_leaves(Pass *pass)
{
	CatalogScope scope;
	const char *column;
	Oid			type;
	Oid			collation;
	char	   *lead_sql;
	List	   *planned = NIL;
	List	   *fresh;
	PassPlan	plan = {0};
	int			n;
	int			next_part;
	ListCell   *lc;

	if (!pass->partitioned)
		return false;
	catalog_enter(&scope);
	n = exec_on_run(pass, "SELECT leaf_range, (SELECT pg_catalog.max(q.part_no) + 1"
					"   FROM backfill.partition q WHERE q.run_id = $1)::pg_catalog.int8"
					" FROM backfill.partition WHERE run_id = $1 AND leaf_range IS NOT NULL",
					SPI_OK_SELECT);
	next_part = n > 0 ? (int) catalog_getint64(0, 2) : 0;
	for (int i = 0; i < n; i++)
		planned = lappend(planned, catalog_gettext(i, 1));
	catalog_leave(&scope);
	if (n == 0)
		return false;			/* the pass walks the parent */

	pass_lead(pass, &column, &type, &collation, &lead_sql);
	foreach(lc, planned)
	{
		LeafPiece  *piece = palloc(sizeof(LeafPiece));

		if (!leaves_range_parse((char *) lfirst(lc), type, piece))
			elog(ERROR, "backfill \"%s\" has a leaf range that is not one: %s", pass->name,
				 (char *) lfirst(lc));
		lfirst(lc) = piece;
	}
	fresh = leaves_uncovered(leaves_attached(pass->relid, column, type, collation),
							 planned, type, collation);
	if (fresh == NIL)
		return false;
	plan.room = 2 * list_length(fresh);
	plan.lo = palloc(sizeof(Datum) * plan.room);
	plan.hi = palloc(sizeof(Datum) * plan.room);
	plan.lo_null = palloc(sizeof(bool) * plan.room);
	plan.hi_null = palloc(sizeof(bool) * plan.room);
	plan.leaf = palloc(sizeof(Datum) * plan.room);
	plan.leaf_range = palloc(sizeof(Datum) * plan.room);
	foreach(lc, fresh)
	{
		LeafPiece  *piece = lfirst(lc);

		plan_add_piece(&plan, piece, PointerGetDatum(construct_empty_array(TEXTOID)), type);
		ereport(LOG,
				(errmsg("backfill \"%s\" run " INT64_FORMAT ": leaf %s was attached since the "
						"plan; partition %d covers it", pass->name, pass->run_id,
						leaf_name(piece->leaf),
						next_part + plan.nleafparts - 1),
				 errdetail("Its interval of the leading key column: %s.",
						   leaves_range_text(piece, type))));
	}
	catalog_enter(&scope);
	insert_leaf_partitions(pass, &plan, next_part);
	catalog_leave(&scope);
	return true;
}

/*
 * The tree of a partitioned table as this look sees it, kept for the look
 * after the count (leaves_unchanged_since_count).  Taken before the
 * count's transaction begins, so before its snapshot: whatever it lists
 * was committed when the count began, and the count sees its rows.
 */
void
note_leaves_seen(Pass *pass)
{
	MemoryContext old;

	if (!pass->partitioned)
		return;
	old = MemoryContextSwitchTo(pass->cxt);
	if (pass->leaves_seen != NIL)
		list_free_deep(pass->leaves_seen);
	pass->leaves_seen = leaves_versions(pass->relid);
	MemoryContextSwitchTo(old);
}

/*
 * After the count of a partitioned table, in the transaction that ends the
 * pass: may it end on that count, or was a leaf attached that the count
 * may have missed (its snapshot was taken before the ATTACH committed)?
 *
 * ATTACH PARTITION holds SHARE UPDATE EXCLUSIVE on the parent from its
 * start to its commit; this takes the same mode, which conflicts with
 * itself, and keeps it until the pass's end commits.  So every ATTACH
 * either committed before the lock was granted, and the look below (a
 * fresh catalog snapshot, after the lock's invalidations) lists it, or
 * waits for this transaction: its leaf joins a pass that has ended, as a
 * row inserted after the end would (drift).  One that committed just
 * before the look but after note_leaves_seen is new to the look, so the
 * pass does not end: a gap leaf gets partitions (cover_new_leaves), and
 * the count runs again, with a snapshot that sees the leaf.  One that
 * committed before note_leaves_seen committed before the count began.
 *
 * The lock is tried, not waited for, for up to a second: an ATTACH that
 * validates a large table holds the parent longer, and the lane must not
 * wait on it with the ledger row locked, nor queue the DBA's next ATTACH
 * behind it.  Not having the lock is the same answer as a change: the
 * lane counts again.  Holding it, the lane blocks an ATTACH only for the
 * look and the end's commit.
 */
#define LEAVES_LOCK_TRIES 100
#define LEAVES_LOCK_SLEEP_MS 10
bool
leaves_unchanged_since_count(Pass *pass)
{
	bool		locked = false;
	List	   *now;

	if (!pass->partitioned)
		return true;
	for (int i = 0; i < LEAVES_LOCK_TRIES && !locked; i++)
	{
		locked = ConditionalLockRelationOid(pass->relid, ShareUpdateExclusiveLock);
		if (!locked)
		{
			CHECK_FOR_INTERRUPTS();
			pg_usleep(LEAVES_LOCK_SLEEP_MS * 1000L);
		}
	}
	if (!locked)
	{
		ereport(LOG,
				(errmsg("backfill \"%s\" run " INT64_FORMAT ": the count did not end the pass: "
						"the leaves of %s are being changed (its lock is taken); counting again",
						pass->name, pass->run_id, pass->relation)));
		return false;
	}
	now = leaves_versions(pass->relid);
	if (!leaves_changed(pass->leaves_seen, now))
		return true;
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": a partition of %s was attached "
					"while the pass was counted; counting again", pass->name, pass->run_id,
					pass->relation)));
	return false;
}

/*
 * The count may not end the pass: back to running, leaves attached in a
 * gap covered, and the lane goes on (more_leaves) to count again.
 */
void
pass_count_again(Pass *pass)
{
	CatalogScope scope;

	(void) cover_new_leaves(pass);
	catalog_enter(&scope);
	state_pass_leaves_attached(pass->run_id);
	catalog_leave(&scope);
	pass->more_leaves = true;
}
