/*-------------------------------------------------------------------------
 *
 * kind_range.c
 *	  A key range of a table as a kind of partition: the key scan of a key
 *	  of one column or of several (keyset.c) from the claim's cursor to its
 *	  upper bound, the action on the range of keys it found, the last key
 *	  the next cursor.
 *
 * The key scan of a key of one column answers min, max and count where
 * the key type has those aggregates, else the keys themselves; with a
 * fixed batch size its LIMIT is written in (sized_key_scan).  A leaf's
 * piece of a partitioned table (kind_leaf.c) is the same batch, its key
 * scan planned with a condition on the leaf's interval added
 * (KeyScanExtra).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/stratnum.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "batch.h"
#include "catalog.h"
#include "config.h"
#include "keyset.h"
#include "kind_range.h"
#include "worker.h"

/*
 * Does the key type have min and max aggregates (integers, text, times,
 * ...)?  Then the key scan answers just the batch's first key, last key
 * and count; otherwise (uuid, say) it returns the keys and the lane reads
 * the first and the last.
 */
static bool
key_type_aggregated(Oid keytype)
{
	Oid			types[1] = {REGTYPEOID};
	Datum		values[1] = {ObjectIdGetDatum(keytype)};

	return catalog_ask("look up the min and max of a key type",
					   "SELECT pg_catalog.to_regprocedure("
					   "         pg_catalog.format('pg_catalog.min(%s)', $1))"
					   " IS NOT NULL AND"
					   " pg_catalog.to_regprocedure("
					   "         pg_catalog.format('pg_catalog.max(%s)', $1)) IS NOT NULL",
					   1, types, values);
}

/*
 * The key scan of one variant: bit 1, a lower bound ($2, exclusive); bit 2,
 * an upper bound ($3, inclusive); $1 the batch size, or limit (> 0)
 * written in ($1 then unused); more, another kind's condition, or NULL;
 * predicate, the pass's (or "true": the bare scan, bare_key_scan).
 */
static char *
key_scan_sql(Pass *pass, int variant, const char *key, const char *gt, const char *le,
			 int64 limit, const char *more, const char *predicate)
{
	StringInfoData sql;

	initStringInfo(&sql);
	if (pass->keys_aggregated)
		appendStringInfo(&sql, "SELECT pg_catalog.min(%s), pg_catalog.max(%s),"
						 " pg_catalog.count(*) FROM (", key, key);
	appendStringInfo(&sql, "SELECT %s FROM %s WHERE ", key, pass->relation);
	if (variant & 1)
		appendStringInfo(&sql, "%s %s $2 AND ", key, gt);
	if (variant & 2)
		appendStringInfo(&sql, "%s %s $3 AND ", key, le);
	if (more != NULL)
		appendStringInfoString(&sql, more);
	/* between newlines: a trailing "--" comment in it cannot reach further */
	appendStringInfo(&sql, "(\n%s\n) ORDER BY %s LIMIT ", predicate, key);
	if (limit > 0)
		appendStringInfo(&sql, INT64_FORMAT, limit);
	else
		appendStringInfoString(&sql, "$1");
	if (pass->keys_aggregated)
		appendStringInfo(&sql, ") keys");
	return sql.data;
}

/*
 * A composite key of k columns (keyset.c): the four variants of its key
 * scan ($1 the batch size, $2..$k+1 the cursor, $k+2..$2k+1 the upper
 * bound, then extra's), and the action ($1..$k the first key, $k+1..$2k
 * the last).
 */
static void
prepare_table_composite(Pass *pass, const KeyScanExtra *extra)
{
	int			k = pass->keyset.nkeys;
	Oid			key_types[KEY_SCAN_NARGS];
	Oid		   *action_types = key_types + 1;
	int			nleaf = extra ? extra->nparams : 0;
	char	   *leaf_sql = extra ?
		extra->sql(keyset_lead_sql(&pass->keyset), pass->keyset.cols[0].type, 2 * k + 2) :
		NULL;

	key_types[0] = INT8OID;
	for (int i = 0; i < 2 * k; i++)
		action_types[i] = pass->keyset.cols[i % k].type;
	for (int i = 0; i < nleaf; i++)
		key_types[1 + 2 * k + i] = pass->keyset.cols[0].type;
	pass->keys_aggregated = false;
	/*
	 * A partitioned table's key scan is planned for each batch's bounds, so
	 * that the planner prunes its leaves and reads the one or two left in
	 * index order (planned per leaf: the one leaf of the claim's piece,
	 * leaves.c); a generic plan would sort what every leaf returns.  A
	 * table's is generic from the first batch: the planner estimates the
	 * row comparison by its leading column alone, so a custom plan for a
	 * cursor early in the table expects most of it and may read the index
	 * from the cursor to the end into a bitmap and sort it (test/t/112).
	 */
	for (int variant = 0; variant < 4; variant++)
		pass->keys_plan[variant] = batch_prepare_kept(pass, "key scan",
													  keyset_scan_sql(&pass->keyset, pass->predicate,
																	  variant, leaf_sql),
													  1 + 2 * k + nleaf, key_types,
													  extra ? extra->cursor_options :
													  CURSOR_OPT_GENERIC_PLAN);
	/*
	 * A generic plan: the planner estimates a row comparison by its leading
	 * column alone, so a custom plan for a batch inside one big tenant
	 * would expect the whole tenant and scan the table.  The generic one
	 * assumes a narrow range and uses the index.
	 */
	pass->action_plan = batch_prepare_kept(pass, "action", pass->action, 2 * k, action_types,
										   CURSOR_OPT_GENERIC_PLAN);
}

/*
 * A key of one column: the four variants of the key scan (then extra's
 * parameters), and the action ($1, $2 the range).
 */
static void
prepare_table(Pass *pass, const KeyScanExtra *extra)
{
	const char *key = quote_identifier(pass->key);
	char	   *gt = keyset_operator(pass->keytype, BTGreaterStrategyNumber);
	char	   *le = keyset_operator(pass->keytype, BTLessEqualStrategyNumber);
	Oid			key_types[3 + KEY_SCAN_MAX_EXTRA] = {INT8OID, pass->keytype, pass->keytype,
	pass->keytype, pass->keytype, pass->keytype, pass->keytype};
	Oid			action_types[2] = {pass->keytype, pass->keytype};
	char	   *more = extra ? extra->sql(key, pass->keytype, 4) : NULL;

	pass->key_gt = MemoryContextStrdup(pass->cxt, gt);
	pass->key_le = MemoryContextStrdup(pass->cxt, le);
	pass->keys_aggregated = key_type_aggregated(pass->keytype);
	pass->key_eq = MemoryContextStrdup(pass->cxt,
									   keyset_operator(pass->keytype, BTEqualStrategyNumber));
	/* a leaf's (extra): planned for each batch, as a composite key's (kind_leaf.c) */
	for (int variant = 0; variant < 4; variant++)
		pass->keys_plan[variant] = batch_prepare_kept(pass, "key scan",
													  key_scan_sql(pass, variant, key, gt, le, 0,
																   more, pass->predicate),
													  extra ? 3 + extra->nparams : 3, key_types,
													  extra ? extra->cursor_options : 0);
	/* the plan cache chooses, as for PL/pgSQL: a generic plan once it is no worse */
	pass->action_plan = batch_prepare_kept(pass, "action", pass->action, 2, action_types, 0);
}

/*
 * The plans of a key range's batches (extra NULL), or of another kind's
 * that adds to its key scan (extra), in batch_prepare's transaction.
 */
void
range_prepare(Pass *pass, const KeyScanExtra *extra)
{
	Assert(extra == NULL || extra->nparams <= KEY_SCAN_MAX_EXTRA);
	if (pass->keyset.nkeys > 1)
		prepare_table_composite(pass, extra);
	else
		prepare_table(pass, extra);
}

static void
range_prepare_own(Pass *pass)
{
	range_prepare(pass, NULL);
}

/*
 * The key scan's parameters: the limit, then the cursor and the upper
 * bound (NULL when the claim has none): one value each for a key of one
 * column, k each for a composite key (another kind's after them).
 */
void
range_scan_args(Pass *pass, Claim *claim, int64 limit, Datum *values, char *nulls)
{
	int			k = pass->keyset.nkeys;

	values[0] = Int64GetDatum(limit);
	nulls[0] = ' ';
	for (int i = 0; i < k; i++)
	{
		values[1 + i] = k > 1 ? claim->cursor_key[i] : claim->cursor;
		nulls[1 + i] = claim->has_cursor ? ' ' : 'n';
		values[1 + k + i] = k > 1 ? claim->hi_key[i] : claim->hi;
		nulls[1 + k + i] = claim->has_hi ? ' ' : 'n';
	}
}

/*
 * The first and the last key of the batch the key scan found, into range
 * (k values each); returns how many keys it found.
 */
static uint64
batch_range(Pass *pass, Datum *range)
{
	SPITupleTable *keys = SPI_tuptable;
	uint64		nkeys;
	bool		isnull;
	int			k = pass->keyset.nkeys;

	if (pass->keys_aggregated)
		nkeys = (uint64) DatumGetInt64(SPI_getbinval(keys->vals[0], keys->tupdesc, 3, &isnull));
	else
		nkeys = SPI_processed;
	if (nkeys == 0)
		return 0;
	if (pass->keys_aggregated)
	{
		range[0] = SPI_getbinval(keys->vals[0], keys->tupdesc, 1, &isnull);
		range[1] = SPI_getbinval(keys->vals[0], keys->tupdesc, 2, &isnull);
		return nkeys;
	}
	for (int i = 0; i < k; i++)
	{
		range[i] = SPI_getbinval(keys->vals[0], keys->tupdesc, i + 1, &isnull);
		range[k + i] = SPI_getbinval(keys->vals[nkeys - 1], keys->tupdesc, i + 1, &isnull);
	}
	return nkeys;
}

/*
 * The key scan with the batch size written in as its LIMIT, for a table
 * whose key is one column and whose batches have a fixed size.  With
 * LIMIT $1 the plan cache plans the key scan again for every batch: a
 * generic plan assumes a LIMIT it cannot see returns a tenth of the
 * table, so it never looks as cheap as a custom plan for a small batch,
 * and planning was a twentieth of a lane's time at batch 200 (issue 29).
 * With the limit written in, a generic plan costs what a custom one does
 * and the plan cache keeps it (it still chooses: a custom plan while the
 * generic one looks dearer).  Prepared, in the batch's transaction as the
 * declaring role, for the batch size in force, and again when that
 * changes (a new declaration); NULL for any other limit (a row being
 * isolated, the first key alone), a composite key, a leaf's piece (whose
 * scan is planned per batch, kind_leaf.c) or a batch time target (a size that moves every batch): those take $1.
 */
static SPIPlanPtr
sized_key_scan(Pass *pass, int variant, int64 limit, bool bare)
{
	Oid			key_types[3] = {INT8OID, pass->keytype, pass->keytype};
	SPIPlanPtr *plans = bare ? pass->keys_bare_plan : pass->keys_sized_plan;

	if (pass->keyset.nkeys > 1 || pass->target_batch_ms > 0 ||
		limit != pass->batch_size || limit <= 0)
		return NULL;
	if (pass->keys_sized_limit != limit)
		batch_free_sized_plans(pass);
	if (plans[variant] == NULL)
	{
		plans[variant] =
			batch_prepare_kept(pass, "key scan",
							   key_scan_sql(pass, variant, quote_identifier(pass->key),
											pass->key_gt, pass->key_le, limit, NULL,
											bare ? "true" : pass->predicate),
							   3, key_types, 0);
		pass->keys_sized_limit = limit;
	}
	return plans[variant];
}

/*
 * May this batch's key scan leave the predicate out (the bare scan)?  Its
 * keys are then the next batch_size keys of the table, matching or not,
 * read from the key's index alone (an index-only scan where the pages are
 * all visible), and the action's own condition picks the rows that match:
 * the engine's own statement (set, delete) changes exactly those, so each
 * is still done once, the batch never holds more than batch_size rows,
 * and its rows are the rows that matched, as a filtering scan counts
 * them.  (A hand-written guarded action may add conditions of its own,
 * so the rows it changes are not the rows that matched: it keeps the
 * filtering scan.)  Each row's heap tuple is then read once a batch
 * instead of twice (issue 29: a twentieth of a lane at batch 200).
 * Only while the rows match densely: a claim's first batch filters (a
 * partition with nothing left to do does no batch), and a batch whose
 * keys matched less than BARE_MIN_MATCH of them (a pass over a table
 * mostly done already) makes the next BARE_PAUSE batches filter, as
 * before; then the bare scan is tried again.
 */
#define BARE_MIN_MATCH 0.9
#define BARE_PAUSE 16

static bool
bare_key_scan(Pass *pass, Claim *claim)
{
	if (!pass->engine_action || !pass->keys_aggregated || claim->bisect_size > 0)
		return false;
	if (claim->filtered_left > 0)
	{
		claim->filtered_left--;
		return false;
	}
	return true;
}

/* after a bare scan's batch: too few of its keys matched, the next batches filter */
static void
bare_key_scan_matched(Claim *claim, Batch *batch)
{
	if (batch->keys > 0 && (double) batch->rows < BARE_MIN_MATCH * (double) batch->keys)
		claim->filtered_left = BARE_PAUSE;
}

/* the key scan's answer (rc) as the batch's keys and their range */
void
range_found(Pass *pass, int rc, Batch *batch)
{
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "key scan of backfill \"%s\" failed: %s", pass->name,
			 SPI_result_code_string(rc));
	batch->keys = (int64) batch_range(pass, batch->range);
	batch->none = batch->keys == 0;
}

/* the key scan, with the batch size written in where it may be (sized_key_scan) */
static void
range_scan(Pass *pass, Claim *claim, int64 limit, Batch *batch)
{
	int			variant = KEY_SCAN_VARIANT(claim);
	Datum		values[KEY_SCAN_NARGS];
	char		nulls[KEY_SCAN_NARGS];
	bool		bare = limit == pass->batch_size && bare_key_scan(pass, claim);
	SPIPlanPtr	sized = sized_key_scan(pass, variant, limit, bare);

	batch->bare = bare && sized != NULL;
	range_scan_args(pass, claim, limit, values, nulls);
	range_found(pass, SPI_execute_plan(sized ? sized : pass->keys_plan[variant], values, nulls,
									   false, 0), batch);
}

/*
 * The action on the range ($1..$k the first key, $k+1..$2k the last).  The
 * engine's own statement (set, delete)
 * changes exactly the rows of the range that match when it runs: those
 * are the batch's rows, whatever the scan saw (a row the application
 * fixed or wrote meanwhile is counted as it is then).  A hand-written
 * action's rows are the keys its scan found.
 */
void
range_act(Pass *pass, Claim *claim, Batch *batch)
{
	batch_act(pass, batch->range);
	if (!pass->engine_action)
		return;
	batch->rows = (int64) SPI_processed;
	if (batch->bare)
		bare_key_scan_matched(claim, batch);
}

/*
 * The checkpoint's cursor: the last key, a value of one column as its type
 * writes it, else a row literal; the first for the batch history, or NULL
 * when it keeps none.
 */
void
range_checkpoint(Pass *pass, Claim *claim, Batch *batch)
{
	batch->first = backfill_batch_history > 0 ? batch_key_text(pass, batch->range) : NULL;
	batch->cursor = batch_key_text(pass, batch->range + pass->keyset.nkeys);
	/* the engine's statement counted the rows it changed (range_act) */
	if (!pass->engine_action)
		batch->rows = batch->keys;
}

/* the next cursor, the last key, copied out of the batch's memory */
void
range_keep(Pass *pass, Claim *claim, Batch *batch)
{
	batch_copy_key(pass, batch->range + pass->keyset.nkeys, batch->next);
}

/* the checkpoint is durable: move the cursor */
void
range_end(Pass *pass, Claim *claim, Batch *batch)
{
	batch_move_cursor(pass, claim, batch->next);
}

const BatchKind batch_kind_range = {
	.name = "range",
	.isolates_rows = true,
	.coordinated = true,
	.prepare = range_prepare_own,
	.scan = range_scan,
	.act = range_act,
	.checkpoint = range_checkpoint,
	.keep = range_keep,
	.end = range_end,
};
