/*-------------------------------------------------------------------------
 *
 * condition.h
 *	  A declaration's throttle_when: the user's own condition, evaluated
 *	  by a lane of the pass (condition.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_CONDITION_H
#define BACKFILL_CONDITION_H

#include "postgres.h"

#include "pass.h"

/* the statement a condition is evaluated in (and parsed in, by backfill_declare) */
#define CONDITION_SQL	"SELECT (\n%s\n)"

/*
 * Why the pass's lanes hold back by its throttle_when (true, or an error
 * or a timeout evaluating it), or NULL.  Outside a transaction.
 */
extern char *condition_reason(Pass *pass);

#endif							/* BACKFILL_CONDITION_H */
