/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  A partition under a lane's lease: claimed, checkpointed, done,
 *	  released, a failed attempt, its throttle, a Citus shard's mirror and
 *	  split; each write one event of the table in states.c.
 *
 * A lane writes its partition's row only while it holds the lease: each
 * statement here asserts in its WHERE the state running and the holder
 * (pid and start); the caller learns from the rows changed whether it
 * still held it.  The lease rule itself (is a holder live, is a dead
 * holder's partition cooling) is the SQL of backfill.lease_live and
 * backfill.lease_cooling (pg_backfill--0.5--0.6.sql), which
 * backfill.claim_partition, the scheduler and finalize call.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "state.h"

/* the statements a lane runs at every batch, prepared once per lane (catalog.c) */
static SPIPlanPtr checkpoint_plan = NULL;
static SPIPlanPtr checkpoint_tid_plan = NULL;
static SPIPlanPtr done_plan = NULL;

/* a column of the first row of the current SPI answer, by name */
Datum
state_answer_column(const char *name, bool *isnull)
{
	int			col = SPI_fnumber(SPI_tuptable->tupdesc, name);

	if (col <= 0)
		elog(ERROR, "pg_backfill: the answer has no column \"%s\"", name);
	return catalog_getdatum(0, col, isnull);
}

/*
 * pending -> running, or running -> running when its holder died
 * (claimed): backfill.claim_partition leases the first partition free, or
 * none (the pass paused or ended).  Fills *claim (text in the current
 * context) when it answered a row; returns how many rows it answered.
 */
int
state_parts_claim(int64 run_id, int pid, TimestampTz start, StateClaim *claim)
{
	Oid			types[3] = {INT8OID, INT4OID, TIMESTAMPTZOID};
	Datum		values[3] = {Int64GetDatum(run_id), Int32GetDatum(pid),
	TimestampTzGetDatum(start)};
	int			n;
	bool		isnull;

	n = catalog_exec("SELECT * FROM backfill.claim_partition($1, $2, $3)",
					 3, types, values, NULL, SPI_OK_SELECT);
	if (n < 1)
		return n;
	claim->part_no = DatumGetInt32(state_answer_column("part_no", &isnull));
	claim->cursor = catalog_gettext(0, SPI_fnumber(SPI_tuptable->tupdesc, "cursor"));
	claim->hi = catalog_gettext(0, SPI_fnumber(SPI_tuptable->tupdesc, "hi"));
	claim->rows = DatumGetInt64(state_answer_column("rows", &isnull));
	claim->reclaimed = DatumGetBool(state_answer_column("reclaimed", &isnull));
	claim->dead_pid = DatumGetInt32(state_answer_column("dead_pid", &isnull));
	return n;
}

/* running -> pending (released): the lane gives its lease back (the pass was paused) */
void
state_part_released(int64 run_id, int part_no, int pid)
{
	Oid			types[5] = {INT8OID, INT4OID, INT4OID, TEXTOID, TEXTOID};
	Datum		values[5] = {Int64GetDatum(run_id), Int32GetDatum(part_no), Int32GetDatum(pid),
	part_state_datum(PART_PENDING), part_state_datum(PART_RUNNING)};

	(void) state_missed(EV_RELEASED, "partition", run_id,
						catalog_exec("UPDATE backfill.partition SET state = $4, holder_pid = NULL,"
									 " holder_start = NULL, renewed_at = pg_catalog.now()"
									 " WHERE run_id = $1 AND part_no = $2 AND holder_pid = $3"
									 " AND state = $5",
									 5, types, values, NULL, SPI_OK_UPDATE));
}

/*
 * running -> pending (released): every lease of run_id that the process
 * (pid, started at start) holds, each partition pending at its checkpoint.
 */
void
state_parts_released_held(int64 run_id, int pid, TimestampTz start)
{
	Oid			types[5] = {INT8OID, INT4OID, TIMESTAMPTZOID, TEXTOID, TEXTOID};
	Datum		values[5] = {Int64GetDatum(run_id), Int32GetDatum(pid),
		TimestampTzGetDatum(start), part_state_datum(PART_PENDING),
	part_state_datum(PART_RUNNING)};

	catalog_exec("UPDATE backfill.partition SET state = $4, holder_pid = NULL,"
				 " holder_start = NULL, renewed_at = pg_catalog.now()"
				 " WHERE run_id = $1 AND holder_pid = $2 AND holder_start = $3"
				 " AND state = $5",
				 5, types, values, NULL, SPI_OK_UPDATE);
}


/*
 * The checkpoint: the partition's row updated, the pass's state read back;
 * $9 is why the lane holds back (the WAL budget it waited for before
 * this batch, or the foreground throttle, pacing.c), or NULL.  WHERE_TID is empty, or the condition that finds the row by its
 * TID ($10).  The pass's rows are found by $1 (c's run_id), so that each is
 * an index lookup whatever the tables' statistics say: joined on c.run_id,
 * the plan hashed the run table for every batch while it was small.
 */
#define CHECKPOINT_SQL(WHERE_TID) \
	"WITH c AS (" \
	"  UPDATE backfill.partition p SET cursor = $3, rows = p.rows + $4," \
	"    batches = p.batches + 1, failures = 0, last_error = NULL," \
	"    renewed_at = pg_catalog.now(), batch_size = $7, last_batch_ms = $8, throttle = $9" \
	"  WHERE " WHERE_TID " p.run_id = $1 AND p.part_no = $2 AND p.state = 'running'" \
	"    AND p.holder_pid = $5 AND p.holder_start = $6" \
	"  RETURNING p.run_id, p.ctid)" \
	" SELECT l.status, d.checksum, d.rate, d.batch_size, r.paused, c.ctid, d.max_wal_rate" \
	"   FROM c JOIN backfill.ledger l ON l.run_id = $1" \
	"   JOIN backfill.run r ON r.run_id = $1" \
	"   LEFT JOIN backfill.declaration d ON d.name = l.declaration"

/*
 * running -> running (checkpointed): a batch's checkpoint, by the lane that
 * holds the lease, at the version of the row its last checkpoint wrote
 * when it still is the row (*tid, a TID scan), else by its key; *tid is
 * set to the new version.  types/values/nulls: batch.c checkpoint_batch's
 * ($1 .. $9; $10 is the TID).  True when the lane still holds the lease;
 * the answer (the pass's state, the declaration's settings) is the
 * current SPI result.
 */
bool
state_part_checkpointed(ItemPointer tid, Oid *types, Datum *values, const char *nulls)
{
	bool		found = false;
	bool		isnull;

	if (ItemPointerIsValid(tid))
	{
		values[9] = PointerGetDatum(tid);
		found = catalog_exec_cached(&checkpoint_tid_plan, CHECKPOINT_SQL("p.ctid = $10 AND"),
									10, types, values, nulls, SPI_OK_SELECT) == 1;
	}
	if (!found)
		found = catalog_exec_cached(&checkpoint_plan, CHECKPOINT_SQL(""),
									9, types, values, nulls, SPI_OK_SELECT) == 1;
	if (found)
		*tid = *(ItemPointer) DatumGetPointer(state_answer_column("ctid", &isnull));
	return state_missed(EV_CHECKPOINTED, "partition under the lease", DatumGetInt64(values[0]),
						found ? 1 : 0);
}

/* running -> done (done): nothing in the partition matches any more; false: the lease is lost */
bool
state_part_done(int64 run_id, int part_no, int pid, TimestampTz start)
{
	Oid			types[4] = {INT8OID, INT4OID, INT4OID, TIMESTAMPTZOID};
	Datum		values[4] = {Int64GetDatum(run_id), Int32GetDatum(part_no), Int32GetDatum(pid),
	TimestampTzGetDatum(start)};

	return state_missed(EV_PART_DONE, "partition under the lease", run_id,
						catalog_exec_cached(&done_plan,
											"UPDATE backfill.partition SET state = 'done',"
											" finished_at = pg_catalog.now(),"
											" renewed_at = pg_catalog.now(), failures = 0,"
											" last_error = NULL"
											" WHERE run_id = $1 AND part_no = $2"
											"   AND state = 'running'"
											"   AND holder_pid = $3 AND holder_start = $4",
											4, types, values, NULL, SPI_OK_UPDATE) == 1 ? 1 : 0);
}

/* a failed attempt at a batch of the partition: its failures and last error (no move) */
void
state_part_attempt_failed(int64 run_id, int part_no, const char *message)
{
	Oid			types[3] = {INT8OID, INT4OID, TEXTOID};
	Datum		values[3] = {Int64GetDatum(run_id), Int32GetDatum(part_no),
	CStringGetTextDatum(message)};

	catalog_exec("UPDATE backfill.partition SET failures = failures + 1, last_error = $3"
				 " WHERE run_id = $1 AND part_no = $2",
				 3, types, values, NULL, SPI_OK_UPDATE);
}

/*
 * running -> running (checkpointed): the cursor moved past a row that
 * failed alone (poison.c), under the lease; false when it is lost.
 */
bool
state_part_skipped_to(int64 run_id, int part_no, const char *cursor, int pid, TimestampTz start)
{
	Oid			types[5] = {INT8OID, INT4OID, TEXTOID, INT4OID, TIMESTAMPTZOID};
	Datum		values[5] = {Int64GetDatum(run_id), Int32GetDatum(part_no),
		CStringGetTextDatum(cursor), Int32GetDatum(pid),
	TimestampTzGetDatum(start)};

	return state_missed(EV_CHECKPOINTED, "partition under the lease", run_id,
						catalog_exec("UPDATE backfill.partition SET cursor = $3,"
									 " renewed_at = pg_catalog.now()"
									 " WHERE run_id = $1 AND part_no = $2 AND state = 'running'"
									 "   AND holder_pid = $4 AND holder_start = $5",
									 5, types, values, NULL, SPI_OK_UPDATE) == 1 ? 1 : 0);
}

/* why the lane that holds the partition holds back (NULL: it does not; no move) */
void
state_part_throttle(int64 run_id, int part_no, int pid, const char *reason)
{
	Oid			types[4] = {INT8OID, INT4OID, INT4OID, TEXTOID};
	Datum		values[4] = {Int64GetDatum(run_id), Int32GetDatum(part_no), Int32GetDatum(pid),
	reason ? CStringGetTextDatum(reason) : (Datum) 0};
	char		nulls[4] = {' ', ' ', ' ', reason ? ' ' : 'n'};

	catalog_exec("UPDATE backfill.partition SET throttle = $4"
				 " WHERE run_id = $1 AND part_no = $2 AND holder_pid = $3",
				 4, types, values, nulls, SPI_OK_UPDATE);
}

/*
 * running -> running (checkpointed): a Citus shard's partition, its cursor
 * and rows as its row on the shard's node has them, and its shard group
 * (group < 0: kept), under the lease; false when it is lost.
 */
bool
state_part_mirrored(int64 run_id, int part_no, int group, const char *cursor, int64 rows,
					int pid, TimestampTz start)
{
	Oid			types[7] = {INT8OID, INT4OID, INT4OID, TEXTOID, INT8OID, INT4OID, TIMESTAMPTZOID};
	Datum		values[7] = {Int64GetDatum(run_id), Int32GetDatum(part_no), Int32GetDatum(group),
		cursor ? CStringGetTextDatum(cursor) : (Datum) 0, Int64GetDatum(rows),
	Int32GetDatum(pid), TimestampTzGetDatum(start)};
	char		nulls[7] = {' ', ' ', group >= 0 ? ' ' : 'n', cursor ? ' ' : 'n', ' ', ' ', ' '};

	return state_missed(EV_CHECKPOINTED, "partition under the lease", run_id,
						catalog_exec("UPDATE backfill.partition"
									 " SET shard_group = coalesce($3, shard_group), cursor = $4,"
									 " rows = $5, renewed_at = pg_catalog.now()"
									 " WHERE run_id = $1 AND part_no = $2 AND state = 'running'"
									 "   AND holder_pid = $6 AND holder_start = $7",
									 7, types, values, nulls, SPI_OK_UPDATE) == 1 ? 1 : 0);
}

/*
 * new -> pending (planned): a partition for one new shard of a split
 * Citus shard (shardid, its hash range min..max), numbered after every
 * partition there is, with the old one's lo and hi, going on from cursor.
 */
void
state_part_split_child(int64 run_id, int part_no, const char *cursor, int64 shardid, int min,
					   int max)
{
	Oid			types[7] = {INT8OID, INT4OID, TEXTOID, INT8OID, INT4OID, INT4OID, TEXTOID};
	Datum		values[7] = {Int64GetDatum(run_id), Int32GetDatum(part_no),
		cursor ? CStringGetTextDatum(cursor) : (Datum) 0, Int64GetDatum(shardid),
	Int32GetDatum(min), Int32GetDatum(max), part_state_datum(PART_PENDING)};
	char		nulls[7] = {' ', ' ', cursor ? ' ' : 'n', ' ', ' ', ' ', ' '};

	catalog_exec("INSERT INTO backfill.partition (run_id, part_no, lo, hi, cursor, shard,"
				 "   shard_run, shard_min, shard_max, split_from, state)"
				 " SELECT $1, (SELECT max(q.part_no) + 1 FROM backfill.partition q"
				 "              WHERE q.run_id = $1), p.lo, p.hi, $3, $4, $1, $5, $6, $2, $7"
				 "   FROM backfill.partition p WHERE p.run_id = $1 AND p.part_no = $2",
				 7, types, values, nulls, SPI_OK_INSERT);
}
