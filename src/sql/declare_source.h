/*-------------------------------------------------------------------------
 *
 * declare_source.h
 *	  backfill_declare's source resolved (declare_source.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_DECLARE_SOURCE_H
#define BACKFILL_DECLARE_SOURCE_H

#include "postgres.h"

#include "declaration.h"
#include "declare_args.h"

extern void resolve_pages_source(const DeclareArgs *a, Declaration *d);
extern void resolve_table_source(const DeclareArgs *a, Declaration *d, const char *run_as_name);

#endif							/* BACKFILL_DECLARE_SOURCE_H */
