/*-------------------------------------------------------------------------
 *
 * plankey.c
 *	  The planner of a key of one column (backfill.plan_bounds: histogram,
 *	  min/max or one partition), and the pass's bound, the largest key now
 *	  (a composite key's bounds come from keyset.c).
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
#include "plankey.h"
#include "searchpath.h"
#include "shmem.h"
#include "state.h"
#include "xact.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"

/*
 * The largest key the table holds now, as key text, read as the declaring
 * role: the upper end of the pass's key range.  Rows written above it
 * while the pass runs are not chased (a writer faster than the pass would
 * keep it going for ever): they are drift, for the watch or the next pass.
 * NULL for an empty table (the pass is then not bounded), and under a
 * catalog older than 0.5.
 */
char *
plan_upper_bound(Pass *pass)
{
	const char *key = quote_identifier(pass->key);
	bool		isnull;
	Datum		last;

	if (SPI_execute(pass->keyset.nkeys > 1 ? keyset_max_sql(&pass->keyset) :
					psprintf("SELECT %s FROM %s ORDER BY %s DESC LIMIT 1", key, pass->relation,
							 key), true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the largest key of backfill \"%s\"", pass->name);
	if (SPI_processed == 0)
		return NULL;
	/* a composite key's bound is a row literal, as its cursors are */
	if (pass->keyset.nkeys > 1)
	{
		Datum		values[DECLARATION_MAX_KEY_COLUMNS];

		for (int i = 0; i < pass->keyset.nkeys; i++)
			values[i] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1,
									  &isnull);
		return keyset_row_text(&pass->keyset, values);
	}
	last = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? NULL : worker_key_output(pass->key_output, last);
}

/* the bounds of a key of one column, from backfill.plan_bounds */
void
plan_key_bounds(Pass *pass, PassPlan *plan, int nparts)
{
	Oid			ptypes[4] = {OIDOID, NAMEOID, OIDOID, INT4OID};
	Datum		pvalues[4];
	NameData	keyname;
	bool		isnull;

	namestrcpy(&keyname, pass->key ? pass->key : "");
	pvalues[0] = ObjectIdGetDatum(pass->relid);
	pvalues[1] = NameGetDatum(&keyname);
	pvalues[2] = ObjectIdGetDatum(pass->keytype);
	pvalues[3] = Int32GetDatum(nparts);
	if (SPI_execute_with_args("SELECT method, bounds FROM backfill.plan_bounds($1, $2, $3, $4)",
							  4, ptypes, pvalues, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not plan the partitions of backfill \"%s\"", pass->name);
	plan->method = catalog_gettext(0, 1);
	plan->bounds = PointerGetDatum(PG_DETOAST_DATUM_COPY(catalog_getdatum(0, 2, &isnull)));
}
