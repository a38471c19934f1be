/*-------------------------------------------------------------------------
 *
 * pauseall.c
 *	  One switch for one role's backfills: backfill_pause_all(role) and
 *	  backfill_resume_all(role).
 *
 * A role paused for all is a row of backfill.paused_role, so the pause
 * survives restarts, failovers and dumps.  Every lane of a backfill that
 * the role owns or runs as holds at its next batch boundary while the row
 * exists (health.c reads it with the server's health, at most once per
 * backfill.throttle_delay, and before a claim's first batch), keeping its
 * leases: nothing is marked paused or failed, and backfill_status says
 * why in its throttle column.  A superuser or a member of the role may
 * pause or resume it; each answers whether it changed anything.  The
 * cluster-wide switch is the setting backfill.pause_all (config.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "errors.h"

PG_FUNCTION_INFO_V1(backfill_pause_all);
PG_FUNCTION_INFO_V1(backfill_resume_all);

/* the role named by the first argument, which the caller must be able to act for */
static Oid
pause_all_role(FunctionCallInfo fcinfo, const char *what)
{
	char	   *name;
	Oid			role;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("%s needs a role, not NULL", what),
				 errdetail("It acts on the backfills one role owns or runs as."),
				 errhint("Call %s('app_writer') with the role's name.", what)));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	check_not_standby(what, name);
	check_catalog_current(what, name);
	role = get_role_oid(name, true);
	if (!OidIsValid(role))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("cannot %s of role \"%s\": no such role", what, name),
				 errdetail("Role \"%s\" does not exist in this cluster.", name),
				 errhint("Name the role that owns the backfills, or the role they run as.")));
	if (!superuser() && !is_member_of_role(GetUserId(), role))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("cannot %s of role \"%s\": not a member of it", what, name),
				 errdetail("Role \"%s\" is not a member of role \"%s\".",
						   GetUserNameFromId(GetUserId(), false), name),
				 errhint("Ask a member of role \"%s\" or a superuser; backfill.pause_all = on "
						 "(a reload) holds every role's lanes.", name)));
	return role;
}

/* one statement on backfill.paused_role as the extension's owner: rows changed */
static int
pause_all_exec(const char *sql, int nargs, Oid role, int expected)
{
	CatalogScope scope;
	Oid			types[2] = {OIDOID, OIDOID};
	Datum		values[2] = {ObjectIdGetDatum(role), ObjectIdGetDatum(GetUserId())};
	int			n;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	catalog_enter(&scope);
	n = catalog_exec(sql, nargs, types, values, NULL, expected);
	catalog_leave(&scope);
	SPI_finish();
	return n;
}

/* backfill_pause_all(role): hold every lane of the role's backfills; true if it was not held */
Datum
backfill_pause_all(PG_FUNCTION_ARGS)
{
	Oid			role = pause_all_role(fcinfo, "backfill_pause_all");
	int			n;

	n = pause_all_exec("INSERT INTO backfill.paused_role (role, paused_by)"
					   " VALUES ($1::pg_catalog.regrole, $2::pg_catalog.regrole)"
					   " ON CONFLICT (role) DO NOTHING", 2, role, SPI_OK_INSERT);
	PG_RETURN_BOOL(n > 0);
}

/* backfill_resume_all(role): let them go on; true if they were held */
Datum
backfill_resume_all(PG_FUNCTION_ARGS)
{
	Oid			role = pause_all_role(fcinfo, "backfill_resume_all");
	int			n;

	n = pause_all_exec("DELETE FROM backfill.paused_role WHERE role = $1::pg_catalog.regrole",
					   1, role, SPI_OK_DELETE);
	PG_RETURN_BOOL(n > 0);
}
