/*-------------------------------------------------------------------------
 *
 * scope.h
 *	  Scoped backfills: the declared input shape, the scope expression and
 *	  the input each run carries.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_SCOPE_H
#define BACKFILL_SCOPE_H

#include "postgres.h"

#include "utils/jsonb.h"

/* at declaration: both or neither, a valid shape, a valid expression */
extern void scope_check_declaration(const char *name, Jsonb *shape, const char *scope);

/*
 * At run: check the input against the shape and evaluate the scope, as the
 * declaration's owner with its search_path (restricted, rolled back), never
 * as the caller, and never in another role's session (there: in a worker
 * logged in as the owner; BF038 with no worker slot free).  Returns the
 * ledger name "name:scope".
 */
extern char *scope_ledger_name(const char *name, Jsonb *shape, const char *scope,
							   Jsonb *input, Oid owner, const char *search_path);

/*
 * The worker that evaluates a scope for a caller whose session is another
 * role's (logs in as the owner; main_arg: its request's shared memory).
 */
extern PGDLLEXPORT void backfill_scope_main(Datum main_arg);

#endif							/* BACKFILL_SCOPE_H */
