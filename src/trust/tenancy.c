/*-------------------------------------------------------------------------
 *
 * tenancy.c
 *	  Who a backfill runs as, and which tenant's rows it may see.
 *
 * Lanes log in as the declaring role, or as a role the declarer names with
 * run_as and is a member of: never with more privilege than the declarer
 * has.  Membership is checked at declaration and again at every run, retry
 * and lane start, so a REVOKE takes effect at once.  A declaration may name settings that the lane sets for its whole
 * session (each batch, the plan and the convergence count), such as
 * app.tenant_id, so that row-level security scopes the pass to a tenant; a value ":key" takes the scoped run's input key.  Only custom
 * (dotted) settings are allowed: no batch can change its role or
 * search_path this way, and a value the setting's module refuses is
 * refused at declaration, or fails the pass (BF011) when only the run's
 * input supplies it: a lane never dies in start-up over a setting.  Over a table with row-level security a backfill
 * must say which: a tenant setting, or tenant => 'none' to run across
 * tenants, which is refused for a role that row-level security would
 * silently filter.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/rls.h"
#include "utils/syscache.h"

#include "compat.h"
#include "errors.h"
#include "jsonobj.h"
#include "tenancy.h"

Oid
tenancy_run_as(const char *name, const char *run_as)
{
	Oid			roleid;

	if (run_as == NULL)
		return GetUserId();
	roleid = get_role_oid(run_as, true);
	if (!OidIsValid(roleid))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("run_as role \"%s\" of backfill \"%s\" does not exist", run_as, name),
				 errhint("Name an existing role you are a member of, or leave run_as out.")));
	if (!is_member_of_role(GetUserId(), roleid))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("permission denied to run backfill \"%s\" as role \"%s\"", name, run_as),
				 errdetail("A backfill may run only as its declarer or a role the declarer is a member of."),
				 errhint("GRANT %s TO %s; or leave run_as out.", quote_identifier(run_as),
						 quote_identifier(GetUserNameFromId(GetUserId(), false)))));
	return roleid;
}

/*
 * Why a lane could not log in to this database as roleid, or NULL when it
 * can: the role was dropped, may not log in, or lacks CONNECT on the
 * database.  The one check of a lane's login: made when a pass is
 * enqueued (check_role_can_login) and by the scheduler before it starts a
 * lane, so that a pass whose lanes cannot connect ends failed (BF016)
 * instead of running forever with lanes dying at start-up.
 */
char *
tenancy_login_problem(Oid roleid)
{
	HeapTuple	tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(roleid));
	char	   *rolname;
	bool		canlogin;

	if (!HeapTupleIsValid(tuple))
		return psprintf("the role with OID %u that its lanes log in as no longer exists",
						roleid);
	rolname = pstrdup(NameStr(((Form_pg_authid) GETSTRUCT(tuple))->rolname));
	canlogin = ((Form_pg_authid) GETSTRUCT(tuple))->rolcanlogin;
	ReleaseSysCache(tuple);
	if (!canlogin)
		return psprintf("role \"%s\" that its lanes log in as cannot log in (NOLOGIN)",
						rolname);
	if (compat_database_aclcheck(MyDatabaseId, roleid, ACL_CONNECT) != ACLCHECK_OK)
		return psprintf("role \"%s\" that its lanes log in as has no CONNECT privilege on "
						"database \"%s\"", rolname, get_database_name(MyDatabaseId));
	return NULL;
}

/*
 * Why the lanes of a backfill owned by owner may not log in as run_as any
 * more, or NULL when they may: run_as is the owner, or a role the owner is
 * still a member of.  Membership is checked at declaration, and again at
 * every run, retry and lane start: a REVOKE takes effect at once.
 */
char *
tenancy_run_as_refused(Oid owner, Oid run_as)
{
	const char *owner_name;
	const char *run_as_name;

	if (run_as == owner || is_member_of_role(owner, run_as))
		return NULL;
	owner_name = GetUserNameFromId(owner, true);
	run_as_name = GetUserNameFromId(run_as, true);
	return psprintf("role \"%s\" is not a member of its run_as role \"%s\"",
					owner_name ? owner_name : "(dropped)",
					run_as_name ? run_as_name : "(dropped)");
}

void
tenancy_check_run_as(const char *name, Oid owner, Oid run_as)
{
	char	   *refused = tenancy_run_as_refused(owner, run_as);
	const char *owner_name;
	const char *run_as_name;

	if (refused == NULL)
		return;
	owner_name = GetUserNameFromId(owner, true);
	run_as_name = GetUserNameFromId(run_as, true);
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_PRIVILEGE),
			 errmsg("permission denied to run backfill \"%s\" as role \"%s\"", name,
					run_as_name ? run_as_name : "(dropped)"),
			 errdetail("The backfill belongs to role \"%s\", which is no longer a member of "
					   "\"%s\"; lanes run only as the owner or a role it is a member of.",
					   owner_name ? owner_name : "(dropped)",
					   run_as_name ? run_as_name : "(dropped)"),
			 errhint("GRANT %s TO %s; or declare the backfill again without run_as.",
					 quote_identifier(run_as_name ? run_as_name : "(dropped)"),
					 quote_identifier(owner_name ? owner_name : "(dropped)"))));
}

/*
 * Set (or, with !change, only check) one setting as a lane does: in the
 * role's own right, for the session.  A setting that a loaded module
 * defines checks its value; one it refuses is BF011 naming the backfill,
 * so a lane never dies in start-up over it, again and again.
 */
static void
apply_setting(const char *name, const char *key, const char *value, bool change)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		(void) set_config_option(key, value, PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SET, change, ERROR, false);
	}
	PG_CATCH();
	{
		ErrorData  *edata = backfill_take_error(cxt);

		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("setting \"%s\" of backfill \"%s\" cannot be set to \"%s\"",
						key, name, value),
				 errdetail("%s", edata->message),
				 errhint("Declare the backfill again with a value the setting accepts, and one "
						 "its role may set.")));
	}
	PG_END_TRY();
}

/*
 * A setting whose value is ":key" takes that key of each run's input: the
 * backfill must be scoped, and its input shape must declare the key, or
 * the lane would set the literal text.
 */
static void
check_input_key(const char *name, const char *setting, const char *key, Jsonb *input_shape)
{
	if (input_shape == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("setting \"%s\" of backfill \"%s\" takes input key \"%s\", but the "
						"backfill is not scoped", setting, name, key),
				 errdetail("A value \":key\" is the key of each run's input; a backfill without "
						   "input and scope has none."),
				 errhint("Declare input and scope to set it from each run's input, or write the "
						 "value itself.")));
	if (jsonobj_field(input_shape, key) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("setting \"%s\" of backfill \"%s\" takes input key \"%s\", which its "
						"input does not declare", setting, name, key),
				 errhint("Name a key of the input shape, such as \":tenant\" for input => "
						 "'{\"tenant\": \"integer\"}'.")));
}

void
tenancy_check_settings(const char *name, Jsonb *settings, const char *tenant,
					   Jsonb *input_shape)
{
	char	  **keys;
	JsonbValue *values;
	int			n;

	if (tenant != NULL && strcmp(tenant, "none") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("tenant of backfill \"%s\" must be 'none' or left out", name),
				 errdetail("It was \"%s\".", tenant),
				 errhint("Scope batches to a tenant with settings => '{\"app.tenant_id\": \"42\"}'; "
						 "tenant => 'none' declares a run across tenants.")));
	if (settings == NULL)
		return;
	jsonobj_require(settings, ERRCODE_BACKFILL_OPTION_INVALID, "settings", name,
					"Pass settings => '{\"app.tenant_id\": \"42\"}'.");

	n = jsonobj_pairs(settings, &keys, &values);
	for (int i = 0; i < n; i++)
	{
		const char *key = keys[i];
		JsonbValue *v = &values[i];

		if (strchr(key, '.') == NULL || strncmp(key, "backfill.", 9) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
					 errmsg("setting \"%s\" of backfill \"%s\" is not allowed", key, name),
					 errdetail("Batches may set only custom settings such as app.tenant_id."),
					 errhint("Use a dotted name your row-level security policies read.")));
		if (v->type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
					 errmsg("setting \"%s\" of backfill \"%s\" is not a string", key, name),
					 errhint("Write the value as a JSON string, or \":key\" for an input key.")));
		/* an input key's value is known only at run time; the lane checks it */
		if (v->val.string.len > 0 && v->val.string.val[0] == ':')
		{
			check_input_key(name, key, pnstrdup(v->val.string.val + 1,
												v->val.string.len - 1), input_shape);
			continue;
		}
		apply_setting(name, key, pnstrdup(v->val.string.val, v->val.string.len), false);
	}
}

static bool
has_row_security(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	bool		rls = false;

	if (HeapTupleIsValid(tuple))
	{
		rls = ((Form_pg_class) GETSTRUCT(tuple))->relrowsecurity;
		ReleaseSysCache(tuple);
	}
	return rls;
}

void
tenancy_check_rls(const char *name, Oid relid, const char *relation, Oid run_as,
				  Jsonb *settings, const char *tenant)
{
	if (!has_row_security(relid))
		return;
	if (settings == NULL && tenant == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("backfill \"%s\" must say which tenants it covers", name),
				 errdetail("%s has row-level security.", relation),
				 errhint("Pass settings => '{\"app.tenant_id\": \"42\"}' to scope each batch to a "
						 "tenant, or tenant => 'none' to run across tenants.")));
	if (tenant != NULL && check_enable_rls(relid, run_as, true) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("backfill \"%s\" cannot run across tenants as role \"%s\"", name,
						GetUserNameFromId(run_as, false)),
				 errdetail("Row-level security on %s would silently hide rows from that role.",
						   relation),
				 errhint("Run as a role with BYPASSRLS (run_as => ...), or scope the backfill "
						 "to a tenant with settings.")));
}

/* A setting's ":key" value: the text of that input key ("" when absent or null). */
static char *
input_setting_value(Jsonb *input, const char *key)
{
	JsonbValue *found = jsonobj_field(input, key);

	if (found == NULL || found->type == jbvNull)
		return "";
	if (found->type == jbvString)
		return pnstrdup(found->val.string.val, found->val.string.len);
	if (found->type == jbvNumeric)
		return DatumGetCString(DirectFunctionCall1(numeric_out,
												   NumericGetDatum(found->val.numeric)));
	return found->type == jbvBool ? (found->val.boolean ? "true" : "false") : "";
}

void
tenancy_apply_settings(const char *name, Jsonb *settings, Jsonb *input)
{
	char	  **keys;
	JsonbValue *values;
	int			n;

	if (settings == NULL)
		return;
	n = jsonobj_pairs(settings, &keys, &values);
	for (int i = 0; i < n; i++)
	{
		char	   *value = pnstrdup(values[i].val.string.val, values[i].val.string.len);

		if (value[0] == ':' && input != NULL)
			value = input_setting_value(input, value + 1);
		apply_setting(name, keys[i], value, true);
	}
}

/*
 * Refuse a backfill whose lanes could not log in (tenancy_login_problem):
 * at declaration, and whenever a pass is enqueued.
 */
void
check_role_can_login(const char *name, Oid roleid)
{
	char	   *problem = tenancy_login_problem(roleid);
	char	   *rolname = GetUserNameFromId(roleid, true);

	if (problem == NULL)
		return;
	if (rolname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("the role that runs backfill \"%s\" no longer exists", name),
				 errdetail("Lanes connect as the role that declared the backfill (or its "
						   "run_as); %s.", problem),
				 errhint("Declare the backfill again as an existing role.")));
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_PRIVILEGE),
			 errmsg("role \"%s\" cannot run backfill \"%s\" because it cannot log in",
					rolname, name),
			 errdetail("Lanes connect as the role that declared the backfill (or its run_as), "
					   "never as a superuser; %s.", problem),
			 errhint("ALTER ROLE %s LOGIN and GRANT CONNECT on the database to it, or declare "
					 "the backfill as a role that can log in.", quote_identifier(rolname))));
}
