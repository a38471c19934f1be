/*-------------------------------------------------------------------------
 *
 * kind_leaf.c
 *	  A partition of a partitioned table as a kind: a key range (one column
 *	  or composite, kind_range.c) kept to its leaf's piece of the leading
 *	  key column (leaves.c), or to none when the pass was not planned per
 *	  leaf; ended when its leaf has left the table.
 *
 * Its key scan is the key range's with the leaf's interval added, planned
 * for each batch's bounds, so that the planner prunes the leaves and reads
 * the one or two left in index order; its action, checkpoint and cursor
 * are the key range's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/guc.h"

#include "kind_range.h"
#include "leaves.h"

/*
 * A partition planned per leaf whose leaf has left the table (detached or
 * dropped) since the plan: it is done with what it did, logged, without
 * a scan (the parent's scan of its interval would find no leaf, or a leaf
 * attached there since, which the count then finds: STALLED).
 */
static bool
leaf_gone(Pass *pass, Claim *claim)
{
	/* a union of several leaves' pieces (leaf NULL): a leaf gone just takes its rows */
	if (!claim->has_piece || !OidIsValid(claim->piece.leaf) ||
		leaves_still_partition(claim->piece.leaf, pass->relid))
		return false;
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": partition %d is done; its leaf was "
					"detached or dropped while the pass ran", pass->name, pass->run_id,
					claim->part_no),
			 errdetail("The partition did " INT64_FORMAT " rows; the rows that left with the "
					   "leaf are no longer the table's.", claim->rows)));
	return true;
}

/* in the batch's transaction: nothing to do when the claim's leaf is gone */
static BatchOutcome
leaf_begin(Pass *pass, Claim *claim)
{
	return leaf_gone(pass, claim) ? BATCH_PARTITION_DONE : BATCH_DONE;
}

/* the condition on the leaf's interval, its four parameters, plans made for each batch */
static const KeyScanExtra leaf_interval = {
	leaves_scan_sql, LEAVES_SCAN_PARAMS, CURSOR_OPT_CUSTOM_PLAN
};

static void
leaf_prepare(Pass *pass)
{
	StaticAssertStmt(LEAVES_SCAN_PARAMS <= KEY_SCAN_MAX_EXTRA,
					 "a leaf's key scan takes more parameters than a key scan may");
	range_prepare(pass, &leaf_interval);
}

/*
 * The key scan, planned for each batch; a leaf attached since the last
 * ANALYZE has no statistics, and the planner, expecting a row or two,
 * would read the leaf's rest into a bitmap and sort it, in every batch.  So, for its planning only, no
 * sort, no bitmap and no sequential scan: the leaf's own index in key
 * order, which the LIMIT ends (a GUC nest level of its own, undone at once).
 */
static void
leaf_scan(Pass *pass, Claim *claim, int64 limit, Batch *batch)
{
	int			variant = KEY_SCAN_VARIANT(claim);
	int			k = pass->keyset.nkeys;
	Datum		values[KEY_SCAN_NARGS];
	char		nulls[KEY_SCAN_NARGS];
	int			nest;
	int			rc;

	/* after the bounds: the claim's piece of a leaf, or none */
	range_scan_args(pass, claim, limit, values, nulls);
	leaves_scan_args(claim->has_piece ? &claim->piece : NULL, values + 1 + 2 * k,
					 nulls + 1 + 2 * k);
	nest = NewGUCNestLevel();
	(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	rc = SPI_execute_plan(pass->keys_plan[variant], values, nulls, false, 0);
	AtEOXact_GUC(true, nest);
	range_found(pass, rc, batch);
}

const BatchKind batch_kind_leaf = {
	.name = "leaf",
	.isolates_rows = true,
	.coordinated = true,
	.prepare = leaf_prepare,
	.begin = leaf_begin,
	.scan = leaf_scan,
	.act = range_act,
	.checkpoint = range_checkpoint,
	.keep = range_keep,
	.end = range_end,
};
