/*-------------------------------------------------------------------------
 *
 * names.h
 *	  Small lookups every layer shares: a role's name for a message, a
 *	  function's owner, two texts compared, a value quoted as a field of a
 *	  row or range literal (names.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_NAMES_H
#define BACKFILL_NAMES_H

#include "postgres.h"

#include "lib/stringinfo.h"

/* a role's name, or "(dropped role <oid>)" when no role has that oid any more */
extern char *role_name(Oid role);

/* the role that owns a function, InvalidOid when the function is gone */
extern Oid	function_owner(Oid fn);

/* two texts alike, NULL alike (a NULL equals only a NULL) */
extern bool text_equal(const char *a, const char *b);

/* value as a field of a row or range literal: quoted when empty or special */
extern void append_literal_field(StringInfo buf, const char *value, const char *special,
								 char escape);

#endif							/* BACKFILL_NAMES_H */
