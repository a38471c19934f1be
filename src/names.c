/*-------------------------------------------------------------------------
 *
 * names.c
 *	  Small lookups every layer shares: a role's name for a message, a
 *	  function's owner, two texts compared, a value quoted as a field of
 *	  a row or range literal.
 *
 * Each was written in several modules (the relay, the requirements, the
 * declaration, a shard's batch, the pacing); written once here, below
 * every layer, so that a dropped role or function reads the same way in
 * every message.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "miscadmin.h"
#include "utils/syscache.h"

#include "names.h"

char *
role_name(Oid role)
{
	char	   *name = GetUserNameFromId(role, true);

	return name ? name : psprintf("(dropped role %u)", role);
}

Oid
function_owner(Oid fn)
{
	HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		return InvalidOid;
	owner = ((Form_pg_proc) GETSTRUCT(tuple))->proowner;
	ReleaseSysCache(tuple);
	return owner;
}

bool
text_equal(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/*
 * A value as record_out and range_out write a field: as it is, unless it
 * is empty or holds a double quote, a backslash, a space or one of
 * special; then double-quoted, each double quote and backslash inside
 * preceded by escape ('\0': by itself, doubled).
 */
void
append_literal_field(StringInfo buf, const char *value, const char *special, char escape)
{
	bool		quote = (value[0] == '\0');

	for (const char *p = value; *p && !quote; p++)
		quote = (*p == '"' || *p == '\\' || strchr(special, *p) != NULL ||
				 isspace((unsigned char) *p));
	if (!quote)
	{
		appendStringInfoString(buf, value);
		return;
	}
	appendStringInfoChar(buf, '"');
	for (const char *p = value; *p; p++)
	{
		if (*p == '"' || *p == '\\')
			appendStringInfoChar(buf, escape ? escape : *p);
		appendStringInfoChar(buf, *p);
	}
	appendStringInfoChar(buf, '"');
}
