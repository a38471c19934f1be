/*-------------------------------------------------------------------------
 *
 * pacing.c
 *	  How fast a lane goes: the declared rate, the WAL budgets, the adaptive
 *	  batch size, the health throttle and the switches that pause all.
 *
 * Rate: the pass's, whatever its lanes.  Before each batch (each attempt
 * of one too) a lane asks the pass's pacer in shared memory (shmem.c):
 * a batch of the pass may start once 1/rate has passed since the start of
 * the pass's last one, whichever lane or session ran it.  So k lanes
 * together start at most rate batches a second, each about rate/k, and a
 * lane that joins or leaves changes nobody's share by hand.  The pacer has
 * no owner: a lane that dies leaves at most the start of its last batch
 * behind, which ages out.  After its batch a lane also waits 1/rate from
 * that batch's start (what it does alone if no pacer is free).  The waits
 * end early when the lane is woken (shmem.c: a pause, a cancel or a new
 * declaration of the backfill): it reads its pass and the declared rate
 * again, so a new rate takes effect at once.
 *
 * Adaptive batch size: when the declaration names a target batch time, the
 * batch size moves toward it after each batch, halfway at a time and at
 * most doubling or halving per step, within min_batch_size..max_batch_size;
 * a batch that hits its timeout halves it at once.  Sparse key ranges thus
 * get bigger batches and slow rows smaller ones.
 *
 * WAL budgets: the pass's max_wal_rate and backfill.max_wal_rate for the
 * cluster.  After each batch (committed or not) the lane charges the WAL
 * its process wrote since it last charged (pgWalUsage: the batch, its
 * checkpoint, its commit) to the pass's pacer and the cluster's account
 * (shmem.c); before each batch the pacer answers for the rate and both
 * budgets together, and a wait for WAL is what the next checkpoint writes
 * as the throttle ('wal: 4.9 MB/s of 5 MB/s ...'; a wait longer than
 * throttle_delay is written at once).
 *
 * Health (health.c): a batch reads, before it commits and at most once
 * per backfill.throttle_delay, how many sessions wait on its locks, how
 * far the furthest standby's replay is behind, the table's dead tuples,
 * the archiver's and the slots' backlog and whether its role is paused
 * for all.  A lane that blocked someone yields for backfill.throttle_delay;
 * a lane that finds any other signal over its limit (or backfill.pause_all
 * on) holds until that clears, reading the health again after each
 * throttle_delay, keeping its partition, marking nothing in the ledger.
 * It holds after a batch and again before the next one (a reload taken in
 * first, and the first batch of a claim after a fresh reading), so a
 * switch for all stops it at a batch boundary and a lane that starts
 * during a hold holds too.  Either way it says why in backfill_status
 * (partition.throttle).
 *
 * The user's condition (condition.c): the declaration's throttle_when,
 * true or failing, holds the lane as the health does, read with it; its
 * answer is the pass's, at most once a second.  Time windows (windows.c):
 * before each batch, and while holding, a lane outside every window gives
 * its partition back at its checkpoint and ends (BATCH_STOP, the pass
 * still running); the scheduler starts lanes again at the next window's
 * start.  Both are read again at every hold and wake, so a new declaration
 * applies to running lanes.
 *
 * Foreground (backfill.foreground_throttle): every batch samples how many
 * client sessions are at work (health.c) and how many cores were idle
 * since the last sample (idlecores.c).  While the sessions are as many as
 * half the cores (at least one) and less than FOREGROUND_IDLE_CORES cores
 * were idle (or the idle cores are unknown), each fresh sample halves the
 * share of its time the lane works, down to 1/64: after a batch that took
 * d, the lane waits d * (1/share - 1).  Otherwise each sample gives an
 * eighth back (additive increase, multiplicative decrease): on a box at
 * half its capacity a lane keeps working in the core the foreground
 * leaves idle, and on a saturated one it holds back.  The lane keeps
 * working at its lowest share, so a busy server still sees the pass move;
 * the checkpoint says why it holds back.  Lowering the lane's OS priority
 * instead made the foreground slower: a descheduled backend that holds an
 * LWLock (WAL insertion, a buffer) stalls every session that needs it.
 *
 *-------------------------------------------------------------------------
 */
#include "names.h"
#include "postgres.h"

#include <unistd.h>

#include "executor/instrument.h"
#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "config.h"
#include "backoff.h"
#include "catalog.h"
#include "condition.h"
#include "health.h"
#include "claim.h"
#include "idlecores.h"
#include "pacing.h"
#include "shmem.h"
#include "state.h"
#include "windows.h"
#include "xact.h"

void
pacing_start(Pass *pass, Claim *claim)
{
	claim->batch_size = pass->batch_size;
	claim->health.blocking = 0;
	claim->health.lag_bytes = 0;
	claim->health.dead_tuples = 0;
	claim->health.archive_ready = 0;
	claim->health.slot_retained = 0;
	claim->health.slot_name[0] = '\0';
	claim->health.role_paused[0] = '\0';
	claim->health.foreground = 0;
	claim->health.foreground_fresh = false;
	claim->foreground_share = 1.0;
	claim->foreground_reason[0] = '\0';
	claim->pace_reason[0] = '\0';
	claim->wal_seen = pgWalUsage.wal_bytes;
	claim->health_fresh = false;
}

/* the foreground throttle's bounds and steps (see the header) */
#define FOREGROUND_MIN_SHARE	(1.0 / 64)
#define FOREGROUND_STEP_BACK	(1.0 / 8)
#define FOREGROUND_MAX_WAIT_MS	10000
/* idle cores at which a busy foreground still leaves room for the lane */
#define FOREGROUND_IDLE_CORES	0.5

/* the cores of this machine, as the foreground throttle counts them */
static int
machine_cores(void)
{
	static int	cores = 0;

	if (cores == 0)
	{
		long		n = sysconf(_SC_NPROCESSORS_ONLN);

		cores = n > 0 ? (int) n : 1;
	}
	return cores;
}

/*
 * Is the foreground busy by a fresh sample: client sessions at work as
 * many as half the cores, and less than FOREGROUND_IDLE_CORES idle (or
 * no idle count)?  The idle cores are read at every sample, so that each
 * reading covers the time since the one before.
 */
static bool
foreground_busy(Claim *claim, int cores)
{
	double		idle = idle_cores_since_last(cores);

	if (claim->health.foreground < Max(1.0, cores / 2.0))
		return false;
	return idle < 0 || idle < FOREGROUND_IDLE_CORES;
}

/*
 * AIMD on the lane's share of time after a fresh sample of the
 * foreground; says why in the reason the next checkpoint writes.
 */
static void
foreground_adjust(Claim *claim)
{
	int			cores = machine_cores();
	int			was = (int) (1.0 / claim->foreground_share + 0.5);
	int			now;

	if (!backfill_foreground_throttle)
		claim->foreground_share = 1.0;
	else if (!claim->health.foreground_fresh)
		return;
	else if (foreground_busy(claim, cores))
		claim->foreground_share = Max(claim->foreground_share / 2.0, FOREGROUND_MIN_SHARE);
	else
		claim->foreground_share = Min(claim->foreground_share + FOREGROUND_STEP_BACK, 1.0);

	now = (int) (1.0 / claim->foreground_share + 0.5);
	if (now == 1)
		claim->foreground_reason[0] = '\0';
	else if (now != was || claim->foreground_reason[0] == '\0')
		snprintf(claim->foreground_reason, sizeof(claim->foreground_reason),
				 "foreground: %.1f client sessions at work on %d cores: the lane works 1/%d "
				 "of the time", claim->health.foreground, cores, now);
}

/* When the next batch may start by the foreground throttle (0: at once). */
static TimestampTz
foreground_not_before(Claim *claim, TimestampTz started)
{
	TimestampTz now = GetCurrentTimestamp();
	double		wait_ms;

	foreground_adjust(claim);
	if (claim->foreground_share >= 1.0)
		return 0;
	wait_ms = (now - started) / 1000.0 * (1.0 / claim->foreground_share - 1.0);
	return TimestampTzPlusMilliseconds(now, (int64) Min(wait_ms, FOREGROUND_MAX_WAIT_MS));
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
void
pacing_say_throttle(Pass *pass, Claim *claim, const char *reason)
{
	CatalogScope scope;

	worker_begin_xact("pg_backfill lane: throttled");
	catalog_enter(&scope);
	state_part_throttle(pass->run_id, claim->part_no, LANE_PID(), reason);
	catalog_leave(&scope);
	worker_commit_xact();
}

/* a pass's state, and the declaration's settings a lane follows live */
#define PASS_STATE_SQL \
	"SELECT l.status = 'running', r.paused, d.rate, d.batch_size" \
	" FROM backfill.ledger l JOIN backfill.run r ON r.run_id = l.run_id" \
	" LEFT JOIN backfill.declaration d ON d.name = l.declaration" \
	" WHERE l.run_id = $1"

/*
 * The declaration's throttle_when and windows as they are now (in a
 * transaction, inside a catalog scope): a
 * new declaration applies to a lane at its next wake or hold.
 */
static void
reread_when(Pass *pass)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(pass->name)};
	char	   *condition;
	char	   *windows_said;
	bool		isnull;
	Datum		windows;
	MemoryContext old;

	if (catalog_exec("SELECT throttle_when, windows::text || ' in ' || window_time_zone, windows,"
					 "  window_time_zone FROM backfill.declaration WHERE name = $1",
					 1, types, values, NULL, SPI_OK_SELECT) == 0)
		return;
	condition = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	windows_said = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	/* only what changed is taken again: a held lane reads this every throttle_delay */
	old = MemoryContextSwitchTo(pass->cxt);
	if (!text_equal(condition, pass->throttle_when))
	{
		pass->throttle_when = condition ? pstrdup(condition) : NULL;
		pass->condition_at = 0;
	}
	if (!text_equal(windows_said, pass->windows_said))
	{
		windows = catalog_getdatum(0, 3, &isnull);
		pass->windows_said = windows_said ? pstrdup(windows_said) : NULL;
		pass->windows = isnull ? NULL :
			windows_parse(pass->name, DatumGetArrayTypeP(windows),
						  SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4));
	}
	MemoryContextSwitchTo(old);
}

/*
 * The pass as it is now (in a transaction, inside a catalog scope):
 * BATCH_DONE while it runs, else BATCH_PAUSED or BATCH_STOP.  With
 * reread, also the declaration's rate and batch size, which a new
 * declaration may have changed.
 */
static BatchOutcome
read_pass_state(Pass *pass, bool reread)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(pass->run_id)};
	bool		isnull;
	bool		running;
	bool		paused;
	Datum		d;

	/* no row: the catalog is not the pass's any more (the extension dropped and created again) */
	if (catalog_exec(PASS_STATE_SQL, 1, types, values, NULL, SPI_OK_SELECT) == 0)
		return BATCH_STOP;
	running = DatumGetBool(catalog_getdatum(0, 1, &isnull));
	paused = DatumGetBool(catalog_getdatum(0, 2, &isnull));
	d = catalog_getdatum(0, 3, &isnull);
	if (reread && !isnull)
		pass->rate = DatumGetFloat8(d);
	d = catalog_getdatum(0, 4, &isnull);
	if (reread && !isnull)
		pass->batch_size = DatumGetInt32(d);
	reread_when(pass);
	if (!running)
		return BATCH_STOP;
	return paused ? BATCH_PAUSED : BATCH_DONE;
}

/*
 * Read the health again (holding back, or before the first batch of a
 * claim).  Returns BATCH_PAUSED or BATCH_STOP when the pass is no longer
 * running or is paused: stop holding.  Who waits on the lane's locks
 * stays as the last batch read it: a lane holding back holds none.
 */
static BatchOutcome
read_health(Pass *pass, Claim *claim)
{
	CatalogScope scope;
	Health		now;
	BatchOutcome outcome;

	worker_begin_xact("pg_backfill lane: reading the server's health");
	catalog_enter(&scope);
	outcome = read_pass_state(pass, false);
	health_read(&now, pass->relid, pass->name);
	catalog_leave(&scope);
	worker_commit_xact();
	claim->health.lag_bytes = now.lag_bytes;
	claim->health.dead_tuples = now.dead_tuples;
	claim->health.archive_ready = now.archive_ready;
	claim->health.slot_retained = now.slot_retained;
	memcpy(claim->health.slot_name, now.slot_name, NAMEDATALEN);
	memcpy(claim->health.role_paused, now.role_paused, NAMEDATALEN);
	claim->health_fresh = true;
	return outcome;
}

/* why the lane holds back: a switch for all or the health first, then throttle_when */
static char *
hold_reason(Pass *pass, Claim *claim)
{
	char	   *reason = health_reason(&claim->health, pass->relation);

	return reason ? reason : condition_reason(pass);
}

/*
 * Outside every window of the pass (windows.c): the lane gives its
 * partition back at its checkpoint and ends (true); the scheduler starts
 * lanes again at the next window's start, and backfill_status says when.
 */
static bool
leave_outside_windows(Pass *pass, Claim *claim)
{
	TimestampTz next;

	if (pass->windows == NULL || windows_inside(pass->windows, GetCurrentTimestamp(), &next))
		return false;
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": outside its windows, the lane gives "
					"partition %d back at its checkpoint", pass->name, pass->run_id,
					claim->part_no),
			 errdetail("The next window starts at %s.", timestamptz_to_str(next))));
	pacing_say_throttle(pass, claim, NULL);
	pass_release(pass, claim);
	return true;
}

/*
 * Hold back while the health, a switch for all or throttle_when says so: the reason in
 * backfill_status (and the log when it changes), the reading taken again
 * after each backfill.throttle_delay.  *said is what the lane said last.
 * BATCH_DONE once it may go on, else BATCH_PAUSED / BATCH_STOP.
 */
static BatchOutcome
hold_while_unhealthy(Pass *pass, Claim *claim, char **said)
{
	char	   *reason;

	while ((reason = hold_reason(pass, claim)) != NULL)
	{
		BatchOutcome outcome;

		if (leave_outside_windows(pass, claim))
			return BATCH_STOP;

		if (*said == NULL || strcmp(*said, reason) != 0)
		{
			ereport(LOG,
					(errmsg("backfill \"%s\" run " INT64_FORMAT " holds back: %s",
							pass->name, pass->run_id, reason)));
			pacing_say_throttle(pass, claim, reason);
			*said = reason;
		}
		(void) backoff_sleep_until(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															   backfill_throttle_delay));
		if (backfill_lane_stop_requested() || backfill_lane_yield_requested())
			return BATCH_DONE;	/* work_partition stops or yields */
		outcome = read_health(pass, claim);
		if (outcome != BATCH_DONE)
			return outcome;
	}
	return BATCH_DONE;
}

/*
 * The next batch is more than LANE_IDLE_GIVE_BACK_MS away: while another
 * pass waits for a lane, this lane gives its own up (shmem.c sets its yield
 * flag; work.c gives the partition back at its checkpoint), saying so in
 * the partition's throttle (backfill_partitions), instead of holding a
 * lane it only sleeps in.  The scheduler starts no lane for the pass
 * before its next batch is near (scheduler.c).
 */
static bool
give_back_idle_lane(Pass *pass, Claim *claim, const PaceWait *wait)
{
	long		ms = (long) ((wait->until - GetCurrentTimestamp()) / 1000);

	if (ms <= LANE_IDLE_GIVE_BACK_MS)
		return false;
	/* asked already (the rate's wait after the batch gave it back) */
	if (backfill_lane_yield_requested())
		return true;
	if (!backfill_lane_give_back_idle())
		return false;
	pacing_say_throttle(pass, claim,
						psprintf("lane given back: the next batch is %ld s away (%s) while "
								 "another pass waits for a lane", (ms + 999) / 1000,
								 wait->signal == PACE_RATE ? "its rate" : "a WAL budget"));
	return true;
}

/*
 * Woken while waiting out the rate: read the pass again, and the
 * declaration's rate and batch size.  Returns what the lane does next.
 */
static BatchOutcome
reread_pass(Pass *pass)
{
	CatalogScope scope;
	BatchOutcome outcome;

	worker_begin_xact("pg_backfill lane: woken, reading the pass again");
	catalog_enter(&scope);
	outcome = read_pass_state(pass, true);
	catalog_leave(&scope);
	worker_commit_xact();
	return outcome;
}

bool
pacing_pass_running(Pass *pass)
{
	return reread_pass(pass) != BATCH_STOP;
}

/*
 * Wait until the next batch may start by the rate, from the start of the
 * last one.  A wake (a pause, a cancel, a new declaration) makes the lane
 * read its pass and rate again at once: a new rate counts from then on,
 * never after the old sleep.
 */
static BatchOutcome
wait_for_rate(Pass *pass, Claim *claim, TimestampTz started, TimestampTz not_before)
{
	for (;;)
	{
		TimestampTz next = started + (TimestampTz) (1000000.0 / pass->rate);
		PaceWait	wait = {.until = Max(next, not_before), .signal = PACE_RATE};
		TimestampTz now = GetCurrentTimestamp();
		BatchOutcome outcome;

		if (wait.until <= now)
			return BATCH_DONE;
		/* a long wait: given back to a waiting pass (work_partition yields) */
		if (claim != NULL && give_back_idle_lane(pass, claim, &wait))
			return BATCH_DONE;
		/* looked up every second: a pass may come to wait for a lane */
		if (!backoff_sleep_until(Min(wait.until, TimestampTzPlusMilliseconds(now, 1000))))
			continue;
		if (backfill_lane_stop_requested() || backfill_lane_yield_requested())
			return BATCH_DONE;	/* work_partition stops or yields */
		outcome = reread_pass(pass);
		if (outcome != BATCH_DONE)
			return outcome;
	}
}

/* What the lane says while it waits for a WAL budget (pacing_before_batch). */
static void
say_wal_wait(Pass *pass, Claim *claim, const PaceWait *wait)
{
	bool		was_said = claim->pace_reason[0] != '\0';

	snprintf(claim->pace_reason, sizeof(claim->pace_reason), "wal: %s/s of %s/s (%s)",
			 health_size_text(wait->wal_rate), health_size_text((double) wait->wal_budget),
			 wait->signal == PACE_WAL_PASS ? "its max_wal_rate" : "backfill.max_wal_rate");
	/* a long wait is shown at once; a short one by the next checkpoint */
	if (!was_said &&
		wait->until > TimestampTzPlusMilliseconds(GetCurrentTimestamp(), backfill_throttle_delay))
		pacing_say_throttle(pass, claim, claim->pace_reason);
}

/*
 * Before a batch: hold while a switch for all or the health says so (the
 * first batch of a claim reads the health first; a reload is taken in
 * first, so backfill.pause_all stops a lane at this boundary), then wait
 * until the pass's rate and the WAL budgets (the pass's and the
 * cluster's, the pacers of shmem.c) let one of its batches start,
 * whoever started the last.  A wake reads the pass and the rate again.
 * BATCH_DONE to go on (also when the lane is asked to stop or yield: the
 * caller looks), else BATCH_PAUSED / BATCH_STOP.
 */
BatchOutcome
pacing_before_batch(Pass *pass, Claim *claim)
{
	char	   *said = NULL;

	/* a claim's first batch: a throttle left by its last holder is cleared */
	if (!claim->health_fresh)
		pacing_say_throttle(pass, claim, NULL);
	claim->pace_reason[0] = '\0';
	for (;;)
	{
		PaceWait	wait;
		BatchOutcome outcome = BATCH_DONE;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (leave_outside_windows(pass, claim))
			return BATCH_STOP;
		if (!claim->health_fresh)
			outcome = read_health(pass, claim);
		if (outcome == BATCH_DONE)
			outcome = hold_while_unhealthy(pass, claim, &said);
		if (outcome != BATCH_DONE)
			return outcome;
		backfill_pace_claim(pass->run_id, pass->rate, pass->max_wal_rate, &wait);
		if (wait.until == 0)
			break;
		if (give_back_idle_lane(pass, claim, &wait))
			return BATCH_DONE;	/* work_partition yields */
		if (wait.signal == PACE_WAL_PASS || wait.signal == PACE_WAL_CLUSTER)
			say_wal_wait(pass, claim, &wait);
		/* a long wait is looked up every second: a pass may come to wait for a lane */
		if (!backoff_sleep_until(Min(wait.until, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
																			  1000))))
			continue;			/* its time (or a second): ask again */
		if (backfill_lane_stop_requested() || backfill_lane_yield_requested())
			return BATCH_DONE;
		outcome = reread_pass(pass);
		if (outcome != BATCH_DONE)
			return outcome;
	}
	/* held for a switch or the health: say it no longer holds */
	if (said != NULL)
		pacing_say_throttle(pass, claim, claim->pace_reason[0] ? claim->pace_reason : NULL);
	return BATCH_DONE;
}

/*
 * After a batch (committed or not): the WAL this process wrote since it
 * last charged some, charged to the pass's and the cluster's budgets as
 * of the batch's start (shmem.c).
 */
void
pacing_charge_wal(Pass *pass, Claim *claim, TimestampTz started)
{
	uint64		now = pgWalUsage.wal_bytes;

	backfill_pace_wal(pass->run_id, pass->rate, pass->max_wal_rate, started,
					  (int64) (now - claim->wal_seen));
	claim->wal_seen = now;
}

/*
 * After a failed attempt at isolating a row (poison.c): it waits out the
 * rate as a committed batch does, so halving never runs faster than the
 * declared rate.  BATCH_PAUSED / BATCH_STOP when the pass was paused or
 * ended meanwhile.
 */
BatchOutcome
pacing_after_attempt(Pass *pass, TimestampTz started)
{
	return wait_for_rate(pass, NULL, started, 0);
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
	char	   *said = NULL;
	char	   *held;
	BatchOutcome outcome;

	adapt_batch_size(pass, claim);
	not_before = foreground_not_before(claim, started);

	if (claim->health.blocking > 0)
	{
		said = psprintf("locks: %d session(s) waited on the last batch",
						claim->health.blocking);
		pacing_say_throttle(pass, claim, said);
		not_before = Max(not_before,
						 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), backfill_throttle_delay));
	}
	outcome = wait_for_rate(pass, claim, started, not_before);
	if (outcome != BATCH_DONE)
		return outcome;
	held = said;
	outcome = hold_while_unhealthy(pass, claim, &said);
	if (outcome != BATCH_DONE)
		return outcome;
	if (said != held && claim->health.blocking == 0)
		pacing_say_throttle(pass, claim, claim->foreground_reason[0] ? claim->foreground_reason : NULL);
	return BATCH_DONE;
}
