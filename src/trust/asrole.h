/*-------------------------------------------------------------------------
 *
 * asrole.h
 *	  Evaluating a role's SQL from a session that is not that role's,
 *	  leaving nothing of it behind.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_ASROLE_H
#define BACKFILL_ASROLE_H

#include "postgres.h"

typedef void (*AsRoleFunc) (void *arg);

/*
 * Call fn(arg) as role, under SECURITY_RESTRICTED_OPERATION, with the
 * given search_path with pg_temp last (searchpath.h; NULL or "":
 * pg_catalog, pg_temp), inside a
 * subtransaction that is always rolled back.  fn starts in the caller's
 * memory context; what it allocates there survives, nothing else it did
 * does (settings, rows, locks, SPI tuple tables).  fn may use SPI through
 * the caller's connection or a connection of its own.  With
 * catch_errors, an error fn raises (other than a cancel) is returned,
 * copied; otherwise it is re-thrown after the rollback.  NULL: no error.
 * name is the backfill whose SQL it is (NULL: none), for BF032 when that
 * SQL released a session advisory lock of the caller's (advisory.h).
 */
extern ErrorData *asrole_call(const char *name, Oid role, const char *search_path,
							  AsRoleFunc fn, void *arg, bool catch_errors);

/*
 * One query through asrole_call: the first column of its first row as
 * text (NULL for no row or a NULL), in the caller's memory context.  The
 * caller must be connected to SPI.  Errors are re-thrown after the
 * rollback, unless error is not NULL: then *error receives it.
 */
extern char *asrole_query(const char *name, Oid role, const char *search_path, const char *sql,
						  int nargs, Oid *types, Datum *values, const char *nulls,
						  ErrorData **error);

/*
 * Is this a client session of role itself: logged in as it, and still it
 * (no SET SESSION AUTHORIZATION)?  Only such a session may run that role's
 * SQL with what it holds (cursors, prepared statements, temporary objects,
 * advisory locks, LISTEN channels) in reach: they are the role's own.
 */
extern bool asrole_own_session(Oid role);

#endif							/* BACKFILL_ASROLE_H */
