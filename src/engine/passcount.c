/*-------------------------------------------------------------------------
 *
 * passcount.c
 *	  The count that proves a pass done: the rows within its bound that still
 *	  match the predicate (past the rows recorded as failed alone), what
 *	  matches beyond its bound, and the probe key of a sweep.
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
#include "planpages.h"
#include "passcount.h"
#include "searchpath.h"
#include "shmem.h"
#include "state.h"
#include "xact.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"

/* the keys of the rows this pass recorded as failed alone, as text; their number */
static int
recorded_key_texts(Pass *pass, char ***texts)
{
	CatalogScope scope;
	int			n;

	catalog_enter(&scope);
	n = exec_on_run(pass, "SELECT key FROM backfill.failed_row WHERE run_id = $1", SPI_OK_SELECT);
	*texts = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
		(*texts)[i] = catalog_gettext(i, 1);
	catalog_leave(&scope);
	return n;
}

/*
 * The keys of the rows this pass recorded as failed alone (poison.c), as an
 * array of the key type, or NULL when there are none.  They are read as the
 * extension's owner and become keys as the lane's role (a domain's CHECK).
 * A composite key's stay text: its row literals, as ROW(...)::text writes
 * them.
 */
static ArrayType *
recorded_keys(Pass *pass)
{
	char	  **texts;
	int			n = recorded_key_texts(pass, &texts);
	Datum	   *keys;
	char		align;

	if (n == 0)
		return NULL;
	keys = palloc(sizeof(Datum) * n);
	if (pass->keyset.nkeys > 1)
	{
		for (int i = 0; i < n; i++)
			keys[i] = CStringGetTextDatum(texts[i]);
		return construct_array(keys, n, TEXTOID, -1, false, TYPALIGN_INT);
	}
	for (int i = 0; i < n; i++)
		keys[i] = worker_key_input(pass->key_input, texts[i], pass->key_ioparam);
	get_typlenbyvalalign(pass->keytype, &pass->key_len, &pass->key_byval, &align);
	return construct_array(keys, n, pass->keytype, pass->key_len, pass->key_byval, align);
}

/* a composite bound's columns as parameters: their types and values; returns how many */
static int
bound_params(Pass *pass, Oid *types, Datum *values)
{
	keyset_row_parse(&pass->keyset, pass->bound, values, CurrentMemoryContext);
	for (int i = 0; i < pass->keyset.nkeys; i++)
		types[i] = pass->keyset.cols[i].type;
	return pass->keyset.nkeys;
}

/*
 * The condition of a table's rows still to do, appended to sql: they match
 * the predicate, are not rows the pass recorded as failed alone (those are
 * its result, completed_with_failures, not a sign that it stalled), and lie
 * within its bound.  Its parameters go to types and values; returns how many.
 */
static int
remaining_where(Pass *pass, StringInfo sql, Oid *types, Datum *values)
{
	ArrayType  *keys = recorded_keys(pass);
	int			nargs = 0;

	appendStringInfo(sql, " WHERE (\n%s\n)", pass->predicate);
	if (keys != NULL && pass->keyset.nkeys > 1)
	{
		appendStringInfo(sql, " AND NOT (ROW(%s)::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($1))",
						 keyset_columns_sql(&pass->keyset));
		types[nargs] = TEXTARRAYOID;
		values[nargs++] = PointerGetDatum(keys);
	}
	else if (keys != NULL)
	{
		appendStringInfo(sql, " AND NOT (%s %s ANY ($1))", quote_identifier(pass->key),
						 pass->key_eq);
		types[nargs] = get_array_type(pass->keytype);
		values[nargs++] = PointerGetDatum(keys);
	}
	/* a bounded pass converges within its bound: what lies beyond is drift */
	if (pass->blocks)
		;						/* in block order: every row, where it lies (plan_blocks.c) */
	else if (pass->bound != NULL && pass->keyset.nkeys > 1)
	{
		appendStringInfo(sql, " AND %s", keyset_bound_sql(&pass->keyset, false, nargs + 1));
		nargs += bound_params(pass, types + nargs, values + nargs);
	}
	else if (pass->bound != NULL)
	{
		appendStringInfo(sql, " AND %s %s $%d", quote_identifier(pass->key), pass->key_le,
						 nargs + 1);
		types[nargs] = pass->keytype;
		values[nargs++] = pass_key_from_text(pass, pass->bound);
	}
	return nargs;
}

/* a table's rows still to do (remaining_where) */
static int64
count_table_remaining(Pass *pass)
{
	StringInfoData sql;
	Oid			types[1 + DECLARATION_MAX_KEY_COLUMNS];
	Datum		values[1 + DECLARATION_MAX_KEY_COLUMNS];
	bool		isnull;
	int			nargs;

	initStringInfo(&sql);
	/* in block order, the table's own heap: the walk writes ONLY it (plan_blocks.c) */
	appendStringInfo(&sql, "SELECT pg_catalog.count(*) FROM %s%s", pass->blocks ? "ONLY " : "",
					 pass->relation);
	nargs = remaining_where(pass, &sql, types, values);
	if (SPI_execute_with_args(sql.data, nargs, types, values, NULL, true, 0) !=
		SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not count the rows left by backfill \"%s\"", pass->name);
	return DatumGetInt64(catalog_getdatum(0, 1, &isnull));
}

/*
 * The smallest key of a row still to do (remaining_where), as key text (a
 * composite key's row literal), or NULL when none is: where a sweep
 * begins to prove itself (pass_sweep_or_end).
 */
char *
smallest_remaining_key(Pass *pass)
{
	StringInfoData sql;
	Oid			types[1 + DECLARATION_MAX_KEY_COLUMNS];
	Datum		values[1 + DECLARATION_MAX_KEY_COLUMNS];
	Datum		key[DECLARATION_MAX_KEY_COLUMNS];
	const char *cols = pass->keyset.nkeys > 1 ? keyset_columns_sql(&pass->keyset) :
		quote_identifier(pass->key);
	bool		isnull;
	int			nargs;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s FROM %s", cols, pass->relation);
	nargs = remaining_where(pass, &sql, types, values);
	appendStringInfo(&sql, " ORDER BY %s LIMIT 1", cols);
	if (SPI_execute_with_args(sql.data, nargs, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the first row left by backfill \"%s\"", pass->name);
	if (SPI_processed == 0)
		return NULL;
	for (int i = 0; i < Max(pass->keyset.nkeys, 1); i++)
		key[i] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1, &isnull);
	if (pass->keyset.nkeys > 1)
		return keyset_row_text(&pass->keyset, key);
	return worker_key_output(pass->key_output, key[0]);
}

/* does the row of key text still match the predicate (as the lane's role)? */
bool
key_still_matches(Pass *pass, const char *key)
{
	StringInfoData sql;
	Oid			types[DECLARATION_MAX_KEY_COLUMNS];
	Datum		values[DECLARATION_MAX_KEY_COLUMNS];
	int			nargs = 1;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT 1 FROM %s WHERE ", pass->relation);
	if (pass->keyset.nkeys > 1)
	{
		const char *cols = keyset_columns_sql(&pass->keyset);
		StringInfoData params;

		initStringInfo(&params);
		keyset_row_parse(&pass->keyset, key, values, CurrentMemoryContext);
		nargs = pass->keyset.nkeys;
		for (int i = 0; i < nargs; i++)
		{
			types[i] = pass->keyset.cols[i].type;
			appendStringInfo(&params, "%s$%d", i > 0 ? ", " : "", i + 1);
		}
		/* equal: at most it both ways, with the key's own operators (its index) */
		appendStringInfo(&sql, "ROW(%s) %s ROW(%s) AND ROW(%s) %s ROW(%s)", cols,
						 pass->keyset.le, params.data, params.data, pass->keyset.le, cols);
	}
	else
	{
		types[0] = pass->keytype;
		values[0] = pass_key_from_text(pass, key);
		appendStringInfo(&sql, "%s %s $1", quote_identifier(pass->key), pass->key_eq);
	}
	appendStringInfo(&sql, " AND (\n%s\n) LIMIT 1", pass->predicate);
	if (SPI_execute_with_args(sql.data, nargs, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not look at key %s of backfill \"%s\"", key, pass->name);
	return SPI_processed > 0;
}

/*
 * What matches beyond the bound of a bounded pass that converged within
 * it, as the lane's role, at most DRIFT_BEYOND_LIMIT rows (a LIMIT, never
 * a full count): -1 when the pass is not bounded or its predicate is not
 * its proof.
 */
int64
count_beyond(Pass *pass)
{
	Oid			types[DECLARATION_MAX_KEY_COLUMNS] = {pass->keytype};
	Datum		values[DECLARATION_MAX_KEY_COLUMNS];
	int			nargs = 1;
	char	   *beyond;

	if (pass->bound == NULL || !pass->counted || OidIsValid(pass->pages_fn) || pass->blocks)
		return -1;
	if (pass->keyset.nkeys > 1)
	{
		beyond = keyset_bound_sql(&pass->keyset, true, 1);
		nargs = bound_params(pass, types, values);
	}
	else
	{
		beyond = psprintf("%s %s $1", quote_identifier(pass->key), pass->key_gt);
		values[0] = pass_key_from_text(pass, pass->bound);
	}
	if (SPI_execute_with_args(psprintf("SELECT pg_catalog.count(*) FROM (SELECT 1 FROM %s"
									   " WHERE %s AND (\n%s\n) LIMIT %d) beyond",
									   pass->relation, beyond,
									   pass->predicate, DRIFT_BEYOND_LIMIT),
							  nargs, types, values, NULL, true, 0) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not probe beyond the bound of backfill \"%s\"", pass->name);
	return catalog_getint64(0, 1);
}

/*
 * Convergence, as the declaring role: for a table the predicate is the
 * count; a pages source may declare a count function (none: 0).  A count
 * that is NULL or negative is an error, never "converged".
 */
int64
count_remaining(Pass *pass)
{
	bool		isnull;
	int64		remaining;

	if (!pass->counted)
		return 0;				/* a revert without a predicate: the walk is the proof */
	/* a batch a crash left prepared on a worker is done: Citus commits it first */
	if (pass->citus_remote)
		citus_recover_prepared(pass->name);
	if (!OidIsValid(pass->pages_fn))
		return count_table_remaining(pass);
	if (!OidIsValid(pass->count_fn))
		return 0;
	if (!call_count_fn(pass, true))
		elog(ERROR, "could not count the rows left by backfill \"%s\"", pass->name);
	remaining = DatumGetInt64(catalog_getdatum(0, 1, &isnull));
	if (isnull || remaining < 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("count function of backfill \"%s\" answered %s", pass->name,
						isnull ? "NULL" : psprintf(INT64_FORMAT, remaining)),
				 errdetail("A count must be a whole number of rows still to do, zero or more."),
				 errhint("Fix the count function; the pass did not converge.")));
	return remaining;
}
