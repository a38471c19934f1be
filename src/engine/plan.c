/*-------------------------------------------------------------------------
 *
 * plan.c
 *	  Planning a pass, once, by its first lane: which planner (pages, a key
 *	  of one column, a composite key, per leaf, per Citus shard) and storing
 *	  the plan (state/ writes its partitions); a retried pass described anew.
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
#include "plan_blocks.h"
#include "passplan.h"
#include "plankey.h"
#include "planleaf.h"
#include "planpages.h"
#include "planshard.h"
#include "plan.h"
#include "searchpath.h"
#include "shmem.h"
#include "state.h"
#include "xact.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"

/* the rows to do (estimate.c): the planner's, or a sample's, which plan_method then names */
static void
plan_estimate_rows(Pass *pass, PassPlan *plan)
{
	int64		rows;
	char	   *note;

	plan->has_estimate = estimate_pass_rows(pass->name, pass->relid, pass->relation,
											pass->predicate, &rows, &note);
	if (plan->has_estimate)
		plan->estimate = Int64GetDatum(rows);
	if (note != NULL)
		plan->method = psprintf("%s; %s", plan->method, note);
}

/*
 * A table: bounds about four partitions per lane (a composite key's from
 * keyset.c), and the planner's estimate of the rows the predicate
 * matches; both as the declaring role.
 */
static void
plan_table(Pass *pass, PassPlan *plan)
{
	Oid			etypes[2] = {TEXTOID, TEXTOID};
	Datum		evalues[2];
	int			nparts = pass->max_parallel > 1 ? pass->max_parallel * 4 : 1;
	const char *why = NULL;
	const char *not_per_shard = NULL;

	if (pass->blocks)
		plan->bounds = blocks_plan_bounds(pass->relid, nparts, &plan->method, &plan->bound);
	else if (pass->citus_remote && plan_per_shard(pass, plan, &not_per_shard))
		;
	else if (!plan_per_leaf(pass, plan, nparts, &why))
	{
		if (pass->keyset.nkeys > 1)
			plan->bounds = keyset_plan_bounds(&pass->keyset, nparts, NULL, &plan->method);
		else
			plan_key_bounds(pass, plan, nparts);
		if (why != NULL)
			plan->method = psprintf("parent walk: %s; %s", why, plan->method);
	}
	if (not_per_shard != NULL)
		plan->method = psprintf("coordinator-side (%s); %s", not_per_shard, plan->method);
	if (!pass->blocks)
		plan->bound = plan_upper_bound(pass);

	if (pass->citus_remote)
	{
		evalues[0] = CStringGetTextDatum(pass->relation);
		evalues[1] = CStringGetTextDatum(pass->predicate);
		if (SPI_execute_with_args("SELECT backfill.estimate_rows($1, $2)", 2, etypes, evalues,
								  NULL, false, 1) == SPI_OK_SELECT && SPI_processed == 1)
			plan_take_estimate(plan);
		plan_citus_estimate(pass, plan);
	}
	else
		plan_estimate_rows(pass, plan);
}

/* how many partitions plan_store inserts: one a leaf piece, a shard, or a range */
static int
plan_partition_count(PassPlan *plan, ArrayType *bounds)
{
	ArrayType  *shards;

	if (plan->nleafparts > 0)
		return plan->nleafparts;
	if (plan->shards != (Datum) 0)
	{
		shards = DatumGetArrayTypeP(plan->shards);
		return ArrayGetNItems(ARR_NDIM(shards), ARR_DIMS(shards));
	}
	return 1 + ArrayGetNItems(ARR_NDIM(bounds), ARR_DIMS(bounds));
}

/* Insert the partitions and move the run to running; say so in the log. */
static void
plan_store(Pass *pass, PassPlan *plan)
{
	CatalogScope scope;
	ArrayType  *bounds = DatumGetArrayTypeP(plan->bounds);

	catalog_enter(&scope);
	/*
	 * partition i covers (bounds[i-1], bounds[i]]; the ends are open, and
	 * the run's bound closes the last one when a lane claims it (per leaf:
	 * within the piece of its leaf)
	 */
	if (plan->nleafparts > 0)
		insert_leaf_partitions(pass, plan, 0);
	else if (plan->shards != (Datum) 0)
		state_parts_planned_shards(pass->run_id, plan->shards);
	else
		state_parts_planned_ranges(pass->run_id, plan->bounds);
	state_pass_planned(pass->run_id, plan->method, plan->estimate, plan->has_estimate,
					   plan->bound);
	catalog_leave(&scope);
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT " started: %d partitions by %s, "
					"about %s rows to do",
					pass->name, pass->run_id, plan_partition_count(plan, bounds),
					plan->method,
					plan->has_estimate ? psprintf(INT64_FORMAT, DatumGetInt64(plan->estimate)) :
					"?")));
}

/*
 * A retried pass (backfill_retry) goes on from the failed one's partitions,
 * which the retry copied; its first lane describes it as the table is now,
 * not as it was: for partitions of Citus shards, the shards the table has
 * now (a split shard's partition goes on in the new ones when a lane claims
 * it), else the failed pass's method; and the rows to do now, estimated as
 * a new plan's are (from a sample where the statistics are missing or
 * stale), not the failed pass's estimate of its start.
 */
static void
plan_resumed(Pass *pass)
{
	CatalogScope scope;
	PassPlan	plan = {0};
	int64		previous;
	int			nparts;
	int			nshards;
	char	   *old_method;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	bool		isnull;

	catalog_enter(&scope);
	exec_on_run(pass, "SELECT l.previous_run_id, (SELECT o.plan_method FROM backfill.run o"
				"   WHERE o.run_id = l.previous_run_id),"
				" (SELECT pg_catalog.count(*)::pg_catalog.int4 FROM backfill.partition p"
				"   WHERE p.run_id = l.run_id),"
				" (SELECT pg_catalog.count(p.shard)::pg_catalog.int4 FROM backfill.partition p"
				"   WHERE p.run_id = l.run_id)"
				"  FROM backfill.ledger l WHERE l.run_id = $1", SPI_OK_SELECT);
	(void) catalog_getdatum(0, 1, &isnull);
	previous = isnull ? 0 : catalog_getint64(0, 1);
	old_method = catalog_gettext(0, 2);
	nparts = DatumGetInt32(catalog_getdatum(0, 3, &isnull));
	nshards = DatumGetInt32(catalog_getdatum(0, 4, &isnull));
	if (nshards > 0 && pass->citus_remote)
	{
		values[0] = ObjectIdGetDatum(pass->relid);
		catalog_exec("SELECT pg_catalog.count(*)::pg_catalog.int4 FROM pg_catalog.pg_dist_shard s"
					 " WHERE s.logicalrelid = $1::pg_catalog.regclass",
					 1, types, values, NULL, SPI_OK_SELECT);
		plan.method = psprintf("per shard: %d Citus shards",
							   DatumGetInt32(catalog_getdatum(0, 1, &isnull)));
	}
	else
		plan.method = old_method ? old_method : "?";
	catalog_leave(&scope);
	/* the rows to do now, as the lane's role (as a new plan estimates them) */
	if (pass->citus_remote)
		plan_citus_estimate(pass, &plan);
	else if (!OidIsValid(pass->pages_fn))
		plan_estimate_rows(pass, &plan);
	plan.method = psprintf("%s; resumed from run " INT64_FORMAT " (%d partitions)",
						   plan.method, previous, nparts);
	catalog_enter(&scope);
	state_pass_replanned(pass->run_id, plan.method, plan.estimate, plan.has_estimate);
	catalog_leave(&scope);
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT " resumes run " INT64_FORMAT ": %d "
					"partitions by %s, about %s rows to do", pass->name, pass->run_id, previous,
					nparts, plan.method,
					plan.has_estimate ? psprintf(INT64_FORMAT, DatumGetInt64(plan.estimate)) :
					"?")));
}

/*
 * The first lane of a pass splits the key space into partitions, about
 * four per lane so that a lane that finishes early takes another: from the
 * key's histogram in pg_stats when there is one, else from min/max of an
 * integer key, else one partition.  Bounds come from backfill.plan_bounds,
 * run as the declaring role (it reads the table and its statistics).  The
 * run row stays locked while planning: one lane plans, a control waits.
 */
void
pass_plan(Pass *pass)
{
	CatalogScope scope;
	char	   *phase;
	bool		isnull;
	bool		resumed;

	worker_begin_xact("pg_backfill lane: planning the pass");
	catalog_enter(&scope);
	exec_on_run(pass, "SELECT r.phase, r.plan_method IS NULL AND EXISTS (SELECT 1"
				"  FROM backfill.partition p WHERE p.run_id = r.run_id)"
				"  FROM backfill.run r WHERE r.run_id = $1 FOR UPDATE OF r",
				SPI_OK_SELECT);
	phase = catalog_gettext(0, 1);
	resumed = DatumGetBool(catalog_getdatum(0, 2, &isnull));
	catalog_leave(&scope);

	if (strcmp(phase, run_phase_text(PHASE_QUEUED)) == 0)
	{
		PassPlan	plan = {0};

		if (OidIsValid(pass->pages_fn))
			plan_pages(pass, &plan);
		else
			plan_table(pass, &plan);
		plan_store(pass, &plan);
	}
	else if (strcmp(phase, run_phase_text(PHASE_RUNNING)) == 0 && resumed)
		plan_resumed(pass);
	worker_commit_xact();
}
