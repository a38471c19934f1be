/*-------------------------------------------------------------------------
 *
 * pass_state.c
 *	  The transitions of a pass: its ledger row and its run row, each
 *	  function one event of the table in states.c.
 *
 * Each runs in the caller's transaction and catalog scope.  A transition
 * asserts in its WHERE the state it leaves (a ledger row still running, a
 * run in the phase it leaves) and says when it found none (state_missed);
 * one that locks takes the ledger row before the run row, before the
 * partitions: the order of every writer of a pass's state (src/README.md).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "state.h"

/*
 * Lock a running pass: its ledger row (while it is running), then its run
 * row.  False, and nothing locked, when the pass has ended.
 */
bool
state_pass_lock(int64 run_id)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2] = {Int64GetDatum(run_id), ledger_status_datum(LEDGER_RUNNING)};

	if (catalog_exec("SELECT 1 FROM backfill.ledger WHERE run_id = $1 AND status = $2"
					 " FOR UPDATE", 2, types, values, NULL, SPI_OK_SELECT) == 0)
		return false;
	catalog_exec("SELECT 1 FROM backfill.run WHERE run_id = $1 FOR UPDATE",
				 1, types, values, NULL, SPI_OK_SELECT);
	return true;
}

/*
 * new -> queued (enqueued): a pass's ledger row, running, and its run row,
 * queued.  values/nulls: $1 ledger_name, $2 checksum, $3 forced,
 * $4 previous_run_id, $5 owner, $6 declaration, $7 input, $8 direction,
 * $9 watch.  Returns the new run id.
 */
int64
state_pass_enqueue(Datum *values, const char *nulls)
{
	Oid			types[11] = {TEXTOID, TEXTOID, BOOLOID, INT8OID, OIDOID, TEXTOID, JSONBOID,
	TEXTOID, BOOLOID, TEXTOID, TEXTOID};
	Datum		all[11];
	char		allnulls[11];
	bool		isnull;
	Datum		run_id;

	memcpy(all, values, 9 * sizeof(Datum));
	memcpy(allnulls, nulls, 9);
	all[9] = ledger_status_datum(LEDGER_RUNNING);
	all[10] = run_phase_datum(PHASE_QUEUED);
	allnulls[9] = allnulls[10] = ' ';
	catalog_exec("WITH l AS ("
				 "  INSERT INTO backfill.ledger"
				 "   (ledger_name, declaration, checksum, forced, previous_run_id,"
				 "    owner, direction, watch, status)"
				 "  VALUES ($1, $6, $2, $3, $4, $5, $8, $9, $10) RETURNING run_id)"
				 " INSERT INTO backfill.run (run_id, input, phase) SELECT run_id, $7, $11 FROM l"
				 " RETURNING run_id",
				 11, types, all, allnulls, SPI_OK_INSERT_RETURNING);
	run_id = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
						   SPI_fnumber(SPI_tuptable->tupdesc, "run_id"), &isnull);
	return DatumGetInt64(run_id);
}

/* an UPDATE of the run's row, $1 its run_id; returns how many rows it changed */
static int
run_update(const char *sql, int64 run_id)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(run_id)};

	return catalog_exec(sql, 1, types, values, NULL, SPI_OK_UPDATE);
}

/* a lane started on the pass (counted; no change of state) */
void
state_pass_lane_started(int64 run_id)
{
	run_update("UPDATE backfill.run SET lane_starts = lane_starts + 1,"
			   " updated_at = pg_catalog.now() WHERE run_id = $1", run_id);
}

/*
 * queued -> running (planned): its partitions are written (part_state.c);
 * the run records how it was planned, its estimate and its bound (NULL:
 * kept).
 */
void
state_pass_planned(int64 run_id, const char *method, Datum estimate, bool has_estimate,
				   const char *bound)
{
	Oid			types[5] = {INT8OID, TEXTOID, TEXTOID, INT8OID, TEXTOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', has_estimate ? ' ' : 'n', bound ? ' ' : 'n'};

	values[0] = Int64GetDatum(run_id);
	values[1] = run_phase_datum(PHASE_RUNNING);
	values[2] = CStringGetTextDatum(method);
	values[3] = has_estimate ? estimate : (Datum) 0;
	values[4] = bound ? CStringGetTextDatum(bound) : (Datum) 0;
	catalog_exec("UPDATE backfill.run SET phase = $2, plan_method = $3,"
				 " estimate = $4, bound = coalesce($5, bound), updated_at = pg_catalog.now()"
				 " WHERE run_id = $1",
				 5, types, values, nulls, SPI_OK_UPDATE);
}

/* a retried pass's first lane describes it as the table is now (no change of state) */
void
state_pass_replanned(int64 run_id, const char *method, Datum estimate, bool has_estimate)
{
	Oid			types[3] = {INT8OID, TEXTOID, INT8OID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', has_estimate ? ' ' : 'n'};

	values[0] = Int64GetDatum(run_id);
	values[1] = CStringGetTextDatum(method);
	values[2] = has_estimate ? estimate : (Datum) 0;
	catalog_exec("UPDATE backfill.run SET plan_method = $2, estimate = $3,"
				 " updated_at = pg_catalog.now() WHERE run_id = $1",
				 3, types, values, nulls, SPI_OK_UPDATE);
}

/* a lane reclaimed a partition whose holder died (counted; no change of state) */
void
state_pass_interrupted(int64 run_id)
{
	run_update("UPDATE backfill.run SET interruptions = interruptions + 1,"
			   " updated_at = pg_catalog.now() WHERE run_id = $1", run_id);
}

/* a run's phase moves from one to another (with the ledger row locked by the caller) */
static int
run_phase_move(int64 run_id, RunPhase from, RunPhase to)
{
	Oid			types[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum		values[3] = {Int64GetDatum(run_id), run_phase_datum(from), run_phase_datum(to)};

	return catalog_exec("UPDATE backfill.run SET phase = $3, updated_at = pg_catalog.now()"
						" WHERE run_id = $1 AND phase = $2",
						3, types, values, NULL, SPI_OK_UPDATE);
}

/* running -> counting (counting): no partition is open, none failed */
bool
state_pass_counting(int64 run_id)
{
	return state_missed(EV_COUNTING, "run", run_id,
						run_phase_move(run_id, PHASE_RUNNING, PHASE_COUNTING));
}

/* counting -> running (leaves attached): partitions were added for new leaves */
void
state_pass_leaves_attached(int64 run_id)
{
	(void) state_missed(EV_LEAVES_ATTACHED, "run", run_id,
						run_phase_move(run_id, PHASE_COUNTING, PHASE_RUNNING));
}

/*
 * counting -> running (swept): the sweep counted, the probe key (the
 * smallest key left now) and the rows left recorded; every done partition
 * back to its start, pending (done -> pending, swept), its rows and
 * batches kept (the ledger sums them).
 */
void
state_pass_swept(int64 run_id, const char *probe_key, int64 remaining)
{
	Oid			types[5] = {INT8OID, TEXTOID, INT8OID, TEXTOID, TEXTOID};
	Datum		values[5];
	char		nulls[5] = {' ', probe_key ? ' ' : 'n', ' ', ' ', ' '};

	values[0] = Int64GetDatum(run_id);
	values[1] = probe_key ? CStringGetTextDatum(probe_key) : (Datum) 0;
	values[2] = Int64GetDatum(remaining);
	values[3] = run_phase_datum(PHASE_COUNTING);
	values[4] = run_phase_datum(PHASE_RUNNING);
	(void) state_missed(EV_SWEPT, "run", run_id,
						catalog_exec("UPDATE backfill.run SET sweep = sweep + 1, probe_key = $2,"
									 " remaining = $3, phase = $5, updated_at = pg_catalog.now()"
									 " WHERE run_id = $1 AND phase = $4", 5, types, values, nulls,
									 SPI_OK_UPDATE));
	values[1] = part_state_datum(PART_DONE);
	values[2] = part_state_datum(PART_PENDING);
	types[1] = types[2] = TEXTOID;
	catalog_exec("UPDATE backfill.partition SET state = $3, cursor = NULL,"
				 " holder_pid = NULL, holder_start = NULL, renewed_at = NULL, failures = 0,"
				 " last_error = NULL, throttle = NULL, finished_at = NULL"
				 " WHERE run_id = $1 AND state = $2", 3, types, values, NULL, SPI_OK_UPDATE);
}

/* the partitions of an ending pass: the one at fault failed, the open ones cancelled */
static void
parts_end(int64 run_id, int failed_part, const char *message)
{
	Oid			types[6] = {INT8OID, INT4OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[6];

	values[0] = Int64GetDatum(run_id);
	values[1] = Int32GetDatum(failed_part);
	values[2] = message ? CStringGetTextDatum(message) : (Datum) 0;
	values[3] = part_state_datum(PART_FAILED);
	values[4] = part_state_datum(PART_PENDING);
	values[5] = part_state_datum(PART_RUNNING);
	if (failed_part >= 0)
		catalog_exec("UPDATE backfill.partition SET state = $4, last_error = $3,"
					 " finished_at = pg_catalog.now() WHERE run_id = $1 AND part_no = $2",
					 4, types, values, NULL, SPI_OK_UPDATE);
	values[1] = part_state_datum(PART_CANCELLED);
	types[1] = TEXTOID;
	values[2] = values[4];
	values[3] = values[5];
	catalog_exec("UPDATE backfill.partition SET state = $2, finished_at = pg_catalog.now()"
				 " WHERE run_id = $1 AND state IN ($3, $4)",
				 4, types, values, NULL, SPI_OK_UPDATE);
}

/*
 * The ledger's final word on a running pass (status, and for a failure
 * its SQLSTATE and message) with the rows and batches its partitions
 * committed.  False when the pass had already ended.
 */
static bool
ledger_end(int64 run_id, LedgerStatus to, const char *code, const char *message)
{
	Oid			types[5] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', code ? ' ' : 'n', message ? ' ' : 'n', ' '};

	/*
	 * The end of a pass is never taken back by a crash once seen: whatever
	 * the lane role's synchronous_commit, this transaction waits for disk.
	 */
	ForceSyncCommit();
	values[0] = Int64GetDatum(run_id);
	values[1] = ledger_status_datum(to);
	values[2] = code ? CStringGetTextDatum(code) : (Datum) 0;
	values[3] = message ? CStringGetTextDatum(message) : (Datum) 0;
	values[4] = ledger_status_datum(LEDGER_RUNNING);
	return catalog_exec("UPDATE backfill.ledger l SET status = $2,"
						"  finished_at = pg_catalog.clock_timestamp(),"
						"  error_code = $3, error_message = $4,"
						"  rows = (SELECT coalesce(pg_catalog.sum(p.rows), 0) FROM backfill.partition p"
						"           WHERE p.run_id = l.run_id),"
						"  batches = (SELECT coalesce(pg_catalog.sum(p.batches), 0)"
						"               FROM backfill.partition p WHERE p.run_id = l.run_id)"
						" WHERE l.run_id = $1 AND l.status = $5",
						5, types, values, nulls, SPI_OK_UPDATE) > 0;
}

/*
 * The run row of a pass that ended: done, never left paused; remaining
 * and last_error are set when given (>= 0, not NULL), else kept.
 */
static void
run_end(int64 run_id, int64 remaining, const char *last_error)
{
	Oid			types[4] = {INT8OID, INT8OID, TEXTOID, TEXTOID};
	Datum		values[4];
	char		nulls[4] = {' ', remaining >= 0 ? ' ' : 'n', last_error ? ' ' : 'n', ' '};

	values[0] = Int64GetDatum(run_id);
	values[1] = Int64GetDatum(remaining);
	values[2] = last_error ? CStringGetTextDatum(last_error) : (Datum) 0;
	values[3] = run_phase_datum(PHASE_DONE);
	catalog_exec("UPDATE backfill.run SET phase = $4, paused = false,"
				 " remaining = coalesce($2, remaining), last_error = coalesce($3, last_error),"
				 " updated_at = pg_catalog.now() WHERE run_id = $1",
				 4, types, values, nulls, SPI_OK_UPDATE);
}

/*
 * End a running pass (queued, running, counting or paused -> to: completed,
 * completed with failures, failed or cancelled), as a lane ends it and as
 * backfill_cancel does: the ledger row and the run row locked first, then
 * the partition at fault (failed_part >= 0) failed and every other open
 * partition cancelled.  That waits for the batches committing their
 * checkpoints now, and every later checkpoint finds no lease, so its batch
 * rolls back: the ledger's rows and batches, summed after, are exactly
 * what committed.  The run is done; remaining (>= 0) and the message (as
 * its last_error) recorded when given.  Returns false, and changes
 * nothing, when the pass has already ended.
 */
bool
state_pass_end(int64 run_id, LedgerStatus to, int failed_part, const char *code,
			   const char *message, int64 remaining)
{
	StateEvent	event = to == LEDGER_COMPLETED ? EV_COMPLETED :
		to == LEDGER_COMPLETED_WITH_FAILURES ? EV_COMPLETED_WITH_FAILURES :
		to == LEDGER_CANCELLED ? EV_CANCELLED : EV_FAILED;

	Assert(to != LEDGER_RUNNING);
	if (!state_missed(event, "ledger row", run_id, state_pass_lock(run_id) ? 1 : 0))
		return false;
	parts_end(run_id, failed_part, message);
	if (!ledger_end(run_id, to, code, message))
		return false;
	run_end(run_id, remaining, message);
	return true;
}

/* what a completed bounded pass found beyond its bound (no change of state) */
void
state_pass_set_beyond(int64 run_id, int64 beyond)
{
	Oid			types[2] = {INT8OID, INT8OID};
	Datum		values[2] = {Int64GetDatum(run_id), Int64GetDatum(beyond)};

	catalog_exec("UPDATE backfill.run SET beyond = $2 WHERE run_id = $1",
				 2, types, values, NULL, SPI_OK_UPDATE);
}

/*
 * A pass in block order's bound grown to its heap's size now, for a sweep
 * (plan_blocks.c): never lowered (no change of state).
 */
void
state_pass_bound_grown(int64 run_id, const char *bound)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2] = {Int64GetDatum(run_id), CStringGetTextDatum(bound)};

	catalog_exec("UPDATE backfill.run SET bound = $2 WHERE run_id = $1"
				 " AND coalesce(bound::pg_catalog.tid OPERATOR(pg_catalog.<)"
				 "              $2::pg_catalog.tid, true)",
				 2, types, values, NULL, SPI_OK_UPDATE);
}

/*
 * The run's last_error (no change of state): what a lane that dies or a
 * partition that fails says while the pass runs; if_running: only while
 * its ledger row is running.
 */
void
state_pass_note_error(int64 run_id, const char *message, bool if_running)
{
	Oid			types[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum		values[3];

	values[0] = Int64GetDatum(run_id);
	values[1] = CStringGetTextDatum(message);
	values[2] = ledger_status_datum(LEDGER_RUNNING);
	if (if_running)
		catalog_exec("UPDATE backfill.run r SET last_error = $2, updated_at = pg_catalog.now()"
					 " FROM backfill.ledger l WHERE r.run_id = $1 AND l.run_id = r.run_id"
					 " AND l.status = $3",
					 3, types, values, NULL, SPI_OK_UPDATE);
	else
		catalog_exec("UPDATE backfill.run SET last_error = $2, updated_at = pg_catalog.now()"
					 " WHERE run_id = $1",
					 2, types, values, NULL, SPI_OK_UPDATE);
}

/* running -> paused (paused), with the pass locked (state_pass_lock); false when it was */
bool
state_pass_paused(int64 run_id)
{
	return state_missed(EV_PAUSED, "run", run_id,
						run_update("UPDATE backfill.run SET paused = true, updated_at = now()"
								   " WHERE run_id = $1 AND NOT paused ", run_id));
}

/*
 * running -> paused (paused), every running pass of the database that is
 * not paused (a scheduler whose database is no longer served), its
 * last_error why; the ledger rows locked first.  The run ids paused are
 * the current SPI result (column run_id); returns how many.
 */
int
state_passes_paused_all(const char *why)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {CStringGetTextDatum(why), ledger_status_datum(LEDGER_RUNNING)};

	return catalog_exec("WITH l AS (SELECT run_id FROM backfill.ledger"
						"   WHERE status = $2 ORDER BY run_id FOR UPDATE)"
						" UPDATE backfill.run r SET paused = true, last_error = $1,"
						"   updated_at = pg_catalog.now()"
						" FROM l WHERE r.run_id = l.run_id AND NOT r.paused"
						" RETURNING r.run_id",
						2, types, values, NULL, SPI_OK_UPDATE_RETURNING);
}

/*
 * paused -> running (resumed), with the pass locked; a last_error that
 * begins with unserved_prefix (why a scheduler paused it) is over and
 * cleared.  False when it was not paused.
 */
bool
state_pass_resumed(int64 run_id, const char *unserved_prefix)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2] = {Int64GetDatum(run_id),
	CStringGetTextDatum(psprintf("%s%%", unserved_prefix))};

	return state_missed(EV_RESUMED, "run", run_id,
						catalog_exec("UPDATE backfill.run SET paused = false, updated_at = now(),"
									 " last_error = CASE WHEN last_error LIKE $2 THEN NULL"
									 " ELSE last_error END"
									 " WHERE run_id = $1 AND paused ",
									 2, types, values, NULL, SPI_OK_UPDATE));
}

/*
 * queued -> running (retried): a new pass resuming a failed one, whose
 * partitions it copied (part_state.c), keeps its bound: it converges
 * within the same key range.
 */
void
state_pass_retried(int64 run_id, int64 old_id)
{
	Oid			types[4] = {INT8OID, INT8OID, TEXTOID, TEXTOID};
	Datum		values[4] = {Int64GetDatum(run_id), Int64GetDatum(old_id),
	run_phase_datum(PHASE_RUNNING), run_phase_datum(PHASE_QUEUED)};

	(void) state_missed(EV_RETRIED, "run", run_id,
						catalog_exec("UPDATE backfill.run r SET phase = $3, bound = o.bound"
									 " FROM backfill.run o WHERE r.run_id = $1 AND o.run_id = $2"
									 " AND r.phase = $4",
									 4, types, values, NULL, SPI_OK_UPDATE));
}
