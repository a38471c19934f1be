/*-------------------------------------------------------------------------
 *
 * identity.c
 *	  A declaration's table and roles, across dump and restore.
 *
 * backfill.declaration names its table (relid, regclass), its owner and
 * its run_as role (regrole), so pg_dump writes their names and a restore
 * looks them up again in the new cluster.  A name can only be written for
 * an object that exists: the oid of a role dropped before the dump goes
 * out as a number, which in another cluster may be another role.  So the
 * declaration also keeps the names it was declared with (owner_name,
 * run_as_name, relation), and nothing runs a declaration whose oids no
 * longer carry them: backfill_run and backfill_retry refuse, the scheduler
 * fails such a pass instead of starting a lane for it
 * (backfill.fail_unbound_passes), and a lane checks again after it logs in.
 * The checks are catalog lookups in SQL (backfill.identity_problem), run
 * as the extension's owner with a fixed search_path.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/elog.h"

#include "catalog.h"
#include "identity.h"

/* the problem's four columns as palloc'd strings; false when there is none */
static bool
identity_read(const char *name, char **code, char **message, char **detail, char **hint)
{
	CatalogScope scope;
	bool		found;

	catalog_enter(&scope);
	found = catalog_exec_named("SELECT i.code, i.message, i.detail, i.hint"
							   "  FROM backfill.declaration d,"
							   "       backfill.identity_problem(d.name, d.relid, d.relation, d.owner,"
							   "                                 d.owner_name, d.run_as,"
							   "                                 d.run_as_name) i"
							   " WHERE d.name = $1 AND i.code IS NOT NULL", name) > 0;
	if (found)
	{
		*code = catalog_gettext(0, 1);
		*message = catalog_gettext(0, 2);
		*detail = catalog_gettext(0, 3);
		*hint = catalog_gettext(0, 4);
	}
	catalog_leave(&scope);
	return found;
}

static int
sqlstate_of(const char *code)
{
	return MAKE_SQLSTATE(code[0], code[1], code[2], code[3], code[4]);
}

void
identity_check(const char *name)
{
	char	   *code;
	char	   *message;
	char	   *detail;
	char	   *hint;

	if (identity_read(name, &code, &message, &detail, &hint))
		ereport(ERROR,
				(errcode(sqlstate_of(code)),
				 errmsg("%s", message),
				 errdetail("%s", detail),
				 errhint("%s", hint)));
}

bool
identity_problem(const char *name, int *sqlerrcode, char **message)
{
	char	   *code;
	char	   *msg;
	char	   *detail;
	char	   *hint;

	if (!identity_read(name, &code, &msg, &detail, &hint))
		return false;
	*sqlerrcode = sqlstate_of(code);
	*message = psprintf("%s: %s %s", msg, detail, hint);
	return true;
}
