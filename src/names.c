/*-------------------------------------------------------------------------
 *
 * names.c
 *	  Small lookups every layer shares: a role's name for a message, a
 *	  function's owner, two texts compared.
 *
 * Each was written in several modules (the relay, the requirements, the
 * declaration, a shard's batch, the pacing); written once here, below
 * every layer, so that a dropped role or function reads the same way in
 * every message.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

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
