/*-------------------------------------------------------------------------
 *
 * askedprobes.h
 *	  The probes backfill_probe starts: one per backfill, a cap per
 *	  calling role (askedprobes.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_ASKEDPROBES_H
#define BACKFILL_ASKEDPROBES_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/lwlock.h"

/* the table in shared memory (shmem.c asks for it), under the lane table's lock */
extern const Size backfill_asked_probes_size;
extern void backfill_asked_probes_attach(void *table, bool created, LWLock *lane_lock);

/* the probes backfill_probe starts: one per backfill, a cap per calling role */
typedef enum ProbeReservation
{
	PROBE_RESERVED,				/* start it */
	PROBE_RUNNING,				/* one of this backfill runs: wait for it */
	PROBE_ROLE_CAP,				/* the role has backfill.max_probes_per_role running */
	PROBE_TABLE_FULL
} ProbeReservation;

extern ProbeReservation backfill_asked_probe_reserve(Oid dboid, Oid caller, int64 name_hash,
													 int role_cap, int *index, uint64 *token,
													 TimestampTz *since, int *running);
extern void backfill_asked_probe_started(int index, uint64 token, pid_t pid);
extern bool backfill_asked_probe_running(int index, uint64 token);

#endif							/* BACKFILL_ASKEDPROBES_H */
