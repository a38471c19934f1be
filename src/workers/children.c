/*-------------------------------------------------------------------------
 *
 * children.c
 *	  A database's scheduler's children: the lanes it starts (each
 *	  reserved in the lane table first), reaped when they stop, with a
 *	  doubling delay for a pass whose lanes die soon after starting; the
 *	  outbox relay; lanes handed out round robin and the fair share between
 *	  roles (a lane asked to yield, its batch cancelled past
 *	  backfill.preempt_after).
 *
 * backfill.max_workers holds for the cluster: the lanes are counted in the
 * shared lane table (lanetable.c), whoever started them, so a scheduler
 * that is started again does not forget its predecessor's.  Lanes are
 * handed out round robin, the next to the waiting pass whose role holds
 * the fewest; when all are taken and a role holds less than its share, a
 * lane of the role holding the most gives its place up after its batch,
 * or at once when that batch has run longer than backfill.preempt_after
 * (the batch is cancelled and rolled back).  No free worker slot is a
 * WARNING with a hint, at most once a minute; the scheduler never dies of
 * it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "config.h"
#include "backoff.h"
#include "children.h"
#include "needs.h"
#include "shmem.h"
#include "worker.h"

/* a lane this scheduler started */
typedef struct LaneHandle
{
	int64		run_id;
	TimestampTz started_at;
	BackgroundWorkerHandle *handle;
	int			index;			/* its entry in the lane table */
	uint64		token;
} LaneHandle;

/* a lane that stops sooner than this after its start counts as a quick exit */
#define QUICK_EXIT_MS	5000
#define LANE_RETRY_MIN_MS	1000
#define LANE_RETRY_MAX_MS	60000

static List *lanes = NIL;
static List *memos = NIL;
MemoryContext scheduler_cxt = NULL;
static TimestampTz last_slot_warning = 0;
static BackgroundWorkerHandle *relay = NULL;

RunMemo *
memo_for(int64 run_id)
{
	ListCell   *lc;
	RunMemo    *memo;
	MemoryContext old;

	foreach(lc, memos)
	{
		memo = lfirst(lc);
		if (memo->run_id == run_id)
			return memo;
	}
	old = MemoryContextSwitchTo(scheduler_cxt);
	memo = palloc0(sizeof(RunMemo));
	memo->run_id = run_id;
	memos = lappend(memos, memo);
	MemoryContextSwitchTo(old);
	return memo;
}

/* Mark every memo not seen yet at this tick (mark_eligible sees those running). */
void
memos_unseen(void)
{
	ListCell   *lc;

	foreach(lc, memos)
		((RunMemo *) lfirst(lc))->seen = false;
}

/* Forget lanes that have stopped; note those that stopped too soon. */
void
reap_lanes(void)
{
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();

	foreach(lc, lanes)
	{
		LaneHandle *lane = lfirst(lc);
		pid_t		pid;

		if (GetBackgroundWorkerPid(lane->handle, &pid) != BGWH_STOPPED)
			continue;
		if (TimestampDifferenceExceeds(lane->started_at, now, QUICK_EXIT_MS))
			memo_for(lane->run_id)->quick_exits = 0;
		else
		{
			RunMemo    *memo = memo_for(lane->run_id);

			memo->next_start = TimestampTzPlusMilliseconds(now,
														   backoff_doubling_ms(memo->quick_exits,
																			   LANE_RETRY_MIN_MS,
																			   LANE_RETRY_MAX_MS));
			memo->quick_exits++;
		}
		backfill_lane_forget(lane->index, lane->token);
		pfree(lane->handle);
		pfree(lane);
		lanes = foreach_delete_current(lanes, lc);
	}
}

static int
lanes_of_run(int64 run_id)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, lanes)
		if (((LaneHandle *) lfirst(lc))->run_id == run_id)
			n++;
	return n;
}

/*
 * Start a child worker (lane or relay) that tells this scheduler when it
 * stops.  The handle lives in the scheduler's context.  No free slot is a
 * WARNING with a hint, at most once a minute, and NULL: the scheduler tries
 * again later and never dies of it.
 */
static BackgroundWorkerHandle *
start_child(const char *function, const char *name, const char *type, LaneArgs *args)
{
	BackgroundWorkerHandle *handle;

	handle = worker_start(function, name, type, (Datum) 0, args, sizeof(LaneArgs),
						  scheduler_cxt);
	/* a backend waiting for lanes (finalize) reads whether there was a slot */
	backfill_shmem_note_worker_slot(handle != NULL);
	if (handle != NULL)
		return handle;

	/* at most one warning a minute: a full slot table is not news every tick */
	if (TimestampDifferenceExceeds(last_slot_warning, GetCurrentTimestamp(), 60000))
	{
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start a %s worker", type),
				 errdetail("Every background worker slot is in use."),
				 errhint("Raise max_worker_processes (a restart is needed) or lower "
						 "backfill.max_workers; pg_backfill keeps retrying.")));
		last_slot_warning = GetCurrentTimestamp();
	}
	return NULL;
}

/*
 * Start a lane for a pass.  Its entry in the lane table is reserved first
 * and holds the lane's pid once the postmaster has started it, so that
 * every scheduler counts it, even after this one is gone.
 */
static bool
start_lane(RunNeed *need)
{
	BackgroundWorkerHandle *handle;
	LaneArgs	args;
	LaneHandle *lane;
	pid_t		pid;

	memset(&args, 0, sizeof(args));
	args.dboid = MyDatabaseId;
	args.roleoid = need->owner;
	args.run_id = need->run_id;
	args.lane_index = backfill_lane_reserve(MyDatabaseId, need->owner, need->run_id,
											&args.lane_token);
	if (args.lane_index < 0)
		return false;
	handle = start_child("backfill_lane_main",
						 psprintf("pg_backfill lane for run " INT64_FORMAT, need->run_id),
						 "pg_backfill lane", &args);
	if (handle == NULL)
	{
		backfill_lane_forget(args.lane_index, args.lane_token);
		return false;
	}
	switch (WaitForBackgroundWorkerStartup(handle, &pid))
	{
		case BGWH_STARTED:
			backfill_lane_started(args.lane_index, args.lane_token, pid);
			break;
		case BGWH_POSTMASTER_DIED:
			proc_exit(1);
			break;
		default:
			/* it stopped already: reap_lanes counts it */
			break;
	}
	lane = MemoryContextAlloc(scheduler_cxt, sizeof(LaneHandle));
	lane->run_id = need->run_id;
	lane->started_at = GetCurrentTimestamp();
	lane->handle = handle;
	lane->index = args.lane_index;
	lane->token = args.lane_token;
	{
		MemoryContext old = MemoryContextSwitchTo(scheduler_cxt);

		lanes = lappend(lanes, lane);
		MemoryContextSwitchTo(old);
	}
	return true;
}

/* Start the outbox relay if messages wait and it is not running. */
void
start_relay_if_needed(void)
{
	LaneArgs	args;
	pid_t		pid;

	if (relay != NULL && GetBackgroundWorkerPid(relay, &pid) == BGWH_STOPPED)
	{
		pfree(relay);
		relay = NULL;
	}
	if (relay != NULL || !outbox_pending)
		return;
	memset(&args, 0, sizeof(args));
	args.dboid = MyDatabaseId;
	args.lane_index = -1;
	relay = start_child("backfill_relay_main", "pg_backfill outbox relay",
						"pg_backfill relay", &args);
}

/* Lanes in the census matching a database, role and pass (0 / InvalidOid: any). */
int
census_count(LaneCensus *census, Oid dboid, Oid roleoid, int64 run_id)
{
	int			n = 0;

	for (int i = 0; i < census->n; i++)
	{
		LaneInfo   *l = &census->lanes[i];

		if ((!OidIsValid(dboid) || l->dboid == dboid) &&
			(!OidIsValid(roleoid) || l->roleoid == roleoid) &&
			(run_id == 0 || l->run_id == run_id))
			n++;
	}
	return n;
}

static void
census_add(LaneCensus *census, RunNeed *need)
{
	LaneInfo   *l;

	if (census->n >= BACKFILL_MAX_LANES)
		return;
	l = &census->lanes[census->n++];
	memset(l, 0, sizeof(LaneInfo));
	l->dboid = MyDatabaseId;
	l->roleoid = need->owner;
	l->run_id = need->run_id;
	l->index = -1;
}

/* the most lanes one role may hold: backfill.max_workers_per_role, or all */
static int
role_cap(void)
{
	return backfill_max_workers_per_role > 0 ?
		Min(backfill_max_workers_per_role, backfill_max_workers) : backfill_max_workers;
}

/*
 * Does a pass wait for a lane: eligible, with fewer than it wants, and not
 * idle (its next batch far off: it would only sleep in it)?
 */
static bool
need_waits(RunNeed *need)
{
	return need->eligible && !need->idle && need->have < need->lanes_wanted;
}

/*
 * The next pass to get a lane, round robin: the one whose role holds the
 * fewest lanes in the cluster, then the one with the fewest lanes, then the
 * oldest; a pass whose next batch is far off (idle) after all others.
 * NULL when no pass may have one.
 */
static RunNeed *
next_pass_for_a_lane(List *needs, LaneCensus *census)
{
	ListCell   *lc;
	RunNeed    *best = NULL;
	int			best_role_lanes = 0;

	foreach(lc, needs)
	{
		RunNeed    *need = lfirst(lc);
		int			role_lanes;

		if (!need->eligible || need->have >= need->lanes_wanted)
			continue;
		role_lanes = census_count(census, InvalidOid, need->owner, 0);
		if (role_lanes >= role_cap())
			continue;
		/* a pass whose next batch is far off comes after every other */
		if (best != NULL && need->idle != best->idle)
		{
			if (need->idle)
				continue;
			best = NULL;
		}
		if (best == NULL || role_lanes < best_role_lanes ||
			(role_lanes == best_role_lanes && need->have < best->have))
		{
			best = need;
			best_role_lanes = role_lanes;
		}
	}
	return best;
}

/* Add a role to a set of at most BACKFILL_MAX_LANES + 64 roles. */
static void
add_role(Oid *roles, int *nroles, Oid role)
{
	for (int k = 0; k < *nroles; k++)
		if (roles[k] == role)
			return;
	if (*nroles < BACKFILL_MAX_LANES + 64)
		roles[(*nroles)++] = role;
}

/*
 * The roles that hold lanes or have a pass here waiting for one, in roles;
 * true when such a pass's role holds less than its share (*share).
 */
static bool
fair_share_starved(List *needs, LaneCensus *census, Oid *roles, int *nroles, int *share)
{
	bool		starved = false;
	ListCell   *lc;

	for (int i = 0; i < census->n; i++)
		add_role(roles, nroles, census->lanes[i].roleoid);
	foreach(lc, needs)
	{
		RunNeed    *need = lfirst(lc);

		if (!need_waits(need))
			continue;
		add_role(roles, nroles, need->owner);
	}
	*share = Max(1, backfill_max_workers / Max(*nroles, 1));
	foreach(lc, needs)
	{
		RunNeed    *need = lfirst(lc);

		if (need_waits(need) &&
			census_count(census, InvalidOid, need->owner, 0) < Min(*share, role_cap()))
			starved = true;
	}
	return starved;
}

/*
 * Of the victim role's lanes, the one to give its place up: the one whose
 * batch has run longest, else one of the pass with the most lanes.
 */
static int
pick_yielding_lane(LaneCensus *census, Oid victim)
{
	int			pick = -1;
	int			pick_run_lanes = 0;

	for (int i = 0; i < census->n; i++)
	{
		LaneInfo   *l = &census->lanes[i];
		int			run_lanes;

		if (l->roleoid != victim || l->index < 0)
			continue;
		run_lanes = census_count(census, l->dboid, InvalidOid, l->run_id);
		if (pick < 0 ||
			(l->in_batch && (!census->lanes[pick].in_batch ||
							 l->batch_since < census->lanes[pick].batch_since)) ||
			(!l->in_batch && !census->lanes[pick].in_batch && run_lanes > pick_run_lanes))
		{
			pick = i;
			pick_run_lanes = run_lanes;
		}
	}
	return pick;
}

/*
 * The lane asked to give its place up is still in a batch that has run
 * longer than backfill.preempt_after: cancel that batch.  It rolls back
 * with its checkpoint, its partition goes back to pending (not counted as
 * a failed attempt: work.c), and the lane leaves.
 */
static void
preempt_if_overdue(LaneInfo *lane)
{
	if (backfill_preempt_after <= 0 || !lane->in_batch ||
		!TimestampDifferenceExceeds(lane->batch_since, GetCurrentTimestamp(),
									backfill_preempt_after))
		return;
	if (backfill_lane_preempt(lane->index, lane->batch_since))
		ereport(LOG,
				(errmsg("pg_backfill: the batch of a lane of run " INT64_FORMAT " is cancelled for a "
						"waiting pass of another role", lane->run_id),
				 errdetail("It has run longer than backfill.preempt_after (%d ms) while its role "
						   "holds more than its share of the lanes.", backfill_preempt_after)));
}

/*
 * Fair share: when every lane is taken and a pass here waits whose role
 * holds less than its share (backfill.max_workers divided among the roles
 * that hold or want lanes), ask one lane of the role that holds the most,
 * above its share, to give its lane up after its batch; a batch of it that
 * runs longer than backfill.preempt_after is cancelled.  One at a time: no
 * new request while a lane is still leaving.
 */
void
ask_for_fair_share(List *needs, LaneCensus *census)
{
	Oid			roles[BACKFILL_MAX_LANES + 64];
	int			nroles = 0;
	int			share;
	Oid			victim = InvalidOid;
	int			victim_lanes = 0;
	int			pick;

	if (census->n < backfill_max_workers ||
		!fair_share_starved(needs, census, roles, &nroles, &share))
		return;
	for (int i = 0; i < census->n; i++)
	{
		if (census->lanes[i].yield)
		{
			preempt_if_overdue(&census->lanes[i]);
			return;
		}
	}

	for (int k = 0; k < nroles; k++)
	{
		int			held = census_count(census, InvalidOid, roles[k], 0);

		if (held > share && held > victim_lanes)
		{
			victim = roles[k];
			victim_lanes = held;
		}
	}
	if (!OidIsValid(victim))
		return;

	pick = pick_yielding_lane(census, victim);
	if (pick < 0 || !backfill_lane_request_yield(census->lanes[pick].index))
		return;
	ereport(LOG,
			(errmsg("pg_backfill: a lane of run " INT64_FORMAT " gives its place to a waiting pass",
					census->lanes[pick].run_id),
			 errdetail("Its role holds %d of the %d lanes (backfill.max_workers); "
					   "%d roles share them.", victim_lanes, backfill_max_workers, nroles)));
	preempt_if_overdue(&census->lanes[pick]);
}

/* Start lanes, round-robin over the eligible passes, while slots are free. */
void
start_lanes(List *needs, LaneCensus *census)
{
	RunNeed    *need;

	while (census->n < backfill_max_workers &&
		   (need = next_pass_for_a_lane(needs, census)) != NULL)
	{
		if (!start_lane(need))
			break;
		need->have++;
		census_add(census, need);
		/* waiting for the lane's start may have eaten a wake meant for the next tick */
		SetLatch(MyLatch);
	}
}

/* does an eligible pass still wait for a lane (need_waits)? */
bool
passes_waiting(List *needs)
{
	ListCell   *lc;

	foreach(lc, needs)
	{
		RunNeed    *need = lfirst(lc);

		if (need_waits(need))
			return true;
	}
	return false;
}

/* Forget the memos of passes that have ended and have no lane left. */
void
forget_ended_passes(void)
{
	ListCell   *lc;

	foreach(lc, memos)
	{
		RunMemo    *memo = lfirst(lc);

		if (!memo->seen && lanes_of_run(memo->run_id) == 0)
		{
			pfree(memo);
			memos = foreach_delete_current(memos, lc);
		}
	}
}

/* Has the scheduler a child still running (a lane, the relay)? */
bool
children_running(void)
{
	return lanes != NIL || relay != NULL;
}

/* Does the relay run (start_relay_if_needed started it, and it has not stopped)? */
bool
relay_running(void)
{
	return relay != NULL;
}
