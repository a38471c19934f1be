/*-------------------------------------------------------------------------
 *
 * estimate.c
 *	  How many rows a pass has to do, for its progress and its ETA: the
 *	  planner's estimate of the predicate, or a bounded sample of the table
 *	  where the statistics cannot answer.
 *
 * A predicate over a column added since the last ANALYZE (no statistics:
 * "total_cents IS NULL" is taken for 0.5% of the rows) is estimated from
 * TABLESAMPLE SYSTEM of at most
 * ESTIMATE_SAMPLE_PAGES pages (backfill.estimate_rows_sampled; a smaller
 * table is counted whole); so is one whose statistics predate more changed
 * rows than a tenth of the table (a migration rewrote the column since).  Everything runs as the lane's role, the
 * declarer: pg_stats shows it the columns it may read, and the sample
 * reads what its count would.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "nodes/bitmapset.h"
#include "optimizer/optimizer.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/plancache.h"

#include "estimate.h"

/* the most pages a sample reads (8 MB of 8 kB pages) */
#define ESTIMATE_SAMPLE_PAGES 1000

/* the names of the user columns the predicate reads */
static Datum
predicate_columns(Oid relid, const char *relation, const char *predicate)
{
	SPIPlanPtr	plan = SPI_prepare(psprintf("SELECT 1 FROM %s WHERE (\n%s\n)", relation,
											predicate), 0, NULL);
	CachedPlanSource *source;
	Query	   *query;
	Bitmapset  *attrs = NULL;
	List	   *names = NIL;
	int			i = -1;

	if (plan == NULL)
		elog(ERROR, "could not plan the predicate: %s", SPI_result_code_string(SPI_result));
	source = linitial(SPI_plan_get_plan_sources(plan));
	query = linitial_node(Query, source->query_list);
	pull_varattnos(query->jointree->quals, 1, &attrs);
	while ((i = bms_next_member(attrs, i)) >= 0)
	{
		AttrNumber	attno = i + FirstLowInvalidHeapAttributeNumber;

		if (attno > 0)
			names = lappend(names, get_attname(relid, attno, false));
	}
	SPI_freeplan(plan);
	if (names == NIL)
		return PointerGetDatum(construct_empty_array(TEXTOID));
	return PointerGetDatum(strlist_to_textarray(names));
}

/* the one text a read-only query of the statistics answers, or NULL for no row */
static char *
stats_answer(const char *sql, int nargs, Oid *types, Datum *values)
{
	if (SPI_execute_with_args(sql, nargs, types, values, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		return NULL;
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/*
 * Why the planner's estimate cannot be trusted, or NULL: a column of the
 * predicate without statistics in a table that has some (a column added
 * since the last ANALYZE).  A table never analyzed, or whose statistics
 * the role may not see (row-level security hides pg_stats), is left to the
 * planner.
 */
static char *
statistics_missing(Oid relid, const char *relation, const char *predicate)
{
	Oid			types[2] = {OIDOID, TEXTARRAYOID};
	Datum		values[2] = {ObjectIdGetDatum(relid),
	predicate_columns(relid, relation, predicate)};

	return stats_answer("SELECT 'column ' || pg_catalog.quote_ident(a) || ' has no statistics'"
						"  FROM pg_catalog.pg_class c"
						"  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace,"
						"       pg_catalog.unnest($2::pg_catalog.text[]) a"
						" WHERE c.oid = $1 AND NOT pg_catalog.row_security_active(c.oid)"
						"   AND EXISTS (SELECT 1 FROM pg_catalog.pg_stats s"
						"                WHERE s.schemaname = n.nspname AND s.tablename = c.relname)"
						"   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stats s"
						"                    WHERE s.schemaname = n.nspname"
						"                      AND s.tablename = c.relname AND s.attname = a)"
						" ORDER BY a LIMIT 1",
						2, types, values);
}

/*
 * Or: the table's statistics predate most of what it holds now: more rows
 * inserted, updated or deleted since its last ANALYZE than a tenth of the
 * rows it had then (autovacuum's default threshold for an ANALYZE), as
 * after a migration that rewrote the column the predicate reads.
 */
static char *
statistics_stale(Oid relid)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(relid)};

	return stats_answer("SELECT 'its statistics predate ' || s.n_mod_since_analyze"
						"       || ' changed rows'"
						"  FROM pg_catalog.pg_class c"
						"  JOIN pg_catalog.pg_stat_all_tables s ON s.relid = c.oid"
						" WHERE c.oid = $1 AND c.reltuples > 0"
						"   AND NOT pg_catalog.row_security_active(c.oid)"
						"   AND s.n_mod_since_analyze > c.reltuples * 0.1",
						1, types, values);
}

/* the planner's estimate (backfill.estimate_rows) */
static bool
planner_estimate(const char *relation, const char *predicate, int64 *rows)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {CStringGetTextDatum(relation), CStringGetTextDatum(predicate)};
	bool		isnull = true;
	Datum		d = (Datum) 0;

	if (SPI_execute_with_args("SELECT backfill.estimate_rows($1, $2)", 2, types, values,
							  NULL, false, 1) == SPI_OK_SELECT && SPI_processed == 1)
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
		*rows = DatumGetInt64(d);
	return !isnull;
}

bool
estimate_pass_rows(const char *name, Oid relid, const char *relation, const char *predicate,
				   int64 *rows, char **note)
{
	Oid			types[3] = {OIDOID, TEXTOID, INT4OID};
	Datum		values[3];
	char	   *why = statistics_missing(relid, relation, predicate);
	bool		stale = false;
	bool		isnull;
	double		percent;

	*note = NULL;
	if (why == NULL)
		stale = (why = statistics_stale(relid)) != NULL;
	if (why == NULL)
		return planner_estimate(relation, predicate, rows);
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(predicate);
	values[2] = Int32GetDatum(ESTIMATE_SAMPLE_PAGES);
	if (SPI_execute_with_args("SELECT estimate, percent"
							  "  FROM backfill.estimate_rows_sampled($1, $2, $3)",
							  3, types, values, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		return planner_estimate(relation, predicate, rows);
	*rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
										&isnull));
	percent = DatumGetFloat8(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2,
										   &isnull));
	/* stale statistics are said in the log only: plan_method keeps to the plan */
	if (!stale)
		*note = percent >= 100 ? psprintf("estimate counted (%s)", why) :
			psprintf("estimate from a %.1f%% sample (%s)", percent, why);
	ereport(LOG,
			(errmsg("backfill \"%s\": %s; about " INT64_FORMAT " rows to do, by a %s",
					name, why, *rows, percent >= 100 ? "count of the whole table" :
					psprintf("sample of %.1f%% of its pages", percent))));
	return true;
}
