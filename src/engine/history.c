/*-------------------------------------------------------------------------
 *
 * history.c
 *	  The batch history: each batch of a pass recorded in backfill.batch
 *	  with its partition, key range, rows, time, WAL, batch size and
 *	  throttle; the last backfill.batch_history of the pass kept.
 *
 * The row is written by the statement after the checkpoint, in the
 * batch's own transaction: a batch that rolls back leaves no row, one
 * that commits leaves its row exactly when its checkpoint stays.  The
 * same statement prunes the pass's older rows: it walks the pass's index
 * entries down from the newest, past the batch_history - 1 it keeps, and
 * deletes the next one (the one the new row replaces), and stops there:
 * it does not walk on over the dead index entries of the rows pruned
 * before, which pile up while something holds back the xmin horizon.
 * Two lanes of a pass pruning at the same moment see each other's new
 * row only after their commits, so both keep one row too many; every
 * HISTORY_CATCH_UP-th record of a lane deletes up to HISTORY_CATCH_UP
 * rows, which brings the pass back to batch_history (that walk, one in
 * HISTORY_CATCH_UP, may pass the dead entries).
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

/* every this many records a lane also deletes up to this many rows beyond the kept ones */
#define HISTORY_CATCH_UP	8

static SPIPlanPtr record_plan = NULL;
static uint64 records = 0;

#define HISTORY_SQL \
	"WITH n AS (INSERT INTO backfill.batch (run_id, part_no, first_key, last_key, rows, ms," \
	"    wal_bytes, batch_size, throttle) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9))" \
	" DELETE FROM backfill.batch b WHERE b.run_id = $1 AND b.seq IN (" \
	"   SELECT o.seq FROM backfill.batch o WHERE o.run_id = $1" \
	"    ORDER BY o.seq DESC OFFSET $10 LIMIT $11)"

void
history_record(Pass *pass, Claim *claim, const char *first_key, const char *last_key,
			   int64 rows, const char *throttle)
{
	Oid			types[11] = {INT8OID, INT4OID, TEXTOID, TEXTOID, INT8OID, FLOAT8OID, INT8OID,
	INT4OID, TEXTOID, INT8OID, INT8OID};
	Datum		values[11];
	char		nulls[11] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

	/* catalogs older than 0.6 (the library updated first) have no history to write */
	if (backfill_batch_history <= 0 || !catalog_has_column("batch", "throttle"))
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
	/* the newest batch_history - 1 stay, with the new row */
	values[9] = Int64GetDatum((int64) backfill_batch_history - 1);
	values[10] = Int64GetDatum(++records % HISTORY_CATCH_UP == 0 ? HISTORY_CATCH_UP : 1);
	(void) catalog_exec_cached(&record_plan, HISTORY_SQL, 11, types, values, nulls,
							   SPI_OK_DELETE);
}
