/*-------------------------------------------------------------------------
 *
 * probe.h
 *	  The probe worker: a declarer's SQL outside a batch, evaluated in a
 *	  short-lived background process of its own, as the declarer.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PROBE_H
#define BACKFILL_PROBE_H

#include "postgres.h"

#include "postmaster/bgworker.h"

#include "drift.h"

/* what a probe worker is started with (in bgw_extra) */
typedef struct ProbeArgs
{
	Oid			dboid;
	Oid			roleoid;		/* the backfill's run_as: the probe logs in as it */
	int32		kind;			/* DriftKind */
	int64		name_hash;		/* drift_name_hash of the backfill's name */
	int64		run_id;			/* DRIFT_REQUIRED: the waiting pass */
} ProbeArgs;

/*
 * Start a probe worker for target, which tells this process when it
 * stops; its handle in cxt, NULL when no background worker slot is free.
 */
extern BackgroundWorkerHandle *probe_start(DriftKind kind, DriftTarget *target, int64 run_id,
										   MemoryContext cxt);

/*
 * Wait, at most until deadline, for the probe worker of handle to stop,
 * and read the answer it recorded since `since`: the rows found, or BF039
 * with its error (none recorded, or none in time, is BF039 too).  Inside SPI.
 * handle NULL: only the answer (a probe another call started, waited for).
 */
extern int64 probe_wait_answer(const char *name, BackgroundWorkerHandle *handle,
							   TimestampTz since, TimestampTz deadline);

/*
 * The scheduler's probes: is one of this kind for this backfill (and
 * run) done?  Starts it when none runs and none ended in the last
 * PROBE_RESTART_MS; false until it has ended.  At most PROBE_MAX run at
 * once; a probe that cannot start now is started at a later look.
 */
extern bool probe_done(DriftKind kind, DriftTarget *target, int64 run_id, MemoryContext cxt);

/* Forget the scheduler's probes that ended long enough ago; are any still running? */
extern bool probes_reap(void);

extern PGDLLEXPORT void backfill_probe_main(Datum main_arg);

#endif							/* BACKFILL_PROBE_H */
