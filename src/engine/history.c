/*-------------------------------------------------------------------------
 *
 * history.c
 *	  The batch history: each batch of a pass recorded in backfill.batch
 *	  with its partition, key range, rows, time, WAL, batch size and
 *	  throttle; the last backfill.batch_history of the pass kept.
 *
 * The row is written by a statement after the checkpoint, in the batch's
 * own transaction: a batch that rolls back leaves no row, one that
 * commits leaves its row exactly when its checkpoint stays.  Pruning in
 * every batch would walk the pass's newest batch_history rows each time
 * (their heap tuples, a hot page is never all-visible): a measurable
 * share of a small batch.  So every HISTORY_PRUNE_EVERY-th record of a
 * lane, in the same transaction, deletes the pass's rows beyond the
 * newest batch_history (at most HISTORY_PRUNE_LIMIT of them: more than
 * every lane adds in between); the table holds at most batch_history +
 * HISTORY_PRUNE_EVERY rows of a pass per lane, and backfill_batches
 * shows the newest batch_history.  The walk stops once it has deleted
 * what was beyond, or at the end of the pass's index entries: past the
 * dead ones of rows pruned before, which pile up while something holds
 * back the xmin horizon, once every HISTORY_PRUNE_EVERY batches only.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/instrument.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "config.h"
#include "history.h"

/* every this many records a lane prunes the pass's rows beyond batch_history ... */
#define HISTORY_PRUNE_EVERY		16
/* ... at most this many */
#define HISTORY_PRUNE_LIMIT		256

static SPIPlanPtr record_plan = NULL;
static SPIPlanPtr prune_plan = NULL;
static uint64 records = 0;

#define HISTORY_SQL \
	"INSERT INTO backfill.batch (run_id, part_no, first_key, last_key, rows, ms," \
	"    wal_bytes, batch_size, throttle) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"

#define PRUNE_SQL \
	"DELETE FROM backfill.batch b WHERE b.run_id = $1 AND b.seq IN (" \
	"  SELECT o.seq FROM backfill.batch o WHERE o.run_id = $1" \
	"   ORDER BY o.seq DESC OFFSET $2 LIMIT $3)"

/* the pass's rows beyond the newest batch_history, deleted */
static void
history_prune(int64 run_id)
{
	Oid			types[3] = {INT8OID, INT8OID, INT8OID};
	Datum		values[3];

	values[0] = Int64GetDatum(run_id);
	values[1] = Int64GetDatum((int64) backfill_batch_history);
	values[2] = Int64GetDatum(HISTORY_PRUNE_LIMIT);
	(void) catalog_exec_cached(&prune_plan, PRUNE_SQL, 3, types, values, NULL, SPI_OK_DELETE);
}

void
history_record(Pass *pass, Claim *claim, const char *first_key, const char *last_key,
			   int64 rows, const char *throttle)
{
	Oid			types[9] = {INT8OID, INT4OID, TEXTOID, TEXTOID, INT8OID, FLOAT8OID, INT8OID,
	INT4OID, TEXTOID};
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	static bool table_seen = false; /* once seen, for the process's life */

	/* catalogs older than 0.6 (the library updated first) have no history to write */
	if (backfill_batch_history <= 0 ||
		(!table_seen && !(table_seen = catalog_has_column("batch", "throttle"))))
		return;
	values[0] = Int64GetDatum(pass->run_id);
	values[1] = Int32GetDatum(claim->part_no);
	values[2] = first_key ? CStringGetTextDatum(first_key) : (Datum) 0;
	nulls[2] = first_key ? ' ' : 'n';
	values[3] = last_key ? CStringGetTextDatum(last_key) : (Datum) 0;
	nulls[3] = last_key ? ' ' : 'n';
	values[4] = Int64GetDatum(rows);
	values[5] = Float8GetDatum(claim->last_batch_ms);
	/* the WAL this lane wrote since it was last charged (after its last batch, pacing.c) */
	values[6] = Int64GetDatum((int64) (pgWalUsage.wal_bytes - claim->wal_seen));
	values[7] = Int32GetDatum(CLAIM_BATCH_LIMIT(claim));
	values[8] = (throttle && throttle[0]) ? CStringGetTextDatum(throttle) : (Datum) 0;
	nulls[8] = (throttle && throttle[0]) ? ' ' : 'n';
	(void) catalog_exec_cached(&record_plan, HISTORY_SQL, 9, types, values, nulls,
							   SPI_OK_INSERT);
	if (++records % HISTORY_PRUNE_EVERY == 0)
		history_prune(pass->run_id);
}
