/*-------------------------------------------------------------------------
 *
 * batch.h
 *	  One batch of a pass: its plans, and running it through the routines
 *	  of its partition's kind (batch.c, kind.h).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_BATCH_H
#define BACKFILL_BATCH_H

#include "postgres.h"

#include "pass.h"

struct BatchKind;

extern const struct BatchKind *batch_kind_for(Pass *pass, Claim *claim);
extern void batch_prepare(Pass *pass);
extern SPIPlanPtr batch_prepare_kept(Pass *pass, const char *what, const char *sql, int nargs,
									 Oid *types, int cursor_options);
extern void batch_free_sized_plans(Pass *pass);
extern void batch_free_plans(Pass *pass);
extern BatchOutcome batch_run(Pass *pass, Claim *claim);
extern bool batch_first_key(Pass *pass, Claim *claim, Datum *key);
extern char *batch_key_text(Pass *pass, const Datum *key);
extern char *batch_cursor_text(Pass *pass, Claim *claim);
extern void batch_copy_key(Pass *pass, const Datum *key, Datum *copy);
extern void batch_move_cursor(Pass *pass, Claim *claim, const Datum *next);
extern BatchOutcome batch_end_partition(Pass *pass, Claim *claim, const char *activity);
extern int64 batch_scan_keys(Pass *pass, Claim *claim, Datum *range);
extern void batch_act(Pass *pass, Datum *range);

#endif							/* BACKFILL_BATCH_H */
