/*-------------------------------------------------------------------------
 *
 * newest.c
 *	  A backfill and its newest pass, as CALL backfill_finalize
 *	  (finalize.c) and backfill_ensure_complete (ensure.c) read and raise
 *	  them: the row read as the extension's owner with its columns found by
 *	  name (BF002 for a backfill not declared), and the SQLSTATE of a pass
 *	  that ended otherwise than completed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "newest.h"

void
newest_read(const char *sql, const char *name, const CatalogColumn *columns, int ncolumns,
			void *into)
{
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	int			n;

	catalog_enter(&scope);
	n = catalog_exec(sql, 1, types, values, NULL, SPI_OK_SELECT);
	if (n == 1)
		catalog_read_row(0, columns, ncolumns, into);
	catalog_leave(&scope);
	if (n != 1)
		report_not_declared(name);
}

const char *
ended_code(const char *status, const char *error_code)
{
	if (strcmp(status, "completed_with_failures") == 0)
		return "BF018";
	if (error_code == NULL || strlen(error_code) != 5)
		return strcmp(status, "cancelled") == 0 ? "BF010" : "BF014";
	return error_code;
}
