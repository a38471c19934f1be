/*-------------------------------------------------------------------------
 *
 * drift.h
 *	  Drift: probes of a completed backfill's predicate, recorded; the
 *	  watch's catch-up passes; reopening a required backfill that drifted.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_DRIFT_H
#define BACKFILL_DRIFT_H

#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/memutils.h"

/* why a probe runs (backfill.probe.kind: asked, watch, required, requires, finalize) */
typedef enum DriftKind
{
	DRIFT_ASKED = 0,			/* backfill_probe(name) */
	DRIFT_WATCH = 1,			/* a watch that is due */
	DRIFT_REQUIRED = 2,			/* a pass waits for the backfill it requires */
	DRIFT_MIGRATION = 3,		/* a pass waits for the migration it requires: no predicate */
	DRIFT_FINALIZE = 4			/* backfill_finalize's count after the newest pass */
} DriftKind;

/* a backfill to probe, and the role its probe logs in as */
typedef struct DriftTarget
{
	char	   *name;
	Oid			run_as;
} DriftTarget;

/* the hash of a backfill's name a probe worker is started with */
extern int64 drift_name_hash(const char *name);

/*
 * The watched backfills whose probe is due (DriftTarget, in cxt), and in
 * *next_ms the milliseconds until the next one is (-1: none).  Reads the
 * catalogs only, in a transaction of its own.
 */
extern List *drift_watch_due(MemoryContext cxt, long *next_ms);

/*
 * The backfill that a waiting pass's declaration requires, to probe
 * before the pass starts; false when there is none to check.  Reads the
 * catalogs only, in a transaction of its own.
 */
extern bool drift_required_target(int64 waiting_run_id, DriftTarget *target,
								  MemoryContext cxt);

/*
 * In a probe worker logged in as the backfill's run_as role: read the
 * migration it requires into backfill.requirement, then (but for
 * DRIFT_MIGRATION) probe it (name_hash; for DRIFT_REQUIRED run_id is the
 * waiting pass), record the answer or the error in backfill.probe, and
 * heal (watch) or reopen (required) on drift.  Runs transactions of its own; cxt outlives them.
 */
/*
 * In a session logged in as the backfill's run_as (finalize's own, see
 * asrole_own_session): the rows (at most 1,000) its predicate matches now,
 * counted through asrole.c as a probe worker counts them, and recorded in
 * backfill.probe (kind finalize).  Errors are raised.  Inside SPI.
 */
extern int64 drift_probe_here(const char *name);

/*
 * A catch-up pass of a completed table backfill whose predicate matches
 * rows again (as the watch enqueues one: forced, watch, after last_id), in
 * the caller's transaction; 0 when last_id is no longer its newest pass.
 * Raises when it may not run here (environment, run_as, login).  Inside SPI.
 */
extern int64 drift_catch_up(const char *name, int64 last_id);

extern void drift_probe_worker(DriftKind kind, int64 name_hash, int64 run_id,
							   MemoryContext cxt);

#endif							/* BACKFILL_DRIFT_H */
