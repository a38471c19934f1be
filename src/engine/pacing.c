/*-------------------------------------------------------------------------
 *
 * pacing.c
 *	  How fast a lane goes: the declared rate, the adaptive batch size and
 *	  the health throttle.
 *
 * Rate: a lane starts at most one batch every 1/rate seconds.  The wait
 * ends early when the lane is woken (shmem.c: a pause, a cancel or a new
 * declaration of the backfill): it reads its pass and the declared rate
 * again, so a new rate takes effect at once.
 *
 * Adaptive batch size: when the declaration names a target batch time, the
 * batch size moves toward it after each batch, halfway at a time and at
 * most doubling or halving per step, within min_batch_size..max_batch_size;
 * a batch that hits its timeout halves it at once.  Sparse key ranges thus
 * get bigger batches and slow rows smaller ones.
 *
 * Health: each checkpoint also reads, in the same statement, how many
 * sessions are waiting on the batch's locks, how far the furthest standby's
 * replay is behind, and the table's dead tuples.  A lane that blocked
 * someone yields for backfill.throttle_delay; a lane that finds a standby
 * too far behind or the table too full of dead tuples holds until that
 * clears.  Either way it says why in backfill_status (partition.throttle).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "pg_backfill.h"
#include "catalog.h"
#include "lane.h"
#include "pacing.h"
#include "shmem.h"
#include "xact.h"

void
pacing_start(Pass *pass, Claim *claim)
{
	claim->batch_size = pass->batch_size;
	claim->blocking = 0;
	claim->lag_bytes = 0;
	claim->dead_tuples = 0;
}

static void
adapt_batch_size(Pass *pass, Claim *claim)
{
	double		ratio;
	double		next;

	if (pass->target_batch_ms <= 0)
	{
		/* fixed: follow the declaration, which may be changed live */
		claim->batch_size = pass->batch_size;
		return;
	}
	ratio = pass->target_batch_ms / Max(claim->last_batch_ms, 0.1);
	ratio = Min(Max(ratio, 0.5), 2.0);
	/* a short batch at the end of a range says little about a full one */
	if (ratio > 1.0 && claim->last_keys < claim->batch_size)
		return;
	next = claim->batch_size * (1.0 + 0.5 * (ratio - 1.0));
	next = Min(Max(next, (double) pass->min_batch_size), (double) pass->max_batch_size);
	claim->batch_size = (int) (next + 0.5);
}

void
pacing_after_timeout(Pass *pass, Claim *claim)
{
	if (pass->target_batch_ms > 0)
		claim->batch_size = Max(pass->min_batch_size, claim->batch_size / 2);
}

/* Say why the lane holds back (NULL: it does not), where backfill_status sees it. */
static void
set_throttle(Pass *pass, Claim *claim, const char *reason)
{
	CatalogScope scope;
	Oid			types[4] = {INT8OID, INT4OID, INT4OID, TEXTOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	values[0] = Int64GetDatum(pass->run_id);
	values[1] = Int32GetDatum(claim->part_no);
	values[2] = Int32GetDatum(LANE_PID());
	values[3] = reason ? CStringGetTextDatum(reason) : (Datum) 0;
	nulls[3] = reason ? ' ' : 'n';
	worker_begin_xact("pg_backfill lane: throttled");
	catalog_enter(&scope);
	catalog_exec("UPDATE backfill.partition SET throttle = $4"
				 " WHERE run_id = $1 AND part_no = $2 AND holder_pid = $3",
				 4, types, values, nulls, SPI_OK_UPDATE);
	catalog_leave(&scope);
	worker_commit_xact();
}

/* Why the server's health says to hold back, or NULL. */
static char *
health_reason(Pass *pass, Claim *claim)
{
	if (backfill_max_replication_lag >= 0 &&
		claim->lag_bytes > (int64) backfill_max_replication_lag * 1024)
		return psprintf("replication: a standby's replay is " INT64_FORMAT " kB behind "
						"(backfill.max_replication_lag is %d kB)",
						claim->lag_bytes / 1024, backfill_max_replication_lag);
	if (backfill_max_dead_tuples >= 0 && claim->dead_tuples > backfill_max_dead_tuples)
		return psprintf("vacuum: %s has " INT64_FORMAT " dead tuples "
						"(backfill.max_dead_tuples is %d)",
						pass->relation, claim->dead_tuples, backfill_max_dead_tuples);
	return NULL;
}

/*
 * Read the health again while holding back.  Returns false when the pass
 * is no longer running (or is paused): stop holding, the next checkpoint
 * will tell the lane what to do.
 */
static bool
read_health(Pass *pass, Claim *claim)
{
	CatalogScope scope;
	Oid			types[2] = {INT8OID, OIDOID};
	Datum		values[2];
	bool		isnull;
	bool		go_on;

	values[0] = Int64GetDatum(pass->run_id);
	values[1] = ObjectIdGetDatum(pass->relid);
	worker_begin_xact("pg_backfill lane: throttled, reading the server's health");
	catalog_enter(&scope);
	catalog_exec("SELECT l.status = 'running' AND NOT r.paused,"
				 "  coalesce((SELECT pg_catalog.max(pg_catalog.pg_wal_lsn_diff("
				 "                     pg_catalog.pg_current_wal_lsn(), s.replay_lsn))"
				 "              FROM pg_catalog.pg_stat_replication s), 0)::pg_catalog.int8,"
				 "  pg_catalog.pg_stat_get_dead_tuples($2)"
				 " FROM backfill.ledger l JOIN backfill.run r ON r.run_id = l.run_id"
				 " WHERE l.run_id = $1",
				 2, types, values, NULL, SPI_OK_SELECT);
	go_on = DatumGetBool(catalog_getdatum(0, 1, &isnull));
	claim->lag_bytes = DatumGetInt64(catalog_getdatum(0, 2, &isnull));
	claim->dead_tuples = DatumGetInt64(catalog_getdatum(0, 3, &isnull));
	catalog_leave(&scope);
	worker_commit_xact();
	return go_on;
}

/*
 * Woken while waiting out the rate: read the pass again, and the
 * declaration's rate and batch size, which a new declaration may have
 * changed.  Returns what the lane does next.
 */
static BatchOutcome
reread_pass(Pass *pass)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1];
	bool		isnull;
	bool		running;
	bool		paused;
	Datum		d;

	values[0] = Int64GetDatum(pass->run_id);
	worker_begin_xact("pg_backfill lane: woken, reading the pass again");
	catalog_enter(&scope);
	catalog_exec("SELECT l.status = 'running', r.paused, d.rate, d.batch_size"
				 " FROM backfill.ledger l JOIN backfill.run r ON r.run_id = l.run_id"
				 " LEFT JOIN backfill.declaration d ON d.name = l.declaration"
				 " WHERE l.run_id = $1",
				 1, types, values, NULL, SPI_OK_SELECT);
	running = DatumGetBool(catalog_getdatum(0, 1, &isnull));
	paused = DatumGetBool(catalog_getdatum(0, 2, &isnull));
	d = catalog_getdatum(0, 3, &isnull);
	if (!isnull)
		pass->rate = DatumGetFloat8(d);
	d = catalog_getdatum(0, 4, &isnull);
	if (!isnull)
		pass->batch_size = DatumGetInt32(d);
	catalog_leave(&scope);
	worker_commit_xact();
	if (!running)
		return BATCH_STOP;
	return paused ? BATCH_PAUSED : BATCH_DONE;
}

/*
 * Wait until the next batch may start by the rate, from the start of the
 * last one.  A wake (a pause, a cancel, a new declaration) makes the lane
 * read its pass and rate again at once: a new rate counts from then on,
 * never after the old sleep.
 */
static BatchOutcome
wait_for_rate(Pass *pass, TimestampTz started, TimestampTz not_before)
{
	for (;;)
	{
		TimestampTz next = started + (TimestampTz) (1000000.0 / pass->rate);
		BatchOutcome outcome;

		if (!lane_sleep_until(Max(next, not_before)))
			return BATCH_DONE;
		if (backfill_lane_stop_requested() || backfill_lane_yield_requested())
			return BATCH_DONE;	/* work_partition stops or yields */
		outcome = reread_pass(pass);
		if (outcome != BATCH_DONE)
			return outcome;
	}
}

/*
 * After a committed batch: adapt the batch size, wait out the rate, and
 * hold back while the server's health asks for it.  Returns BATCH_DONE to
 * go on, or BATCH_PAUSED / BATCH_STOP when the pass was paused or ended
 * meanwhile.
 */
BatchOutcome
pacing_after_batch(Pass *pass, Claim *claim, TimestampTz started)
{
	TimestampTz not_before = 0;
	char	   *reason;
	char	   *said = NULL;
	BatchOutcome outcome;

	adapt_batch_size(pass, claim);

	if (claim->blocking > 0)
	{
		said = psprintf("locks: %d session(s) waited on the last batch", claim->blocking);
		set_throttle(pass, claim, said);
		not_before = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), backfill_throttle_delay);
	}
	outcome = wait_for_rate(pass, started, not_before);
	if (outcome != BATCH_DONE)
		return outcome;

	while ((reason = health_reason(pass, claim)) != NULL)
	{
		if (said == NULL || strcmp(said, reason) != 0)
		{
			ereport(LOG,
					(errmsg("backfill \"%s\" run " INT64_FORMAT " holds back: %s",
							pass->name, pass->run_id, reason)));
			set_throttle(pass, claim, reason);
			said = reason;
		}
		(void) lane_sleep_until(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															backfill_throttle_delay));
		if (!read_health(pass, claim))
			break;
	}
	if (said != NULL && reason == NULL && claim->blocking == 0)
		set_throttle(pass, claim, NULL);
	return BATCH_DONE;
}
