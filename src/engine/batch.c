/*-------------------------------------------------------------------------
 *
 * batch.c
 *	  One batch: read the next keys in key order, run the action on their
 *	  range, and write the checkpoint in the same transaction.
 *
 * The batch's keys are found with an index-ordered keyset scan,
 *
 *	  SELECT min(key), max(key), count(*) FROM (
 *	    SELECT key FROM rel WHERE key > cursor AND key <= hi AND (predicate)
 *	     ORDER BY key LIMIT batch_size) keys
 *
 * (or the keys themselves, for a key type without min and max)
 * and the action then runs once with $1 = the first and $2 = the last of
 * those keys (both inclusive).  A composite key of k columns scans by row
 * comparison (keyset.c) and its action gets $1..$k and $k+1..$2k.  The action never sees an
 * "IN (SELECT ... LIMIT n)" that the planner could turn into a full scan
 * per batch.  Because the action's writes and the checkpoint commit
 * together, a crash keeps both or loses both: each row is done once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "catalog.h"
#include "config.h"
#include "errors.h"
#include "batch.h"
#include "citus.h"
#include "health.h"
#include "history.h"
#include "jsonobj.h"
#include "keyset.h"
#include "leaves.h"
#include "pagecycle.h"
#include "shards.h"
#include "shmem.h"
#include "state.h"
#include "worker.h"
#include "xact.h"

/* the key scans sized for one batch size (sized_key_scan) */
static void
free_sized_plans(Pass *pass)
{
	for (int variant = 0; variant < 4; variant++)
	{
		if (pass->keys_sized_plan[variant] != NULL)
			SPI_freeplan(pass->keys_sized_plan[variant]);
		pass->keys_sized_plan[variant] = NULL;
	}
	pass->keys_sized_limit = 0;
}

/*
 * Free the plans an earlier, failed attempt at batch_prepare kept; or,
 * in a backend that worked a pass itself, the plans once it is done.
 */
void
batch_free_plans(Pass *pass)
{
	for (int variant = 0; variant < 4; variant++)
	{
		if (pass->keys_plan[variant] != NULL)
			SPI_freeplan(pass->keys_plan[variant]);
		pass->keys_plan[variant] = NULL;
	}
	free_sized_plans(pass);
	if (pass->action_plan != NULL)
		SPI_freeplan(pass->action_plan);
	pass->action_plan = NULL;
	if (pass->page_plan != NULL)
		SPI_freeplan(pass->page_plan);
	pass->page_plan = NULL;
}

/*
 * One of the lane's plans, prepared and kept for the lane's life; what
 * names it in the error when it cannot be prepared.
 */
static SPIPlanPtr
prepare_kept(Pass *pass, const char *what, const char *sql, int nargs, Oid *types,
			 int cursor_options)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, types, cursor_options);

	if (plan == NULL)
		elog(ERROR, "could not prepare the %s of backfill \"%s\": %s",
			 what, pass->name, SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

/*
 * A pages source: the pages function ($1 cursor, $2 input) and the action
 * ($1 the page's rows), planned for each page's rows.
 */
static void
prepare_pages(Pass *pass)
{
	Oid			page_types[2] = {TEXTOID, JSONBOID};
	Oid			rows_type[1] = {JSONBOID};

	pass->page_plan = prepare_kept(pass, "pages function",
								   psprintf("SELECT %s($1, $2)", function_name(pass->pages_fn)),
								   2, page_types, 0);
	pass->action_plan = prepare_kept(pass, "action", pass->action, 1, rows_type,
									 CURSOR_OPT_CUSTOM_PLAN);
}

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
 * written in ($1 then unused).
 */
static char *
key_scan_sql(Pass *pass, int variant, const char *key, const char *gt, const char *le,
			 int64 limit)
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
	if (pass->partitioned)
		appendStringInfoString(&sql, leaves_scan_sql(key, pass->keytype, 4));
	/* between newlines: a trailing "--" comment in it cannot reach further */
	appendStringInfo(&sql, "(\n%s\n) ORDER BY %s LIMIT ", pass->predicate, key);
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
 * bound), and the action ($1..$k the first key, $k+1..$2k the last).
 */
static void
prepare_table_composite(Pass *pass)
{
	int			k = pass->keyset.nkeys;
	Oid			key_types[1 + 2 * DECLARATION_MAX_KEY_COLUMNS + LEAVES_SCAN_PARAMS];
	Oid		   *action_types = key_types + 1;
	int			nleaf = pass->partitioned ? LEAVES_SCAN_PARAMS : 0;
	char	   *leaf_sql = pass->partitioned ?
		leaves_scan_sql(keyset_lead_sql(&pass->keyset), pass->keyset.cols[0].type, 2 * k + 2) :
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
		pass->keys_plan[variant] = prepare_kept(pass, "key scan",
												keyset_scan_sql(&pass->keyset, pass->predicate, variant,
																leaf_sql),
												1 + 2 * k + nleaf, key_types,
												pass->partitioned ?
												CURSOR_OPT_CUSTOM_PLAN : CURSOR_OPT_GENERIC_PLAN);
	/*
	 * A generic plan: the planner estimates a row comparison by its leading
	 * column alone, so a custom plan for a batch inside one big tenant
	 * would expect the whole tenant and scan the table.  The generic one
	 * assumes a narrow range and uses the index.
	 */
	pass->action_plan = prepare_kept(pass, "action", pass->action, 2 * k, action_types,
									 CURSOR_OPT_GENERIC_PLAN);
}

/* A table: the four variants of the key scan, and the action ($1, $2 the range). */
static void
prepare_table(Pass *pass)
{
	const char *key = quote_identifier(pass->key);
	char	   *gt = keyset_operator(pass->keytype, BTGreaterStrategyNumber);
	char	   *le = keyset_operator(pass->keytype, BTLessEqualStrategyNumber);
	Oid			key_types[3 + LEAVES_SCAN_PARAMS] = {INT8OID, pass->keytype, pass->keytype,
	pass->keytype, pass->keytype, pass->keytype, pass->keytype};
	Oid			action_types[2] = {pass->keytype, pass->keytype};

	pass->key_gt = MemoryContextStrdup(pass->cxt, gt);
	pass->key_le = MemoryContextStrdup(pass->cxt, le);
	pass->keys_aggregated = key_type_aggregated(pass->keytype);
	pass->key_eq = MemoryContextStrdup(pass->cxt,
									   keyset_operator(pass->keytype, BTEqualStrategyNumber));
	/* a partitioned table's: planned for each batch, as a composite key's (leaves.c) */
	for (int variant = 0; variant < 4; variant++)
		pass->keys_plan[variant] = prepare_kept(pass, "key scan",
												key_scan_sql(pass, variant, key, gt, le, 0),
												pass->partitioned ? 3 + LEAVES_SCAN_PARAMS : 3,
												key_types,
												pass->partitioned ? CURSOR_OPT_CUSTOM_PLAN : 0);
	/* the plan cache chooses, as for PL/pgSQL: a generic plan once it is no worse */
	pass->action_plan = prepare_kept(pass, "action", pass->action, 2, action_types, 0);
}

/*
 * Prepare the lane's plans, as the declaring role, in a transaction of its
 * own.  The plans are kept for the lane's life; the plan cache replans them
 * when the table changes.  A failed attempt may be made again (lane.c).
 */
void
batch_prepare(Pass *pass)
{
	worker_begin_xact("pg_backfill lane: preparing");
	batch_free_plans(pass);
	if (OidIsValid(pass->pages_fn))
		prepare_pages(pass);
	else if (pass->keyset.nkeys > 1)
		prepare_table_composite(pass);
	else
		prepare_table(pass);
	worker_commit_xact();
}

/*
 * A checkpoint found the partition no longer this lane's (the pass was
 * cancelled): the batch rolls back.
 */
static void
lost_lease(Pass *pass, Claim *claim)
{
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_CONFLICT),
			 errmsg("lane of backfill \"%s\" lost its lease on partition %d",
					pass->name, claim->part_no)));
}

/* Mark the claimed partition done: nothing in it matches any more. */
static void
checkpoint_partition_done(Pass *pass, Claim *claim)
{
	CatalogScope scope;

	catalog_enter(&scope);
	if (!state_part_done(pass->run_id, claim->part_no, LANE_PID(), LANE_START()))
		lost_lease(pass, claim);
	catalog_leave(&scope);
}

/*
 * Update the partition's row, at the version the lane's last checkpoint
 * wrote when it still is the row (a TID scan), else by its key; true when
 * the lane still holds the lease.
 *
 * Every checkpoint leaves a dead version of the row behind.  While
 * something holds back the xmin horizon (a long transaction, a waiting
 * backfill_wait, autovacuum analyzing the big table), pruning cannot
 * remove them, and a lookup by key walks all of them: a batch would cost
 * more the further the pass has come.  The TID goes to the newest
 * version at once.  It is only a hint: when anything else updated the
 * row since (a control, a throttle, another lane), the TID scan finds no
 * row with these conditions and the key finds the row as it is now.
 */
static bool
checkpoint_update(Claim *claim, Oid *types, Datum *values, const char *nulls)
{
	return state_part_checkpointed(&claim->checkpoint_tid, types, values, nulls);
}

/*
 * Write the checkpoint of a batch and read back what may have changed
 * meanwhile: the pass's status, whether it is paused, and the
 * declaration's checksum, rate, batch size and WAL budget.
 */
static BatchOutcome
checkpoint_batch(Pass *pass, Claim *claim, const char *first, const char *cursor, int64 rows)
{
	CatalogScope scope;
	Oid			types[10] = {INT8OID, INT4OID, TEXTOID, INT8OID, INT4OID, TIMESTAMPTZOID,
	INT4OID, FLOAT8OID, TEXTOID, TIDOID};
	Datum		values[10];
	char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	char	   *status;
	char	   *checksum;
	const char *why;
	bool		paused;
	bool		isnull;
	Datum		wal_budget;

	values[0] = Int64GetDatum(pass->run_id);
	values[1] = Int32GetDatum(claim->part_no);
	values[2] = cursor ? CStringGetTextDatum(cursor) : (Datum) 0;
	nulls[2] = cursor ? ' ' : 'n';
	values[3] = Int64GetDatum(rows);
	values[4] = Int32GetDatum(LANE_PID());
	values[5] = TimestampTzGetDatum(LANE_START());
	values[6] = Int32GetDatum(CLAIM_BATCH_LIMIT_AFTER(claim, rows));
	values[7] = Float8GetDatum(claim->last_batch_ms);
	why = claim->pace_reason[0] ? claim->pace_reason : claim->foreground_reason;
	values[8] = CStringGetTextDatum(why);
	nulls[8] = why[0] ? ' ' : 'n';

	/*
	 * One statement writes the checkpoint and reads back the pass's state.
	 * The server's health (health.c) is read separately, in the same
	 * transaction so that the locks it counts are this batch's, and at most
	 * once per backfill.throttle_delay: reading it costs more than a small
	 * batch.
	 */
	catalog_enter(&scope);
	if (!checkpoint_update(claim, types, values, nulls))
		lost_lease(pass, claim);
	status = catalog_gettext(0, 1);
	checksum = catalog_gettext(0, 2);
	if (checksum == NULL || strcmp(checksum, pass->checksum) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CHANGED),
				 errmsg("backfill \"%s\" changed while run " INT64_FORMAT " was running",
						pass->name, pass->run_id),
				 errdetail("The pass started with checksum %s; the declaration now has %s.",
						   pass->checksum, checksum ? checksum : "none (dropped)"),
				 errhint("Run the backfill again to start a pass with the new definition.")));
	pass->rate = DatumGetFloat8(catalog_getdatum(0, 3, &isnull));
	pass->batch_size = DatumGetInt32(catalog_getdatum(0, 4, &isnull));
	paused = DatumGetBool(catalog_getdatum(0, 5, &isnull));
	wal_budget = catalog_getdatum(0, 7, &isnull);
	pass->max_wal_rate = isnull ? 0 : DatumGetInt64(wal_budget);
	/* after the checkpoint's answer is read: it runs a statement of its own */
	history_record(pass, claim, first, cursor, rows, why);
	health_read_if_due(&claim->health, pass->relid, pass->name);
	health_sample_foreground(&claim->health);
	catalog_leave(&scope);
	if (strcmp(status, "running") != 0)
		return BATCH_STOP;
	return paused ? BATCH_PAUSED : BATCH_DONE;
}

/* What every batch transaction sets first: lock and statement timeouts. */
static void
begin_batch(Pass *pass, Claim *claim)
{
	worker_begin_xact(psprintf("pg_backfill lane: backfill \"%s\" partition %d",
							 pass->name, claim->part_no));
	/* a lane never queues long behind the application's locks */
	(void) set_config_option("lock_timeout", psprintf("%d", pass->lock_timeout_ms),
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	/*
	 * The batch and its checkpoint commit together: a crash that loses the
	 * commit loses both, and the batch is done again.  So the lane need not
	 * wait for the commit to reach disk (a transaction that emitted outbox
	 * messages is made synchronous by backfill_outbox_emit).
	 * async_commit => false makes the batch synchronous, also for a role or
	 * database whose synchronous_commit is off.
	 */
	if (pass->async_commit || synchronous_commit == SYNCHRONOUS_COMMIT_OFF)
		(void) set_config_option("synchronous_commit", pass->async_commit ? "off" : "on",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	/* a Citus table's batch: two-phase on the workers, synchronous here (citus.c) */
	if (pass->citus_remote && claim->shardid == 0)
		citus_fence_batch();
	worker_statement_timeout(pass->batch_timeout_ms);
	/* SQL that catches that timeout's cancel ends with the lane (shmem.c) */
	backfill_lane_batch_deadline(pass->batch_timeout_ms);
}

/*
 * The walk of the claim's pages (pagecycle.c), made at its first page in
 * this process, numbered from the pages its partition has done (read in
 * the batch's open transaction).
 */
static PageCycle *
page_walk(Pass *pass, Claim *claim)
{
	CatalogScope scope;
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2] = {Int64GetDatum(pass->run_id), Int32GetDatum(claim->part_no)};
	int64		done = 0;

	if (pass->page_cycle != NULL && pass->page_cycle_claim == pass->claims)
		return pass->page_cycle;
	pagecycle_free(pass->page_cycle);
	pass->page_cycle = NULL;
	catalog_enter(&scope);
	if (catalog_exec("SELECT batches FROM backfill.partition WHERE run_id = $1 AND part_no = $2",
					 2, types, values, NULL, SPI_OK_SELECT) == 1)
		done = catalog_getint64(0, 1);
	catalog_leave(&scope);
	pass->page_cycle = pagecycle_create(pass->cxt, done + 1);
	pass->page_cycle_claim = pass->claims;
	return pass->page_cycle;
}

/*
 * The rows and the next cursor of the page the pages function answered
 * after cursor (NULL: the first page).  Refused with BF001: an answer
 * that is no page; a page with rows whose next cursor is the one it was
 * asked for (asked again for ever); a next cursor that the pass asked for
 * before (every page from there on again, in a cycle).
 */
static JsonbValue *
page_read(Pass *pass, Claim *claim, Jsonb *page, const char *cursor, char **next_text)
{
	JsonbValue *rows = (page && jsonobj_is_object(page)) ? jsonobj_field(page, "rows") : NULL;
	JsonbValue *next = rows ? jsonobj_field(page, "next") : NULL;
	int			nrows;
	int64		earlier;

	if (rows == NULL || rows->type != jbvBinary || !JsonContainerIsArray(rows->val.binary.data) ||
		next == NULL || (next->type != jbvString && next->type != jbvNull))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("pages function of backfill \"%s\" answered something that is not a page",
						pass->name),
				 errdetail("It answered: %.200s", page ? JsonbToCString(NULL, &page->root, 0) : "NULL"),
				 errhint("Return jsonb {\"rows\": [...], \"next\": \"cursor\" or null}.")));
	nrows = JsonContainerSize(rows->val.binary.data);
	*next_text = next->type == jbvString ?
		pnstrdup(next->val.string.val, next->val.string.len) : NULL;
	if (*next_text == NULL)
		return rows;

	/* rows, and a cursor that does not move: the same page for ever */
	if (cursor != NULL && strcmp(cursor, *next_text) == 0)
	{
		if (nrows > 0)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("pages function of backfill \"%s\" does not advance", pass->name),
					 errdetail("After cursor \"%.100s\" it answered %d rows and the same cursor as next.",
							   cursor, nrows),
					 errhint("Return as next the cursor after the page's last row, or null at the "
							 "end of the source.")));
		return rows;
	}

	/* a cursor asked for before in this pass: the pages from there on, again and again */
	earlier = pagecycle_find(page_walk(pass, claim), *next_text);
	if (earlier > 0)
	{
		int64		now = pagecycle_next_page(pass->page_cycle);

		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("pages function of backfill \"%s\" goes round in a cycle: page " INT64_FORMAT
						" leads back to cursor \"%.100s\" of page " INT64_FORMAT,
						pass->name, now, *next_text, earlier),
				 errdetail("Page " INT64_FORMAT " (cursor \"%.100s\") answered %d rows and next cursor "
						   "\"%.100s\", with which page " INT64_FORMAT " of this pass was asked for: "
						   "every page from there on would be asked for again and again. Page "
						   INT64_FORMAT " was rolled back.",
						   now, cursor ? cursor : "", nrows, *next_text, earlier, now),
				 errhint("Return cursors that only move forward, each once in a pass, and null "
						 "as next at the end of the source; then run the backfill again.")));
	}
	return rows;
}

/*
 * One page of a pages source: ask the function for the page after the
 * cursor, check it (page_read), run the action on its rows, checkpoint
 * the next cursor (never the rows).  next = NULL ends the pass; so does an
 * empty page that does not move the cursor.
 */
static BatchOutcome
batch_run_page(Pass *pass, Claim *claim)
{
	Datum		args[2];
	char		nulls[2] = {' ', ' '};
	Datum		result;
	bool		isnull;
	JsonbValue *rows;
	char	   *cursor = NULL;
	char	   *next_text = NULL;
	Datum		next_cursor;
	int			nrows;
	TimestampTz batch_start = GetCurrentTimestamp();
	BatchOutcome outcome = BATCH_DONE;

	if (claim->has_cursor)
		cursor = TextDatumGetCString(claim->cursor);
	args[0] = claim->has_cursor ? claim->cursor : (Datum) 0;
	nulls[0] = claim->has_cursor ? ' ' : 'n';
	args[1] = pass->input ? JsonbPGetDatum(pass->input) : (Datum) 0;
	nulls[1] = pass->input ? ' ' : 'n';

	begin_batch(pass, claim);
	(void) page_walk(pass, claim);
	if (SPI_execute_plan(pass->page_plan, args, nulls, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "pages function of backfill \"%s\" returned no row", pass->name);
	result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	rows = page_read(pass, claim, isnull ? NULL : DatumGetJsonbP(result), cursor, &next_text);
	nrows = JsonContainerSize(rows->val.binary.data);

	if (nrows > 0)
	{
		Datum		rows_arg[1];

		rows_arg[0] = JsonbPGetDatum(JsonbValueToJsonb(rows));
		if (SPI_execute_plan(pass->action_plan, rows_arg, NULL, false, 0) < 0)
			elog(ERROR, "action of backfill \"%s\" failed", pass->name);
	}
	worker_statement_timeout_end();
	claim->last_keys = nrows;
	claim->last_batch_ms = (GetCurrentTimestamp() - batch_start) / 1000.0;

	/* the end: no next page, or an empty page that does not move the cursor */
	if (next_text == NULL ||
		(nrows == 0 && cursor != NULL && strcmp(cursor, next_text) == 0))
	{
		if (nrows > 0)
			outcome = checkpoint_batch(pass, claim, cursor, cursor ? cursor : "", nrows);
		checkpoint_partition_done(pass, claim);
		worker_commit_xact();
		claim->rows += nrows;
		return outcome == BATCH_DONE ? BATCH_PARTITION_DONE : outcome;
	}
	outcome = checkpoint_batch(pass, claim, cursor, next_text, nrows);
	/* the next cursor, in the pass's memory: the transaction's goes at commit */
	{
		MemoryContext old = MemoryContextSwitchTo(pass->cxt);

		next_cursor = CStringGetTextDatum(next_text);
		MemoryContextSwitchTo(old);
	}
	worker_commit_xact();

	/* the checkpoint is durable: the page is done, move the cursor */
	pagecycle_done(pass->page_cycle, cursor);
	if (claim->has_cursor)
		pfree(DatumGetPointer(claim->cursor));
	claim->cursor = next_cursor;
	claim->has_cursor = true;
	claim->rows += nrows;
	return outcome;
}

/*
 * The key scan's parameters: the limit, then the cursor and the upper
 * bound (NULL when the claim has none): one value each for a key of one
 * column, k each for a composite key.
 */
static void
key_scan_args(Pass *pass, Claim *claim, int64 limit, Datum *values, char *nulls)
{
	int			k = pass->keyset.nkeys;

	/* a partitioned table's: the claim's piece of a leaf, or none */
	if (pass->partitioned)
		leaves_scan_args(claim->has_piece ? &claim->piece : NULL, values + 1 + 2 * k,
						 nulls + 1 + 2 * k);

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
 * The next cursor is the last key itself, copied out of the batch's
 * memory while the transaction is still open: turning the text back into
 * a key would run the key type's input function (a domain's CHECK, which
 * needs a transaction) after the commit.
 */
static void
copy_next_cursor(Pass *pass, const Datum *last, Datum *next)
{
	MemoryContext old = MemoryContextSwitchTo(pass->cxt);

	if (pass->keyset.nkeys == 1)
		next[0] = datumCopy(last[0], pass->key_byval, pass->key_len);
	else
		for (int i = 0; i < pass->keyset.nkeys; i++)
			next[i] = datumCopy(last[i], pass->keyset.cols[i].byval, pass->keyset.cols[i].len);
	MemoryContextSwitchTo(old);
}

/* the checkpoint is durable: move the claim's cursor to a key (k values, the pass's memory) */
void
batch_move_cursor(Pass *pass, Claim *claim, const Datum *next)
{
	if (pass->keyset.nkeys == 1)
	{
		if (claim->has_cursor && !pass->key_byval)
			pfree(DatumGetPointer(claim->cursor));
		claim->cursor = next[0];
	}
	else
		for (int i = 0; i < pass->keyset.nkeys; i++)
		{
			if (claim->has_cursor && !pass->keyset.cols[i].byval)
				pfree(DatumGetPointer(claim->cursor_key[i]));
			claim->cursor_key[i] = next[i];
		}
	claim->has_cursor = true;
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
 * isolated, the first key alone), a composite key, a partitioned table or
 * a batch time target (a size that moves every batch): those take $1.
 */
static SPIPlanPtr
sized_key_scan(Pass *pass, int variant, int64 limit)
{
	Oid			key_types[3] = {INT8OID, pass->keytype, pass->keytype};

	if (pass->keyset.nkeys > 1 || pass->partitioned || pass->target_batch_ms > 0 ||
		limit != pass->batch_size || limit <= 0)
		return NULL;
	if (pass->keys_sized_limit != limit)
		free_sized_plans(pass);
	if (pass->keys_sized_plan[variant] == NULL)
	{
		pass->keys_sized_plan[variant] =
			prepare_kept(pass, "key scan",
						 key_scan_sql(pass, variant, quote_identifier(pass->key), pass->key_gt,
									  pass->key_le, limit),
						 3, key_types, 0);
		pass->keys_sized_limit = limit;
	}
	return pass->keys_sized_plan[variant];
}

/*
 * Run the key scan of a variant.  A partitioned table's is planned for
 * each batch; a leaf attached since the last ANALYZE has no statistics,
 * and the planner, expecting a row or two, would read the leaf's rest into
 * a bitmap and sort it, in every batch.  So, for its planning only, no
 * sort, no bitmap and no sequential scan: the leaf's own index in key
 * order, which the LIMIT ends (a GUC nest level of its own, undone at once).
 */
static int
run_key_scan(Pass *pass, int variant, Datum *values, const char *nulls)
{
	int			nest;
	int			rc;
	SPIPlanPtr	sized = sized_key_scan(pass, variant, DatumGetInt64(values[0]));

	if (sized != NULL)
		return SPI_execute_plan(sized, values, nulls, false, 0);
	if (!pass->partitioned)
		return SPI_execute_plan(pass->keys_plan[variant], values, nulls, false, 0);
	nest = NewGUCNestLevel();
	(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	rc = SPI_execute_plan(pass->keys_plan[variant], values, nulls, false, 0);
	AtEOXact_GUC(true, nest);
	return rc;
}

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

/*
 * The first key after the claim's cursor that still matches the predicate
 * (k values for a composite key), found in a batch transaction begun here
 * and left open: the caller (poison.c) records the row and moves the
 * cursor past it in the same transaction, and commits it.  false: no key
 * is left in the partition.  The key is copied into the pass's memory.
 */
bool
batch_first_key(Pass *pass, Claim *claim, Datum *key)
{
	int			variant = (claim->has_cursor ? 1 : 0) | (claim->has_hi ? 2 : 0);
	Datum		key_values[1 + 2 * DECLARATION_MAX_KEY_COLUMNS + LEAVES_SCAN_PARAMS];
	char		key_nulls[1 + 2 * DECLARATION_MAX_KEY_COLUMNS + LEAVES_SCAN_PARAMS];
	Datum		range[2 * DECLARATION_MAX_KEY_COLUMNS];

	key_scan_args(pass, claim, 1, key_values, key_nulls);
	begin_batch(pass, claim);
	if (leaf_gone(pass, claim))
	{
		worker_statement_timeout_end();
		return false;
	}
	if (run_key_scan(pass, variant, key_values, key_nulls) != SPI_OK_SELECT)
		elog(ERROR, "key scan of backfill \"%s\" failed", pass->name);
	worker_statement_timeout_end();
	if (SPI_processed == 0 || batch_range(pass, range) == 0)
		return false;			/* no key, or min() of no keys */
	copy_next_cursor(pass, range, key);
	return true;
}

/* a key (k values) as the cursor writes it: its type's text, or a row literal */
char *
batch_key_text(Pass *pass, const Datum *key)
{
	return pass->keyset.nkeys > 1 ? keyset_row_text(&pass->keyset, key) :
		worker_key_output(pass->key_output, key[0]);
}

/* the claim's cursor (it has one) as text */
char *
batch_cursor_text(Pass *pass, Claim *claim)
{
	return batch_key_text(pass, pass->keyset.nkeys > 1 ? claim->cursor_key : &claim->cursor);
}

/*
 * A Citus shard's batch: run on the node that holds the shard, with its
 * checkpoint there (shards.c); this transaction only mirrors it in the
 * partition's row and reads the pass's state back.  The node's checkpoint
 * is read again before the first batch and after any that failed.
 */
static BatchOutcome
batch_run_shard(Pass *pass, Claim *claim)
{
	ShardAnswer answer;
	BatchOutcome outcome;
	TimestampTz batch_start;
	int64		rows_before;

	if (!claim->shard_ready && !shards_open(pass, claim))
	{
		/* split: its new shards' partitions go on from its checkpoint (shards.c) */
		worker_begin_xact("pg_backfill lane: a split shard's partition ends");
		checkpoint_partition_done(pass, claim);
		worker_commit_xact();
		return BATCH_PARTITION_DONE;
	}
	batch_start = GetCurrentTimestamp();
	begin_batch(pass, claim);
	if (!shards_fence_moves(pass))
	{
		/*
		 * A move or split of the group goes first, and no batch starts
		 * after it before the lane has looked again at what comes before
		 * a batch (a pause, a cancel, a switch for all) and where the
		 * shard is now.
		 */
		worker_statement_timeout_end();
		worker_commit_xact();
		shards_wait_out_move(pass, claim);
		claim->shard_ready = false;
		claim->health_fresh = false;
		return BATCH_AGAIN;
	}
	claim->scanned_keys = -1;
	claim->shard_ready = false;
	shards_batch(pass, claim, CLAIM_BATCH_LIMIT(claim), &answer);
	claim->shard_ready = true;
	worker_statement_timeout_end();
	if (answer.status == SHARD_DONE)
	{
		checkpoint_partition_done(pass, claim);
		worker_commit_xact();
		return BATCH_PARTITION_DONE;
	}
	claim->scanned_keys = answer.keys;
	claim->last_keys = answer.keys;
	claim->last_batch_ms = (GetCurrentTimestamp() - batch_start) / 1000.0;
	rows_before = claim->rows;
	outcome = checkpoint_batch(pass, claim, NULL, answer.cursor, answer.rows - rows_before);
	worker_commit_xact();
	shards_took(pass, claim, &answer);
	return outcome;
}

/* the batch's first key as text for the batch history, or NULL when it keeps none */
static char *
batch_history_first(Pass *pass, const Datum *range)
{
	if (backfill_batch_history <= 0)
		return NULL;
	return pass->keyset.nkeys > 1 ? keyset_row_text(&pass->keyset, range) :
		worker_key_output(pass->key_output, range[0]);
}

BatchOutcome
batch_run(Pass *pass, Claim *claim)
{
	int			variant = (claim->has_cursor ? 1 : 0) | (claim->has_hi ? 2 : 0);
	int			k = pass->keyset.nkeys;
	Datum		key_values[1 + 2 * DECLARATION_MAX_KEY_COLUMNS + LEAVES_SCAN_PARAMS];
	char		key_nulls[1 + 2 * DECLARATION_MAX_KEY_COLUMNS + LEAVES_SCAN_PARAMS];
	Datum		range[2 * DECLARATION_MAX_KEY_COLUMNS];
	Datum		next_cursor[DECLARATION_MAX_KEY_COLUMNS];
	uint64		nkeys;
	char	   *cursor_text;
	BatchOutcome outcome;
	TimestampTz batch_start;
	int			rc;

	if (OidIsValid(pass->pages_fn))
		return batch_run_page(pass, claim);
	if (claim->shardid != 0)
		return batch_run_shard(pass, claim);

	key_scan_args(pass, claim, CLAIM_BATCH_LIMIT(claim), key_values, key_nulls);
	batch_start = GetCurrentTimestamp();
	begin_batch(pass, claim);
	claim->scanned_keys = -1;

	if (leaf_gone(pass, claim))
	{
		worker_statement_timeout_end();
		checkpoint_partition_done(pass, claim);
		worker_commit_xact();
		return BATCH_PARTITION_DONE;
	}
	rc = run_key_scan(pass, variant, key_values, key_nulls);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "key scan of backfill \"%s\" failed: %s", pass->name,
			 SPI_result_code_string(rc));
	nkeys = batch_range(pass, range);
	claim->scanned_keys = (int64) nkeys;
	if (nkeys == 0)
	{
		worker_statement_timeout_end();
		checkpoint_partition_done(pass, claim);
		worker_commit_xact();
		return BATCH_PARTITION_DONE;
	}
	/* the last key: a value of one column as its type writes it, else a row literal */
	cursor_text = k > 1 ? keyset_row_text(&pass->keyset, &range[k]) :
		worker_key_output(pass->key_output, range[1]);

	rc = SPI_execute_plan(pass->action_plan, range, NULL, false, 0);
	if (rc < 0)
		elog(ERROR, "action of backfill \"%s\" failed: %s", pass->name,
			 SPI_result_code_string(rc));
	worker_statement_timeout_end();
	claim->last_keys = (int64) nkeys;
	claim->last_batch_ms = (GetCurrentTimestamp() - batch_start) / 1000.0;

	outcome = checkpoint_batch(pass, claim, batch_history_first(pass, range), cursor_text,
							   (int64) nkeys);
	copy_next_cursor(pass, &range[k], next_cursor);
	worker_commit_xact();

	batch_move_cursor(pass, claim, next_cursor);
	claim->rows += nkeys;

	return outcome;
}

/*
 * A rehearsal's batch (rehearse.c), in two steps in the transaction that
 * is open, with no checkpoint: the key scan from the claim's cursor,
 * which returns the keys it found and their range (2k values, valid until
 * the next statement), then the action on that range.
 */
int64
batch_scan_keys(Pass *pass, Claim *claim, Datum *range)
{
	int			variant = (claim->has_cursor ? 1 : 0) | (claim->has_hi ? 2 : 0);
	Datum		key_values[1 + 2 * DECLARATION_MAX_KEY_COLUMNS + LEAVES_SCAN_PARAMS];
	char		key_nulls[1 + 2 * DECLARATION_MAX_KEY_COLUMNS + LEAVES_SCAN_PARAMS];
	int			rc;

	key_scan_args(pass, claim, CLAIM_BATCH_LIMIT(claim), key_values, key_nulls);
	rc = run_key_scan(pass, variant, key_values, key_nulls);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "key scan of backfill \"%s\" failed: %s", pass->name,
			 SPI_result_code_string(rc));
	return (int64) batch_range(pass, range);
}

void
batch_act(Pass *pass, Datum *range)
{
	int			rc = SPI_execute_plan(pass->action_plan, range, NULL, false, 0);

	if (rc < 0)
		elog(ERROR, "action of backfill \"%s\" failed: %s", pass->name,
			 SPI_result_code_string(rc));
}
