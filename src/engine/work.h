/*-------------------------------------------------------------------------
 *
 * work.h
 *	  Working on a claimed partition, and a step of a pass outside any
 *	  batch, with their retries (work.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_WORK_H
#define BACKFILL_WORK_H

#include "postgres.h"

#include "utils/timestamp.h"

#include "pass.h"

extern bool work_partition(Pass *pass, Claim *claim, MemoryContext scratch);
extern bool work_step(Pass *pass, void (*step) (Pass *), const char *what);
extern void work_set_deadline(TimestampTz deadline);

#endif							/* BACKFILL_WORK_H */
