/*-------------------------------------------------------------------------
 *
 * pacers.c
 *	  The pacers in shared memory: the rate of a pass, whoever works it,
 *	  and the WAL budgets (the pass's and the cluster's).
 *
 * The rate is the pass's: every process that works a pass (its lanes, a
 * finalizing session) asks its pacer before each batch.  A pacer is the
 * start of the pass's last batch and the rate it started at; the next
 * batch may start once 1/rate has passed since (one start per 1/rate,
 * never a burst).  A pacer has no owner, so a lane that dies holds nothing
 * back: a pacer whose 1/rate has passed says nothing any more and is free
 * to be taken for another pass.  With every pacer taken (more passes than
 * BACKFILL_MAX_PACERS that each started a batch less than 1/rate ago), a
 * lane paces alone, as its own last batch says.
 *
 * WAL budgets.  A pacer also keeps the pass's WAL account, and one more
 * account keeps every lane's (backfill.max_wal_rate): after each batch its
 * lane charges the WAL the batch wrote, paid at the budget from the
 * batch's start (or from when the WAL before it is paid, whichever is
 * later), and no batch of the pass (of the cluster) starts before it is
 * paid.  So over any window the WAL written stays within the budget but
 * for the batches in flight, and a pace the batches themselves set (their
 * own duration) is not charged twice.  A pacer that owes WAL is not free.
 *
 * The pacers are under the lane table's lock (lanetable.c), and hold the
 * pass's last answer of throttle_when too (condition.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "config.h"
#include "lanetable.h"
#include "pacers.h"

/*
 * A WAL budget's account: the time until which the WAL written so far is
 * paid at the budget, and the bytes of the last two 5 s windows (for the
 * rate shown).
 */
typedef struct BackfillWalMeter
{
	TimestampTz paid_until;		/* 0: nothing owed */
	TimestampTz window_start;
	int64		window_bytes;
	int64		previous_bytes;	/* of the window before */
} BackfillWalMeter;

#define WAL_WINDOW_US	(5 * USECS_PER_SEC)

typedef struct BackfillPacer
{
	Oid			dboid;
	int64		run_id;			/* 0: never used */
	TimestampTz last_start;		/* the start of the pass's last batch */
	double		rate;			/* the rate it started at */
	BackfillWalMeter wal;		/* the pass's WAL, against its max_wal_rate */
	TimestampTz condition_at;	/* when a lane last began evaluating throttle_when */
	char		condition[BACKFILL_CONDITION_LEN];	/* its last answer: why it holds, or "" */
} BackfillPacer;

/* pacers: a pass needs one while it has a live lane, or just had one */
#define BACKFILL_MAX_PACERS	(2 * BACKFILL_MAX_LANES)

typedef struct BackfillPacers
{
	LWLock	   *lane_lock;		/* the lane table's */
	BackfillPacer pacers[BACKFILL_MAX_PACERS];
	BackfillWalMeter cluster_wal;	/* every lane's WAL, against backfill.max_wal_rate */
} BackfillPacers;

static BackfillPacers *shared = NULL;

/* the pacers' size, for the shared memory request */
const Size backfill_pacers_size = sizeof(BackfillPacers);

/* the pacers, zeroed when created (shmem.c, under AddinShmemInitLock) */
void
backfill_pacers_attach(void *table, bool created, LWLock *lane_lock)
{
	shared = table;
	if (created)
		shared->lane_lock = lane_lock;
}

/* When a batch of the pacer's pass may start next (by its last batch's rate). */
static TimestampTz
pacer_next(BackfillPacer *p)
{
	return p->last_start + (TimestampTz) (1000000.0 / p->rate);
}

/*
 * The pacer of pass (dboid, run_id), or one that is free (never used, or
 * its last batch's 1/rate has passed and it owes no WAL), emptied, or NULL
 * when every pacer is taken.
 */
static BackfillPacer *
pacer_find(Oid dboid, int64 run_id, TimestampTz now)
{
	BackfillPacer *free_one = NULL;

	for (int i = 0; i < BACKFILL_MAX_PACERS; i++)
	{
		BackfillPacer *p = &shared->pacers[i];

		if (p->run_id == run_id && p->dboid == dboid)
			return p;
		if (free_one == NULL &&
			(p->run_id == 0 || (pacer_next(p) <= now && p->wal.paid_until <= now &&
								p->condition_at + USECS_PER_SEC <= now)))
			free_one = p;
	}
	if (free_one != NULL)
		memset(free_one, 0, sizeof(BackfillPacer));
	return free_one;
}

/*
 * When may the next batch of this database's pass start by its rate (0:
 * now, or no batch of it started lately)?  For a scheduler: a lane started
 * for it before then would only sleep.
 */
TimestampTz
backfill_pace_next_start(Oid dboid, int64 run_id)
{
	TimestampTz next = 0;

	LWLockAcquire(shared->lane_lock, LW_SHARED);
	for (int i = 0; i < BACKFILL_MAX_PACERS; i++)
	{
		BackfillPacer *p = &shared->pacers[i];

		if (p->run_id == run_id && p->dboid == dboid && p->rate > 0)
			next = Max(next, pacer_next(p));
	}
	LWLockRelease(shared->lane_lock);
	return next;
}

/*
 * bytes per second over the meter's last 5 to 10 s (its current window
 * alone, at least 1 s of it, when the one before wrote nothing); 0 when
 * nothing was written lately
 */
static double
meter_rate(const BackfillWalMeter *m, TimestampTz now)
{
	TimestampTz span = now - m->window_start;

	if (m->window_start == 0 || span >= 2 * WAL_WINDOW_US)
		return 0;
	if (m->previous_bytes > 0)
		span += WAL_WINDOW_US;
	return (m->previous_bytes + m->window_bytes) * 1000000.0 / Max(span, USECS_PER_SEC);
}

/*
 * Charge a batch's WAL: paid at the budget from the batch's start, or from
 * when the WAL before it is paid (budget 0: no budget, nothing owed).
 */
static void
meter_charge(BackfillWalMeter *m, int64 budget, TimestampTz started, int64 bytes,
			 TimestampTz now)
{
	if (now - m->window_start >= WAL_WINDOW_US)
	{
		m->previous_bytes = now - m->window_start < 2 * WAL_WINDOW_US ? m->window_bytes : 0;
		m->window_start = now;
		m->window_bytes = 0;
	}
	m->window_bytes += bytes;
	if (budget <= 0)
		m->paid_until = 0;
	else
		m->paid_until = Max(m->paid_until, started) +
			(TimestampTz) (bytes * 1000000.0 / budget);
}

/* the later of two waits: the WAL's wins a tie, it is what the lane shows */
static void
pace_wait_on(PaceWait *wait, TimestampTz until, PaceSignal signal,
			 const BackfillWalMeter *m, int64 budget, TimestampTz now)
{
	if (until <= now || until < wait->until)
		return;
	wait->until = until;
	wait->signal = signal;
	wait->wal_rate = m ? meter_rate(m, now) : 0;
	wait->wal_budget = budget;
}

/*
 * May a batch of this database's pass run_id start now, at this rate (the
 * declaration's, as the caller read it last) and within the pass's WAL
 * budget (wal_budget bytes/s, 0: none) and the cluster's
 * (backfill.max_wal_rate)?  wait->until 0: yes, and its start is recorded;
 * else the time from which it may (ask again then: another process of the
 * pass may have started one meanwhile), and what it waits for.  A rate
 * lowered since the last batch counts from it at the new rate, as does one
 * raised.
 */
void
backfill_pace_claim(int64 run_id, double rate, int64 wal_budget, PaceWait *wait)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		cluster_budget = (int64) backfill_max_wal_rate * 1024;
	BackfillPacer *p;

	memset(wait, 0, sizeof(PaceWait));
	if (shared == NULL || rate <= 0)
		return;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	p = pacer_find(MyDatabaseId, run_id, now);
	if (p != NULL && p->run_id != 0)
	{
		p->rate = rate;
		pace_wait_on(wait, pacer_next(p), PACE_RATE, NULL, 0, now);
		if (wal_budget > 0)
			pace_wait_on(wait, p->wal.paid_until, PACE_WAL_PASS, &p->wal, wal_budget, now);
	}
	if (cluster_budget > 0)
		pace_wait_on(wait, shared->cluster_wal.paid_until, PACE_WAL_CLUSTER,
					 &shared->cluster_wal, cluster_budget, now);
	if (p != NULL && wait->until == 0)
	{
		p->dboid = MyDatabaseId;
		p->run_id = run_id;
		p->last_start = now;
		p->rate = rate;
	}
	LWLockRelease(shared->lane_lock);
}

/*
 * A batch of pass run_id that started at started wrote bytes of WAL:
 * charged to the pass's budget (wal_budget bytes/s, 0: none) and to the
 * cluster's (backfill.max_wal_rate), which the next claims wait out.
 */
void
backfill_pace_wal(int64 run_id, double rate, int64 wal_budget, TimestampTz started, int64 bytes)
{
	TimestampTz now = GetCurrentTimestamp();
	BackfillPacer *p;

	if (shared == NULL || bytes <= 0)
		return;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	meter_charge(&shared->cluster_wal, (int64) backfill_max_wal_rate * 1024, started, bytes, now);
	p = pacer_find(MyDatabaseId, run_id, now);
	if (p != NULL && p->run_id == 0)
	{
		/* the pass's pacer was let go meanwhile: taken again, as of this batch */
		p->dboid = MyDatabaseId;
		p->run_id = run_id;
		p->last_start = started;
		p->rate = Max(rate, 0.001);
	}
	if (p != NULL)
		meter_charge(&p->wal, wal_budget, started, bytes, now);
	LWLockRelease(shared->lane_lock);
}

/*
 * The pass's throttle_when, evaluated at most once a second per pass:
 * true when it is due (this process evaluates it now and records the
 * answer); else answer receives the last one ("": go on).  With no pacer
 * free, it is due: the lane bounds itself (condition.c).
 */
bool
backfill_condition_claim(int64 run_id, char *answer, size_t len)
{
	TimestampTz now = GetCurrentTimestamp();
	BackfillPacer *p;
	bool		due = true;

	answer[0] = '\0';
	if (shared == NULL)
		return true;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	p = pacer_find(MyDatabaseId, run_id, now);
	if (p != NULL && p->run_id == 0)
	{
		/* taken for the condition alone: no batch of the pass to wait for yet */
		p->dboid = MyDatabaseId;
		p->run_id = run_id;
		p->rate = 1;
	}
	if (p != NULL)
	{
		due = p->condition_at + USECS_PER_SEC <= now;
		if (due)
			p->condition_at = now;
		else
			strlcpy(answer, p->condition, len);
	}
	LWLockRelease(shared->lane_lock);
	return due;
}

/* the answer of the evaluation backfill_condition_claim gave (NULL: go on) */
void
backfill_condition_record(int64 run_id, const char *reason)
{
	TimestampTz now = GetCurrentTimestamp();
	BackfillPacer *p;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->lane_lock, LW_EXCLUSIVE);
	p = pacer_find(MyDatabaseId, run_id, now);
	if (p != NULL && p->run_id == run_id)
		strlcpy(p->condition, reason ? reason : "", sizeof(p->condition));
	LWLockRelease(shared->lane_lock);
}
