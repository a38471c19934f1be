/*-------------------------------------------------------------------------
 *
 * retire.c
 *	  backfill_retire(name): the end of a backfill's life once its work is
 *	  done for good.
 *
 * After the old column is dropped a backfill can neither run (its SQL
 * names the column) nor be dropped (it wrote rows: BF009), and it would
 * keep the deploy gate red for ever after any failed pass.  Retiring it
 * records, in backfill.retired, which completed pass did its work; the
 * declaration and the ledger stay as the history of what was done.  From
 * then on backfill_run, backfill_retry, backfill_revert, backfill_probe
 * and every start of a pass (enqueue.c: the watch's catch-up passes too)
 * are refused with BF041 (check_not_retired); its watch stops;
 * backfill_pending shows it retired, and the CLI's pending gate counts it
 * done; finalize and backfill_ensure_complete take it as complete.
 *
 * Retire reads only the catalogs (never the backfill's SQL, which may name
 * columns that are gone).  It needs, for each history of the backfill
 * (its own, or each scope's), a completed forward pass with the
 * declaration's checksum, no pass running, and no revert after that pass
 * that completed or undid rows; a failed or cancelled forward pass after
 * it (a forced run after the column drop) is no obstacle.  Otherwise it is
 * refused: BF044 (never completed, or reverted: drop it, or revert it and
 * drop it), BF008 while a pass runs.  The caller must be able to act for
 * the owner, as for the other controls.  Retiring twice answers the first.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "errors.h"

PG_FUNCTION_INFO_V1(backfill_retire);

/*
 * Each history of declaration $1 ($2: its checksum): its newest forward
 * pass completed with that checksum, its running pass, its newest revert
 * that completed or undid rows; the newest state first.
 */
#define HISTORIES_SQL \
	"SELECT l.ledger_name," \
	"  pg_catalog.max(l.run_id) FILTER (WHERE l.status = 'completed'" \
	"     AND l.direction = 'forward' AND l.checksum = $2)," \
	"  pg_catalog.max(l.run_id) FILTER (WHERE l.status = 'running')," \
	"  pg_catalog.max(l.run_id) FILTER (WHERE l.direction = 'revert' AND (l.status = 'completed'" \
	"     OR coalesce(l.rows, (SELECT pg_catalog.sum(p.rows) FROM backfill.partition p" \
	"                           WHERE p.run_id = l.run_id), 0) > 0))" \
	" FROM backfill.ledger l WHERE l.declaration = $1" \
	" GROUP BY l.ledger_name ORDER BY 1"

/*
 * Lock and read the declaration (its owner and checksum), as it is now;
 * raises when it is not declared.
 */
static void
retire_lock(const char *name, Oid *owner, char **checksum)
{
	CatalogScope scope;
	bool		found;

	catalog_enter(&scope);
	found = catalog_exec_named("SELECT d.owner, d.checksum FROM backfill.declaration d"
							   " WHERE d.name = $1 FOR UPDATE", name) == 1;
	if (found)
	{
		*owner = catalog_getoid(0, 1);
		*checksum = catalog_gettext(0, 2);
	}
	catalog_leave(&scope);
	if (!found)
		report_not_declared(name);
}

/* the run a retired backfill keeps, or 0 */
static int64
retired_run(const char *name)
{
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	int64		run_id = 0;

	catalog_enter(&scope);
	if (catalog_exec_latest("SELECT r.run_id FROM backfill.retired r WHERE r.declaration = $1",
							1, types, values, NULL) == 1)
		run_id = catalog_getint64(0, 1);
	catalog_leave(&scope);
	return run_id;
}

/* Refuse a history that does not hold the backfill's work done for good. */
static void
check_history(const char *name, const char *ledger_name, int64 done, int64 running,
			  int64 undone)
{
	if (running != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CONFLICT),
				 errmsg("backfill \"%s\" cannot be retired while run " INT64_FORMAT " is running",
						name, running),
				 errdetail("History %s has a pass at work.", ledger_name),
				 errhint("Wait for it to end (backfill_wait), or backfill_cancel('%s'), then "
						 "retire.", name)));
	if (done == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_INCOMPLETE),
				 errmsg("backfill \"%s\" cannot be retired: it never completed", name),
				 errdetail("History %s has no completed forward pass with the declaration's "
						   "checksum; retiring keeps a completed backfill's history.",
						   ledger_name),
				 errhint("Complete it first (CALL backfill_finalize('%s')); or withdraw it: "
						 "backfill_drop('%s'), after backfill_revert('%s') if it wrote rows.",
						 name, name, name)));
	if (undone > done)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_INCOMPLETE),
				 errmsg("backfill \"%s\" cannot be retired: run " INT64_FORMAT " reverted it after "
						"run " INT64_FORMAT " completed", name, undone, done),
				 errdetail("History %s: its work is undone, at least in part.", ledger_name),
				 errhint("Drop it once reverted (backfill_drop('%s')), or run it forward again "
						 "(backfill_run('%s', force => true)) and retire it then.", name, name)));
}

/*
 * Check every history of the backfill; returns the newest completed
 * forward pass among them (the run the retired backfill keeps).
 */
static int64
check_histories(const char *name, const char *checksum)
{
	CatalogScope scope;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {CStringGetTextDatum(name), CStringGetTextDatum(checksum)};
	int			n;
	int64		kept = 0;

	catalog_enter(&scope);
	n = catalog_exec_latest(HISTORIES_SQL, 2, types, values, NULL);
	for (int i = 0; i < n; i++)
	{
		int64		done = catalog_getint64(i, 2);

		check_history(name, catalog_gettext(i, 1), done, catalog_getint64(i, 3),
					  catalog_getint64(i, 4));
		kept = Max(kept, done);
	}
	catalog_leave(&scope);
	if (n == 0)
		check_history(name, name, 0, 0, 0);
	return kept;
}

/*
 * backfill_retire(name): record the backfill as retired; returns the run
 * whose work it keeps.
 */
Datum
backfill_retire(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *by = GetUserNameFromId(GetUserId(), false);
	Oid			owner = InvalidOid;
	char	   *checksum = NULL;
	int64		run_id;
	CatalogScope scope;
	Oid			types[3] = {TEXTOID, INT8OID, TEXTOID};
	Datum		values[3];

	check_backfill_name(name);
	check_not_standby("retire backfill", name);
	check_catalog_current("retire backfill", name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	retire_lock(name, &owner, &checksum);
	check_backfill_member(name, owner);
	if ((run_id = retired_run(name)) != 0)
	{
		ereport(NOTICE,
				(errmsg("backfill \"%s\" is already retired: run " INT64_FORMAT " did its work",
						name, run_id)));
		SPI_finish();
		PG_RETURN_INT64(run_id);
	}
	run_id = check_histories(name, checksum);
	values[0] = CStringGetTextDatum(name);
	values[1] = Int64GetDatum(run_id);
	values[2] = CStringGetTextDatum(by);
	catalog_enter(&scope);
	catalog_exec("INSERT INTO backfill.retired (declaration, run_id, retired_at, retired_by)"
				 " VALUES ($1, $2, pg_catalog.now(), $3)", 3, types, values, NULL, SPI_OK_INSERT);
	catalog_leave(&scope);
	ereport(NOTICE,
			(errmsg("backfill \"%s\" is retired: run " INT64_FORMAT " did its work", name, run_id),
			 errdetail("Its declaration and ledger stay; later runs, retries and reverts are "
					   "refused (BF041), and backfill_pending shows it retired.")));
	SPI_finish();
	PG_RETURN_INT64(run_id);
}
