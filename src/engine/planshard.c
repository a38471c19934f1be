/*-------------------------------------------------------------------------
 *
 * planshard.c
 *	  The planner of a Citus distributed table, shard by shard, and its
 *	  estimate (the sum of the shards' own, citus.c).
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
#include "planshard.h"
#include "searchpath.h"
#include "shmem.h"
#include "state.h"
#include "xact.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"

/*
 * A Citus table's rows are on its shards, which the coordinator's planner
 * does not see: the estimate is the sum of the shards' own (citus.c), and
 * the method says so.
 */
void
plan_citus_estimate(Pass *pass, PassPlan *plan)
{
	int64		estimate;
	int			shards;
	int			sampled;

	if (!citus_estimate_rows(pass->relid, pass->predicate, &estimate, &shards, &sampled))
		return;
	plan->estimate = Int64GetDatum(estimate);
	plan->has_estimate = true;
	plan->method = psprintf("%s, rows from %d Citus shard%s", plan->method, shards,
								shards == 1 ? "" : "s");
	if (sampled > 0)
		ereport(LOG,
				(errmsg("backfill \"%s\": the rows to do in %d of the %d Citus shards counted in "
						"a sample of their pages (statistics missing or stale)",
						pass->name, sampled, shards)));
}

/*
 * A Citus distributed table whose batches can run on the shards' nodes:
 * one partition per shard (shards.c); else the method says why not.
 */
bool
plan_per_shard(Pass *pass, PassPlan *plan, const char **why)
{
	CitusTable	table;

	citus_describe(pass->relid, &table);
	if (table.kind != CITUS_DISTRIBUTED)
		return false;
	if (!backfill_citus_per_shard)
		*why = "backfill.citus_per_shard is off";
	else if (pass->keyset.nkeys > 1)
		*why = "a composite key";
	else if (pass->partitioned)
		*why = "a partitioned table";
	else if (pass->input != NULL)
		*why = "a scoped backfill";
	else if (pass->settings != NULL)
		*why = "settings";
	else if (pass->max_failed_rows > 0)
		*why = "max_failed_rows above 0";
	if (*why != NULL)
		return false;
	plan->shards = citus_plan_shards(pass->relid, pass->relation, pass->action, pass->predicate,
									 pass->keytype, why);
	if (plan->shards != (Datum) 0)
	{
		ArrayType  *shards = DatumGetArrayTypeP(plan->shards);

		plan->method = psprintf("per shard: %d Citus shards",
								ArrayGetNItems(ARR_NDIM(shards), ARR_DIMS(shards)));
		plan->bounds = PointerGetDatum(construct_empty_array(TEXTOID));
		return true;
	}
	return false;
}
