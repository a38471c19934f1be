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
 * shows the newest batch_history.
 *
 * The walk goes down the pass's index entries from the newest row beyond
 * the kept ones, and would go on to the end of them: past the dead
 * entries of every row pruned before, which pile up while something
 * holds back the xmin horizon (a backfill_wait does, for the whole
 * pass), each a heap visit.  Each prune then cost more than the last: a
 * seventh of a lane's time at batch 200, a million rows (issue 29).  So
 * it stops at a floor: the first row beyond the kept ones two prunes ago
 * (what was visible below it then is deleted; a batch of another lane
 * committed later than one prune after its row took its number is left
 * to the next full walk), and every HISTORY_PRUNE_FULL-th prune of a
 * lane walks to the end.
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
/* every this many prunes, a walk with no floor */
#define HISTORY_PRUNE_FULL		64

static SPIPlanPtr record_plan = NULL;
static SPIPlanPtr prune_plan = NULL;
static uint64 records = 0;

/* the floors of this lane's walks: the first row beyond the kept ones at its last two prunes */
static int64 prune_run = 0;
static int64 prune_beyond[2] = {0, 0};

#define HISTORY_SQL \
	"INSERT INTO backfill.batch (run_id, part_no, first_key, last_key, rows, ms," \
	"    wal_bytes, batch_size, throttle) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"

/* deletes the pass's rows beyond the newest $2, above the floor $4; answers the first beyond */
#define PRUNE_SQL \
	"WITH beyond AS (SELECT o.seq FROM backfill.batch o WHERE o.run_id = $1" \
	"                 ORDER BY o.seq DESC OFFSET $2 LIMIT 1)," \
	" pruned AS (DELETE FROM backfill.batch b WHERE b.run_id = $1 AND b.seq IN (" \
	"  SELECT o.seq FROM backfill.batch o WHERE o.run_id = $1 AND o.seq > $4" \
	"     AND o.seq <= (SELECT beyond.seq FROM beyond)" \
	"   ORDER BY o.seq DESC LIMIT $3))" \
	" SELECT (SELECT beyond.seq FROM beyond)"

/* the pass's rows beyond the newest batch_history, deleted */
static void
history_prune(int64 run_id)
{
	Oid			types[4] = {INT8OID, INT8OID, INT8OID, INT8OID};
	Datum		values[4];
	bool		isnull;
	Datum		beyond;

	if (prune_run != run_id)
	{
		prune_run = run_id;
		prune_beyond[0] = prune_beyond[1] = 0;
	}
	values[0] = Int64GetDatum(run_id);
	values[1] = Int64GetDatum((int64) backfill_batch_history);
	values[2] = Int64GetDatum(HISTORY_PRUNE_LIMIT);
	values[3] = Int64GetDatum((records / HISTORY_PRUNE_EVERY) % HISTORY_PRUNE_FULL == 0 ?
							  0 : prune_beyond[0]);
	(void) catalog_exec_cached(&prune_plan, PRUNE_SQL, 4, types, values, NULL, SPI_OK_SELECT);
	beyond = catalog_getdatum(0, 1, &isnull);
	prune_beyond[0] = prune_beyond[1];
	prune_beyond[1] = isnull ? 0 : DatumGetInt64(beyond);
}

void
history_record(Pass *pass, Claim *claim, const char *first_key, const char *last_key,
			   int64 rows, const char *throttle)
{
	Oid			types[9] = {INT8OID, INT4OID, TEXTOID, TEXTOID, INT8OID, FLOAT8OID, INT8OID,
	INT4OID, TEXTOID};
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

	if (backfill_batch_history <= 0)
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
