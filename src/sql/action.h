/*-------------------------------------------------------------------------
 *
 * action.h
 *	  The batch statement the engine writes for set => / delete =>, and the
 *	  guard of a hand-written UPDATE or DELETE of the declared relation
 *	  (action.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_ACTION_H
#define BACKFILL_ACTION_H

#include "postgres.h"

#include "executor/spi.h"

#include "declaration.h"

/* the WHERE clause of a batch over the key's range, with $1..$2k */
extern char *action_range_form(const Declaration *d);

/* the UPDATE (d->action_set) or DELETE (d->action_delete) the engine writes */
extern char *action_generate(const Declaration *d);

/*
 * refuse a hand-written UPDATE or DELETE of d->relid without the predicate;
 * true when the action is guarded (it changes only rows that match)
 */
extern bool action_check_guard(const Declaration *d, SPIPlanPtr predicate_plan,
							   SPIPlanPtr action_plan);

#endif							/* BACKFILL_ACTION_H */
