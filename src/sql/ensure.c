/*-------------------------------------------------------------------------
 *
 * ensure.c
 *	  backfill_ensure_complete(name): the deploy check a schema migration
 *	  runs inside its transaction, from the extension's catalogs only.
 *
 * Rails and Django wrap a migration in a transaction, where CALL
 * backfill_finalize (which commits) cannot run.  This function can: it
 * reads the catalogs as they are in the caller's snapshot, runs none of
 * the declarer's SQL (no predicate, no action: nothing in the caller's
 * session), writes nothing and takes no lock but the catalogs' reads.
 * It returns a short text when the backfill is complete, else raises
 * with the pass's state, a SQLSTATE and a hint (CALL backfill_finalize
 * outside the transaction):
 *
 *	  retired (backfill_retire)                      complete
 *	  never run                                      BF044
 *	  newest pass running (or queued)                BF044
 *	  newest pass a revert                           BF008
 *	  newest pass failed, cancelled, with failures   its SQLSTATE (BF018...)
 *	  completed with another checksum                BF007
 *	  completed with the current checksum, and the newest recorded count
 *	  after it:
 *	    found rows                                   BF006 (drift: rows left)
 *	    failed (its error recorded)                  BF039
 *	    found none                                   complete
 *
 * The recorded count it relies on: for a plain table backfill, the newest
 * probe of backfill.probe taken after the pass ended and about that pass
 * (finalize's count, the watch's, backfill_probe's); before any, the
 * pass's own end (its convergence count found none up to its bound, and
 * run.beyond what matched beyond it).  A pages source's pass ended on its
 * own count.  So a backfill that CALL backfill_finalize returned for, with
 * no row drifted since, passes: finalize records its count.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "newest.h"
#include "errors.h"

PG_FUNCTION_INFO_V1(backfill_ensure_complete);

/* the backfill, its newest pass and the newest count after it */
typedef struct Ensure
{
	char	   *name;
	Oid			owner;
	char	   *checksum;
	bool		plain;
	bool		scoped;
	int64		run_id;			/* 0: never run */
	char	   *status;
	bool		revert;
	char	   *run_checksum;
	char	   *error_code;
	char	   *error_message;
	char	   *finished_at;
	int64		rows;
	int64		retired_run;	/* 0: not retired */
	char	   *retired_at;
	bool		probed;			/* a probe after the pass is recorded */
	int64		found;			/* its rows, or (none) beyond the bound at the end */
	char	   *counted_at;
	char	   *count_kind;
	char	   *probe_error;
} Ensure;

#define ENSURE_SQL \
	"SELECT d.owner, d.checksum, d.relid IS NOT NULL AND d.scope IS NULL AS plain," \
	"  d.scope IS NOT NULL AS scoped," \
	"  l.run_id, l.status, l.direction = 'revert' AS revert, l.checksum AS run_checksum," \
	"  l.error_code, l.error_message, l.finished_at::pg_catalog.text AS finished_at," \
	"  coalesce(l.rows, (SELECT pg_catalog.sum(p.rows) FROM backfill.partition p" \
	"                     WHERE p.run_id = l.run_id))::pg_catalog.int8 AS rows," \
	"  rt.run_id AS retired_run, rt.retired_at::pg_catalog.text AS retired_at," \
	"  pr.taken_at IS NOT NULL AS probed, coalesce(pr.found, r.beyond, 0) AS found," \
	"  coalesce(pr.taken_at, l.finished_at)::pg_catalog.text AS counted_at," \
	"  CASE WHEN pr.taken_at IS NOT NULL THEN 'a ' || pr.kind || ' probe'" \
	"       ELSE 'the end of the pass' END AS count_kind," \
	"  pr.error_code || ': ' || pr.error_message AS probe_error" \
	" FROM backfill.declaration d" \
	" LEFT JOIN LATERAL (SELECT * FROM backfill.ledger l WHERE l.ledger_name = d.name" \
	"                     ORDER BY l.run_id DESC LIMIT 1) l ON true" \
	" LEFT JOIN backfill.retired rt ON rt.declaration = d.name" \
	" LEFT JOIN backfill.run r ON r.run_id = l.run_id" \
	" LEFT JOIN backfill.probe pr ON pr.declaration = d.name AND pr.run_id = l.run_id" \
	"       AND pr.taken_at >= l.finished_at" \
	" WHERE d.name = $1"

/* ENSURE_SQL's columns, by name, and the fields they fill */
static const CatalogColumn ensure_columns[] = {
	CATALOG_FIELD(Ensure, owner, CATALOG_OID),
	CATALOG_FIELD(Ensure, checksum, CATALOG_TEXT),
	CATALOG_FIELD(Ensure, plain, CATALOG_BOOL),
	CATALOG_FIELD(Ensure, scoped, CATALOG_BOOL),
	CATALOG_FIELD(Ensure, run_id, CATALOG_INT64),
	CATALOG_FIELD(Ensure, status, CATALOG_TEXT),
	CATALOG_FIELD(Ensure, revert, CATALOG_BOOL),
	CATALOG_FIELD(Ensure, run_checksum, CATALOG_TEXT),
	CATALOG_FIELD(Ensure, error_code, CATALOG_TEXT),
	CATALOG_FIELD(Ensure, error_message, CATALOG_TEXT),
	CATALOG_FIELD(Ensure, finished_at, CATALOG_TEXT),
	CATALOG_FIELD(Ensure, rows, CATALOG_INT64),
	CATALOG_FIELD(Ensure, retired_run, CATALOG_INT64),
	CATALOG_FIELD(Ensure, retired_at, CATALOG_TEXT),
	CATALOG_FIELD(Ensure, probed, CATALOG_BOOL),
	CATALOG_FIELD(Ensure, found, CATALOG_INT64),
	CATALOG_FIELD(Ensure, counted_at, CATALOG_TEXT),
	CATALOG_FIELD(Ensure, count_kind, CATALOG_TEXT),
	CATALOG_FIELD(Ensure, probe_error, CATALOG_TEXT),
};

/* Read the backfill as the caller's snapshot sees the catalogs. */
static void
ensure_read(Ensure *e)
{
	newest_read(ENSURE_SQL, e->name, ensure_columns, lengthof(ensure_columns), e);
	e->revert = e->run_id != 0 && e->revert;
	e->probed = e->run_id != 0 && e->probed;
}

/* the hint of every refusal: the call that completes it, outside the transaction */
#define ENSURE_HINT \
	"Run CALL backfill_finalize('%s') outside a transaction (before the migration, or as a " \
	"step of its own): it works what is left and returns once nothing is; then run the " \
	"migration again."

/* The newest pass has not completed with the current definition: raise. */
static void
raise_not_completed(const Ensure *e)
{
	const char *code;

	if (e->run_id == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_INCOMPLETE),
				 errmsg("backfill \"%s\" is not complete: it has never run", e->name),
				 errdetail("Its ledger has no pass."),
				 errhint(ENSURE_HINT, e->name)));
	if (e->revert)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CONFLICT),
				 errmsg("backfill \"%s\" is not complete: its newest pass, run " INT64_FORMAT
						", is a revert (%s)", e->name, e->run_id, e->status),
				 errdetail("A revert undoes the backfill."),
				 errhint("Run it forward again with backfill_run('%s', force => true), then "
						 "CALL backfill_finalize('%s') outside a transaction.", e->name, e->name)));
	if (strcmp(e->status, "running") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_INCOMPLETE),
				 errmsg("backfill \"%s\" is not complete: run " INT64_FORMAT " is running",
						e->name, e->run_id),
				 errdetail("It has done " INT64_FORMAT " rows so far.", e->rows),
				 errhint(ENSURE_HINT, e->name)));
	if (strcmp(e->status, "completed") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CHANGED),
				 errmsg("backfill \"%s\" is not complete: it was declared again since run "
						INT64_FORMAT " completed", e->name, e->run_id),
				 errdetail("Run " INT64_FORMAT " completed with checksum %s; the declaration's "
						   "is %s.", e->run_id, e->run_checksum, e->checksum),
				 errhint(ENSURE_HINT, e->name)));
	code = ended_code(e->status, e->error_code);
	ereport(ERROR,
			(errcode(MAKE_SQLSTATE(code[0], code[1], code[2], code[3], code[4])),
			 errmsg("backfill \"%s\" is not complete: run " INT64_FORMAT " ended %s",
					e->name, e->run_id, e->status),
			 errdetail("%s", e->error_message ? e->error_message : "The pass ended without a message."),
			 errhint("Fix the cause, then backfill_retry('%s') (a failed pass) or "
					 "backfill_run('%s', force => true), and CALL backfill_finalize('%s') "
					 "outside a transaction.", e->name, e->name, e->name)));
}

/* The newest pass completed: the newest count after it must have found no row. */
static void
check_count(const Ensure *e)
{
	if (!e->plain)
		return;					/* a pages source: its pass ended on its own count */
	if (e->probed && e->probe_error != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PROBE_FAILED),
				 errmsg("backfill \"%s\" is not known to be complete: the newest count after run "
						INT64_FORMAT " failed", e->name, e->run_id),
				 errdetail("%s at %s: %s.", e->count_kind, e->counted_at, e->probe_error),
				 errhint(ENSURE_HINT, e->name)));
	if (e->found > 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_STALLED),
				 errmsg("backfill \"%s\" is not complete: %s" INT64_FORMAT " rows match its "
						"predicate again since run " INT64_FORMAT " completed", e->name,
						e->found >= 1000 ? "at least " : "", e->found, e->run_id),
				 errdetail("Counted by %s at %s (backfill_pending: drifted).",
						   e->count_kind, e->counted_at),
				 errhint(ENSURE_HINT, e->name)));
}

/*
 * backfill_ensure_complete(name): a short text when the backfill is
 * complete, else an error (see the header).  Allowed in any transaction.
 */
Datum
backfill_ensure_complete(PG_FUNCTION_ARGS)
{
	Ensure		e;
	char	   *answer;
	text	   *result;
	MemoryContext caller = CurrentMemoryContext;

	/* not STRICT: a NULL name raises (BF012) rather than passing as NULL */
	if (PG_ARGISNULL(0))
		check_backfill_name(NULL);
	memset(&e, 0, sizeof(e));
	e.name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	check_backfill_name(e.name);
	check_catalog_current("check backfill", e.name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ensure_read(&e);
	/* a reader's check: the owner's members, and pg_monitor's (who read its reports) */
	if (!has_privs_of_role(GetUserId(), ROLE_PG_MONITOR))
		check_backfill_member(e.name, e.owner);
	if (e.retired_run != 0)
		answer = psprintf("backfill \"%s\" is retired (at %s): run " INT64_FORMAT
						  " did its work", e.name, e.retired_at, e.retired_run);
	else
	{
		if (e.scoped)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SCOPED),
					 errmsg("backfill \"%s\" is scoped: each scope completes on its own",
							e.name),
					 errdetail("Each scope keeps a history of its own."),
					 errhint("Check each scope's run with backfill_wait(run_id) or "
							 "backfill_pending().")));
		if (e.run_id == 0 || e.revert || strcmp(e.status, "completed") != 0 ||
			strcmp(e.run_checksum, e.checksum) != 0)
			raise_not_completed(&e);
		check_count(&e);
		answer = e.plain ?
			psprintf("backfill \"%s\" is complete: run " INT64_FORMAT ", and %s at %s found no "
					 "row left", e.name, e.run_id, e.count_kind, e.counted_at) :
			psprintf("backfill \"%s\" is complete: run " INT64_FORMAT, e.name, e.run_id);
	}
	result = (text *) MemoryContextAlloc(caller, VARHDRSZ + strlen(answer));
	SET_VARSIZE(result, VARHDRSZ + strlen(answer));
	memcpy(VARDATA(result), answer, strlen(answer));
	SPI_finish();
	PG_RETURN_TEXT_P(result);
}
