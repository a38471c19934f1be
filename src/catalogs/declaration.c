/*-------------------------------------------------------------------------
 *
 * declaration.c
 *	  The columns of backfill.declaration in one table, and the only code
 *	  that stores, loads and checksums a declaration from it.
 *
 * Each row of declaration_columns names a column, its SQL type, the field
 * of struct Declaration that holds it, whether it enters the checksum,
 * and the backfill_declare argument it comes from with that argument's
 * default.  The INSERT ... ON CONFLICT and the SELECT lists are built
 * from the rows, values always travel as parameters, and columns are read
 * back by name, never by position.  backfill_declare checks its SQL
 * signature against the rows at every call (declare.c).
 *
 * The checksum must stay byte for byte what it has always been for the
 * same declaration: stored checksums of existing declarations and ledger
 * rows are compared with it.  So the rows that enter it keep their order
 * and their labels.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"

#include "catalog.h"
#include "declaration.h"

/* a column's name is its field's name in struct Declaration */
#define COL(c, type, field, not_null) #c, type, field, offsetof(Declaration, c), not_null

/*
 * The table, one row per column: column, SQL type, field, NOT NULL; how it
 * enters the checksum and its label there; the backfill_declare argument,
 * its type and its default in the signature (pg_backfill--0.3--0.4.sql;
 * NULL where it has none).  The rows that enter the checksum come first,
 * in the checksum's order.
 */
const DeclarationColumn declaration_columns[] = {
	{COL(name, TEXTOID, DECL_TEXT, true), DECL_NOT_SUMMED, NULL, "name", TEXTOID, NULL},
	{COL(relation, TEXTOID, DECL_TEXT, false), DECL_SUM_LINE, "relation", "relation", TEXTOID, "NULL"},
	{COL(key_column, NAMEOID, DECL_NAME, false), DECL_SUM_LINE, "key", "key", TEXTOID, "NULL"},
	{COL(predicate, TEXTOID, DECL_TEXT, false), DECL_SUM_STATEMENT, "predicate", "predicate", TEXTOID, "NULL"},
	{COL(action, TEXTOID, DECL_TEXT, true), DECL_SUM_STATEMENT, "action", "action", TEXTOID, "NULL"},
	{COL(pages_fn, TEXTOID, DECL_FUNCTION, false), DECL_SUM_WORD, "pages", "pages", TEXTOID, "NULL"},
	{COL(count_fn, TEXTOID, DECL_FUNCTION, false), DECL_SUM_WORD, "count", "count_function", TEXTOID, "NULL"},
	{COL(input_shape, JSONBOID, DECL_JSONB, false), DECL_SUM_WORD, "input", "input", JSONBOID, "NULL"},
	{COL(scope, TEXTOID, DECL_TEXT, false), DECL_SUM_WORD, "scope", "scope", TEXTOID, "NULL"},
	{COL(settings, JSONBOID, DECL_JSONB, false), DECL_SUM_WORD, "settings", "settings", JSONBOID, "NULL"},
	{COL(run_as, REGROLEOID, DECL_OID, true), DECL_SUM_WORD, "run_as", "run_as", TEXTOID, "NULL"},
	/* a composite key (issue 12): NULL for one column, so that checksum stays as it was */
	{COL(key_columns, TEXTARRAYOID, DECL_TEXT_ARRAY, false), DECL_SUM_WORD_IF_SET, "keys", NULL, InvalidOid, NULL},
	/* resolved from the relation and key */
	{COL(relid, REGCLASSOID, DECL_OID, false), DECL_NOT_SUMMED, NULL, NULL, InvalidOid, NULL},
	{COL(key_type, REGTYPEOID, DECL_OID, false), DECL_NOT_SUMMED, NULL, NULL, InvalidOid, NULL},
	{COL(pages_owner, REGROLEOID, DECL_OID, false), DECL_NOT_SUMMED, NULL, NULL, InvalidOid, NULL},
	{COL(count_owner, REGROLEOID, DECL_OID, false), DECL_NOT_SUMMED, NULL, NULL, InvalidOid, NULL},
	{COL(key_types, REGTYPEARRAYOID, DECL_OID_ARRAY, false), DECL_NOT_SUMMED, NULL, NULL, InvalidOid, NULL},
	/* tuning: a re-declaration may change these under a running pass */
	{COL(batch_size, INT4OID, DECL_INT4, true), DECL_NOT_SUMMED, NULL, "batch_size", INT4OID, "1000"},
	{COL(rate, FLOAT8OID, DECL_FLOAT8, true), DECL_NOT_SUMMED, NULL, "rate", FLOAT8OID, "NULL"},
	{COL(max_parallel, INT4OID, DECL_INT4, true), DECL_NOT_SUMMED, NULL, "max_parallel", INT4OID, "1"},
	{COL(max_attempts, INT4OID, DECL_INT4, true), DECL_NOT_SUMMED, NULL, "max_attempts", INT4OID, "5"},
	{COL(batch_timeout_ms, INT4OID, DECL_INT4, true), DECL_NOT_SUMMED, NULL, "batch_timeout", INTERVALOID, "'1 minute'"},
	{COL(environments, TEXTARRAYOID, DECL_TEXT_ARRAY, false), DECL_NOT_SUMMED, NULL, "environments", TEXTARRAYOID, "NULL"},
	{COL(backoff_base_ms, INT4OID, DECL_INT4, true), DECL_NOT_SUMMED, NULL, "backoff_base", INTERVALOID, "'1 second'"},
	{COL(backoff_cap_ms, INT4OID, DECL_INT4, true), DECL_NOT_SUMMED, NULL, "backoff_cap", INTERVALOID, "'1 minute'"},
	{COL(lock_timeout_ms, INT4OID, DECL_INT4, true), DECL_NOT_SUMMED, NULL, "lock_timeout", INTERVALOID, "'2 seconds'"},
	{COL(target_batch_ms, INT4OID, DECL_INT4, false), DECL_NOT_SUMMED, NULL, "target_batch_time", INTERVALOID, "NULL"},
	{COL(min_batch_size, INT4OID, DECL_INT4, true), DECL_NOT_SUMMED, NULL, "min_batch_size", INT4OID, "NULL"},
	{COL(max_batch_size, INT4OID, DECL_INT4, true), DECL_NOT_SUMMED, NULL, "max_batch_size", INT4OID, "NULL"},
	{COL(async_commit, BOOLOID, DECL_BOOL, true), DECL_NOT_SUMMED, NULL, "async_commit", BOOLOID, "true"},
	/* the rest of a backfill's life (pg_backfill--0.4--0.5.sql) */
	{COL(revert, TEXTOID, DECL_TEXT, false), DECL_NOT_SUMMED, NULL, "revert", TEXTOID, "NULL"},
	{COL(revert_predicate, TEXTOID, DECL_TEXT, false), DECL_NOT_SUMMED, NULL, "revert_predicate", TEXTOID, "NULL"},
	{COL(max_failed_rows, INT4OID, DECL_INT4, true), DECL_NOT_SUMMED, NULL, "max_failed_rows", INT4OID, "0"},
	{COL(watch_ms, INT4OID, DECL_INT4, false), DECL_NOT_SUMMED, NULL, "watch", INTERVALOID, "NULL"},
	/* the statement the engine writes (pg_backfill--0.5--0.6.sql, issue 24): the action it wrote is summed */
	{COL(action_set, TEXTOID, DECL_TEXT, false), DECL_NOT_SUMMED, NULL, "set", TEXTOID, "NULL"},
	{COL(action_delete, BOOLOID, DECL_BOOL, true), DECL_NOT_SUMMED, NULL, "delete", BOOLOID, "false"},
	{COL(guard, BOOLOID, DECL_BOOL, true), DECL_NOT_SUMMED, NULL, "guard", BOOLOID, "true"},
	/* found by backfill_declare: a pass may sweep again (pg_backfill--0.5--0.6.sql, issue 31) */
	{COL(guarded, BOOLOID, DECL_BOOL, true), DECL_NOT_SUMMED, NULL, NULL, InvalidOid, NULL},
	/* pacing on WAL (pg_backfill--0.5--0.6.sql, issue 27) */
	{COL(max_wal_rate, INT8OID, DECL_INT8, false), DECL_NOT_SUMMED, NULL, "max_wal_rate", TEXTOID, "NULL"},
	/* the user's own condition and time windows (issue 27): tuning too */
	{COL(throttle_when, TEXTOID, DECL_TEXT, false), DECL_NOT_SUMMED, NULL, "throttle_when", TEXTOID, "NULL"},
	{COL(windows, TEXTARRAYOID, DECL_TEXT_ARRAY, false), DECL_NOT_SUMMED, NULL, "windows", TEXTARRAYOID, "NULL"},
	{COL(window_time_zone, TEXTOID, DECL_TEXT, false), DECL_NOT_SUMMED, NULL, "window_time_zone", TEXTOID, "NULL"},
	/* lifecycle events through the outbox (issue 28): changed at once by a re-declaration */
	{COL(events, TEXTOID, DECL_TEXT, false), DECL_NOT_SUMMED, NULL, "events", TEXTOID, "NULL"},
	/* requirements and tenancy */
	{COL(requires, TEXTOID, DECL_TEXT, false), DECL_NOT_SUMMED, NULL, "requires", TEXTOID, "NULL"},
	{COL(requires_backfill, TEXTOID, DECL_TEXT, false), DECL_NOT_SUMMED, NULL, "requires_backfill", TEXTOID, "NULL"},
	{COL(tenant, TEXTOID, DECL_TEXT, false), DECL_NOT_SUMMED, NULL, "tenant", TEXTOID, "NULL"},
	/* set by backfill_declare itself */
	{COL(search_path, TEXTOID, DECL_TEXT, true), DECL_NOT_SUMMED, NULL, NULL, InvalidOid, NULL},
	{COL(owner, REGROLEOID, DECL_OID, true), DECL_NOT_SUMMED, NULL, NULL, InvalidOid, NULL},
	{COL(checksum, TEXTOID, DECL_TEXT, true), DECL_NOT_SUMMED, NULL, NULL, InvalidOid, NULL},
};

const int	declaration_ncolumns = lengthof(declaration_columns);

StaticAssertDecl(lengthof(declaration_columns) == DECLARATION_NCOLUMNS,
				 "declaration_columns must have one row per field of struct Declaration");

/*
 * Columns a re-declaration keeps: the conflict key, and the owner (a
 * member of the owning role may declare again; the backfill stays its).
 */
static bool
kept_on_redeclaration(const DeclarationColumn *col)
{
	return strcmp(col->column, "name") == 0 || strcmp(col->column, "owner") == 0;
}

const DeclarationColumn *
declaration_column_of_argument(const char *argument)
{
	for (int i = 0; i < declaration_ncolumns; i++)
		if (declaration_columns[i].argument != NULL &&
			strcmp(declaration_columns[i].argument, argument) == 0)
			return &declaration_columns[i];
	return NULL;
}

#define FIELD(decl, col, type) ((type *) ((char *) (decl) + (col)->offset))

/*
 * Collapse white space outside string literals and quoted identifiers, so
 * that re-indenting a statement does not change its checksum.
 */
static void
append_normalized(StringInfo buf, const char *sql)
{
	char		quote = 0;
	bool		pending_space = false;
	bool		at_start = true;

	for (const char *p = sql; *p; p++)
	{
		if (quote == 0 && isspace((unsigned char) *p))
		{
			pending_space = !at_start;
			continue;
		}
		if (pending_space)
			appendStringInfoChar(buf, ' ');
		pending_space = false;
		at_start = false;
		if (quote == 0 && (*p == '\'' || *p == '"'))
			quote = *p;
		else if (quote != 0 && *p == quote)
			quote = 0;
		appendStringInfoChar(buf, *p);
	}
	appendStringInfoChar(buf, '\n');
}

/* the elements of a text[] joined by commas (a key's columns are names) */
static char *
text_array_joined(ArrayType *arr)
{
	StringInfoData buf;
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	initStringInfo(&buf);
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? "," : "",
						 nulls[i] ? "" : TextDatumGetCString(elems[i]));
	return buf.data;
}

/* a column's value as the checksum spells it: "" for NULL */
static const char *
checksum_text(const Declaration *decl, const DeclarationColumn *col)
{
	switch (col->field)
	{
		case DECL_TEXT:
		case DECL_NAME:
			{
				char	   *s = *FIELD(decl, col, char *);

				return s ? s : "";
			}
		case DECL_JSONB:
			{
				Jsonb	   *j = *FIELD(decl, col, Jsonb *);

				return j ? JsonbToCString(NULL, &j->root, 0) : "";
			}
		case DECL_TEXT_ARRAY:
			{
				ArrayType  *arr = *FIELD(decl, col, ArrayType *);

				return arr ? text_array_joined(arr) : "";
			}
		case DECL_OID:
			{
				Oid			oid = *FIELD(decl, col, Oid);

				if (!OidIsValid(oid))
					return "";
				if (col->sqltype == REGROLEOID)
					return GetUserNameFromId(oid, false);
				break;
			}
		case DECL_FUNCTION:
			{
				Oid			oid = *FIELD(decl, col, Oid);

				return OidIsValid(oid) ? format_procedure(oid) : "";
			}
		default:
			break;
	}
	elog(ERROR, "declaration column \"%s\" cannot enter the checksum", col->column);
	return NULL;				/* keep the compiler quiet */
}

static char *
sha256_hex(const char *data, int len)
{
	pg_cryptohash_ctx *ctx;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char	   *hex = palloc(PG_SHA256_DIGEST_LENGTH * 2 + 1);

	ctx = pg_cryptohash_create(PG_SHA256);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute the sha256 checksum of a declaration: %s",
			 pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);

	for (int i = 0; i < PG_SHA256_DIGEST_LENGTH; i++)
		sprintf(hex + 2 * i, "%02x", digest[i]);
	return hex;
}

/*
 * "pg_backfill declaration v1", then a line per DECL_SUM_LINE column, the
 * normalized statements, and one normalized line of "label value" words
 * (the source, scope and tenancy: the rest of what decides what is done).
 * Function and role names are spelled as the declarer's search_path
 * shows them, so this runs before any catalog scope.
 */
char *
declaration_checksum(const Declaration *decl)
{
	StringInfoData buf;
	StringInfoData words;
	char	   *hex;

	initStringInfo(&buf);
	initStringInfo(&words);
	appendStringInfoString(&buf, "pg_backfill declaration v1\n");
	for (int i = 0; i < declaration_ncolumns; i++)
	{
		const DeclarationColumn *col = &declaration_columns[i];

		switch (col->sum)
		{
			case DECL_NOT_SUMMED:
				break;
			case DECL_SUM_LINE:
				appendStringInfo(&buf, "%s %s\n", col->sum_label, checksum_text(decl, col));
				break;
			case DECL_SUM_STATEMENT:
				appendStringInfo(&buf, "%s ", col->sum_label);
				append_normalized(&buf, checksum_text(decl, col));
				break;
			case DECL_SUM_WORD_IF_SET:
				if (*FIELD(decl, col, void *) == NULL)
					break;
				/* FALLTHROUGH */
			case DECL_SUM_WORD:
				appendStringInfo(&words, "%s%s %s", words.len > 0 ? " " : "",
								 col->sum_label, checksum_text(decl, col));
				break;
		}
	}
	append_normalized(&buf, words.data);

	hex = sha256_hex(buf.data, buf.len);
	pfree(buf.data);
	pfree(words.data);
	return hex;
}

/*
 * The type a field travels as: reg* columns take a plain oid; a function
 * travels as regprocedure, which its text column takes as its output under
 * the catalog scope's search_path (schema-qualified).
 */
static Oid
field_param_type(DeclarationField field)
{
	switch (field)
	{
		case DECL_FUNCTION:
			return REGPROCEDUREOID;
		case DECL_TEXT:
			return TEXTOID;
		case DECL_NAME:
			return NAMEOID;
		case DECL_OID:
			return OIDOID;
		case DECL_INT4:
			return INT4OID;
		case DECL_INT8:
			return INT8OID;
		case DECL_FLOAT8:
			return FLOAT8OID;
		case DECL_BOOL:
			return BOOLOID;
		case DECL_JSONB:
			return JSONBOID;
		case DECL_TEXT_ARRAY:
			return TEXTARRAYOID;
		case DECL_OID_ARRAY:
			return REGTYPEARRAYOID;	/* the one such column is regtype[] */
	}
	return InvalidOid;			/* keep the compiler quiet */
}

/* a field as an SPI parameter: its type, its value, ' ' or 'n' */
static Oid
column_param(const Declaration *decl, const DeclarationColumn *col, Datum *value, char *null)
{
	bool		isnull = false;

	*value = (Datum) 0;
	switch (col->field)
	{
		case DECL_TEXT:
		case DECL_NAME:
			{
				char	   *s = *FIELD(decl, col, char *);

				isnull = (s == NULL);
				if (s != NULL && col->field == DECL_NAME)
				{
					Name		n = palloc0(NAMEDATALEN);

					namestrcpy(n, s);
					*value = NameGetDatum(n);
				}
				else if (s != NULL)
					*value = CStringGetTextDatum(s);
				break;
			}
		case DECL_OID:
		case DECL_FUNCTION:
			*value = ObjectIdGetDatum(*FIELD(decl, col, Oid));
			isnull = !OidIsValid(*FIELD(decl, col, Oid));
			break;
		case DECL_INT4:
			*value = Int32GetDatum(*FIELD(decl, col, int32));
			isnull = (*FIELD(decl, col, int32) == 0);
			break;
		case DECL_INT8:
			*value = Int64GetDatum(*FIELD(decl, col, int64));
			isnull = (*FIELD(decl, col, int64) == 0);
			break;
		case DECL_FLOAT8:
			*value = Float8GetDatum(*FIELD(decl, col, double));
			break;
		case DECL_BOOL:
			*value = BoolGetDatum(*FIELD(decl, col, bool));
			break;
		case DECL_JSONB:
			isnull = (*FIELD(decl, col, Jsonb *) == NULL);
			*value = PointerGetDatum(*FIELD(decl, col, Jsonb *));
			break;
		case DECL_TEXT_ARRAY:
		case DECL_OID_ARRAY:
			isnull = (*FIELD(decl, col, ArrayType *) == NULL);
			*value = PointerGetDatum(*FIELD(decl, col, ArrayType *));
			break;
	}
	*null = (isnull && !col->not_null) ? 'n' : ' ';
	if (isnull && col->not_null && col->field != DECL_INT4 && col->field != DECL_OID)
		elog(ERROR, "declaration column \"%s\" must not be NULL", col->column);
	return field_param_type(col->field);
}

/* the INSERT ... ON CONFLICT (name) DO UPDATE of every column */
static char *
store_statement(void)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfoString(&sql, "INSERT INTO backfill.declaration AS d (");
	for (int i = 0; i < declaration_ncolumns; i++)
		appendStringInfo(&sql, "%s%s", i > 0 ? ", " : "",
						 quote_identifier(declaration_columns[i].column));
	appendStringInfoString(&sql, ") VALUES (");
	for (int i = 1; i <= declaration_ncolumns; i++)
		appendStringInfo(&sql, "%s$%d", i > 1 ? ", " : "", i);
	appendStringInfoString(&sql, ") ON CONFLICT (name) DO UPDATE SET ");
	for (int i = 0; i < declaration_ncolumns; i++)
	{
		const char *c = quote_identifier(declaration_columns[i].column);

		if (!kept_on_redeclaration(&declaration_columns[i]))
			appendStringInfo(&sql, "%s = EXCLUDED.%s, ", c, c);
	}
	appendStringInfoString(&sql, "updated_at = pg_catalog.now()");
	return sql.data;
}

void
declaration_store(const Declaration *decl)
{
	Oid			types[lengthof(declaration_columns)];
	Datum		values[lengthof(declaration_columns)];
	char		nulls[lengthof(declaration_columns)];

	for (int i = 0; i < declaration_ncolumns; i++)
		types[i] = column_param(decl, &declaration_columns[i], &values[i], &nulls[i]);
	catalog_exec(store_statement(), declaration_ncolumns, types, values, nulls, SPI_OK_INSERT);
}

/*
 * A function column read back as the oid its stored name resolves to, or
 * NULL when nothing has that name or when the function of that name is
 * not owned by the role that owned it at declaration (a function dropped,
 * or renamed, and another role's created under its name: it must never
 * run as the declarer); backfill.identity_problem refuses to run such a
 * declaration.  A name that is only digits is the oid of a function
 * dropped before the column held names (pg_backfill 0.4), which
 * to_regprocedure would not parse.
 */
static char *
function_select(const char *alias, const char *column, const char *owner)
{
	const char *c = quote_identifier(column);

	return psprintf("(CASE WHEN %s.%s::pg_catalog.text OPERATOR(pg_catalog.~) '^[0-9]+$'"
					" THEN NULL ELSE (SELECT f.oid FROM pg_catalog.pg_proc f"
					"  WHERE f.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(%s.%s::pg_catalog.text)"
					"    AND f.proowner OPERATOR(pg_catalog.=) %s.%s) END)::pg_catalog.oid AS %s",
					alias, c, alias, c, alias, quote_identifier(owner), c);
}

/* the owner column of a function column */
static const char *
function_owner_column(const DeclarationColumn *col)
{
	return strcmp(col->column, "pages_fn") == 0 ? "pages_owner" : "count_owner";
}

char *
declaration_select_list(const char *alias)
{
	StringInfoData sql;

	initStringInfo(&sql);
	for (int i = 0; i < declaration_ncolumns; i++)
	{
		const DeclarationColumn *col = &declaration_columns[i];

		appendStringInfoString(&sql, i > 0 ? ", " : "");
		if (col->field == DECL_FUNCTION)
			appendStringInfoString(&sql, function_select(alias, col->column,
														 function_owner_column(col)));
		else
			appendStringInfo(&sql, "%s.%s", alias, quote_identifier(col->column));
	}
	return sql.data;
}

/* one column of an SPI result row into its field; NULL leaves it 0 */
static void
read_column(HeapTuple tuple, TupleDesc tupdesc, const DeclarationColumn *col,
			Declaration *decl)
{
	int			fno = SPI_fnumber(tupdesc, col->column);
	bool		isnull;
	Datum		d;

	if (fno <= 0)
		elog(ERROR, "declaration column \"%s\" is not in the result", col->column);
	d = SPI_getbinval(tuple, tupdesc, fno, &isnull);
	if (isnull)
		return;
	switch (col->field)
	{
		case DECL_TEXT:
			*FIELD(decl, col, char *) = TextDatumGetCString(d);
			break;
		case DECL_NAME:
			*FIELD(decl, col, char *) = pstrdup(NameStr(*DatumGetName(d)));
			break;
		case DECL_OID:
		case DECL_FUNCTION:
			*FIELD(decl, col, Oid) = DatumGetObjectId(d);
			break;
		case DECL_INT4:
			*FIELD(decl, col, int32) = DatumGetInt32(d);
			break;
		case DECL_INT8:
			*FIELD(decl, col, int64) = DatumGetInt64(d);
			break;
		case DECL_FLOAT8:
			*FIELD(decl, col, double) = DatumGetFloat8(d);
			break;
		case DECL_BOOL:
			*FIELD(decl, col, bool) = DatumGetBool(d);
			break;
		case DECL_JSONB:
			*FIELD(decl, col, Jsonb *) = DatumGetJsonbPCopy(d);
			break;
		case DECL_TEXT_ARRAY:
		case DECL_OID_ARRAY:
			*FIELD(decl, col, ArrayType *) = DatumGetArrayTypePCopy(d);
			break;
	}
}

bool
declaration_read(int row, Declaration *decl, MemoryContext cxt)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	HeapTuple	tuple = SPI_tuptable->vals[row];
	TupleDesc	tupdesc = SPI_tuptable->tupdesc;

	memset(decl, 0, sizeof(Declaration));
	for (int i = 0; i < declaration_ncolumns; i++)
		read_column(tuple, tupdesc, &declaration_columns[i], decl);
	MemoryContextSwitchTo(old);
	return decl->name != NULL;
}

/*
 * Lock a declaration's row and read it, inside a catalog scope: what
 * declares, runs or steers a backfill serializes on this lock.
 */
bool
declaration_lock(const char *name, Declaration *decl)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	char	   *sql = psprintf("SELECT %s FROM backfill.declaration d"
							   " WHERE d.name = $1 FOR UPDATE OF d",
							   declaration_select_list("d"));

	if (catalog_exec(sql, 1, types, values, NULL, SPI_OK_SELECT) == 0)
	{
		memset(decl, 0, sizeof(Declaration));
		return false;
	}
	return declaration_read(0, decl, CurrentMemoryContext);
}

/*
 * Does a backfill's pass sweep again the rows left within its bound
 * (engine/pass.c)?  A table source whose action is guarded: the engine's
 * set/delete statement, or a hand-written one backfill_declare found
 * guarded.  Inside a catalog scope; false when there is no declaration.
 */
bool
declaration_sweeps(const char *name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};

	return catalog_exec("SELECT 1 FROM backfill.declaration d WHERE d.name = $1"
						" AND d.pages_fn IS NULL"
						" AND (d.guarded OR d.action_set IS NOT NULL OR d.action_delete)",
						1, types, values, NULL, SPI_OK_SELECT) > 0;
}
