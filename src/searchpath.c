/*-------------------------------------------------------------------------
 *
 * searchpath.c
 *	  The search_path a declarer's SQL runs under: the declaration's, with
 *	  pg_temp named last.
 *
 * A search_path that does not name pg_temp (say "$user", public, as most
 * do) has PostgreSQL search the session's temporary schema FIRST for
 * relations and types.  A finalizing session that had created a temporary
 * table named as the action's target would have the pass write into it
 * (and the ledger count rows that never reached the table); a lane whose
 * SQL created one would do the same for the rest of its batches.  So every
 * place the declarer's SQL runs (lanes, CALL backfill_finalize, asrole.c's
 * probes, requires and scopes, a Citus worker's batch, an outbox function
 * sink) sets its path through here: the declaration's entries in their
 * order, every temporary schema among them taken out, and pg_temp named
 * explicitly as the last entry.  A declarer that named pg_temp earlier
 * gets it moved last; one that named its own session's pg_temp_N gets it
 * dropped (in another session that name is another session's schema, or
 * this session's under the wrong position).  PostgreSQL never looks up
 * functions or operators in the temporary schema unless they are
 * qualified with it, even when pg_temp is named, so naming it last only
 * puts relations and types there behind every schema of the path.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/varlena.h"

#include "searchpath.h"

#define SEARCHPATH_DEFAULT	"pg_catalog, pg_temp"

/* pg_temp, or a session's temporary schema pg_temp_N, by its parsed name */
static bool
names_temp_schema(const char *entry)
{
	return strcmp(entry, "pg_temp") == 0 || strncmp(entry, "pg_temp_", 8) == 0;
}

char *
searchpath_temp_last(const char *stored)
{
	char	   *raw;
	List	   *entries;
	ListCell   *lc;
	StringInfoData path;

	if (stored == NULL || stored[0] == '\0')
		return pstrdup(SEARCHPATH_DEFAULT);
	raw = pstrdup(stored);
	/* a path the server accepted always parses; one that does not names nothing */
	if (!SplitIdentifierString(raw, ',', &entries))
		return pstrdup(SEARCHPATH_DEFAULT);

	initStringInfo(&path);
	foreach(lc, entries)
	{
		const char *entry = (const char *) lfirst(lc);

		if (names_temp_schema(entry))
			continue;
		/* quote_identifier keeps "$user" and mixed case as the declarer wrote them */
		appendStringInfo(&path, "%s, ", quote_identifier(entry));
	}
	appendStringInfoString(&path, "pg_temp");
	list_free(entries);
	return path.data;
}

void
searchpath_apply(const char *stored, GucAction action)
{
	(void) set_config_option("search_path", searchpath_temp_last(stored), PGC_USERSET,
							 PGC_S_SESSION, action, true, 0, false);
}
