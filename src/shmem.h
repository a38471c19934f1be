/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  Shared memory of pg_backfill: one slot per served database, where
 *	  its scheduler's latch is found, the launcher's latch, the wakes at
 *	  commit (shmem.c); and, through the headers below, the cluster's lane
 *	  table (lanetable.c), the pacers and WAL accounts (pacers.c), and the
 *	  probes backfill_probe starts (askedprobes.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_SHMEM_H
#define BACKFILL_SHMEM_H

#include "postgres.h"

#include "datatype/timestamp.h"

#include "askedprobes.h"
#include "lanetable.h"
#include "pacers.h"

extern void backfill_shmem_init(void);

/*
 * A scheduler claims its slot (false: another live scheduler holds it, and
 * this one must exit); the slot is released at exit, by its owner only.
 */
extern bool backfill_shmem_attach_scheduler(int slot, pid_t *holder);

/* why a scheduler left, for the launcher */
typedef enum SchedulerExit
{
	SCHEDULER_EXIT_NONE,		/* stopped (a crash, a kill, a refusal): started again */
	SCHEDULER_EXIT_ABSENT,		/* found no pg_backfill in its database */
	SCHEDULER_EXIT_IDLE			/* left with nothing to do (scheduler_idle_exit) */
} SchedulerExit;

/*
 * The scheduler of a slot says why it leaves (before it exits).  Idle: its
 * slot released at once (a wake then reaches the launcher); NONE undoes
 * the mark (work came after all).
 */
extern void backfill_shmem_scheduler_exit(int slot, SchedulerExit why);

/*
 * The launcher: its latch, for the wakes of databases no scheduler serves
 * yet; the database to look at now (InvalidOid: none; *all: every one);
 * the slots, and why a slot's last scheduler left a database (cleared).
 */
extern void backfill_shmem_attach_launcher(void);
extern Oid	backfill_shmem_take_look_at(bool *all);
extern bool backfill_shmem_slot_free(int slot, Oid *dboid, pid_t *pid);
extern SchedulerExit backfill_shmem_take_exit(int slot, Oid dboid);

/*
 * The scheduler's last start of a child worker found a worker slot or not;
 * since when the scheduler of a database has found none (0: it found one,
 * it has not tried for 5 s, or no scheduler serves it).  For a backend that
 * waits for lanes.
 */
extern void backfill_shmem_note_worker_slot(bool found);
extern TimestampTz backfill_shmem_no_worker_slot_since(Oid dboid);

/* DROP DATABASE: keep the launcher off the database, stop its workers */
extern void backfill_shmem_database_going(Oid dboid);
extern bool backfill_shmem_database_is_going(Oid dboid);

/*
 * Wake this database's scheduler when the current transaction commits
 * (backfill_run, _resume, _retry, backfill_outbox_emit): a transaction
 * that rolls back wakes nobody.  With no scheduler yet, the launcher is
 * woken to start one.
 */
extern void backfill_wake_scheduler_at_commit(void);

/*
 * Wake the lanes of a pass (run_id 0: every lane of this database) when the
 * current transaction commits, so that a sleeping lane reads its pass
 * again at once; interrupt: also cancel the batch they have in flight and
 * tell them to stop (backfill_cancel).
 */
extern void backfill_wake_lanes_at_commit(int64 run_id, bool interrupt);

#endif							/* BACKFILL_SHMEM_H */
