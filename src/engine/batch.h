/*-------------------------------------------------------------------------
 *
 * batch.h
 *	  One batch of a pass: its plans, and running it (batch.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_BATCH_H
#define BACKFILL_BATCH_H

#include "postgres.h"

#include "pass.h"

extern void batch_prepare(Pass *pass);
extern void batch_free_plans(Pass *pass);
extern BatchOutcome batch_run(Pass *pass, Claim *claim);
extern bool batch_first_key(Pass *pass, Claim *claim, Datum *key);
extern char *batch_key_text(Pass *pass, const Datum *key);
extern char *batch_cursor_text(Pass *pass, Claim *claim);
extern void batch_move_cursor(Pass *pass, Claim *claim, const Datum *next);
extern int64 batch_scan_keys(Pass *pass, Claim *claim, Datum *range);
extern void batch_act(Pass *pass, Datum *range);

#endif							/* BACKFILL_BATCH_H */
