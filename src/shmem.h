/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  Shared memory of pg_backfill: one slot per database scheduler.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_SHMEM_H
#define BACKFILL_SHMEM_H

#include "postgres.h"

extern void backfill_shmem_init(void);

/* a scheduler announces itself in (and leaves) its slot */
extern void backfill_shmem_attach_scheduler(int slot);
extern void backfill_shmem_set_lanes(int slot, int nlanes);
extern int	backfill_shmem_total_lanes(void);

/* wake the launcher of a database (at commit of backfill_run) */
extern void backfill_wake_scheduler(Oid dboid);
extern void backfill_wake_scheduler_at_commit(void);

#endif							/* BACKFILL_SHMEM_H */
