/*-------------------------------------------------------------------------
 *
 * newest.h
 *	  A backfill and its newest pass, as finalize and
 *	  backfill_ensure_complete read and raise them (newest.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_NEWEST_H
#define BACKFILL_NEWEST_H

#include "postgres.h"

#include "catalog.h"

/*
 * Run sql, a SELECT of one backfill's row ($1: its name), as the
 * extension's owner, and read its columns by name into the fields of into
 * (copied into the current context).  A backfill not declared is BF002.
 */
extern void newest_read(const char *sql, const char *name, const CatalogColumn *columns,
						int ncolumns, void *into);

/*
 * The SQLSTATE (five characters) a pass that ended with status raises:
 * BF018 when it completed with failures, else its recorded error code, or
 * BF010 (cancelled) or BF014 when it recorded none.
 */
extern const char *ended_code(const char *status, const char *error_code);

#endif							/* BACKFILL_NEWEST_H */
