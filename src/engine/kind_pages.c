/*-------------------------------------------------------------------------
 *
 * kind_pages.c
 *	  A pages source as a kind of partition: each batch asks the pages
 *	  function for the page after the cursor, checks it (page_read), runs
 *	  the action on its rows and checkpoints the next cursor (never the
 *	  rows).  next = NULL ends the pass; so does an empty page that does
 *	  not move the cursor.  A next cursor asked for before in the pass is a
 *	  cycle, refused before any page is done twice (pagecycle.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "batch.h"
#include "catalog.h"
#include "errors.h"
#include "jsonobj.h"
#include "kind.h"
#include "pagecycle.h"

/*
 * A pages source: the pages function ($1 cursor, $2 input) and the action
 * ($1 the page's rows), planned for each page's rows.
 */
static void
page_prepare(Pass *pass)
{
	Oid			page_types[2] = {TEXTOID, JSONBOID};
	Oid			rows_type[1] = {JSONBOID};

	pass->page_plan = batch_prepare_kept(pass, "pages function",
										 psprintf("SELECT %s($1, $2)",
												  function_name(pass->pages_fn)),
										 2, page_types, 0);
	pass->action_plan = batch_prepare_kept(pass, "action", pass->action, 1, rows_type,
										   CURSOR_OPT_CUSTOM_PLAN);
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
 * The page after the claim's cursor (NULL: the first page), checked; its
 * rows and where the checkpoint leaves the cursor: the next one, or, at
 * the end (no next page, or an empty page that does not move the
 * cursor), where it is.
 */
static void
page_scan(Pass *pass, Claim *claim, int64 limit, Batch *batch)
{
	Datum		args[2];
	char		nulls[2] = {' ', ' '};
	Datum		result;
	bool		isnull;
	JsonbValue *rows;
	char	   *cursor = NULL;
	char	   *next_text = NULL;

	if (claim->has_cursor)
		cursor = TextDatumGetCString(claim->cursor);
	args[0] = claim->has_cursor ? claim->cursor : (Datum) 0;
	nulls[0] = claim->has_cursor ? ' ' : 'n';
	args[1] = pass->input ? JsonbPGetDatum(pass->input) : (Datum) 0;
	nulls[1] = pass->input ? ' ' : 'n';

	(void) page_walk(pass, claim);
	if (SPI_execute_plan(pass->page_plan, args, nulls, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "pages function of backfill \"%s\" returned no row", pass->name);
	result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	rows = page_read(pass, claim, isnull ? NULL : DatumGetJsonbP(result), cursor, &next_text);
	batch->keys = JsonContainerSize(rows->val.binary.data);
	batch->rows = batch->keys;
	batch->rows_found = batch->keys > 0 ? JsonbPGetDatum(JsonbValueToJsonb(rows)) : (Datum) 0;
	batch->first = cursor;
	batch->last = next_text == NULL ||
		(batch->keys == 0 && cursor != NULL && strcmp(cursor, next_text) == 0);
	batch->cursor = batch->last ? (cursor ? cursor : "") : next_text;
}

/* the action on the page's rows ($1), when it has any */
static void
page_act(Pass *pass, Claim *claim, Batch *batch)
{
	Datum		rows_arg[1];

	if (batch->keys == 0)
		return;
	rows_arg[0] = batch->rows_found;
	if (SPI_execute_plan(pass->action_plan, rows_arg, NULL, false, 0) < 0)
		elog(ERROR, "action of backfill \"%s\" failed", pass->name);
}

/* the next cursor, in the pass's memory: the transaction's goes at commit */
static void
page_keep(Pass *pass, Claim *claim, Batch *batch)
{
	MemoryContext old = MemoryContextSwitchTo(pass->cxt);

	batch->next[0] = CStringGetTextDatum(batch->cursor);
	MemoryContextSwitchTo(old);
}

/* the checkpoint is durable: the page is done, move the cursor */
static void
page_end(Pass *pass, Claim *claim, Batch *batch)
{
	pagecycle_done(pass->page_cycle,
				   claim->has_cursor ? TextDatumGetCString(claim->cursor) : NULL);
	if (claim->has_cursor)
		pfree(DatumGetPointer(claim->cursor));
	claim->cursor = batch->next[0];
	claim->has_cursor = true;
}

const BatchKind batch_kind_pages = {
	.name = "pages",
	.isolates_rows = false,		/* a page cannot be halved */
	.coordinated = true,
	.prepare = page_prepare,
	.scan = page_scan,
	.act = page_act,
	.keep = page_keep,
	.end = page_end,
};
