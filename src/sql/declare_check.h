/*-------------------------------------------------------------------------
 *
 * declare_check.h
 *	  backfill_declare's statements parsed and planned (declare_check.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_DECLARE_CHECK_H
#define BACKFILL_DECLARE_CHECK_H

#include "postgres.h"

#include "declaration.h"
#include "executor/spi.h"

extern void rethrow_as_source_invalid(MemoryContext cxt, const char *name, const char *what,
						  const char *hint);
extern void check_statements(Declaration *d);
extern void check_throttle_when(const Declaration *d);

#endif							/* BACKFILL_DECLARE_CHECK_H */
