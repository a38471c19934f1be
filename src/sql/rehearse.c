/*-------------------------------------------------------------------------
 *
 * rehearse.c
 *	  backfill_rehearse(name, batches): real batches of a backfill run and
 *	  rolled back by a rehearsal worker as its role; the caller only waits
 *	  and shows the answer.
 *
 * The caller's session runs none of the backfill's SQL: it checks that
 * the caller may act for the backfill's owner, that the owner is still a
 * member of its run_as (BF016) and that run_as can log in, starts a "pg_backfill rehearsal" worker (workers/rehearsal.c) with
 * a shared memory segment to answer in, waits for it to stop, and
 * returns one row per rehearsed batch and a last row, kind
 * 'projection', for the whole pass (engine/rehearse.c).  A retired
 * backfill is refused (BF041), as its runs are.  No free
 * background worker slot is BF038; batches outside 1..100 are BF043.  A
 * cancel of the caller stops the worker.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "catalog.h"
#include "errors.h"
#include "rehearsal.h"
#include "rehearse.h"
#include "tenancy.h"

PG_FUNCTION_INFO_V1(backfill_rehearse);

#define REHEARSE_COLUMNS 17

/* the role the backfill's lanes log in as, once the caller may rehearse it */
static Oid
rehearse_target(const char *name)
{
	CatalogScope scope;
	bool		found;
	Oid			owner = InvalidOid;
	Oid			run_as = InvalidOid;

	catalog_enter(&scope);
	found = catalog_exec_named("SELECT d.owner, d.run_as FROM backfill.declaration d WHERE d.name = $1",
							   name) == 1;
	if (found)
	{
		owner = catalog_getoid(0, 1);
		run_as = catalog_getoid(0, 2);
	}
	catalog_leave(&scope);
	check_backfill_target(name, found, owner, "be rehearsed");
	/* a REVOKE since the declaration takes effect here too, as at a lane's start */
	tenancy_check_run_as(name, owner, run_as);
	check_role_can_login(name, run_as);
	return run_as;
}

static void
check_batches(const char *name, int batches)
{
	if (batches < 1 || batches > REHEARSAL_MAX_BATCHES)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_REHEARSAL_BATCHES),
				 errmsg("a rehearsal of backfill \"%s\" runs 1 to %d batches, not %d", name,
						REHEARSAL_MAX_BATCHES, batches),
				 errhint("Pass batches => 5 (the default) for the start, the middle and the "
						 "end of the key space and two between.")));
}

/*
 * One rehearsal at a time for the role a backfill's lanes log in as: a
 * second call waits (in its own session, as for any lock: lock_timeout
 * bounds it) instead of taking another worker slot, so one role cannot
 * fill max_worker_processes with rehearsals.  An advisory lock of a kind
 * (field4 3) that SQL's advisory lock functions cannot take.
 */
#define REHEARSAL_LOCK_KEY	0x42460052	/* "BF" 'R' */

static void
lock_role_rehearsal(Oid run_as)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, REHEARSAL_LOCK_KEY, run_as, 3);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/* Start the worker and wait for it to stop; a cancel of the caller stops it too. */
static void
rehearse_in_worker(const char *name, dsm_segment *seg)
{
	BackgroundWorkerHandle *handle = rehearsal_start(seg, CurrentMemoryContext);

	if (handle == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NO_WORKER),
				 errmsg("no background worker slot is free to rehearse backfill \"%s\"", name),
				 errdetail("A rehearsal runs in a background worker of its own, as the "
						   "backfill's role; every slot (max_worker_processes) is in use."),
				 errhint("Call backfill_rehearse again later, or raise max_worker_processes "
						 "(a restart is needed).")));
	PG_TRY();
	{
		if (WaitForBackgroundWorkerShutdown(handle) == BGWH_POSTMASTER_DIED)
			proc_exit(1);
	}
	PG_CATCH();
	{
		TerminateBackgroundWorker(handle);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* "a\nb" as text[] {a,b}, or an empty array */
static Datum
lines_array(const char *text)
{
	List	   *items = NIL;
	char	   *copy = pstrdup(text);
	char	   *save = NULL;
	Datum	   *elems;
	int			n = 0;
	ListCell   *lc;

	for (char *tok = strtok_r(copy, "\n", &save); tok; tok = strtok_r(NULL, "\n", &save))
		items = lappend(items, tok);
	elems = palloc(sizeof(Datum) * Max(list_length(items), 1));
	foreach(lc, items)
		elems[n++] = CStringGetTextDatum(lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

static void
text_or_null(Datum *values, bool *nulls, int i, const char *text)
{
	values[i] = text[0] ? CStringGetTextDatum(text) : (Datum) 0;
	nulls[i] = text[0] == '\0';
}

static void
bool_or_null(Datum *values, bool *nulls, int i, int8 b)
{
	values[i] = BoolGetDatum(b > 0);
	nulls[i] = b < 0;
}

/* a batch's row */
static void
batch_row(Tuplestorestate *store, TupleDesc desc, RehearsalBatch *b, int no)
{
	Datum		values[REHEARSE_COLUMNS];
	bool		nulls[REHEARSE_COLUMNS];

	memset(nulls, 0, sizeof(nulls));
	values[0] = CStringGetTextDatum("batch");
	values[1] = Int32GetDatum(no);
	text_or_null(values, nulls, 2, b->position);
	text_or_null(values, nulls, 3, b->first_key);
	text_or_null(values, nulls, 4, b->last_key);
	values[5] = Int64GetDatum(b->rows);
	values[6] = Float8GetDatum(b->ms);
	values[7] = Int64GetDatum(b->wal_bytes);
	values[8] = Int64GetDatum(b->shared_hit);
	values[9] = Int64GetDatum(b->shared_read);
	values[10] = lines_array(b->locks);
	bool_or_null(values, nulls, 11, b->error[0] ? -1 : b->key_scan_index);
	bool_or_null(values, nulls, 12, b->error[0] ? -1 : b->action_index);
	text_or_null(values, nulls, 13, b->key_scan_plan);
	text_or_null(values, nulls, 14, b->action_plan);
	text_or_null(values, nulls, 15, b->error);
	nulls[16] = true;
	tuplestore_putvalues(store, desc, values, nulls);
}

/* the projection's row: rows to do, batches, duration (ms), WAL, assumptions */
static void
projection_row(Tuplestorestate *store, TupleDesc desc, Rehearsal *r)
{
	Datum		values[REHEARSE_COLUMNS];
	bool		nulls[REHEARSE_COLUMNS];

	for (int i = 0; i < REHEARSE_COLUMNS; i++)
		nulls[i] = true;
	values[0] = CStringGetTextDatum("projection");
	nulls[0] = false;
	values[1] = Int32GetDatum((int32) Min(r->batches_to_do, PG_INT32_MAX));
	nulls[1] = !r->has_estimate;
	values[5] = Int64GetDatum(r->rows_to_do);
	nulls[5] = !r->has_estimate;
	values[6] = Float8GetDatum(r->duration_ms);
	nulls[6] = !r->projected;
	values[7] = Int64GetDatum(r->wal_bytes);
	nulls[7] = !r->projected;
	text_or_null(values, nulls, 16, r->assumptions);
	tuplestore_putvalues(store, desc, values, nulls);
}

static void
rehearsal_answer(const char *name, Rehearsal *r)
{
	if (r->state == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("the rehearsal of backfill \"%s\" ended without an answer", name),
				 errdetail("Its worker, logged in as the backfill's role, stopped before it "
						   "answered; the server log says why."),
				 errhint("Check that the backfill's role may log in and connect, then call "
						 "backfill_rehearse again.")));
	if (r->state == 2)
		backfill_raise_answer(r->sqlerrcode, r->message, r->detail, r->hint);
}

Datum
backfill_rehearse(PG_FUNCTION_ARGS)
{
	char	   *name;
	int			batches;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	dsm_segment *seg;
	Rehearsal  *r;
	Oid			run_as;

	/* not STRICT: a NULL is refused, never answered with no rows */
	name = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));
	check_backfill_name(name);
	check_catalog_current("rehearse backfill", name);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_REHEARSAL_BATCHES),
				 errmsg("a rehearsal of backfill \"%s\" needs a number of batches, not NULL", name),
				 errhint("Leave batches out for the default, 5.")));
	batches = PG_GETARG_INT32(1);
	check_batches(name, batches);
	check_not_standby("rehearse backfill", name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	run_as = rehearse_target(name);
	SPI_finish();
	lock_role_rehearsal(run_as);

	seg = dsm_create(sizeof(Rehearsal), 0);
	r = (Rehearsal *) dsm_segment_address(seg);
	memset(r, 0, sizeof(Rehearsal));
	r->dboid = MyDatabaseId;
	r->run_as = run_as;
	r->batches = batches;
	strlcpy(r->name, name, sizeof(r->name));
	rehearse_in_worker(name, seg);
	rehearsal_answer(name, r);

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < r->nbatches; i++)
		batch_row(rsinfo->setResult, rsinfo->setDesc, &r->batch[i], i + 1);
	projection_row(rsinfo->setResult, rsinfo->setDesc, r);
	dsm_detach(seg);
	return (Datum) 0;
}
