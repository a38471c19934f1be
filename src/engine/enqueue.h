/*-------------------------------------------------------------------------
 *
 * enqueue.h
 *	  The start of a pass: may it run here, and its ledger and run rows.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_ENQUEUE_H
#define BACKFILL_ENQUEUE_H

#include "postgres.h"

#include "utils/jsonb.h"

extern void check_environment(const char *name, Datum environments, const char *envlist);
extern int64 enqueue_pass(const char *ledger_name, const char *name, const char *checksum,
						  bool force, int64 previous_id, Oid owner, Jsonb *input);
extern int64 enqueue_pass_as(const char *ledger_name, const char *name, const char *checksum,
							 bool force, int64 previous_id, Oid owner, Jsonb *input,
							 const char *direction, bool watch);

#endif							/* BACKFILL_ENQUEUE_H */
