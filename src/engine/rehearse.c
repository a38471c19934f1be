/*-------------------------------------------------------------------------
 *
 * rehearse.c
 *	  A rehearsal: up to n real batches of a declaration, spread over its
 *	  key space, each measured and rolled back; and a projection of the
 *	  whole pass from them.
 *
 * It runs in a "pg_backfill rehearsal" worker (workers/rehearsal.c)
 * logged in as the declaration's run_as, with the lanes' settings and
 * plans (batch_prepare), never in the caller's session.  Each batch is
 * the key scan and the action a lane would run, in a transaction of its
 * own under the declaration's lock_timeout and batch_timeout, restricted
 * (SECURITY_RESTRICTED_OPERATION), that is always rolled back: no
 * checkpoint, no ledger row, no catalog row; the table and its indexes
 * keep their contents (the rolled-back row versions are dead, as after
 * any failed batch; a sequence the action advanced stays advanced).
 *
 * Where the batches start: the keys of a small sample of the table
 * (TABLESAMPLE SYSTEM, about REHEARSAL_SAMPLE rows) in key order; the
 * first batch at the start of the key space, the last about one batch
 * before its end, the others evenly between (labelled start, middle, end
 * or the share of that walk, "25%").  What each measures: the
 * keys found, the time of the key scan and the action, the WAL they
 * wrote and the shared buffers they hit and read (pgWalUsage,
 * pgBufferUsage), the relations it holds locks on before the rollback
 * (the lock manager), and the shape of the plans the executor started
 * (an executor hook of this process only: the scans, and whether one
 * reads an index).  A batch that fails is shown with its error, and the
 * rehearsal goes on.
 *
 * The projection: the rows to do are the planner's estimate of the
 * predicate (estimate.c, as a pass plans it); a batch of the declared
 * size costs the rehearsal's time per row (over every batch that found
 * rows) plus REHEARSAL_CHECKPOINT_MS for the checkpoint and commit it
 * does not rehearse; the pass's batches start no faster than its rate,
 * its lanes' time allows, and its WAL budgets (the pass's and
 * backfill.max_wal_rate) let them.  The assumptions say which bound
 * holds and what the projection leaves out.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/catalog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/instrument.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/plannodes.h"
#include "parser/parsetree.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "batch.h"
#include "config.h"
#include "deadline.h"
#include "estimate.h"
#include "pass.h"
#include "rehearse.h"
#include "tenancy.h"
#include "worker.h"
#include "xact.h"

/* rows of the table the sample of batch starts aims at */
#define REHEARSAL_SAMPLE			20000
/* what a batch's checkpoint and commit add to its key scan and action */
#define REHEARSAL_CHECKPOINT_MS		0.5

/* the plan shape the executor hook records: 0 the key scan, 1 the action */
typedef struct PlanSeen
{
	bool		seen;
	bool		index;
	StringInfoData scans;
} PlanSeen;

static ExecutorStart_hook_type prev_executor_start = NULL;
static PlanSeen *capture = NULL;	/* armed: the next statement started is recorded here */

static void plan_walk(PlannedStmt *stmt, Plan *plan, PlanSeen *seen);

static void
plan_walk_list(PlannedStmt *stmt, List *plans, PlanSeen *seen)
{
	ListCell   *lc;

	foreach(lc, plans)
		plan_walk(stmt, (Plan *) lfirst(lc), seen);
}

static void
note_scan(PlanSeen *seen, const char *what, const char *name, bool index)
{
	if (seen->scans.len < 400)
		appendStringInfo(&seen->scans, "%s%s %s", seen->scans.len ? ", " : "", what,
						 name ? name : "?");
	seen->index |= index;
}

static const char *
scan_rel(PlannedStmt *stmt, Index scanrelid)
{
	return scanrelid > 0 ? get_rel_name(rt_fetch(scanrelid, stmt->rtable)->relid) : NULL;
}

/* the scans of a plan tree, and whether one reads an index */
static void
plan_walk(PlannedStmt *stmt, Plan *plan, PlanSeen *seen)
{
	if (plan == NULL)
		return;
	switch (nodeTag(plan))
	{
		case T_IndexScan:
			note_scan(seen, "Index Scan using", get_rel_name(((IndexScan *) plan)->indexid), true);
			break;
		case T_IndexOnlyScan:
			note_scan(seen, "Index Only Scan using",
					  get_rel_name(((IndexOnlyScan *) plan)->indexid), true);
			break;
		case T_BitmapIndexScan:
			note_scan(seen, "Bitmap Index Scan on",
					  get_rel_name(((BitmapIndexScan *) plan)->indexid), true);
			break;
		case T_SeqScan:
			note_scan(seen, "Seq Scan on", scan_rel(stmt, ((Scan *) plan)->scanrelid), false);
			break;
		case T_SampleScan:
		case T_TidScan:
		case T_TidRangeScan:
			note_scan(seen, "Tid or Sample Scan on", scan_rel(stmt, ((Scan *) plan)->scanrelid),
					  false);
			break;
		case T_Append:
			plan_walk_list(stmt, ((Append *) plan)->appendplans, seen);
			break;
		case T_MergeAppend:
			plan_walk_list(stmt, ((MergeAppend *) plan)->mergeplans, seen);
			break;
		case T_BitmapAnd:
			plan_walk_list(stmt, ((BitmapAnd *) plan)->bitmapplans, seen);
			break;
		case T_BitmapOr:
			plan_walk_list(stmt, ((BitmapOr *) plan)->bitmapplans, seen);
			break;
		case T_SubqueryScan:
			plan_walk(stmt, ((SubqueryScan *) plan)->subplan, seen);
			break;
		default:
			break;
	}
	plan_walk(stmt, plan->lefttree, seen);
	plan_walk(stmt, plan->righttree, seen);
}

/* the first statement started after arming: the one the rehearsal runs, not what it calls */
static void
rehearse_executor_start(QueryDesc *queryDesc, int eflags)
{
	if (capture != NULL && !capture->seen)
	{
		PlanSeen   *seen = capture;

		capture = NULL;
		seen->seen = true;
		plan_walk(queryDesc->plannedstmt, queryDesc->plannedstmt->planTree, seen);
		plan_walk_list(queryDesc->plannedstmt, queryDesc->plannedstmt->subplans, seen);
	}
	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

/* the relations this backend holds locks on, "schema.relation Mode" a line, catalogs left out */
static void
held_locks(char *out, size_t size)
{
	LockData   *data = GetLockStatusData();
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < data->nelements; i++)
	{
		LockInstanceData *lock = &data->locks[i];
		Oid			relid = lock->locktag.locktag_field2;
		Oid			nsp;

		if (lock->pid != MyProcPid || lock->locktag.locktag_type != LOCKTAG_RELATION ||
			lock->locktag.locktag_field1 != MyDatabaseId || get_rel_name(relid) == NULL)
			continue;
		nsp = get_rel_namespace(relid);
		if (IsCatalogNamespace(nsp) || IsToastNamespace(nsp))
			continue;
		for (LOCKMODE mode = 1; mode <= MaxLockMode; mode++)
			if (lock->holdMask & LOCKBIT_ON(mode))
				appendStringInfo(&buf, "%s%s %s", buf.len ? "\n" : "",
								 quote_qualified_identifier(get_namespace_name(nsp),
															get_rel_name(relid)),
								 GetLockmodeName(lock->locktag.locktag_lockmethodid, mode));
	}
	strlcpy(out, buf.data, size);
}

/* A transaction of the rehearsal, restricted; *sec gets what to restore. */
static void
rehearse_begin(const char *activity, int *sec)
{
	Oid			user;

	worker_begin_xact(activity);
	GetUserIdAndSecContext(&user, sec);
	SetUserIdAndSecContext(user, *sec | SECURITY_RESTRICTED_OPERATION);
}

/* ... and its rollback: nothing it did stays */
static void
rehearse_rollback(MemoryContext cxt, int sec)
{
	SetUserIdAndSecContext(GetUserId(), sec);
	SPI_finish();
	PopActiveSnapshot();
	AbortCurrentTransaction();
	MemoryContextSwitchTo(cxt);
}

/* where the batches start: n cursors (NULL: the start) in pass->cxt, with their labels */
typedef struct Starts
{
	int			n;
	bool		has_cursor[REHEARSAL_MAX_BATCHES];
	Datum		cursor[REHEARSAL_MAX_BATCHES][DECLARATION_MAX_KEY_COLUMNS];
	char		label[REHEARSAL_MAX_BATCHES][16];
	double		table_rows;
} Starts;

/* the key columns, quoted and comma-separated */
static char *
key_list(Pass *pass)
{
	StringInfoData buf;

	if (pass->keyset.nkeys == 1)
		return (char *) quote_identifier(pass->key);
	initStringInfo(&buf);
	for (int i = 0; i < pass->keyset.nkeys; i++)
		appendStringInfo(&buf, "%s%s", i ? ", " : "", quote_identifier(pass->keyset.cols[i].name));
	return buf.data;
}

/* the table's rows as pg_class has them (at least 20 a page of what it holds now) */
static double
table_rows(Pass *pass)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(pass->relid)};
	bool		isnull;
	Datum		d;

	if (SPI_execute_with_args("SELECT pg_catalog.sum(GREATEST(c.reltuples::float8,"
							  "   pg_catalog.pg_relation_size(c.oid) / 8192.0 * 20))::float8"
							  " FROM pg_catalog.pg_class c WHERE c.relkind <> 'p' AND (c.oid = $1"
							  "   OR c.oid IN (SELECT t.relid FROM pg_catalog.pg_partition_tree($1) t"
							  "                 WHERE t.isleaf))",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the size of the relation of backfill \"%s\"", pass->name);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetFloat8(d);
}

static void
copy_key(Pass *pass, HeapTuple tuple, TupleDesc desc, Datum *to)
{
	MemoryContext old = MemoryContextSwitchTo(pass->cxt);
	bool		isnull;

	for (int c = 0; c < pass->keyset.nkeys; c++)
	{
		Datum		d = SPI_getbinval(tuple, desc, c + 1, &isnull);

		to[c] = pass->keyset.nkeys == 1 ? datumCopy(d, pass->key_byval, pass->key_len) :
			datumCopy(d, pass->keyset.cols[c].byval, pass->keyset.cols[c].len);
	}
	MemoryContextSwitchTo(old);
}

/*
 * The batches' starts, from a sample of the table's keys in key order: the
 * first at the start, the last about a batch before the end.
 */
static void
choose_starts(Pass *pass, int n, Starts *s)
{
	double		pct;
	uint64		m;
	int64		end;

	s->table_rows = table_rows(pass);
	pct = s->table_rows < 1 ? 100 : Min(100.0, 100.0 * REHEARSAL_SAMPLE / s->table_rows);
	if (SPI_execute(psprintf("SELECT %s FROM %s TABLESAMPLE SYSTEM (%g) ORDER BY %s",
							 key_list(pass), pass->relation, pct, key_list(pass)),
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not sample the keys of backfill \"%s\"", pass->name);
	m = SPI_processed;
	/* the sample's key about one batch before the end */
	end = (int64) m - 1 - (int64) ceil((double) m * pass->batch_size / Max(s->table_rows, 1.0));
	end = Max(end, 0);
	s->n = m == 0 ? 1 : n;
	for (int i = 0; i < s->n; i++)
	{
		int64		at = s->n == 1 ? 0 : (int64) rint((double) i * end / (s->n - 1));

		s->has_cursor[i] = i > 0 && m > 0;
		if (s->has_cursor[i])
			copy_key(pass, SPI_tuptable->vals[at], SPI_tuptable->tupdesc, s->cursor[i]);
		if (i == 0)
			strlcpy(s->label[i], "start", 16);
		else if (i == s->n - 1)
			strlcpy(s->label[i], "end", 16);
		else if (2 * i == s->n - 1)
			strlcpy(s->label[i], "middle", 16);
		else
			snprintf(s->label[i], 16, "%d%%", (int) rint(100.0 * i / (s->n - 1)));
	}
}

/* the claim a rehearsed batch starts from */
static void
start_claim(Pass *pass, Starts *s, int i, Claim *claim)
{
	memset(claim, 0, sizeof(Claim));
	claim->batch_size = pass->batch_size;
	claim->has_cursor = s->has_cursor[i];
	if (!claim->has_cursor)
		return;
	if (pass->keyset.nkeys == 1)
		claim->cursor = s->cursor[i][0];
	else
		memcpy(claim->cursor_key, s->cursor[i], sizeof(claim->cursor_key));
}

static void
copy_plan_seen(PlanSeen *seen, int8 *index, char *scans)
{
	*index = seen->seen ? (seen->index ? 1 : 0) : -1;
	strlcpy(scans, seen->scans.data, 512);
}

/* the measured part of a batch: key scan, action, locks, in the open transaction */
static void
measure_batch(Pass *pass, Claim *claim, RehearsalBatch *b)
{
	WalUsage	wal0 = pgWalUsage;
	BufferUsage buf0 = pgBufferUsage;
	TimestampTz t0 = GetCurrentTimestamp();
	Datum		range[2 * DECLARATION_MAX_KEY_COLUMNS];
	PlanSeen	seen[2];

	memset(seen, 0, sizeof(seen));
	initStringInfo(&seen[0].scans);
	initStringInfo(&seen[1].scans);
	capture = &seen[0];
	b->rows = batch_scan_keys(pass, claim, range);
	capture = NULL;
	if (b->rows > 0)
	{
		strlcpy(b->first_key, batch_key_text(pass, range), REHEARSAL_KEY_TEXT);
		strlcpy(b->last_key, batch_key_text(pass, range + pass->keyset.nkeys),
				REHEARSAL_KEY_TEXT);
		capture = &seen[1];
		batch_act(pass, range);
		capture = NULL;
		/* the engine's statement: the rows are what it changed, as a lane counts them (range_act) */
		if (pass->engine_action)
			b->rows = (int64) SPI_processed;
	}
	worker_statement_timeout_end();
	b->ms = (GetCurrentTimestamp() - t0) / 1000.0;
	b->wal_bytes = (int64) (pgWalUsage.wal_bytes - wal0.wal_bytes);
	b->shared_hit = pgBufferUsage.shared_blks_hit - buf0.shared_blks_hit;
	b->shared_read = pgBufferUsage.shared_blks_read - buf0.shared_blks_read;
	held_locks(b->locks, sizeof(b->locks));
	copy_plan_seen(&seen[0], &b->key_scan_index, b->key_scan_plan);
	copy_plan_seen(&seen[1], &b->action_index, b->action_plan);
}

/* one batch, rolled back whatever happened; an error is the batch's answer */
static void
rehearse_batch(Pass *pass, Starts *s, int i, RehearsalBatch *b)
{
	MemoryContext cxt = CurrentMemoryContext;
	Claim		claim;
	int			sec;

	memset(b, 0, sizeof(RehearsalBatch));
	strlcpy(b->position, s->label[i], sizeof(b->position));
	start_claim(pass, s, i, &claim);
	PG_TRY();
	{
		rehearse_begin(psprintf("pg_backfill rehearsal: backfill \"%s\" batch %d", pass->name,
								i + 1), &sec);
		(void) set_config_option("lock_timeout", psprintf("%d", pass->lock_timeout_ms),
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
		worker_statement_timeout(pass->batch_timeout_ms);
		/* past the timeout and the grace, SQL that caught the cancel ends with the worker */
		deadline_arm(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												 pass->batch_timeout_ms +
												 BACKFILL_TERMINATE_GRACE_MS));
		measure_batch(pass, &claim, b);
		deadline_disarm();
		rehearse_rollback(cxt, sec);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		capture = NULL;
		deadline_disarm();
		worker_statement_timeout_end();
		edata = worker_abort_xact(cxt);
		snprintf(b->error, sizeof(b->error), "%s: %s", unpack_sql_state(edata->sqlerrcode),
				 edata->message);
		FreeErrorData(edata);
	}
	PG_END_TRY();
}

/* the rows the pass would do: the planner's estimate, as a pass plans it */
static void
estimate_rows(Pass *pass, Rehearsal *r, char **note)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			sec;
	int64		rows = 0;

	rehearse_begin("pg_backfill rehearsal: estimating the rows to do", &sec);
	r->has_estimate = estimate_pass_rows(pass->name, pass->relid, pass->relation,
										 pass->predicate, &rows, note);
	if (*note)
		*note = MemoryContextStrdup(cxt, *note);
	rehearse_rollback(cxt, sec);
	r->rows_to_do = rows;
}

/* which bound sets the pace of the pass's batches, and the interval between them (ms) */
static double
batch_interval(Pass *pass, double batch_ms, double wal, const char **bound)
{
	int			lanes = Max(1, Min(pass->max_parallel, backfill_max_workers));
	double		ms = 1000.0 / pass->rate;

	*bound = psprintf("the rate (%g batches/s)", pass->rate);
	if (batch_ms / lanes > ms)
	{
		ms = batch_ms / lanes;
		*bound = psprintf("the batches' own time over %d lane%s", lanes, lanes > 1 ? "s" : "");
	}
	if (pass->max_wal_rate > 0 && wal * 1000.0 / pass->max_wal_rate > ms)
	{
		ms = wal * 1000.0 / pass->max_wal_rate;
		*bound = "the pass's WAL budget (max_wal_rate)";
	}
	if (backfill_max_wal_rate > 0 && wal * 1000.0 / (backfill_max_wal_rate * 1024.0) > ms)
	{
		ms = wal * 1000.0 / (backfill_max_wal_rate * 1024.0);
		*bound = "the cluster's WAL budget (backfill.max_wal_rate)";
	}
	return ms;
}

/* the pass projected from the batches that found rows */
static void
project(Pass *pass, Rehearsal *r, const char *note)
{
	double		rows = 0,
				ms = 0,
				wal = 0;
	double		batch_ms,
				batch_wal,
				interval;
	const char *bound;
	int			used = 0;

	for (int i = 0; i < r->nbatches; i++)
		if (r->batch[i].error[0] == '\0' && r->batch[i].rows > 0)
		{
			rows += r->batch[i].rows;
			ms += r->batch[i].ms;
			wal += r->batch[i].wal_bytes;
			used++;
		}
	r->batches_to_do = (r->rows_to_do + pass->batch_size - 1) / pass->batch_size;
	if (used == 0 || !r->has_estimate)
	{
		snprintf(r->assumptions, sizeof(r->assumptions),
				 "nothing to project: %s", !r->has_estimate ? "no estimate of the rows to do" :
				 "no rehearsed batch found rows (or every one failed)");
		return;
	}
	batch_ms = ms / rows * pass->batch_size + REHEARSAL_CHECKPOINT_MS;
	batch_wal = wal / rows * pass->batch_size;
	interval = batch_interval(pass, batch_ms, batch_wal, &bound);
	r->projected = true;
	r->duration_ms = r->batches_to_do * interval;
	r->wal_bytes = (int64) (r->batches_to_do * batch_wal);
	snprintf(r->assumptions, sizeof(r->assumptions),
			 "rows to do: the planner's estimate%s%s; %d rows a batch (the declared size); "
			 "%.2f ms a batch (the %d rehearsed batch%s that found rows, per row, plus %.1f ms "
			 "for its checkpoint and commit); %.0f bytes of WAL a batch; batches start no "
			 "faster than %s; leaves out the lanes' start, the plan, the convergence count "
			 "at the end, other passes sharing the lanes, and any hold for the server's health",
			 note ? ", " : "", note ? note : "", pass->batch_size, batch_ms, used,
			 used > 1 ? "es" : "", REHEARSAL_CHECKPOINT_MS, batch_wal, bound);
}

void
rehearse_run(Rehearsal *r)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "pg_backfill rehearsal",
											  ALLOCSET_DEFAULT_SIZES);
	Pass		pass;
	Starts	   *starts = MemoryContextAllocZero(cxt, sizeof(Starts));
	char	   *note = NULL;
	int			sec;

	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = rehearse_executor_start;

	pass_load_declared(&pass, r->name, cxt);
	/* as a lane: its settings, its plans */
	tenancy_apply_settings(pass.name, pass.settings, NULL);
	batch_prepare(&pass);

	rehearse_begin("pg_backfill rehearsal: choosing where the batches start", &sec);
	choose_starts(&pass, r->batches, starts);
	rehearse_rollback(cxt, sec);

	/* before the batches, whose rolled-back row versions grow the table */
	estimate_rows(&pass, r, &note);
	r->nbatches = starts->n;
	for (int i = 0; i < starts->n; i++)
		rehearse_batch(&pass, starts, i, &r->batch[i]);
	project(&pass, r, note);
}
