/*-------------------------------------------------------------------------
 *
 * drift.h
 *	  Reopening a required backfill whose predicate matches rows again.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_DRIFT_H
#define BACKFILL_DRIFT_H

#include "postgres.h"

extern bool drift_reopen_required(int64 waiting_run_id);

#endif							/* BACKFILL_DRIFT_H */
