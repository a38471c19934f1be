/*-------------------------------------------------------------------------
 *
 * drift.c
 *	  Reopening a required backfill whose predicate matches rows again.
 *
 * A pass of A that requires backfill B starts only after B's newest pass
 * completed.  Rows written since (by an application still on the old
 * code, say) can make B's predicate match again: B has drifted.  Just
 * before A's pass would start, the scheduler asks B's predicate, as B's
 * role and with B's search_path, whether any row still needs B.  If so it
 * enqueues a new pass of B (forced: its last one completed) and A waits
 * for it.
 *
 * The scheduler is a superuser session that goes on to run its own SQL,
 * so B's predicate is evaluated through asrole.c (restricted, settings
 * rolled back), and only when the reopen is something B's owner could do
 * and A's owner may ask for (a member of B's owner): a role never
 * force-runs another role's backfill.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

#include "asrole.h"
#include "catalog.h"
#include "declare.h"
#include "drift.h"
#include "requires.h"
#include "run.h"
#include "tenancy.h"
#include "xact.h"

/*
 * A reopen is a forced run of B on behalf of A's owner: only what B's own
 * owner could do here (B's environment, its run_as role, a role that can
 * log in), asked by a role that may act for B's owner.  Raises BF016 or
 * BF004 otherwise.
 */
static void
check_reopen_allowed(const char *a_name, Oid a_owner, const char *b_name, Oid b_owner,
					 Oid b_run_as, Datum b_environments, const char *b_envlist)
{
	requires_check_backfill(a_name, a_owner, b_name);
	check_environment(b_name, b_environments, b_envlist);
	tenancy_check_run_as(b_name, b_owner, b_run_as);
	check_role_can_login(b_name, b_run_as);
}

/*
 * Does B's predicate match a row?  B's SQL, so it runs as B's role with
 * B's search_path, restricted, and whatever it changes (a setting made
 * with set_config(..., false), say) is rolled back with it: nothing of it
 * reaches the scheduler's own session.
 */
static bool
predicate_matches(Oid run_as, const char *search_path, const char *relation,
				  const char *predicate)
{
	char	   *answer;

	answer = asrole_query(run_as, search_path,
						  psprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE (\n%s\n))",
								   relation, predicate),
						  0, NULL, NULL, NULL, NULL);
	return answer != NULL && strcmp(answer, "t") == 0;
}

/*
 * Returns true when the backfill that waiting_run_id requires was reopened,
 * so the waiting pass must not start yet.  Runs its own transaction.
 */
bool
drift_reopen_required(int64 waiting_run_id)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool reopened = false;

	worker_begin_xact("pg_backfill scheduler: checking a required backfill");

	PG_TRY();
	{
		CatalogScope scope;
		Oid			types[1] = {INT8OID};
		Datum		values[1] = {Int64GetDatum(waiting_run_id)};
		bool		isnull;

		catalog_enter(&scope);
		if (catalog_exec("SELECT b.name, b.relation, b.predicate, b.run_as, b.checksum, b.owner,"
						 "  b.search_path, a.name,"
						 "  (SELECT pg_catalog.max(l.run_id) FROM backfill.ledger l"
						 "    WHERE l.ledger_name = b.name),"
						 "  a.owner, b.environments, pg_catalog.array_to_string(b.environments, ', ')"
						 " FROM backfill.ledger la"
						 " JOIN backfill.declaration a ON a.name = la.declaration"
						 " JOIN backfill.declaration b ON b.name = a.requires_backfill"
						 " WHERE la.run_id = $1 AND b.relid IS NOT NULL AND b.scope IS NULL"
						 /* never as a role the required backfill does not name */
						 "   AND (SELECT i.code FROM backfill.identity_problem(b.name, b.relid,"
						 "          b.relation, b.owner, b.owner_name, b.run_as, b.run_as_name) i)"
						 "       IS NULL",
						 1, types, values, NULL, SPI_OK_SELECT) == 1)
		{
			char	   *b_name = catalog_gettext(0, 1);
			char	   *b_relation = catalog_gettext(0, 2);
			char	   *b_predicate = catalog_gettext(0, 3);
			Oid			b_run_as = DatumGetObjectId(catalog_getdatum(0, 4, &isnull));
			char	   *b_checksum = catalog_gettext(0, 5);
			Oid			b_owner = DatumGetObjectId(catalog_getdatum(0, 6, &isnull));
			char	   *b_search_path = catalog_gettext(0, 7);
			char	   *a_name = catalog_gettext(0, 8);
			int64		b_last = DatumGetInt64(catalog_getdatum(0, 9, &isnull));
			Oid			a_owner = DatumGetObjectId(catalog_getdatum(0, 10, &isnull));
			Datum		b_environments = catalog_getdatum(0, 11, &isnull);
			char	   *b_envlist = catalog_gettext(0, 12);

			if (!isnull)
				b_environments = PointerGetDatum(PG_DETOAST_DATUM_COPY(b_environments));
			catalog_leave(&scope);

			check_reopen_allowed(a_name, a_owner, b_name, b_owner, b_run_as,
								 b_environments, b_envlist);
			if (predicate_matches(b_run_as, b_search_path, b_relation, b_predicate))
			{
				int64		run_id = enqueue_pass(b_name, b_name, b_checksum, true, b_last,
												  b_owner, NULL);

				ereport(LOG,
						(errmsg("backfill \"%s\" reopened as run " INT64_FORMAT
								": its predicate matches rows again", b_name, run_id),
						 errdetail("Backfill \"%s\" requires it and waits for the new pass.",
								   a_name)));
				reopened = true;
			}
		}
		else
			catalog_leave(&scope);
	}
	PG_CATCH();
	{
		/* a broken required backfill must not stop the scheduler */
		ErrorData  *edata = worker_abort_xact(cxt);

		ereport(WARNING,
				(errmsg("could not check the backfill that run " INT64_FORMAT " requires: %s",
						waiting_run_id, edata->message),
				 errhint("The waiting pass starts without the drift check.")));
		return false;
	}
	PG_END_TRY();

	worker_commit_xact();
	return reopened;
}
