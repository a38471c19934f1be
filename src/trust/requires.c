/*-------------------------------------------------------------------------
 *
 * requires.c
 *	  What a declaration requires before a pass may start: a schema
 *	  migration, and the completion of another backfill.
 *
 * The migrations table (backfill.migrations_table) is the application's:
 * it may be a view, its column's type may have a cast to text of its
 * owner's, it may have row-level security with policies that call
 * functions.  Reading it as the extension's owner, or as a superuser who
 * happens to call backfill_run() for another role, would run those objects
 * with that privilege.  backfill.migration_unapplied() reads it as the declaring
 * role instead, through asrole.c: restricted, with search_path
 * pg_catalog, pg_temp, its settings rolled back, bounded (probe timeouts).
 * A declarer that may not read the table is blocked, and told why.  The
 * scheduler and backfill_pending read no migrations table: a probe worker
 * reads it and records the answer (backfill.requirement, drift.c).
 *
 * requires_backfill may name only a backfill whose owner the declaring
 * role is a member of (at declaration, at every run, and in
 * backfill.unmet_required_backfill for the scheduler): otherwise one role could
 * learn whether another's backfill completed, and have the scheduler
 * reopen it on drift.
 *
 *-------------------------------------------------------------------------
 */
#include "names.h"
#include "postgres.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "asrole.h"
#include "catalog.h"
#include "compat.h"
#include "errors.h"
#include "requires.h"

PG_FUNCTION_INFO_V1(backfill_migration_unapplied);


/* what a relation that is not a table is, for a message */
static const char *
relkind_words(char relkind)
{
	switch (relkind)
	{
		case RELKIND_VIEW:
			return "a view";
		case RELKIND_MATVIEW:
			return "a materialized view";
		case RELKIND_FOREIGN_TABLE:
			return "a foreign table";
		case RELKIND_SEQUENCE:
			return "a sequence";
		case RELKIND_COMPOSITE_TYPE:
			return "a composite type";
		case RELKIND_INDEX:
		case RELKIND_PARTITIONED_INDEX:
			return "an index";
		case RELKIND_TOASTVALUE:
			return "a TOAST table";
		default:
			return "a relation of another kind";
	}
}

/*
 * Reading the migrations table must run no code that the reader did not
 * choose.  A table whose owner has the privileges of the reading role is
 * that role's own business.  Any other owner (say a role that could create
 * "public.schema_migrations" before the application did) could make the
 * read run its functions with the reader's privileges: through a view, a
 * row-level security policy, or the output function of a column type of
 * its own.  Such a relation must be a plain table, without row-level
 * security, whose column has a built-in type.  So must the role's own
 * relation when the read happens in a client session that is not the
 * role's (a superuser's backfill_run of the role's backfill, say): its
 * view, policies or type would run there, beside that session's cursors,
 * prepared statements and temporary objects.  NULL when it may be read,
 * else why not.
 */
static char *
migrations_relation_refusal(Oid relid, const char *column, Oid role)
{
	HeapTuple	tuple;
	Form_pg_class form;
	char	   *refusal = NULL;
	char	   *distrust;
	bool		owned;
	AttrNumber	attnum;

	/* no SELECT: the read itself says so, before anything of it runs */
	if (pg_class_aclcheck(relid, role, ACL_SELECT) != ACLCHECK_OK)
		return NULL;

	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		return pstrdup("no longer exists");
	form = (Form_pg_class) GETSTRUCT(tuple);
	owned = has_privs_of_role(form->relowner, role);
	/* the role's own relation: its code runs only in its own session, or a worker's */
	if (owned && (IsBackgroundWorker || asrole_own_session(role)))
	{
		ReleaseSysCache(tuple);
		return NULL;
	}
	distrust = owned ?
		psprintf("this session is not role %s's own (reading it here could run that role's "
				 "code beside what the session holds)", role_name(role)) :
		psprintf("its owner %s is not one that role %s trusts (reading it could run that "
				 "owner's code)", role_name(form->relowner), role_name(role));
	if (form->relkind != RELKIND_RELATION && form->relkind != RELKIND_PARTITIONED_TABLE)
		refusal = psprintf("is %s, not a table, and %s", relkind_words(form->relkind), distrust);
	else if (form->relrowsecurity)
		refusal = psprintf("has row-level security, and %s", distrust);
	ReleaseSysCache(tuple);
	if (refusal != NULL)
		return refusal;

	attnum = get_attnum(relid, column);
	if (attnum == InvalidAttrNumber)
		return NULL;			/* the read itself says the column is missing */
	if (get_atttype(relid, attnum) >= FirstNormalObjectId)
		return psprintf("has a column %s whose type is not built in, and %s", column, distrust);
	return NULL;
}

/* trim white space at both ends, in place */
static char *
trim(char *s)
{
	char	   *end;

	while (*s && isspace((unsigned char) *s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char) end[-1]))
		*--end = '\0';
	return s;
}

/*
 * Split "table(column)" into its two parts; false if it is not of that
 * form (the column may hold no parenthesis).
 */
static bool
parse_migrations_table(const char *spec, char **table, char **column)
{
	char	   *s = trim(pstrdup(spec));
	size_t		len = strlen(s);
	char	   *open;

	if (len < 4 || s[len - 1] != ')')
		return false;
	s[len - 1] = '\0';
	open = strrchr(s, '(');
	if (open == NULL || strchr(open + 1, ')') != NULL)
		return false;
	*open = '\0';
	*table = trim(s);
	*column = trim(open + 1);
	return (*table)[0] != '\0' && (*column)[0] != '\0';
}

/*
 * The migrations table's oid: an unqualified table is looked up in schema
 * public, never through a search_path.  A lookup in the catalogs, without
 * privilege checks: the read itself, as the role, is what privileges
 * decide.  InvalidOid when there is no such table.
 */
static Oid
migrations_table_oid(const char *table)
{
	char	   *schema;
	char	   *relname;
	Oid			nspid;

	DeconstructQualifiedName(compat_qualified_name_list(table), &schema, &relname);
	nspid = get_namespace_oid(schema ? schema : "public", true);
	return OidIsValid(nspid) ? get_relname_relid(relname, nspid) : InvalidOid;
}

/*
 * Does the column of the migrations relation list the id?  Read as role
 * (asrole.c).  When the read fails, *unreadable says why.
 */
static bool
migration_listed(Oid role, const char *relation, const char *column, const char *id,
				 char **unreadable)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(id)};
	char	   *sql = psprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE %s::pg_catalog.text"
							   " OPERATOR(pg_catalog.=) $1)", relation, quote_identifier(column));
	ErrorData  *error = NULL;
	char	   *applied;
	bool		listed;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	applied = asrole_query(NULL, role, NULL, sql, 1, types, values, NULL, &error);
	/* both live in SPI's memory: keep what is needed */
	*unreadable = error ? MemoryContextStrdup(cxt, error->message) : NULL;
	listed = applied != NULL && strcmp(applied, "t") == 0;
	SPI_finish();
	return listed;
}

/*
 * backfill.migration_unapplied(id text [, role oid]): NULL when the schema
 * migration is applied, else why not.  The table is read as role (default:
 * the calling role), which the caller must have the privileges of.
 */
Datum
backfill_migration_unapplied(PG_FUNCTION_ARGS)
{
	char	   *id = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Oid			role = PG_NARGS() > 1 ? PG_GETARG_OID(1) : GetUserId();
	const char *spec = GetConfigOption("backfill.migrations_table", false, false);
	char	   *table;
	char	   *column;
	Oid			relid;
	char	   *relation;
	char	   *unreadable;
	bool		listed;

	check_catalog_current(NULL, NULL);
	if (!has_privs_of_role(GetUserId(), role))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("permission denied to check migration %s as role \"%s\"", id,
						role_name(role)),
				 errdetail("The migrations table is read as the role that requires the migration."),
				 errhint("Check it as a member of that role, or as your own role.")));

	if (spec == NULL || !parse_migrations_table(spec, &table, &column))
		PG_RETURN_TEXT_P(cstring_to_text(psprintf("migration %s: backfill.migrations_table %s "
												  "is not \"table(column)\"", id,
												  quote_literal_cstr(spec ? spec : ""))));
	relid = migrations_table_oid(table);
	if (!OidIsValid(relid))
		PG_RETURN_TEXT_P(cstring_to_text(psprintf("migration %s is not applied: table %s does "
												  "not exist", id, table)));
	relation = quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
										  get_rel_name(relid));
	unreadable = migrations_relation_refusal(relid, column, role);
	if (unreadable != NULL)
		PG_RETURN_TEXT_P(cstring_to_text(psprintf("migration %s cannot be checked as role %s: "
												  "%s %s", id, role_name(role), relation,
												  unreadable)));

	listed = migration_listed(role, relation, column, id, &unreadable);
	if (unreadable != NULL)
		PG_RETURN_TEXT_P(cstring_to_text(psprintf("migration %s cannot be checked as role %s: %s",
												  id, role_name(role), unreadable)));
	if (!listed)
		PG_RETURN_TEXT_P(cstring_to_text(psprintf("migration %s is not applied (no such %s in %s)",
												  id, column, relation)));
	PG_RETURN_NULL();
}

void
requires_check_backfill(const char *name, Oid owner, const char *required)
{
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	Oid			required_owner = InvalidOid;
	bool		found;
	bool		isnull;

	if (required == NULL)
		return;
	values[0] = CStringGetTextDatum(required);
	catalog_enter(&scope);
	found = catalog_exec("SELECT b.owner FROM backfill.declaration b WHERE b.name = $1",
						 1, types, values, NULL, SPI_OK_SELECT) > 0;
	if (found)
		required_owner = DatumGetObjectId(catalog_getdatum(0, 1, &isnull));
	catalog_leave(&scope);

	/*
	 * A name nobody has declared yet would be anyone's to take: a role the
	 * declarer is no member of could declare it and make every run of this
	 * backfill refused.  So the required backfill must exist first.
	 */
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_UNKNOWN),
				 errmsg("backfill \"%s\" requires backfill \"%s\", which is not declared",
						name, required),
				 errdetail("A required backfill must be declared before the backfills that require it."),
				 errhint("Declare backfill \"%s\" first, then declare \"%s\" again.",
						 required, name)));
	if (!has_privs_of_role(owner, required_owner))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("backfill \"%s\" may not require backfill \"%s\"", name, required),
				 errdetail("Backfill \"%s\" belongs to role \"%s\", which role \"%s\" is not a "
						   "member of.", required, role_name(required_owner), role_name(owner)),
				 errhint("Require a backfill of your own, or GRANT %s TO %s;",
						 quote_identifier(role_name(required_owner)),
						 quote_identifier(role_name(owner)))));
}
