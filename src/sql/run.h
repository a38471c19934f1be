/*-------------------------------------------------------------------------
 *
 * run.h
 *	  Enqueueing passes: what backfill_run and backfill_retry share.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_RUN_H
#define BACKFILL_RUN_H

#include "postgres.h"

#include "utils/jsonb.h"

extern void check_environment(const char *name, Datum environments, const char *envlist);
extern int64 enqueue_pass(const char *ledger_name, const char *name, const char *checksum,
						  bool force, int64 previous_id, Oid owner, Jsonb *input);

#endif							/* BACKFILL_RUN_H */
