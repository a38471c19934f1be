/*-------------------------------------------------------------------------
 *
 * searchpath.h
 *	  The search_path a declarer's SQL runs under: the declaration's, with
 *	  pg_temp named last.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_SEARCHPATH_H
#define BACKFILL_SEARCHPATH_H

#include "postgres.h"

#include "utils/guc.h"

/*
 * The stored path with every temporary schema it names (pg_temp,
 * pg_temp_N) taken out and pg_temp appended last; NULL or "" give
 * "pg_catalog, pg_temp".  palloc'd in the current memory context.
 */
extern char *searchpath_temp_last(const char *stored);

/* Set search_path to searchpath_temp_last(stored), with the given GUC action. */
extern void searchpath_apply(const char *stored, GucAction action);

#endif							/* BACKFILL_SEARCHPATH_H */
