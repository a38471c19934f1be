/*-------------------------------------------------------------------------
 *
 * passend.c
 *	  The end of a pass: once no partition is open, count what still matches
 *	  and end it (completed, with failures, stalled) or sweep again; one
 *	  lane writes the end, through state/.
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
#include "attach.h"
#include "passcount.h"
#include "passend.h"
#include "searchpath.h"
#include "shmem.h"
#include "state.h"
#include "xact.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"

/*
 * With the ledger row locked, as backfill_retry and backfill_cancel lock
 * it: a retry that puts failed partitions back to pending comes wholly
 * before this look (the pass goes on) or wholly after it (it resumes the
 * failed pass in a new one).  Returns true when the pass is to be counted
 * now: no partition is open and none failed (the run is then counting).
 * A pass with failed partitions fails here; one with open partitions is
 * another lane's to end.
 */
static bool
pass_ready_to_count(Pass *pass)
{
	CatalogScope scope;
	int64		open_parts;
	int64		failed_parts;
	char	   *first_error;

	worker_begin_xact("pg_backfill lane: checking the partitions");
	catalog_enter(&scope);
	if (!state_pass_lock(pass->run_id))
	{
		catalog_leave(&scope);
		worker_commit_xact();
		return false;			/* it has ended */
	}
	first_error = state_parts_tally(pass->run_id, &open_parts, &failed_parts);
	if (open_parts == 0 && failed_parts > 0)
	{
		char	   *message = psprintf("%lld partitions failed; the first: %s",
									   (long long) failed_parts, first_error);

		catalog_leave(&scope);
		pass_fail_in_xact(pass, -1, ERRCODE_BACKFILL_BATCH_FAILED, message);
		worker_commit_xact();
		return false;
	}
	pass->more_leaves = false;
	if (open_parts == 0)
	{
		catalog_leave(&scope);
		note_leaves_seen(pass);
		pass->more_leaves = cover_new_leaves(pass);
		catalog_enter(&scope);
	}
	if (open_parts == 0 && !pass->more_leaves)
		(void) state_pass_counting(pass->run_id);
	catalog_leave(&scope);
	worker_commit_xact();
	return open_parts == 0 && !pass->more_leaves;
}

/*
 * In the counting transaction: lock the ledger row and say whether the
 * pass is still running and not paused.  The lock stays while counting: a
 * cancel or pause waits for the count and then finds the pass ended.  A
 * pass paused before the count began is not counted now: resuming it
 * starts a lane that counts.
 */
static bool
lock_pass_to_count(Pass *pass)
{
	CatalogScope scope;
	bool		isnull;
	char	   *status;
	bool		paused;

	catalog_enter(&scope);
	exec_on_run(pass, "SELECT l.status, r.paused, r.bound, r.sweep::pg_catalog.int8, r.probe_key"
				" FROM backfill.ledger l JOIN backfill.run r ON r.run_id = l.run_id"
				" WHERE l.run_id = $1 FOR UPDATE OF l",
				SPI_OK_SELECT);
	status = catalog_gettext(0, 1);
	paused = DatumGetBool(catalog_getdatum(0, 2, &isnull));
	pass->bound = pass_strdup(pass, catalog_gettext(0, 3));
	pass->sweep = (int) catalog_getint64(0, 4);
	pass->probe_key = pass_strdup(pass, catalog_gettext(0, 5));
	catalog_leave(&scope);
	return strcmp(status, ledger_status_text(LEDGER_RUNNING)) == 0 && !paused;
}

/*
 * Every other row is done; failed rows were recorded and skipped: within
 * max_failed_rows the pass ends completed_with_failures, beyond it (rows
 * recorded by lanes at once, or before a crash) failed with BF018.
 */
static void
end_with_failed_rows(Pass *pass, int64 failed)
{
	char	   *message;

	pass_reread_max_failed_rows(pass);
	if (failed > pass->max_failed_rows)
	{
		message = psprintf("backfill \"%s\" has " INT64_FORMAT " row(s) that failed alone, more "
						   "than max_failed_rows (%d); backfill_failed_rows('%s') lists them",
						   pass->name, failed, pass->max_failed_rows, pass->name);
		(void) state_pass_end(pass->run_id, LEDGER_FAILED, -1,
							  unpack_sql_state(ERRCODE_BACKFILL_FAILED_ROWS), message, 0);
	}
	else
	{
		message = psprintf(INT64_FORMAT " row(s) failed alone and were skipped (max_failed_rows "
						   "%d); backfill_failed_rows('%s') lists them, backfill_retry('%s') "
						   "tries them again", failed, pass->max_failed_rows, pass->name,
						   pass->name);
		(void) state_pass_end(pass->run_id, LEDGER_COMPLETED_WITH_FAILURES, -1, NULL, message, 0);
	}
	ereport(LOG, (errmsg("backfill \"%s\" run " INT64_FORMAT " ended: %s",
						 pass->name, pass->run_id, message)));
}

/* the message and hint of a pass that ends stalled (BF006): what is true of it */
static char *
stalled_message(Pass *pass, int64 remaining, const char *key, const char **hint)
{
	if (key != NULL)
	{
		*hint = psprintf("The action does not fix the rows it is given: fix it, declare the "
						 "backfill again, and run it with backfill_run('%s', force => true).",
						 pass->name);
		return psprintf("backfill \"%s\" stalled: %lld rows still match the predicate after "
						"sweep %d; the row of key %s was given to the action and still "
						"matches (the action does not fix it)", pass->name,
						(long long) remaining, pass->sweep, key);
	}
	if (!pass->guarded && !OidIsValid(pass->pages_fn))
		*hint = psprintf("Its action is not guarded (guard => false, or a statement other than "
						 "an UPDATE or DELETE of its table): a sweep could do a row twice, so "
						 "it does not sweep; once the writers stop, backfill_run('%s', "
						 "force => true) starts a new pass.", pass->name);
	else if (OidIsValid(pass->pages_fn))
		*hint = psprintf("A pages source is not swept again: once the writers stop, "
						 "backfill_retry('%s') starts a new pass.", pass->name);
	else
		*hint = psprintf("This pass could not sweep its partitions again (rows it recorded "
						 "as failed alone, a Citus table's shards): once the writers stop, "
						 "backfill_retry('%s') starts a new pass.", pass->name);
	return psprintf("backfill \"%s\" stalled: %lld rows still match the predicate after %s",
					pass->name, (long long) remaining,
					OidIsValid(pass->pages_fn) ? "the source was exhausted" :
					"its lanes walked every partition");
}

/*
 * End the counted pass: completed, completed with the failed rows it
 * tolerates, or failed as stalled (BF006; key: the probe key a sweep left
 * matching, or NULL).  A pass that completed within its bound records
 * what matches beyond it (beyond >= 0), which backfill_status shows and
 * backfill_pending calls drift.
 */
static void
pass_end_counted(Pass *pass, int64 remaining, int64 beyond, const char *key)
{
	CatalogScope scope;
	int64		failed;

	catalog_enter(&scope);
	if (remaining > 0)
	{
		const char *hint;
		char	   *message = stalled_message(pass, remaining, key, &hint);

		(void) state_pass_end(pass->run_id, LEDGER_FAILED, -1,
							  unpack_sql_state(ERRCODE_BACKFILL_STALLED), message, remaining);
		ereport(LOG, (errmsg("%s", message), errhint("%s", hint)));
	}
	else if ((failed = exec_on_run(pass, "SELECT 1 FROM backfill.failed_row WHERE run_id = $1",
								   SPI_OK_SELECT)) > 0)
		end_with_failed_rows(pass, failed);
	else
	{
		(void) state_pass_end(pass->run_id, LEDGER_COMPLETED, -1, NULL, NULL, 0);
		if (beyond >= 0)
			state_pass_set_beyond(pass->run_id, beyond);
		if (beyond > 0)
			ereport(LOG, (errmsg("backfill \"%s\" run " INT64_FORMAT " completed; %s" INT64_FORMAT
								 " rows match beyond its bound %s", pass->name, pass->run_id,
								 beyond >= DRIFT_BEYOND_LIMIT ? "at least " : "", beyond,
								 pass->bound),
						  errdetail("They were written after the pass was planned: drift, for "
									"the watch or the next pass.")));
		else
			ereport(LOG, (errmsg("backfill \"%s\" run " INT64_FORMAT " completed",
								 pass->name, pass->run_id)));
	}
	catalog_leave(&scope);
}

/*
 * May a pass whose count found rows left within its bound sweep its
 * partitions again?  Only a pass over a table's keys (a plain table, a
 * partitioned table's leaves) whose action is guarded: a row it is given
 * twice is changed only while it matches, so a sweep does no row twice.
 * Not a pages source (no key range), not a Citus table (a shard's
 * checkpoint lives on its node), not a revert, not an unguarded action,
 * not a pass that recorded rows as failed alone (a sweep would record them
 * again), nor a catalog older than 0.6 (no run.sweep).
 */
static bool
pass_may_sweep(Pass *pass)
{
	CatalogScope scope;
	bool		shards = false;
	bool		recorded;

	if (!pass->guarded || !pass->counted || pass->reverting || pass->sweep < 0 ||
		OidIsValid(pass->pages_fn) || pass->citus_remote)
		return false;
	catalog_enter(&scope);
	shards = exec_on_run(pass, "SELECT 1 FROM backfill.partition WHERE run_id = $1"
							 " AND shard IS NOT NULL LIMIT 1", SPI_OK_SELECT) > 0;
	/* a sweep would give a row recorded as failed alone to the action again */
	recorded = exec_on_run(pass, "SELECT 1 FROM backfill.failed_row WHERE run_id = $1 LIMIT 1",
						   SPI_OK_SELECT) > 0;
	catalog_leave(&scope);
	return !shards && !recorded;
}

/*
 * A further sweep, with the ledger row locked: every partition back to its
 * start (cursor NULL: its lo), pending, its lease free; its rows and
 * batches kept (the ledger sums them); the run running again, its sweep
 * counted and the probe key (the smallest key left now) recorded.  The
 * lane goes on (more_leaves); the scheduler may start others.
 */
static void
pass_sweep_again(Pass *pass, int64 remaining)
{
	CatalogScope scope;
	char	   *probe = pass->blocks ?
		blocks_probe_row(pass->relid, pass->relation, pass->predicate) :
		smallest_remaining_key(pass);

	if (pass->blocks)
		blocks_sweep_bound(pass->run_id, pass->relid);
	catalog_enter(&scope);
	state_pass_swept(pass->run_id, probe, remaining);
	catalog_leave(&scope);
	backfill_wake_scheduler_at_commit();
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": %lld rows match within its bound "
					"behind the lanes' cursors; sweep %d from key %s", pass->name,
					pass->run_id, (long long) remaining, pass->sweep + 1,
					probe ? probe : "(none now)"),
			 errdetail("They were written while the pass ran; its action is guarded, so its "
					   "partitions are worked again from their start.")));
	pass->more_leaves = true;
}

/*
 * Rows left within the bound of a pass that may sweep: the probe key of
 * the last sweep still matching means the action does not fix what it is
 * given (STALLED, naming it); past PASS_MAX_SWEEPS the rows left are
 * drift, written while it swept (completed, recorded beyond the bound);
 * else another sweep.
 */
#define PASS_MAX_SWEEPS 3
static void
pass_sweep_or_end(Pass *pass, int64 remaining)
{
	int64		beyond;
	char	   *row;

	if (pass->blocks && blocks_stalled(pass->relid, pass->relation, pass->predicate,
									   pass->sweep, pass->probe_key, &row))
		pass_end_counted(pass, remaining, -1, row);
	else if (!pass->blocks && pass->sweep > 0 && pass->probe_key != NULL &&
			 key_still_matches(pass, pass->probe_key))
		pass_end_counted(pass, remaining, -1, pass->probe_key);
	else if (pass->blocks ? blocks_sweep_falls(pass->run_id, pass->relid, pass->sweep,
											   pass->probe_key, remaining) :
			 pass->sweep < PASS_MAX_SWEEPS)
		pass_sweep_again(pass, remaining);
	else
	{
		beyond = count_beyond(pass);
		ereport(LOG,
				(errmsg("backfill \"%s\" run " INT64_FORMAT ": %lld rows were written within "
						"its bound while it swept %d times; they are left as drift",
						pass->name, pass->run_id, (long long) remaining, pass->sweep),
				 errdetail("The sweeps fixed every row they were given; the watch, finalize or "
						   "the next pass takes up the rest.")));
		pass_end_counted(pass, 0, remaining + Max(beyond, 0), NULL);
	}
}

/*
 * Once no partition is left to work on: count the rows that still match
 * the predicate and end the pass, completed or stalled, or sweep again.  Only one lane
 * gets to write the end; the others find the pass ended.
 */
void
pass_finish(Pass *pass)
{
	if (!pass_ready_to_count(pass))
		return;
	worker_begin_xact("pg_backfill lane: counting the rows left");
	if (lock_pass_to_count(pass))
	{
		int64		remaining = count_remaining(pass);

		if (!leaves_unchanged_since_count(pass))
			pass_count_again(pass);
		else if (remaining > 0 && pass_may_sweep(pass))
			pass_sweep_or_end(pass, remaining);
		else
			pass_end_counted(pass, remaining, remaining == 0 ? count_beyond(pass) : -1, NULL);
	}
	worker_commit_xact();
}
