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

#include "catalog.h"
#include "drift.h"
#include "run.h"
#include "xact.h"

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
						 "  (SELECT max(l.run_id) FROM backfill.ledger l WHERE l.ledger_name = b.name)"
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
			Oid			save_user;
			int			save_sec;
			int			nest;
			bool		drifted;

			catalog_leave(&scope);

			/* B's predicate is B's SQL: run it as B's role, restricted */
			GetUserIdAndSecContext(&save_user, &save_sec);
			SetUserIdAndSecContext(b_run_as, save_sec | SECURITY_LOCAL_USERID_CHANGE |
								   SECURITY_RESTRICTED_OPERATION);
			nest = NewGUCNestLevel();
			if (b_search_path && b_search_path[0] != '\0')
				(void) set_config_option("search_path", b_search_path, PGC_USERSET,
										 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
			if (SPI_execute(psprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE (\n%s\n))",
									 b_relation, b_predicate), true, 1) != SPI_OK_SELECT)
				elog(ERROR, "could not check backfill \"%s\" for drift", b_name);
			drifted = DatumGetBool(catalog_getdatum(0, 1, &isnull));
			AtEOXact_GUC(true, nest);
			SetUserIdAndSecContext(save_user, save_sec);

			if (drifted)
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
		ErrorData  *edata;

		/* a broken required backfill must not stop the scheduler */
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		ereport(WARNING,
				(errmsg("could not check the backfill that run " INT64_FORMAT " requires: %s",
						waiting_run_id, edata->message),
				 errhint("The waiting pass starts without the drift check.")));
		pgstat_report_activity(STATE_IDLE, NULL);
		MemoryContextSwitchTo(cxt);
		return false;
	}
	PG_END_TRY();

	worker_commit_xact();
	return reopened;
}
