/*-------------------------------------------------------------------------
 *
 * scheduler.c
 *	  A database's scheduler: the background worker that starts and
 *	  supervises the lanes (and the outbox relay) of one served database.
 *
 * The cluster's launcher (launcher.c) starts a scheduler in each database
 * that may be served and starts it again if it stops.  A scheduler first
 * looks for pg_backfill in its database: with none there it says so (in
 * its shared-memory slot) and exits at once, and so it does when the
 * extension is dropped under it, or when its database becomes a template
 * or stops taking connections.  A scheduler sleeps on its latch.  It
 * wakes when a backfill_run commits (run.c sets the latch through shared
 * memory), when one of its lanes starts or stops
 * (the postmaster signals the notify pid), and every backfill.naptime.
 * Each time it reads the passes still running and starts lanes for those
 * that need them: a queued pass, a pass with a partition whose lease
 * holder is dead (a crashed lane: the new lane resumes from the
 * checkpoint), or a pass whose partitions are all done but which nobody
 * has finished.
 *
 * A scheduler with nothing to do (no pass running, paused or queued, no
 * watched backfill, no outbox message pending or dead, no child of its
 * own) for backfill.scheduler_idle_exit exits, so that a database whose
 * backfills are done holds no worker slot: it gives its slot up first, so
 * that a wake from then on reaches the launcher, which starts it again at
 * once, looks one last time, and says so in the slot.
 *
 * The scheduler runs no declarer's SQL in its loop: a drift probe (a watch
 * that is due; the backfill a queued pass requires, probed before the pass
 * starts) runs in a probe worker it starts (probe.c), as the declarer, and
 * only the backfill probed waits for it.  So is the read of the migrations
 * table that `requires` names: a queued pass waits for a probe worker to
 * record its migration applied (backfill.requirement).
 *
 * Lanes never restart by themselves.  A lane that dies quickly is started
 * again only after a doubling delay, so a pass that cannot start never
 * floods the log.  See src/README.md for the state machine.
 *
 * The loop is here; which passes need lanes is read by needs.c, and the
 * children (lanes, the relay, the fair share between roles) are started
 * and reaped by children.c.
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
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "config.h"
#include "backoff.h"
#include "children.h"
#include "drift.h"
#include "needs.h"
#include "probe.h"
#include "scheduler.h"
#include "shmem.h"
#include "worker.h"
#include "xact.h"

/*
 * Has the backfill this queued pass requires been probed since the pass
 * was first seen?  The probe (a worker of its own, probe.c) reopens it if
 * it drifted, and the pass waits for that; until the probe ends the pass
 * stays queued, and only it: a slow or blocked probe delays no other pass.
 */
static bool
required_probed(RunNeed *need, RunMemo *memo)
{
	DriftTarget target;

	if (memo->drift_checked)
		return true;
	if (!drift_required_target(need->run_id, &target, CurrentMemoryContext) ||
		probe_done(DRIFT_REQUIRED, &target, need->run_id, scheduler_cxt))
		memo->drift_checked = true;
	return memo->drift_checked;
}

/*
 * Which passes may get a lane now: those with fewer than they want whose
 * role can log in, whose requirement has not drifted, and whose restart
 * delay has passed.  A pass that cannot log in and has no lane left fails.
 * Lowers *sleep_ms to the end of the nearest restart delay.
 */
static void
mark_eligible(List *needs, LaneCensus *census, TimestampTz now, long *sleep_ms)
{
	ListCell   *lc;

	memos_unseen();

	foreach(lc, needs)
	{
		RunNeed    *need = lfirst(lc);
		RunMemo    *memo = memo_for(need->run_id);

		memo->seen = true;
		need->have = Max(census_count(census, MyDatabaseId, InvalidOid, need->run_id),
						 need->lanes_live);
		if (need->have >= need->lanes_wanted)
			continue;
		/* outside its windows: no lane until the next starts, the lease not held */
		if (need->window_next != 0)
		{
			*sleep_ms = Min(*sleep_ms, backoff_ms_until(now, need->window_next));
			continue;
		}

		/*
		 * A lane that cannot log in would die at start-up, again and again:
		 * start none.  Once no lane of the pass is left, the pass fails.
		 */
		if (need->login_problem != NULL)
		{
			if (need->have == 0)
				fail_pass_cannot_login(need);
			continue;
		}
		/* its migration is read by a probe worker; this pass waits for the record */
		if (need->check_migration)
		{
			DriftTarget target = {need->name, need->owner};

			(void) probe_done(DRIFT_MIGRATION, &target, need->run_id, scheduler_cxt);
			continue;
		}
		/* a required backfill that drifted is reopened first; this pass waits */
		if (need->check_drift && !required_probed(need, memo))
			continue;
		if (memo->next_start > now)
		{
			*sleep_ms = Min(*sleep_ms, backoff_ms_until(now, memo->next_start));
			continue;
		}
		/* its next batch is far off (its rate): a lane would only sleep, or be given back */
		need->idle = pass_batch_far_off(need, now, sleep_ms);
		need->eligible = true;
	}
}

/*
 * A lane whose batch outlives its bound (its batch_timeout, a cancel, a
 * preemption) by more than BACKFILL_TERMINATE_GRACE_MS is terminated
 * (shmem.c): a declarer's PL/pgSQL that catches query_canceled ignores a
 * statement's cancel, not the end of its process.  Its batch rolls back
 * with its checkpoint; its lease, held by a dead process, is reclaimed by a
 * lane later (or stays cancelled).  Lowers *sleep_ms to the next such end.
 */
static void
terminate_overdue_lanes(long *sleep_ms)
{
	int64		runs[BACKFILL_MAX_LANES];
	int			n = backfill_lane_terminate_overdue(MyDatabaseId, BACKFILL_TERMINATE_GRACE_MS,
													runs, sleep_ms);

	for (int i = 0; i < n; i++)
		ereport(LOG,
				(errmsg("pg_backfill: a lane of run " INT64_FORMAT " is terminated: its batch "
						"outlived its batch_timeout, a cancel or a preemption by %d ms",
						runs[i], BACKFILL_TERMINATE_GRACE_MS),
				 errdetail("Its batch's transaction rolls back with its checkpoint; the "
						   "partition's lease, held by a process that is gone, is taken "
						   "again by a lane unless the pass was cancelled."),
				 errhint("The batch's SQL caught the cancel (EXCEPTION WHEN query_canceled): "
						 "let it end instead.")));
}

/*
 * One look at the database: start the lanes that running passes want,
 * sharing backfill.max_workers fairly between roles, and the relay.
 * Returns how long to sleep before looking again.
 */
static long
scheduler_tick(MemoryContext scratch)
{
	List	   *needs = read_running_passes(scratch);
	TimestampTz now = GetCurrentTimestamp();
	long		sleep_ms = backfill_naptime * 1000L;
	LaneCensus *census = palloc0(sizeof(LaneCensus));

	if (!catalogs_current)
		return sleep_ms;

	/* every live lane of the cluster, whoever started it */
	backfill_lane_sweep();
	census->n = backfill_lane_snapshot(census->lanes);
	terminate_overdue_lanes(&sleep_ms);

	mark_eligible(needs, census, now, &sleep_ms);
	start_lanes(needs, census);
	if (passes_waiting(needs))
	{
		/* every lane taken: one that only sleeps out its rate gives its place up (pacing.c) */
		if (census->n >= backfill_max_workers)
			backfill_lane_wanted();
		ask_for_fair_share(needs, census);
		sleep_ms = Min(sleep_ms, 1000L);
	}

	start_relay_if_needed();
	if (outbox_pending && !relay_running())
		sleep_ms = Min(sleep_ms, 1000L);

	/* completed backfills with a watch: a probe worker for each due, wake for the next */
	{
		long		watch_ms;
		ListCell   *lc;

		foreach(lc, drift_watch_due(scratch, &watch_ms))
			(void) probe_done(DRIFT_WATCH, lfirst(lc), 0, scheduler_cxt);
		if (watch_ms >= 0)
			sleep_ms = Min(sleep_ms, Max(watch_ms, 50L));
	}

	forget_ended_passes();
	return sleep_ms;
}

/*
 * No pg_backfill in this database (never installed, or just dropped): say
 * so for the launcher, which looks again later, and exit.
 */
static void
exit_without_extension(const char *dbname, int slot, bool dropped)
{
	backfill_shmem_scheduler_exit(slot, SCHEDULER_EXIT_ABSENT);
	ereport(dropped ? LOG : DEBUG1,
			(errmsg("pg_backfill scheduler for database \"%s\" stops: %s", dbname,
					dropped ? "the extension was dropped" : "the extension is not installed")));
	proc_exit(0);
}

/*
 * Nothing to do for backfill.scheduler_idle_exit: leave.  The slot is given
 * up first, so that a wake from here on reaches the launcher; then one last
 * look finds what a wake that reached this scheduler just before brought,
 * and if there is work the slot is not marked idle: the launcher starts a
 * scheduler again at once, as after any stop of one that ran a while.
 */
static void
exit_idle(const char *dbname, int slot)
{
	bool		work;

	backfill_shmem_scheduler_exit(slot, SCHEDULER_EXIT_IDLE);
	worker_begin_xact("pg_backfill scheduler: a last look before it leaves");
	work = OidIsValid(get_extension_oid(BACKFILL_EXTENSION_NAME, true)) && database_has_work();
	worker_commit_xact();
	if (work)
		backfill_shmem_scheduler_exit(slot, SCHEDULER_EXIT_NONE);
	ereport(LOG,
			(errmsg("pg_backfill scheduler for database \"%s\" stops: %s", dbname,
					work ? "work came as it left; the launcher starts it again" :
					psprintf("nothing to do for %d s (backfill.scheduler_idle_exit)",
							 backfill_scheduler_idle_exit)),
			 errdetail("A backfill_run, backfill_resume, backfill_retry or "
					   "backfill_outbox_emit in the database starts it again at once.")));
	proc_exit(0);
}

/*
 * Idle bookkeeping after a look (busy: it found work, or failed): exits
 * when the scheduler has had nothing to do for backfill.scheduler_idle_exit,
 * else returns sleep_ms, lowered to that moment.
 */
static long
note_idle(bool busy, TimestampTz *idle_since, const char *dbname, int slot, long sleep_ms)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz leave_at;

	if (busy || children_running() || probes_reap() ||
		backfill_scheduler_idle_exit <= 0)
	{
		*idle_since = 0;
		return sleep_ms;
	}
	if (*idle_since == 0)
		*idle_since = now;
	leave_at = TimestampTzPlusMilliseconds(*idle_since, backfill_scheduler_idle_exit * 1000L);
	if (now >= leave_at)
		exit_idle(dbname, slot);
	return Min(sleep_ms, Max(backoff_ms_until(now, leave_at), 10L));
}

/* is pg_backfill installed here?  (its own transaction) */
static bool
extension_installed(void)
{
	bool		installed;

	worker_begin_xact("pg_backfill scheduler: looking for the extension");
	installed = OidIsValid(get_extension_oid(BACKFILL_EXTENSION_NAME, true));
	worker_commit_xact();
	return installed;
}

/* the database's name, for the log (its own transaction) */
static void
read_database_name(char *dbname)
{
	char	   *name;

	worker_begin_xact("pg_backfill scheduler: starting");
	name = get_database_name(MyDatabaseId);
	strlcpy(dbname, name ? name : "?", NAMEDATALEN);
	worker_commit_xact();
}

/*
 * Connect to the database as the bootstrap superuser, with the scheduler's
 * own settings, and take slot; a slot another live scheduler holds (a
 * restarted launcher's predecessor's) makes this one exit.
 */
static void
scheduler_connect(Oid dboid, int slot, char *dbname)
{
	pid_t		holder = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	worker_own_identity(PGC_S_OVERRIDE);
	pgstat_report_appname("pg_backfill scheduler");
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("application_name", "pg_backfill scheduler", PGC_USERSET, PGC_S_OVERRIDE);
	worker_own_settings();
	/*
	 * In a deadlock with a session's DDL (DROP EXTENSION while a look reads
	 * the catalogs) the scheduler gives way: it notices first, its look
	 * fails and is tried again after the naptime.
	 */
	SetConfigOption("deadlock_timeout", "100ms", PGC_SUSET, PGC_S_OVERRIDE);
	read_database_name(dbname);

	if (!backfill_shmem_attach_scheduler(slot, &holder))
	{
		/* a restarted launcher: the scheduler it replaces still runs */
		ereport(LOG,
				(errmsg("pg_backfill scheduler for database \"%s\" is already running "
						"as PID %d", dbname, (int) holder)));
		proc_exit(0);
	}
}

void
backfill_scheduler_main(Datum main_arg)
{
	int			slot = DatumGetInt32(main_arg);
	Oid			dboid;
	char		dbname[NAMEDATALEN];
	MemoryContext scratch;
	TimestampTz idle_since = 0;

	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));

	scheduler_connect(dboid, slot, dbname);
	if (!extension_installed())
		exit_without_extension(dbname, slot, false);
	ereport(LOG, (errmsg("pg_backfill scheduler started for database \"%s\"", dbname)));

	scheduler_cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill scheduler",
										  ALLOCSET_DEFAULT_SIZES);
	scratch = AllocSetContextCreate(scheduler_cxt, "pg_backfill scheduler tick",
									ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		volatile long sleep_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		MemoryContextReset(scratch);
		MemoryContextSwitchTo(scratch);
		reap_lanes();
		(void) probes_reap();

		/*
		 * A failed look (the extension being dropped or upgraded under us,
		 * say) is logged and tried again after the naptime; the scheduler
		 * itself stays up.
		 */
		PG_TRY();
		{
			sleep_ms = scheduler_tick(scratch);
		}
		PG_CATCH();
		{
			/* logged as it was raised; its copy goes with the next tick's scratch */
			EmitErrorReport();
			(void) worker_abort_xact(scratch);
			sleep_ms = backfill_naptime * 1000L;
			database_busy = true;	/* a failed look found out nothing */
		}
		PG_END_TRY();
		MemoryContextSwitchTo(scheduler_cxt);
		if (!extension_present)
			exit_without_extension(dbname, slot, true);
		if (database_refusal != NULL)
		{
			ereport(LOG,
					(errmsg("pg_backfill scheduler for database \"%s\" stops: %s",
							dbname, database_refusal)));
			proc_exit(0);
		}
		sleep_ms = note_idle(database_busy, &idle_since, dbname, slot, sleep_ms);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
