/*-------------------------------------------------------------------------
 *
 * catalog.c
 *	  Reading and writing pg_backfill's catalogs safely from any role.
 *
 * The catalogs (schema "backfill") belong to the extension's owner and are
 * not writable by PUBLIC.  Every function that records something switches
 * to that owner for the bookkeeping statement alone, with a fixed
 * search_path so that no object of the caller's can stand in for a
 * built-in one, and switches back before any user SQL runs.
 *
 *-------------------------------------------------------------------------
 */
#include "names.h"
#include "postgres.h"

#include <ctype.h>

#include "access/genam.h"
#include "access/xlog.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "config.h"
#include "catalog.h"
#include "errors.h"

/*
 * The extension's row of pg_extension: its owner and (when version is not
 * NULL) its version, NULL when the row has none.  False when no row has
 * that oid.
 */
static bool
extension_row(Oid extoid, Oid *owner, char **version)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(extoid));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	found = HeapTupleIsValid(tuple);
	if (found)
	{
		*owner = ((Form_pg_extension) GETSTRUCT(tuple))->extowner;
		if (version != NULL)
		{
			bool		isnull;
			Datum		d = heap_getattr(tuple, Anum_pg_extension_extversion,
										 RelationGetDescr(rel), &isnull);

			*version = isnull ? NULL : TextDatumGetCString(d);
		}
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * The role that owns the extension in this database, and whether its
 * catalogs here are at the library's version (*version: the version they
 * are at).  Asked at every SQL entry point and by every catalog scope (once
 * per batch): read from pg_extension once per transaction while they are
 * current, and again at each ask while they are not (an ALTER EXTENSION ...
 * UPDATE earlier in the transaction counts).
 */
static bool
extension_state(Oid *owner, char **version)
{
	static LocalTransactionId cached_lxid = InvalidLocalTransactionId;
	static Oid	cached_owner = InvalidOid;
	Oid			extoid;
	char	   *found = NULL;
	bool		current;

	if (cached_lxid == compat_my_lxid() && OidIsValid(cached_owner))
	{
		*owner = cached_owner;
		*version = BACKFILL_CATALOG_VERSION;
		return true;
	}

	extoid = get_extension_oid(BACKFILL_EXTENSION_NAME, true);
	if (!OidIsValid(extoid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"%s\" is not installed in this database",
						BACKFILL_EXTENSION_NAME),
				 errhint("Run CREATE EXTENSION %s;", BACKFILL_EXTENSION_NAME)));

	if (!extension_row(extoid, owner, &found) || !OidIsValid(*owner))
		elog(ERROR, "could not find the owner of extension \"%s\"",
			 BACKFILL_EXTENSION_NAME);
	current = found != NULL && strcmp(found, BACKFILL_CATALOG_VERSION) == 0;
	if (current)
	{
		cached_lxid = compat_my_lxid();
		cached_owner = *owner;
	}
	*version = found;
	return current;
}

bool
catalog_is_current(char **version)
{
	Oid			owner;

	return extension_state(&owner, version);
}

/*
 * The library works with its own catalog version only: after the library
 * was updated and before ALTER EXTENSION ... UPDATE, a column or table it
 * reads or writes may not exist yet, so every SQL entry point and every
 * catalog scope refuses (BF027) with the way out, instead of failing on a
 * missing column or choosing another statement.  what and name say what
 * was refused ("run backfill", its name); NULL for a scope's own refusal.
 */
void
check_catalog_current(const char *what, const char *name)
{
	Oid			owner;
	char	   *version;

	if (extension_state(&owner, &version))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_CATALOG_VERSION),
			 what != NULL ?
			 errmsg("cannot %s \"%s\": the catalogs of pg_backfill are at version %s",
					what, name, version ? version : "unknown") :
			 errmsg("the catalogs of pg_backfill in this database are at version %s",
					version ? version : "unknown"),
			 errdetail("The installed library is version %s and works only with its catalogs "
					   "at that version.", BACKFILL_CATALOG_VERSION),
			 errhint("Run ALTER EXTENSION pg_backfill UPDATE; in this database.")));
}

void
catalog_enter(CatalogScope *scope)
{
	Oid			owner;
	char	   *version;

	if (!extension_state(&owner, &version))
		check_catalog_current(NULL, NULL);

	GetUserIdAndSecContext(&scope->saved_userid, &scope->saved_sec_context);
	SetUserIdAndSecContext(owner,
						   scope->saved_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	scope->guc_nest_level = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
}

void
catalog_leave(CatalogScope *scope)
{
	/* discard any setting changed inside the scope, not only search_path */
	AtEOXact_GUC(false, scope->guc_nest_level);
	SetUserIdAndSecContext(scope->saved_userid, scope->saved_sec_context);
}

int
catalog_exec(const char *sql, int nargs, Oid *types, Datum *values,
			 const char *nulls, int expected)
{
	int			rc;

	rc = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);
	if (rc != expected)
		elog(ERROR, "pg_backfill catalog statement failed (SPI code %d): %s", rc, sql);
	return (int) SPI_processed;
}

/* a SELECT whose only parameter ($1, text) is a backfill's name: its rows */
int
catalog_exec_named(const char *sql, const char *name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};

	return catalog_exec(sql, 1, types, values, NULL, SPI_OK_SELECT);
}

/*
 * Like catalog_exec, for a statement run again and again (a lane's
 * checkpoint): parsed and planned once, on first use inside a catalog
 * scope, and kept for the life of the process.
 */
int
catalog_exec_cached(SPIPlanPtr *cache, const char *sql, int nargs, Oid *types,
					Datum *values, const char *nulls, int expected)
{
	int			rc;

	if (*cache == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);

		if (plan == NULL)
			elog(ERROR, "could not prepare a pg_backfill catalog statement (%s): %s",
				 SPI_result_code_string(SPI_result), sql);
		SPI_keepplan(plan);
		*cache = plan;
	}
	rc = SPI_execute_plan(*cache, values, nulls, false, 0);
	if (rc != expected)
		elog(ERROR, "pg_backfill catalog statement failed (SPI code %d): %s", rc, sql);
	return (int) SPI_processed;
}

/*
 * A catalog statement's answer is read by row and column; a row it did not
 * answer (the catalogs changed under a worker, say) is an error, never a
 * read past the end of the answer.
 */
static void
check_row(int row, int col)
{
	if (SPI_tuptable == NULL || row < 0 || (uint64) row >= SPI_processed ||
		col < 1 || col > SPI_tuptable->tupdesc->natts)
		elog(ERROR, "pg_backfill catalog statement answered no row %d, column %d", row, col);
}

/*
 * A SELECT that sees every transaction committed so far, also in a
 * REPEATABLE READ or SERIALIZABLE transaction, whose own snapshot may be
 * older than the row lock it has just waited for.  Callers take a lock
 * first (the declaration's row), so that what they read cannot move before
 * they act on it.
 */
int
catalog_exec_latest(const char *sql, int nargs, Oid *types, Datum *values,
					const char *nulls)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);
	int			rc;

	if (plan == NULL)
		elog(ERROR, "could not prepare a pg_backfill catalog statement (%s): %s",
			 SPI_result_code_string(SPI_result), sql);
	rc = SPI_execute_snapshot(plan, values, nulls, GetLatestSnapshot(), InvalidSnapshot,
							  true, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "pg_backfill catalog statement failed (SPI code %d): %s", rc, sql);
	SPI_freeplan(plan);
	return (int) SPI_processed;
}

Datum
catalog_getdatum(int row, int col, bool *isnull)
{
	check_row(row, col);
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

/* a palloc'd copy of a column as text, NULL for NULL */
char *
catalog_gettext(int row, int col)
{
	check_row(row, col);
	return SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);
}

/* a column of the current SPI row, or if_null */
static Datum
column_or(int row, int col, Datum if_null)
{
	bool		isnull;
	Datum		d = catalog_getdatum(row, col, &isnull);

	return isnull ? if_null : d;
}

int64
catalog_getint64(int row, int col)
{
	return DatumGetInt64(column_or(row, col, Int64GetDatum(0)));
}

bool
catalog_getbool(int row, int col)
{
	return DatumGetBool(column_or(row, col, BoolGetDatum(false)));
}

Oid
catalog_getoid(int row, int col)
{
	return DatumGetObjectId(column_or(row, col, ObjectIdGetDatum(InvalidOid)));
}

Datum
catalog_getcopy(int row, int col)
{
	Datum		d = column_or(row, col, (Datum) 0);

	return d == (Datum) 0 ? d : PointerGetDatum(PG_DETOAST_DATUM_COPY(d));
}

/*
 * Row row of the current SPI result into the fields of into, each column
 * found by its name (as the SELECT aliases it), never by a position
 * counted in the query's text; copies in the current memory context.
 */
void
catalog_read_row(int row, const CatalogColumn *columns, int ncolumns, void *into)
{
	for (int i = 0; i < ncolumns; i++)
	{
		int			col = SPI_fnumber(SPI_tuptable->tupdesc, columns[i].column);
		char	   *field = (char *) into + columns[i].offset;

		if (col <= 0)
			elog(ERROR, "column \"%s\" is not in the result", columns[i].column);
		switch (columns[i].kind)
		{
			case CATALOG_OID:
				*(Oid *) field = catalog_getoid(row, col);
				break;
			case CATALOG_TEXT:
				*(char **) field = catalog_gettext(row, col);
				break;
			case CATALOG_INT64:
				*(int64 *) field = catalog_getint64(row, col);
				break;
			case CATALOG_BOOL:
				*(bool *) field = catalog_getbool(row, col);
				break;
			case CATALOG_COPY:
				*(Datum *) field = catalog_getcopy(row, col);
				break;
		}
	}
}

/*
 * A yes-or-no query, read-only, with the caller's privileges: its first
 * column (false for NULL).  what is what the error says could not be done.
 */
bool
catalog_ask(const char *what, const char *sql, int nargs, Oid *types, Datum *values)
{
	if (SPI_execute_with_args(sql, nargs, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not %s", what);
	return catalog_getbool(0, 1);
}

void
check_backfill_name(const char *name)
{
	if (name == NULL || name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NAME_INVALID),
				 errmsg("backfill name must not be empty"),
				 errhint("Give the backfill a durable name such as 'orders_fill_total'.")));
	if (strlen(name) > BACKFILL_NAME_MAXLEN)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NAME_INVALID),
				 errmsg("backfill name \"%.40s...\" is too long", name),
				 errdetail("The name has %zu bytes; at most %d are allowed.",
						   strlen(name), BACKFILL_NAME_MAXLEN),
				 errhint("Choose a shorter name.")));
	for (const char *p = name; *p; p++)
	{
		if (*p == ':' || (unsigned char) *p < ' ')
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_NAME_INVALID),
					 errmsg("backfill name \"%s\" contains a reserved character", name),
					 errdetail("Control characters and ':' (which separates a name "
							   "from its scope in the ledger) are not allowed."),
					 errhint("Use letters, digits, '_', '-' or '.'.")));
	}
}

/*
 * A name being declared: a valid name, and not one that looks like
 * another in every report (" orders_fill" beside "orders_fill"): no white
 * space at either end.  Names declared before this rule stay usable.
 */
/*
 * In a UTF-8 database, a character that no report can show as itself: a C1
 * control (U+0080..U+009F, such as CSI or NEL), a bidirectional override
 * or isolate, a line or paragraph separator.  Returns its length in bytes
 * at s, 0 for any other character.
 */
static int
invisible_char_at(const unsigned char *s)
{
	if (GetDatabaseEncoding() != PG_UTF8)
		return 0;
	if (s[0] == 0xc2 && s[1] >= 0x80 && s[1] <= 0x9f)
		return 2;
	if (s[0] == 0xe2 && ((s[1] == 0x80 && s[2] >= 0xa8 && s[2] <= 0xae) ||
						 (s[1] == 0x81 && s[2] >= 0xa6 && s[2] <= 0xa9)))
		return 3;
	return 0;
}

/*
 * In a UTF-8 database, the length of a white space character that is not
 * ASCII at s (NBSP, the U+2000 spaces, ZWSP, U+205F, U+3000, the BOM), 0
 * for any other character.
 */
static int
utf8_space_at(const unsigned char *s)
{
	if (GetDatabaseEncoding() != PG_UTF8)
		return 0;
	if (s[0] == 0xc2 && s[1] == 0xa0)
		return 2;
	if ((s[0] == 0xe2 && s[1] == 0x80 && s[2] >= 0x80 && s[2] <= 0x8b) ||
		(s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) ||
		(s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80) ||
		(s[0] == 0xef && s[1] == 0xbb && s[2] == 0xbf))
		return 3;
	return 0;
}

/* does text hold a character no report can show (C0, DEL, C1, bidi, separators)? */
bool
text_has_invisible(const char *text)
{
	for (const unsigned char *p = (const unsigned char *) text; *p; p++)
		if (*p < ' ' || *p == 0x7f || invisible_char_at(p) > 0)
			return true;
	return false;
}

/* does text begin or end with white space (ASCII, or one of the UTF-8 spaces)? */
static bool
space_at_an_end(const char *text)
{
	const unsigned char *u = (const unsigned char *) text;
	size_t		len = strlen(text);

	if (len == 0)
		return false;
	if (isspace(u[0]) || utf8_space_at(u) > 0 || isspace(u[len - 1]))
		return true;
	for (int n = 2; n <= 3; n++)
		if (len >= (size_t) n && utf8_space_at(u + len - n) == n)
			return true;
	return false;
}

void
check_new_backfill_name(const char *name)
{
	check_backfill_name(name);
	if (text_has_invisible(name))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NAME_INVALID),
				 errmsg("backfill name \"%s\" contains a character reports cannot show", name),
				 errdetail("Control characters (also U+0080 to U+009F), bidirectional overrides "
						   "and line separators are not allowed in a new name."),
				 errhint("Use letters, digits, '_', '-' or '.'.")));
	if (space_at_an_end(name))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NAME_INVALID),
				 errmsg("backfill name \"%s\" begins or ends with white space", name),
				 errdetail("Reports show the name as it is; white space at its ends cannot be seen."),
				 errhint("Use letters, digits, '_', '-' or '.'.")));
}

/*
 * On a hot standby the catalogs are read-only copies of the primary's:
 * the reports work, and whatever would write is refused here, with a code
 * of its own and the way out, before any statement fails on its own with
 * a bare "read-only transaction" error.  "what" is the act and its object,
 * e.g. "run backfill".
 */
void
check_not_standby(const char *what, const char *name)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_STANDBY),
				 errmsg("cannot %s \"%s\" on a standby", what, name),
				 errdetail("This server is in recovery: pg_backfill's catalogs are read-only "
						   "copies of the primary's, and no lane runs here."),
				 errhint("Run it on the primary. backfill_status, backfill_pending, "
						 "backfill_partitions and the ledger can be read here.")));
}

void
check_backfill_member(const char *name, Oid owner)
{
	if (!has_privs_of_role(GetUserId(), owner))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("permission denied for backfill \"%s\"", name),
				 errdetail("The backfill belongs to role \"%s\".", role_name(owner)),
				 errhint("Ask a member of that role, or have it GRANT the role to you.")));
}

char *
retired_sql(const char *alias)
{
	return psprintf("EXISTS (SELECT 1 FROM backfill.retired rt WHERE rt.declaration = %s.name)",
					alias);
}

void
check_not_retired(const char *name, const char *what)
{
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	int64		run_id = 0;
	char	   *at = NULL;
	char	   *by = NULL;
	bool		retired;

	catalog_enter(&scope);
	retired = catalog_exec_latest("SELECT r.run_id, r.retired_at::pg_catalog.text, r.retired_by"
								  " FROM backfill.retired r WHERE r.declaration = $1",
								  1, types, values, NULL) == 1;
	if (retired)
	{
		run_id = catalog_getint64(0, 1);
		at = catalog_gettext(0, 2);
		by = catalog_gettext(0, 3);
	}
	catalog_leave(&scope);
	if (retired)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_RETIRED),
				 errmsg("backfill \"%s\" is retired: it cannot %s", name, what),
				 errdetail("Role %s retired it at %s; run " INT64_FORMAT " did its work, and its "
						   "ledger stays.", by, at, run_id),
				 errhint("A retired backfill neither runs nor reverts.  Declare new work under "
						 "a new name.")));
}

void
check_backfill_target(const char *name, bool found, Oid owner, const char *what)
{
	if (!found)
		report_not_declared(name);
	check_backfill_member(name, owner);
	check_not_retired(name, what);
}

void
report_not_declared(const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_UNKNOWN),
			 errmsg("backfill \"%s\" is not declared", name),
			 errhint("backfill_pending() lists the declared backfills.")));
}

/* a function's schema-qualified, quoted name, to call it in SQL */
char *
function_name(Oid fn)
{
	return quote_qualified_identifier(get_namespace_name(get_func_namespace(fn)),
									  get_func_name(fn));
}
