/*-------------------------------------------------------------------------
 *
 * planpages.c
 *	  The planner of a pages source: one partition, the estimate its count
 *	  function gives (as the declaring role).
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
#include "planpages.h"
#include "searchpath.h"
#include "shmem.h"
#include "state.h"
#include "xact.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"

/*
 * Call a pages source's count function with the pass's input, as the lane's
 * role; true when it answered one row (its count is column 1 of SPI's).
 */
bool
call_count_fn(Pass *pass, bool read_only)
{
	Oid			types[1] = {JSONBOID};
	Datum		values[1] = {pass->input ? JsonbPGetDatum(pass->input) : (Datum) 0};
	char		nulls[1] = {pass->input ? ' ' : 'n'};

	return SPI_execute_with_args(psprintf("SELECT %s($1)::pg_catalog.int8",
										  function_name(pass->count_fn)),
								 1, types, values, nulls, read_only, 1) == SPI_OK_SELECT &&
		SPI_processed == 1;
}

/*
 * A pages source is one sequence of pages: one partition; its estimate is
 * what its count function (if any) says, as the declaring role.
 */
void
plan_pages(Pass *pass, PassPlan *plan)
{
	plan->method = "pages";
	plan->bounds = PointerGetDatum(construct_empty_array(TEXTOID));
	if (OidIsValid(pass->count_fn) && call_count_fn(pass, false))
		plan_take_estimate(plan);
}
