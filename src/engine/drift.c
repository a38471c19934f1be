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
#include "drift.h"
#include "requires.h"
#include "enqueue.h"
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
 * B, the table backfill that the declaration of the waiting pass ($1)
 * requires; never one whose oids no longer carry the roles it names.
 */
#define REQUIRED_SQL \
	"SELECT b.name, b.relation, b.predicate, b.run_as, b.checksum, b.owner," \
	"  b.search_path, a.name," \
	"  (SELECT pg_catalog.max(l.run_id) FROM backfill.ledger l" \
	"    WHERE l.ledger_name = b.name)," \
	"  a.owner, b.environments, pg_catalog.array_to_string(b.environments, ', ')" \
	" FROM backfill.ledger la" \
	" JOIN backfill.declaration a ON a.name = la.declaration" \
	" JOIN backfill.declaration b ON b.name = a.requires_backfill" \
	" WHERE la.run_id = $1 AND b.relid IS NOT NULL AND b.scope IS NULL" \
	"   AND (SELECT i.code FROM backfill.identity_problem(b.name, b.relid," \
	"          b.relation, b.owner, b.owner_name, b.run_as, b.run_as_name) i)" \
	"       IS NULL"

/* the required backfill B of a waiting pass of A, as drift reads it */
typedef struct Required
{
	char	   *a_name;
	Oid			a_owner;
	char	   *b_name;
	char	   *b_relation;
	char	   *b_predicate;
	Oid			b_run_as;
	char	   *b_checksum;
	Oid			b_owner;
	char	   *b_search_path;
	int64		b_last;			/* B's newest pass */
	Datum		b_environments;
	char	   *b_envlist;
} Required;

/*
 * Read B, the table backfill the waiting pass's declaration requires.
 * False when there is none to check: no such declaration, a pages or
 * scoped one, or one whose oids no longer carry its names.
 */
static bool
read_required(int64 waiting_run_id, Required *r)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(waiting_run_id)};
	bool		found;

	catalog_enter(&scope);
	found = catalog_exec(REQUIRED_SQL, 1, types, values, NULL, SPI_OK_SELECT) == 1;
	if (found)
	{
		r->b_name = catalog_gettext(0, 1);
		r->b_relation = catalog_gettext(0, 2);
		r->b_predicate = catalog_gettext(0, 3);
		r->b_run_as = catalog_getoid(0, 4);
		r->b_checksum = catalog_gettext(0, 5);
		r->b_owner = catalog_getoid(0, 6);
		r->b_search_path = catalog_gettext(0, 7);
		r->a_name = catalog_gettext(0, 8);
		r->b_last = catalog_getint64(0, 9);
		r->a_owner = catalog_getoid(0, 10);
		r->b_environments = catalog_getcopy(0, 11);
		r->b_envlist = catalog_gettext(0, 12);
	}
	catalog_leave(&scope);
	return found;
}

/*
 * If B may be reopened on A's behalf and its predicate matches a row,
 * enqueue a forced pass of B.  Returns true when it did.
 */
static bool
reopen_if_drifted(Required *r)
{
	int64		run_id;

	check_reopen_allowed(r->a_name, r->a_owner, r->b_name, r->b_owner, r->b_run_as,
						 r->b_environments, r->b_envlist);
	if (!predicate_matches(r->b_run_as, r->b_search_path, r->b_relation, r->b_predicate))
		return false;
	run_id = enqueue_pass(r->b_name, r->b_name, r->b_checksum, true, r->b_last, r->b_owner, NULL);
	ereport(LOG,
			(errmsg("backfill \"%s\" reopened as run " INT64_FORMAT
					": its predicate matches rows again", r->b_name, run_id),
			 errdetail("Backfill \"%s\" requires it and waits for the new pass.", r->a_name)));
	return true;
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
		Required	r;

		if (read_required(waiting_run_id, &r))
			reopened = reopen_if_drifted(&r);
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
