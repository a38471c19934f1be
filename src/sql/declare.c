/*-------------------------------------------------------------------------
 *
 * declare.c
 *	  backfill_declare(): validate a declaration as the caller and store it
 *	  with the checksum of its normalized definition.
 *
 * Everything is checked before anything is written, and every refusal
 * names the backfill, carries a SQLSTATE of class BF and a hint.  The
 * relation, key, predicate and action are resolved and parsed with the
 * caller's privileges; only the catalog row is written as the extension's
 * owner (catalog.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include <math.h>

#include "access/htup_details.h"
#include "access/genam.h"
#include "access/relation.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "common/keywords.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "nodes/parsenodes.h"
#include "optimizer/optimizer.h"
#include "parser/parser.h"
#include "parser/scanner.h"
#include "utils/acl.h"
#include "utils/regproc.h"
#include "utils/array.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "parser/parse_func.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/plancache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "action.h"
#include "compat.h"
#include "config.h"
#include "catalog.h"
#include "citus.h"
#include "ctid.h"
#include "declaration.h"
#include "errors.h"
#include "key.h"
#include "requires.h"
#include "scope.h"
#include "shmem.h"
#include "tenancy.h"
#include "windows.h"
#include "condition.h"

PG_FUNCTION_INFO_V1(backfill_declare);

/* the resolved source of a declaration */
typedef struct DeclaredSource
{
	Oid			relid;
	char	   *relation;		/* schema-qualified, quoted */
	char	   *key;			/* key column name (a composite key's first) */
	Oid			keytype;
	KeyResolved composite;		/* nkeys > 1: a composite key (key.c) */
} DeclaredSource;

static char *key_column_list(const KeyResolved *key);

/* Raise a SOURCE_INVALID error that carries an error caught from below. */
static void
rethrow_as_source_invalid(MemoryContext cxt, const char *name, const char *what,
						  const char *hint)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
			 errmsg("%s of backfill \"%s\" is not valid", what, name),
			 errdetail("%s", edata->message),
			 errhint("%s", hint)));
}

static void
resolve_relation(const char *name, const char *relation, DeclaredSource *src)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			relid = InvalidOid;
	char		relkind;
	AclResult	acl;

	if (relation == NULL || relation[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" names no relation", name),
				 errhint("Pass relation => 'schema.table', the table the backfill rewrites.")));

	PG_TRY();
	{
		List	   *names = compat_qualified_name_list(relation);

		relid = RangeVarGetRelid(makeRangeVarFromNameList(names), NoLock, true);
	}
	PG_CATCH();
	{
		rethrow_as_source_invalid(cxt, name, "the relation",
								  "Write the relation as table or schema.table, quoting as in SQL.");
	}
	PG_END_TRY();

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("relation \"%s\" of backfill \"%s\" does not exist", relation, name),
				 errhint("Create the table first, or check the name and the search_path.")));

	relkind = get_rel_relkind(relid);
	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("relation \"%s\" of backfill \"%s\" is not a table", relation, name),
				 errhint("A backfill reads and rewrites an ordinary or partitioned table.")));

	acl = pg_class_aclcheck(relid, GetUserId(), ACL_SELECT | ACL_UPDATE);
	if (acl == ACLCHECK_OK)
		acl = pg_class_aclcheck(relid, GetUserId(), ACL_SELECT);
	if (acl == ACLCHECK_OK)
		acl = pg_class_aclcheck(relid, GetUserId(), ACL_UPDATE);
	if (acl != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("permission denied to declare backfill \"%s\" over \"%s\"", name, relation),
				 errdetail("A backfill runs as its declaring role, which needs SELECT and UPDATE on the table."),
				 errhint("GRANT SELECT, UPDATE ON %s TO %s;", relation,
						 quote_identifier(GetUserNameFromId(GetUserId(), false)))));

	src->relid = relid;
	src->relation = quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
											   get_rel_name(relid));
}

/*
 * Is attnum the single column of a valid, unique, non-partial index?
 */
static bool
has_unique_index_on(Relation rel, AttrNumber attnum)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	bool		found = false;

	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = idx->rd_index;

		if (form->indisunique && form->indisvalid && form->indnkeyatts == 1 &&
			form->indkey.values[0] == attnum &&
			heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, NULL))
			found = true;
		index_close(idx, AccessShareLock);
		if (found)
			break;
	}
	list_free(indexes);
	return found;
}

/* a key of several columns (key.c): the source takes its first column and type */
static void
resolve_composite_key(const char *name, Relation rel, const char *key, int pk_n,
					  char **pk_columns, DeclaredSource *src)
{
	key_resolve_composite(name, rel, src->relation, key, pk_n, pk_columns, &src->composite);
	src->key = pstrdup(src->composite.columns[0]);
	src->keytype = src->composite.types[0];
	relation_close(rel, AccessShareLock);
}

/*
 * A key is written as text and read back by the next lane: the text of an
 * object identifier type (regclass, regtype...) names the object as the
 * session's search_path sees it, so another lane, or the same one after
 * the action moved search_path, reads another object and skips or redoes
 * batches.  Such keys (or domains and arrays of them) are refused.
 */
static void
refuse_search_path_key(const char *name, const char *column, Oid type)
{
	Oid			base = getBaseType(type);
	Oid			elem = get_base_element_type(base);

	if (OidIsValid(elem))
		base = getBaseType(elem);
	switch (base)
	{
		case REGCLASSOID:
		case REGTYPEOID:
		case REGPROCOID:
		case REGPROCEDUREOID:
		case REGOPEROID:
		case REGOPERATOROID:
		case REGCONFIGOID:
		case REGDICTIONARYOID:
		case REGNAMESPACEOID:
		case REGROLEOID:
		case REGCOLLATIONOID:
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("key column \"%s\" of backfill \"%s\" is of type %s, whose text "
							"depends on search_path", column, name, format_type_be(type)),
					 errdetail("A cursor is stored as its key's text and read back by the next "
							   "lane, which may see another object under that name."),
					 errhint("Key the backfill on a column of another type (the oid as "
							 "oid, or a unique id column).")));
			break;
		default:
			break;
	}
}

static void
resolve_key(const char *name, const char *key, DeclaredSource *src)
{
	Relation	rel = relation_open(src->relid, AccessShareLock);
	AttrNumber	attnum;
	Form_pg_attribute att;

	if (key == NULL)
	{
		Oid			pkoid;
		Relation	pk;

		list_free(RelationGetIndexList(rel));
		pkoid = rel->rd_pkindex;
		if (!OidIsValid(pkoid))
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("relation \"%s\" of backfill \"%s\" has no primary key",
							src->relation, name),
					 errdetail("Batches walk the table in key order; they need a unique, not-null key."),
					 errhint("Pass key => 'column' naming a NOT NULL column with a unique index.")));
		pk = index_open(pkoid, AccessShareLock);
		if (pk->rd_index->indnkeyatts != 1)
		{
			int			n = pk->rd_index->indnkeyatts;
			char	  **columns = palloc(sizeof(char *) * n);

			for (int i = 0; i < n; i++)
				columns[i] = get_attname(src->relid, pk->rd_index->indkey.values[i], false);
			index_close(pk, AccessShareLock);
			resolve_composite_key(name, rel, NULL, n, columns, src);
			return;
		}
		attnum = pk->rd_index->indkey.values[0];
		index_close(pk, AccessShareLock);
	}
	else if (ctid_named(name, key))
	{
		/* the heap in block order (ctid.c) */
		src->key = pstrdup("ctid");
		src->keytype = TIDOID;
		relation_close(rel, AccessShareLock);
		return;
	}
	else if (list_length(key_names(name, key)) > 1)
	{
		resolve_composite_key(name, rel, key, 0, NULL, src);
		return;
	}
	else
	{
		/* one SQL identifier: ID is id, "ID" is ID */
		key = linitial(key_names(name, key));
		attnum = get_attnum(src->relid, key);
		if (attnum == InvalidAttrNumber || attnum < 0)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("key column \"%s\" of backfill \"%s\" does not exist in \"%s\"",
							key, name, src->relation),
					 errhint("Name a column of the table, or leave key out to use the primary key.")));
		if (!has_unique_index_on(rel, attnum))
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("key column \"%s\" of backfill \"%s\" has no unique index", key, name),
					 errdetail("Batches walk the table in key order; two rows with one key could be skipped."),
					 errhint("CREATE UNIQUE INDEX ON %s (%s); then declare again.",
							 src->relation, quote_identifier(key))));
	}

	att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	if (!att->attnotnull)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("key column \"%s\" of backfill \"%s\" may be NULL",
						NameStr(att->attname), name),
				 errdetail("Rows whose key is NULL would never be visited."),
				 errhint("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL;",
						 src->relation, quote_identifier(NameStr(att->attname)))));
	src->key = pstrdup(NameStr(att->attname));
	src->keytype = att->atttypid;
	relation_close(rel, AccessShareLock);
}

/*
 * The predicate is pasted into the lanes' key scan, so it must be one
 * boolean expression and nothing else: no closing parenthesis followed by
 * a UNION, an ORDER BY or a comment that would swallow what follows it.
 * It is always pasted between newlines (see batch.c), so a "--" comment
 * cannot reach past it; here the raw parse tree must be exactly
 * SELECT 1 FROM rel WHERE (predicate).
 */
static bool
predicate_is_one_expression(List *stmts)
{
	SelectStmt *sel;

	if (list_length(stmts) != 1 ||
		!IsA(((RawStmt *) linitial(stmts))->stmt, SelectStmt))
		return false;
	sel = (SelectStmt *) ((RawStmt *) linitial(stmts))->stmt;
	return sel->op == SETOP_NONE && sel->larg == NULL && sel->rarg == NULL &&
		sel->withClause == NULL && sel->intoClause == NULL &&
		sel->distinctClause == NIL && sel->valuesLists == NIL &&
		list_length(sel->targetList) == 1 && list_length(sel->fromClause) == 1 &&
		sel->whereClause != NULL && sel->groupClause == NIL &&
		sel->havingClause == NULL && sel->windowClause == NIL &&
		sel->sortClause == NIL && sel->limitCount == NULL &&
		sel->limitOffset == NULL && sel->lockingClause == NIL;
}

/*
 * The parse tree alone cannot tell "NOT done) OR (NOT done" from a real
 * expression: wrapped in the probe's parentheses both parse.  Pasted into
 * a key scan, the first would close the scan's own parenthesis and escape
 * the partition's bounds.  So the predicate's own tokens (the server's
 * scanner: strings, quoted names and comments are single tokens) must
 * keep their parentheses balanced and never close one they did not open.
 */
static bool
parentheses_balanced(const char *text)
{
	core_yy_extra_type extra;
	core_yyscan_t scanner;
	core_YYSTYPE val;
	YYLTYPE		loc;
	int			depth = 0;
	int			token;

	scanner = scanner_init(text, &extra, &ScanKeywords, ScanKeywordTokens);
	while ((token = core_yylex(&val, &loc, scanner)) != 0)
	{
		if (token == '(' || token == '[')
			depth++;
		else if ((token == ')' || token == ']') && --depth < 0)
			break;
	}
	scanner_finish(scanner);
	return depth == 0;
}

/* an action runs inside the batch's transaction: plain DML or a SELECT */
static bool
action_is_dml(List *stmts)
{
	Node	   *stmt;

	if (list_length(stmts) != 1)
		return false;
	stmt = ((RawStmt *) linitial(stmts))->stmt;
	return IsA(stmt, SelectStmt) || IsA(stmt, InsertStmt) || IsA(stmt, UpdateStmt) ||
		IsA(stmt, DeleteStmt) || IsA(stmt, MergeStmt);
}

/*
 * Parse and analyze one statement as the caller, with its nparams
 * parameters typed (the batch's bounds, a scope's input).  expression_text: the predicate, when sql is its probe query
 * (NULL for an action).
 */
static SPIPlanPtr
check_statement(const char *name, const char *what, const char *sql, Oid *argtypes,
				int nparams, const char *expression_text, const char *hint)
{
	MemoryContext cxt = CurrentMemoryContext;
	SPIPlanPtr volatile plan = NULL;

	PG_TRY();
	{
		List	   *stmts = raw_parser(sql, RAW_PARSE_DEFAULT);

		if (list_length(stmts) != 1)
			ereport(ERROR,
					(errmsg("found %d statements where one is expected", list_length(stmts))));
		if (expression_text != NULL && (!predicate_is_one_expression(stmts) ||
							 !parentheses_balanced(expression_text)))
			ereport(ERROR,
					(errmsg("the predicate must be one boolean expression, not a query fragment")));
		if (expression_text == NULL && !action_is_dml(stmts))
			ereport(ERROR,
					(errmsg("%s must be SELECT, INSERT, UPDATE, DELETE or MERGE", what),
					 errdetail("It runs inside each batch's transaction, which commits the checkpoint.")));
		plan = SPI_prepare(sql, nparams, argtypes);
		if (plan == NULL)
			elog(ERROR, "%s", SPI_result_code_string(SPI_result));
	}
	PG_CATCH();
	{
		rethrow_as_source_invalid(cxt, name, what, hint);
	}
	PG_END_TRY();
	return plan;
}

/*
 * The predicate is evaluated again and again: by the key scan of every
 * batch and by the convergence count.  A volatile one (random(), a
 * sequence, clock_timestamp()) can answer "no rows left" while rows are
 * left, so a pass could end completed without having done them.
 */
static void
check_predicate_not_volatile(const char *name, const char *option, SPIPlanPtr plan)
{
	ListCell   *lc;

	foreach(lc, SPI_plan_get_plan_sources(plan))
	{
		CachedPlanSource *source = (CachedPlanSource *) lfirst(lc);
		ListCell   *lq;

		foreach(lq, source->query_list)
			if (contain_volatile_functions((Node *) lfirst(lq)))
				ereport(ERROR,
						(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
						 errmsg("%s of backfill \"%s\" is volatile", option, name),
						 errdetail("It calls a volatile function, so the count that proves the "
								   "backfill done could disagree with the batches."),
						 errhint("Use a stable expression over the table's columns; wrap what you "
								 "need in a function declared STABLE or IMMUTABLE only if it is.")));
	}
}

static int
interval_to_ms(const char *name, const char *option, Interval *iv, int64 max_ms)
{
	int64		us;
	int64		days_us;
	bool		overflow;

	/* the whole interval, microseconds included; one too big for int64 is out of range */
	overflow = pg_mul_s64_overflow((int64) iv->month * DAYS_PER_MONTH + iv->day, USECS_PER_DAY,
								   &days_us) ||
		pg_add_s64_overflow(iv->time, days_us, &us);
	if (overflow || us < 1000 || us > max_ms * 1000)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("%s of backfill \"%s\" is out of range", option, name),
				 errdetail("It must be between 1 millisecond and " INT64_FORMAT " seconds.",
						   max_ms / 1000),
				 errhint("Pass an interval such as '30 seconds'.")));
	return (int) (us / 1000);
}

static void
check_int_option(const char *name, const char *option, int value, int min, int max,
				 const char *hint)
{
	if (value < min || value > max)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("%s of backfill \"%s\" must be between %d and %d", option, name, min, max),
				 errdetail("It was %d.", value),
				 errhint("%s", hint)));
}

static Datum
text_array_or_null(ArrayType *arr, const char *name, bool *isnull)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	*isnull = (arr == NULL);
	if (arr == NULL)
		return (Datum) 0;
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("environments of backfill \"%s\" is an array of %d dimensions", name,
						ARR_NDIM(arr)),
				 errdetail("It is a list of environment names: one dimension."),
				 errhint("Pass environments => ARRAY['production', 'staging'].")));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("environments of backfill \"%s\" is an empty list", name),
				 errdetail("An empty list would let the backfill run nowhere."),
				 errhint("List the environments it may run in, or pass NULL for all of them.")));
	for (int i = 0; i < n; i++)
		if (nulls[i] || VARSIZE_ANY_EXHDR(DatumGetPointer(elems[i])) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
					 errmsg("environments of backfill \"%s\" contains %s", name,
							nulls[i] ? "a NULL" : "an empty name"),
					 errdetail("Element %d of the list is %s.", i + 1,
							   nulls[i] ? "NULL" : "''"),
					 errhint("List environment names such as 'production' or 'staging'.")));
	return PointerGetDatum(arr);
}

/* the owner of a function */
static Oid
function_owner(Oid fn)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", fn);
	owner = ((Form_pg_proc) GETSTRUCT(tup))->proowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * A pages or count function runs as the declarer in every batch, so it is
 * the declarer's SQL: its owner must be a role the declarer acts for (as
 * for an outbox sink).  Another role's function could be replaced by that
 * role at any time (CREATE OR REPLACE) and its new body run with the
 * declarer's privileges.  A superuser's function is allowed: its owner
 * holds every privilege already.  Its owner is recorded, and a function of
 * the same name owned by anyone else never runs (declaration.c).
 */
static void
check_function_owner(const char *name, const char *option, Oid fn)
{
	Oid			owner = function_owner(fn);

	if (!superuser_arg(owner) && !has_privs_of_role(GetUserId(), owner))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("%s function %s of backfill \"%s\" belongs to role \"%s\"",
						option, format_procedure(fn), name, GetUserNameFromId(owner, false)),
				 errdetail("It would run as the declarer in every batch, and its owner could "
						   "replace it at any time."),
				 errhint("Use a function of your own, or declare as a member of role %s.",
						 quote_identifier(GetUserNameFromId(owner, false)))));
}

/*
 * A function named by a declaration (pages source, count): it must exist
 * with the given arguments, return the given type, and be executable by
 * the role the lanes run as.
 */
static Oid
resolve_function(const char *name, const char *option, const char *fname, int nargs,
				 Oid *argtypes, Oid rettype1, Oid rettype2, Oid run_as, const char *hint)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			fn = InvalidOid;
	Oid			rettype;

	PG_TRY();
	{
		fn = LookupFuncName(compat_qualified_name_list(fname), nargs, argtypes, true);
	}
	PG_CATCH();
	{
		rethrow_as_source_invalid(cxt, name, option, hint);
	}
	PG_END_TRY();
	if (!OidIsValid(fn))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("%s function \"%s\" of backfill \"%s\" does not exist", option, fname, name),
				 errhint("%s", hint)));
	rettype = get_func_rettype(fn);
	if (rettype != rettype1 && rettype != rettype2)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("%s function \"%s\" of backfill \"%s\" returns %s", option, fname, name,
						format_type_be(rettype)),
				 errhint("%s", hint)));
	check_function_owner(name, option, fn);
	if (compat_proc_aclcheck(fn, run_as, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("permission denied to run %s function \"%s\" of backfill \"%s\"",
						option, fname, name),
				 errhint("GRANT EXECUTE ON FUNCTION %s TO %s;", format_procedure(fn),
						 quote_identifier(GetUserNameFromId(run_as, false)))));
	return fn;
}

/*
 * backfill_declare's arguments, found by name: the SQL signature must
 * carry exactly the arguments of declaration_columns, with their types.
 */
typedef struct DeclareArgs
{
	FunctionCallInfo fcinfo;
	int			nargs;
	char	  **names;
} DeclareArgs;

static void
declare_args_open(FunctionCallInfo fcinfo, DeclareArgs *a)
{
	HeapTuple	proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	Oid		   *types;
	char	   *modes;
	if (!HeapTupleIsValid(proc))
		elog(ERROR, "cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
	a->fcinfo = fcinfo;
	a->nargs = get_func_arg_info(proc, &types, &a->names, &modes);
	ReleaseSysCache(proc);

	for (int i = 0; i < a->nargs; i++)
	{
		const DeclarationColumn *col;

		col = a->names ? declaration_column_of_argument(a->names[i]) : NULL;
		if (col == NULL || col->argtype != types[i])
			elog(ERROR, "argument %d (%s) of backfill_declare is not one of the declaration's columns",
				 i + 1, a->names ? a->names[i] : "unnamed");
	}
}

/*
 * The position of an argument, -1 when the signature has none: an older
 * signature (before ALTER EXTENSION ... UPDATE) lacks the newest options,
 * which then take their defaults.
 */
static int
arg_number(const DeclareArgs *a, const char *argument)
{
	for (int i = 0; i < a->nargs; i++)
		if (strcmp(a->names[i], argument) == 0)
			return i;
	if (declaration_column_of_argument(argument) == NULL)
		elog(ERROR, "backfill_declare has no argument \"%s\"", argument);
	return -1;
}

static bool
arg_isnull(const DeclareArgs *a, const char *argument)
{
	int			i = arg_number(a, argument);

	return i < 0 || a->fcinfo->args[i].isnull;
}

static Datum
arg_datum(const DeclareArgs *a, const char *argument)
{
	return a->fcinfo->args[arg_number(a, argument)].value;
}

static char *
arg_text(const DeclareArgs *a, const char *argument)
{
	return arg_isnull(a, argument) ? NULL : TextDatumGetCString(arg_datum(a, argument));
}

static Jsonb *
arg_jsonb(const DeclareArgs *a, const char *argument)
{
	return arg_isnull(a, argument) ? NULL : DatumGetJsonbP(arg_datum(a, argument));
}

/* the signature's default of an argument, as SQL text without its quotes */
static char *
arg_default(const char *argument)
{
	const char *def = declaration_column_of_argument(argument)->argdefault;
	size_t		len = strlen(def);

	if (len >= 2 && def[0] == '\'' && def[len - 1] == '\'')
		return pnstrdup(def + 1, len - 2);
	return pstrdup(def);
}

/* an integer option; NULL takes the signature's default */
static int
arg_int_or_default(const DeclareArgs *a, const char *argument)
{
	if (arg_isnull(a, argument))
		return pg_strtoint32(arg_default(argument));
	return DatumGetInt32(arg_datum(a, argument));
}

/* an interval option in milliseconds; NULL takes the signature's default */
static int
arg_ms_or_default(const DeclareArgs *a, const char *name, const char *argument, int64 max_ms)
{
	Interval   *iv;

	if (arg_isnull(a, argument))
		iv = DatumGetIntervalP(DirectFunctionCall3(interval_in,
												   CStringGetDatum(arg_default(argument)),
												   ObjectIdGetDatum(InvalidOid),
												   Int32GetDatum(-1)));
	else
		iv = DatumGetIntervalP(arg_datum(a, argument));
	return interval_to_ms(name, argument, iv, max_ms);
}

/* batch_size and batch_timeout have defaults, but an explicit NULL is refused */
static void
refuse_null_option(const DeclareArgs *a, const char *name, const char *argument)
{
	if (arg_isnull(a, argument))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("%s of backfill \"%s\" must not be NULL", argument, name),
				 errhint("Pass %s => %s, or leave it out for the default.", argument,
						 declaration_column_of_argument(argument)->argdefault)));
}

/*
 * max_wal_rate: WAL bytes per second, written as PostgreSQL sizes are
 * ('20MB', '512kB', bytes without a unit); NULL: no budget of its own.
 */
static int64
read_wal_budget(const DeclareArgs *a, const char *name)
{
	char	   *given;
	int			bytes;
	const char *hint = NULL;

	if (arg_isnull(a, "max_wal_rate"))
		return 0;
	given = arg_text(a, "max_wal_rate");
	if (!parse_int(given, &bytes, GUC_UNIT_BYTE, &hint) || bytes < 1024)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("max_wal_rate of backfill \"%s\" is not a size from 1kB to 2GB", name),
				 errdetail("It was given as \"%s\"%s%s", given, hint ? ": " : ".", hint ? hint : ""),
				 errhint("Give the WAL bytes per second as PostgreSQL sizes are written, "
						 "for example max_wal_rate => '20MB' (units B, kB, MB, GB).")));
	return bytes;
}

/* batch size, rate, lanes, attempts, and how a batch commits */
static void
read_batch_options(const DeclareArgs *a, Declaration *d)
{
	const char *name = d->name;

	refuse_null_option(a, name, "batch_size");
	d->batch_size = DatumGetInt32(arg_datum(a, "batch_size"));
	check_int_option(name, "batch_size", d->batch_size, 1, 1000000,
					 "Rows per batch; 1000 to 10000 suits most tables.");

	d->rate = arg_isnull(a, "rate") ? backfill_default_rate :
		DatumGetFloat8(arg_datum(a, "rate"));
	/* as backfill.default_rate: below one batch in 1000 s, the wait overflows */
	if (isnan(d->rate) || isinf(d->rate) || d->rate < 0.001 || d->rate > 100000)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("rate of backfill \"%s\" must be between 0.001 and 100000", name),
				 errdetail("The rate is batches per second; pacing cannot be switched off."),
				 errhint("Pass rate => 0.5 for one batch every two seconds, or rate => 50 to go fast.")));

	d->max_wal_rate = read_wal_budget(a, name);
	d->max_parallel = arg_int_or_default(a, "max_parallel");
	check_int_option(name, "max_parallel", d->max_parallel, 1, 64,
					 "The number of lanes that may work on the backfill at once.");
	d->max_attempts = arg_int_or_default(a, "max_attempts");
	check_int_option(name, "max_attempts", d->max_attempts, 1, 100,
					 "How often a failing batch is tried before the pass fails.");
	/* NULL takes the default: a batch's commit need not wait for disk */
	d->async_commit = arg_isnull(a, "async_commit") ||
		DatumGetBool(arg_datum(a, "async_commit"));
}

/* the batch's timeouts, where it may run, and the retries' backoff */
static void
read_timing_options(const DeclareArgs *a, Declaration *d)
{
	const char *name = d->name;
	bool		environments_null;

	refuse_null_option(a, name, "batch_timeout");
	d->batch_timeout_ms = arg_ms_or_default(a, name, "batch_timeout", INT64CONST(86400000));
	if (!arg_isnull(a, "environments"))
		d->environments = DatumGetArrayTypeP(
			text_array_or_null(DatumGetArrayTypeP(arg_datum(a, "environments")),
							   name, &environments_null));
	d->backoff_base_ms = arg_ms_or_default(a, name, "backoff_base", INT64CONST(3600000));
	d->backoff_cap_ms = arg_ms_or_default(a, name, "backoff_cap", INT64CONST(86400000));
	if (d->backoff_cap_ms < d->backoff_base_ms)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("backoff_cap of backfill \"%s\" is below its backoff_base", name),
				 errhint("The cap bounds the doubling delay between attempts; make it at least the base.")));
	d->lock_timeout_ms = arg_ms_or_default(a, name, "lock_timeout", INT64CONST(3600000));
}

/* the adaptive batch size: its target time and bounds */
static void
read_adaptive_options(const DeclareArgs *a, Declaration *d)
{
	const char *name = d->name;

	d->target_batch_ms = arg_isnull(a, "target_batch_time") ? 0 :
		arg_ms_or_default(a, name, "target_batch_time", INT64CONST(600000));
	d->min_batch_size = arg_isnull(a, "min_batch_size") ? Min(d->batch_size, 100) :
		DatumGetInt32(arg_datum(a, "min_batch_size"));
	check_int_option(name, "min_batch_size", d->min_batch_size, 1, 1000000,
					 "The adaptive batch size never goes below it.");
	d->max_batch_size = arg_isnull(a, "max_batch_size") ? Max(d->batch_size, 100000) :
		DatumGetInt32(arg_datum(a, "max_batch_size"));
	check_int_option(name, "max_batch_size", d->max_batch_size, 1, 1000000,
					 "The adaptive batch size never goes above it.");
	if (d->batch_size < d->min_batch_size || d->batch_size > d->max_batch_size)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("batch_size of backfill \"%s\" is outside min_batch_size..max_batch_size", name),
				 errdetail("batch_size is %d; the bounds are %d and %d.",
						   d->batch_size, d->min_batch_size, d->max_batch_size),
				 errhint("The batch size starts at batch_size and adapts within the bounds; "
						 "make batch_size lie between them.")));
}

/*
 * The rest of a backfill's life: how many isolated rows a pass tolerates,
 * the SQL that undoes it, and how often a completed backfill is watched
 * for drift.  (The revert's statements are checked with the source.)
 */
static void
read_lifecycle_options(const DeclareArgs *a, Declaration *d)
{
	const char *name = d->name;

	d->max_failed_rows = arg_int_or_default(a, "max_failed_rows");
	check_int_option(name, "max_failed_rows", d->max_failed_rows, 0, 1000000,
					 "How many rows that fail on their own a pass skips and records; 0 fails the pass at the first.");
	d->revert = arg_text(a, "revert");
	d->revert_predicate = arg_text(a, "revert_predicate");
	d->watch_ms = arg_isnull(a, "watch") ? 0 :
		arg_ms_or_default(a, name, "watch", INT64CONST(86400000));
}

/*
 * When the lanes may work: throttle_when (checked with the statements,
 * check_throttle_when) and the windows in their time zone, which defaults
 * to the server's TimeZone as a new session has it, stored so that the
 * scheduler, the lanes and backfill_status read the same zone.
 */
static void
read_when_options(const DeclareArgs *a, Declaration *d)
{
	d->throttle_when = arg_text(a, "throttle_when");
	if (d->throttle_when != NULL && strspn(d->throttle_when, " \t\r\n") == strlen(d->throttle_when))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("throttle_when of backfill \"%s\" is empty", d->name),
				 errhint("Write one SQL boolean expression, true while the lanes must hold back, "
						 "or leave throttle_when out.")));
	d->window_time_zone = arg_text(a, "window_time_zone");
	if (!arg_isnull(a, "windows"))
		d->windows = DatumGetArrayTypeP(arg_datum(a, "windows"));
	if (d->windows != NULL && d->window_time_zone == NULL)
		d->window_time_zone = pstrdup(GetConfigOptionResetString("TimeZone"));
	(void) windows_parse(d->name, d->windows, d->window_time_zone);
}

/* scope, tenancy, run_as and requirements; returns run_as's name */
static char *
read_trust_options(const DeclareArgs *a, Declaration *d)
{
	const char *name = d->name;
	char	   *run_as_name = arg_text(a, "run_as");

	d->input_shape = arg_jsonb(a, "input");
	d->scope = arg_text(a, "scope");
	d->settings = arg_jsonb(a, "settings");
	/* no settings, however written: '{}' is the declaration without them */
	if (d->settings != NULL && JB_ROOT_IS_OBJECT(d->settings) && JB_ROOT_COUNT(d->settings) == 0)
		d->settings = NULL;
	d->tenant = arg_text(a, "tenant");
	d->requires = arg_text(a, "requires");
	d->requires_backfill = arg_text(a, "requires_backfill");

	scope_check_declaration(name, d->input_shape, d->scope);
	if (d->input_shape != NULL && d->watch_ms > 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("scoped backfill \"%s\" cannot be watched", name),
				 errdetail("A watch heals drift with catch-up passes of the whole table; a scoped "
						   "backfill's passes each need an input."),
				 errhint("Leave watch out, and run each scope again with backfill_run('%s', "
						 "input => ...) when it drifts.", name)));
	tenancy_check_settings(name, d->settings, d->tenant, d->input_shape);
	d->run_as = tenancy_run_as(name, run_as_name);
	if (d->requires != NULL && d->requires[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("requires of backfill \"%s\" is an empty migration id", name),
				 errhint("Name the schema migration that must be applied first, or leave requires out.")));
	if (d->requires_backfill != NULL && strcmp(d->requires_backfill, name) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("backfill \"%s\" cannot require itself", name),
				 errhint("Name another backfill that must complete first.")));
	return run_as_name ? run_as_name : GetUserNameFromId(d->run_as, false);
}

/* a pages source: the pages function and its optional count function */
static void
resolve_pages_source(const DeclareArgs *a, Declaration *d)
{
	const char *name = d->name;
	Oid			page_args[2] = {TEXTOID, JSONBOID};
	Oid			count_args[1] = {JSONBOID};
	char	   *count_function = arg_text(a, "count_function");

	if (!arg_isnull(a, "relation") || !arg_isnull(a, "key") || !arg_isnull(a, "predicate"))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" names both a relation and a pages source", name),
				 errdetail("A pages source has no relation, key or predicate: the function "
						   "decides what each page holds."),
				 errhint("Pass either relation (with predicate) or pages (with an optional "
						 "count_function), not both.")));
	d->pages_fn = resolve_function(name, "pages", arg_text(a, "pages"), 2, page_args,
								   JSONBOID, JSONBOID, d->run_as,
								   "A pages function takes (cursor text, input jsonb) and returns "
								   "jsonb: {\"rows\": [...], \"next\": \"cursor\" or null}.");
	d->pages_owner = function_owner(d->pages_fn);
	if (count_function != NULL)
	{
		d->count_fn = resolve_function(name, "count", count_function, 1, count_args, INT8OID,
									   INT4OID, d->run_as,
									   "A count function takes (input jsonb) and returns the "
									   "bigint number of rows still to do.");
		d->count_owner = function_owner(d->count_fn);
	}
}

/* a table source: the relation (rewritable by run_as too), its key and predicate */
static void
resolve_table_source(const DeclareArgs *a, Declaration *d, const char *run_as_name)
{
	const char *name = d->name;
	char	   *relation = arg_text(a, "relation");
	DeclaredSource src;

	if (!arg_isnull(a, "count_function"))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" has a count function but no pages source", name),
				 errhint("For a relation the predicate is the count; leave count_function out.")));
	if (relation == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" names no source", name),
				 errhint("Pass relation => 'schema.table' (with predicate), or pages => "
						 "'page_function' for a remote source.")));
	memset(&src, 0, sizeof(src));
	resolve_relation(name, relation, &src);
	if (d->run_as != GetUserId() &&
		(pg_class_aclcheck(src.relid, d->run_as, ACL_SELECT) != ACLCHECK_OK ||
		 pg_class_aclcheck(src.relid, d->run_as, ACL_UPDATE) != ACLCHECK_OK))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("role \"%s\" may not rewrite \"%s\" for backfill \"%s\"",
						run_as_name, src.relation, name),
				 errhint("GRANT SELECT, UPDATE ON %s TO %s;", src.relation,
						 quote_identifier(run_as_name))));
	resolve_key(name, arg_text(a, "key"), &src);
	if (src.composite.nkeys > 1)
		for (int i = 0; i < src.composite.nkeys; i++)
			refuse_search_path_key(name, src.composite.columns[i], src.composite.types[i]);
	else
		refuse_search_path_key(name, src.key, src.keytype);
	d->relid = src.relid;
	d->relation = src.relation;
	d->key_column = src.key;
	d->key_type = src.keytype;
	if (src.composite.nkeys > 1 && !catalog_has_column("declaration", "key_columns"))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CATALOG_VERSION),
				 errmsg("cannot declare backfill \"%s\" with a composite key: the catalogs of "
						"pg_backfill are older than version 0.5", name),
				 errdetail("The key (%s) has %d columns; the catalogs in this database have no "
						   "column for them and would keep only the first.",
						   key_column_list(&src.composite), src.composite.nkeys),
				 errhint("Run ALTER EXTENSION pg_backfill UPDATE; in this database, then "
						 "declare it again.")));
	if (src.composite.nkeys > 1)
	{
		d->key_columns = src.composite.key_columns;
		d->key_types = src.composite.key_types;
	}
	d->predicate = arg_text(a, "predicate");
	if (d->predicate == NULL || d->predicate[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" has no predicate", name),
				 errdetail("The predicate selects the rows that still need work; it is also "
						   "how the pass proves it is done."),
				 errhint("Pass predicate => 'total IS NULL', true for rows still to do.")));
	tenancy_check_rls(name, d->relid, d->relation, d->run_as, d->settings, d->tenant);
}

/* a composite key's columns as a list for a message: "t, id" */
static char *
key_column_list(const KeyResolved *key)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < key->nkeys; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? ", " : "", key->columns[i]);
	return buf.data;
}

/*
 * A batch's action or revert: $1 and $2 the first and last key, or for a
 * composite key of k columns $1..$k and $k+1..$2k, every one of them used
 * (key.c).  one_column_hint: the hint for a key of one column.
 */
static SPIPlanPtr
check_batch_statement(const Declaration *d, const char *what, const char *sql,
					  const char *one_column_hint)
{
	Oid			types[2 * DECLARATION_MAX_KEY_COLUMNS] = {d->key_type, d->key_type};
	KeyResolved key;
	SPIPlanPtr	plan;

	if (d->key_columns == NULL)
	{
		plan = check_statement(d->name, what, sql, types, 2, NULL, one_column_hint);
		key.nkeys = 1;
		key.columns = (char **) palloc(sizeof(char *));
		key.columns[0] = d->key_column;
		key.types[0] = d->key_type;
		key_check_action(d->name, what, sql, &key);
		return plan;
	}
	key_from_declaration(d, &key);
	for (int i = 0; i < 2 * key.nkeys; i++)
		types[i] = key.types[i % key.nkeys];
	plan = check_statement(d->name, what, sql, types, 2 * key.nkeys, NULL,
						   psprintf("Write one DML statement over the batch's range, %s; wrap "
									"anything else in a function and SELECT it.",
									key_action_form(key.nkeys, key.columns)));
	key_check_action(d->name, what, sql, &key);
	return plan;
}

/*
 * The way back, checked as the action and the predicate are: the revert
 * takes the action's parameters, the revert predicate none, and neither may
 * be anything but one statement or one stable boolean expression.  A
 * revert predicate needs a revert to select rows for, and a table to
 * select them from.
 */
static void
check_revert_statements(const Declaration *d)
{
	StringInfoData sql;

	if (d->revert_predicate != NULL && d->revert == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" has a revert_predicate but no revert", d->name),
				 errdetail("The revert predicate selects the rows a revert pass undoes; "
						   "without a revert there is no such pass."),
				 errhint("Pass revert => 'UPDATE ... WHERE id BETWEEN $1 AND $2' as well, or "
						 "leave revert_predicate out.")));
	if (d->revert_predicate != NULL && OidIsValid(d->pages_fn))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" has a revert_predicate but a pages source", d->name),
				 errdetail("A pages source has no predicate: its revert walks the pages again."),
				 errhint("Leave revert_predicate out for a pages source.")));
	if (d->revert == NULL)
		return;
	if (d->revert[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" has an empty revert", d->name),
				 errhint("Pass the SQL that undoes the action, or leave revert out.")));
	if (d->revert_predicate != NULL)
	{
		initStringInfo(&sql);
		appendStringInfo(&sql, "SELECT 1 FROM %s WHERE (\n%s\n)", d->relation,
						 d->revert_predicate);
		check_predicate_not_volatile(d->name, "revert_predicate",
									 check_statement(d->name, "the revert predicate", sql.data,
													 NULL, 0, d->revert_predicate,
													 "Write a boolean SQL expression over the "
													 "table's columns, true for rows still to "
													 "undo, such as 'c IS NOT NULL'."));
	}
	if (OidIsValid(d->pages_fn))
	{
		Oid			jsonb_type[1] = {JSONBOID};

		check_statement(d->name, "the revert", d->revert, jsonb_type, 1, NULL,
						"Write one DML statement that undoes the action; $1 is the page's rows "
						"as a jsonb array.");
	}
	else
		check_batch_statement(d, "the revert", d->revert,
							  "Write one DML statement that undoes the action; $1 and $2 are the "
							  "first and last key of the batch.");
}

/* the predicate, the scope, the action and the revert parse and plan as the caller; d->guarded found */
static void
check_statements(Declaration *d)
{
	Oid			jsonb_type[1] = {JSONBOID};
	StringInfoData sql;
	SPIPlanPtr	predicate_plan = NULL;

	if (!OidIsValid(d->pages_fn))
	{
		initStringInfo(&sql);
		appendStringInfo(&sql, "SELECT 1 FROM %s WHERE (\n%s\n)", d->relation, d->predicate);
		predicate_plan = check_statement(d->name, "the predicate", sql.data, NULL, 0,
										 d->predicate,
										 "Write a boolean SQL expression over the table's "
										 "columns, such as 'c IS NULL'.");
		check_predicate_not_volatile(d->name, "predicate", predicate_plan);
	}
	if (d->scope != NULL)
	{
		initStringInfo(&sql);
		appendStringInfo(&sql, "SELECT 1 FROM (SELECT $1::jsonb AS input) s WHERE (\n(\n%s\n) IS NOT NULL\n)",
						 d->scope);
		check_statement(d->name, "the scope", sql.data, jsonb_type, 1, d->scope,
						"Write an expression over input, such as input->>'tenant_id'.");
	}
	/* a page's action gets the rows ($1); a batch's the first and last key */
	if (OidIsValid(d->pages_fn))
		check_statement(d->name, "the action", d->action, jsonb_type, 1, NULL,
						"Write one DML statement; $1 is the page's rows as a jsonb array.");
	else if (d->action_set != NULL)
		action_check_guard(d, predicate_plan,
						   check_batch_statement(d, "set", d->action,
												 "Pass only what follows SET, assignments over "
												 "the table's columns, such as set => "
												 "'total_cents = total * 100'."));
	else
		d->guarded = action_check_guard(d, predicate_plan,
						   check_batch_statement(d, "the action", d->action,
												 "Write one DML statement; $1 and $2 are the "
												 "first and last key of the batch; wrap anything "
												 "else in a function and SELECT it."));
	check_revert_statements(d);
}

/* "SELECT (\ncondition\n)" parsed: one expression, nothing around it */
static bool
condition_is_one_expression(List *stmts)
{
	SelectStmt *sel;

	if (list_length(stmts) != 1 ||
		!IsA(((RawStmt *) linitial(stmts))->stmt, SelectStmt))
		return false;
	sel = (SelectStmt *) ((RawStmt *) linitial(stmts))->stmt;
	return sel->op == SETOP_NONE && sel->withClause == NULL && sel->intoClause == NULL &&
		sel->distinctClause == NIL && sel->valuesLists == NIL &&
		list_length(sel->targetList) == 1 && sel->fromClause == NIL &&
		sel->whereClause == NULL && sel->groupClause == NIL && sel->havingClause == NULL &&
		sel->windowClause == NIL && sel->sortClause == NIL && sel->limitCount == NULL &&
		sel->limitOffset == NULL && sel->lockingClause == NIL;
}

/*
 * throttle_when must be one boolean expression.  It is parsed and analyzed
 * here, as the caller under the search_path the lanes will use, and never
 * run: analysis resolves names and types but calls no function, so no
 * user code runs in the caller's session.  A lane evaluates it
 * (condition.c), as run_as, restricted, with timeouts.
 */
static void
check_throttle_when(const Declaration *d)
{
	MemoryContext cxt = CurrentMemoryContext;
	const char *hint = "Write one SQL boolean expression, true while the lanes must hold back, "
		"such as 'EXISTS (SELECT 1 FROM ops.freeze)' or 'ops.busy()'; it may read tables and "
		"call functions the run_as role may use.";

	if (d->throttle_when == NULL)
		return;
	PG_TRY();
	{
		char	   *sql = psprintf(CONDITION_SQL, d->throttle_when);
		List	   *stmts = raw_parser(sql, RAW_PARSE_DEFAULT);
		SPIPlanPtr	plan;
		CachedPlanSource *source;

		if (!condition_is_one_expression(stmts) || !parentheses_balanced(d->throttle_when))
			ereport(ERROR,
					(errmsg("it must be one boolean expression, not a query fragment")));
		plan = SPI_prepare(sql, 0, NULL);
		if (plan == NULL)
			elog(ERROR, "%s", SPI_result_code_string(SPI_result));
		source = linitial(SPI_plan_get_plan_sources(plan));
		if (source->resultDesc == NULL || source->resultDesc->natts != 1 ||
			TupleDescAttr(source->resultDesc, 0)->atttypid != BOOLOID)
			ereport(ERROR,
					(errmsg("it is of type %s, not boolean",
							source->resultDesc && source->resultDesc->natts == 1 ?
							format_type_be(TupleDescAttr(source->resultDesc, 0)->atttypid) :
							"(none)")));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("throttle_when of backfill \"%s\" is not valid", d->name),
				 errdetail("%s", edata->message),
				 errhint("%s", hint)));
	}
	PG_END_TRY();
}

/* two text[] alike, NULL alike */
static bool
text_array_alike(ArrayType *a, ArrayType *b)
{
	if (a == NULL || b == NULL)
		return a == NULL && b == NULL;
	return DatumGetBool(OidFunctionCall2Coll(F_ARRAY_EQ, DEFAULT_COLLATION_OID,
											 PointerGetDatum(a), PointerGetDatum(b)));
}

/* two texts alike, NULL alike */
static bool
text_equal(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/*
 * Inside the catalog scope, with the row locked: a name declared by a role
 * the caller is not a member of is refused, and so is a new checksum while
 * a pass runs.  Lanes waiting out the old rate read the new one at once.
 */
static void
check_redeclaration(const Declaration *d)
{
	Declaration old;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(d->name)};
	bool		running;
	bool		reverting;
	bool		isnull;

	if (!declaration_lock(d->name, &old))
		return;
	catalog_exec(psprintf("SELECT EXISTS (SELECT 1 FROM backfill.ledger l"
						  "                WHERE l.declaration = $1 AND l.status = 'running'),"
						  "       EXISTS (SELECT 1 FROM backfill.ledger l"
						  "                WHERE l.declaration = $1 AND l.status = 'running'"
						  "                  AND %s = 'revert')", ledger_direction_sql("l")),
				 1, types, values, NULL, SPI_OK_SELECT);
	running = DatumGetBool(catalog_getdatum(0, 1, &isnull));
	reverting = DatumGetBool(catalog_getdatum(0, 2, &isnull));

	if (!has_privs_of_role(d->owner, old.owner))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_DUPLICATE),
				 errmsg("backfill \"%s\" is already declared by role \"%s\"", d->name,
						GetUserNameFromId(old.owner, true) ?
						GetUserNameFromId(old.owner, true) : "(dropped)"),
				 errhint("Choose another name, or re-declare it as a member of that role.")));
	/* a retired backfill's declaration is its history: it stays as it was */
	check_not_retired(d->name, "be declared again");
	if (running)
		backfill_wake_lanes_at_commit(0, false);
	/* new windows: the scheduler looks again at once (it may sleep until a window's start) */
	if (running && !text_array_alike(old.windows, d->windows))
		backfill_wake_scheduler_at_commit();
	if (running && strcmp(old.checksum, d->checksum) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CHANGED),
				 errmsg("backfill \"%s\" cannot be redefined while a pass is running", d->name),
				 errdetail("The running pass started with checksum %s; the new definition has %s.",
						   old.checksum, d->checksum),
				 errhint("Wait for the pass to end, or cancel it, then declare again.")));
	/* the revert is outside the checksum, so a revert pass guards it here */
	if (reverting && (!text_equal(old.revert, d->revert) ||
					  !text_equal(old.revert_predicate, d->revert_predicate)))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CHANGED),
				 errmsg("backfill \"%s\" cannot change its revert while a revert pass is running",
						d->name),
				 errdetail("The lanes of the revert pass run the revert it started with."),
				 errhint("Wait for the revert pass to end, or cancel it, then declare again.")));
	/* the lanes read max_failed_rows again at each row that fails alone (poison.c) */
	if (running && old.max_failed_rows != d->max_failed_rows)
		ereport(NOTICE,
				(errmsg("backfill \"%s\": max_failed_rows => %d applies to the running pass at "
						"its next row that fails alone", d->name, d->max_failed_rows),
				 errdetail("The running pass tolerated %d; it ends failed (BF018) when it has "
						   "recorded more rows than the new bound.", old.max_failed_rows),
				 errhint("backfill_failed_rows('%s') lists the rows it has recorded so far.",
						 d->name)));
	/* a lane reads async_commit when it starts */
	if (running && old.async_commit != d->async_commit)
		ereport(NOTICE,
				(errmsg("backfill \"%s\": async_commit => %s applies to lanes started from now on",
						d->name, d->async_commit ? "true" : "false"),
				 errdetail("The lanes of the running pass keep committing %s.",
						   old.async_commit ? "asynchronously" : "synchronously"),
				 errhint("Pause and resume the pass to apply it now: its lanes start again "
						 "and read it.")));
}

/*
 * What runs per batch: an action as written, or set => / delete => for the
 * engine to write (action.c), exactly one; guard => false lets a
 * hand-written UPDATE or DELETE of the relation leave the predicate out
 * (catalogs older than 0.6, whose signature cannot say it, are not
 * guarded: the guard comes with ALTER EXTENSION ... UPDATE).
 */
static void
read_action_options(const DeclareArgs *a, Declaration *d)
{
	int			given;

	d->action = arg_text(a, "action");
	d->action_set = arg_text(a, "set");
	d->action_delete = !arg_isnull(a, "delete") && DatumGetBool(arg_datum(a, "delete"));
	/* under catalogs older than 0.6 no signature can say guard => false: not guarded */
	d->guard = arg_isnull(a, "guard") ? catalog_has_column("declaration", "guard") :
		DatumGetBool(arg_datum(a, "guard"));
	given = (d->action != NULL) + (d->action_set != NULL) + d->action_delete;
	if (given > 1)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" declares more than one of action, set and delete",
						d->name),
				 errdetail("set and delete declare the statement the engine writes; action is "
						   "one written by hand."),
				 errhint("Pass set => 'c = a * 2' (an UPDATE), delete => true (a DELETE of the "
						 "rows that match the predicate), or action => '...', only one.")));
	if ((d->action == NULL && given == 0) || (d->action != NULL && d->action[0] == '\0') ||
		(d->action_set != NULL && d->action_set[0] == '\0'))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" has no action", d->name),
				 errdetail("Each batch runs the action over its key range."),
				 errhint("Pass set => 'c = a * 2' and the engine writes the UPDATE (the batch's "
						 "range AND the predicate), delete => true for a DELETE, or action => "
						 "'...' for a statement of your own.")));
	if (d->action == NULL && !arg_isnull(a, "pages"))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" has a pages source and %s", d->name,
						d->action_set ? "set" : "delete"),
				 errdetail("The engine writes a statement over a relation's key range; a pages "
						   "source has neither."),
				 errhint("Write the action for the page's rows ($1, jsonb) by hand.")));
}

/*
 * backfill_declare(name, relation, predicate, action, ...): everything is
 * resolved and checked as the caller, in the steps above, before the row
 * is written as the extension's owner.
 */
Datum
backfill_declare(PG_FUNCTION_ARGS)
{
	DeclareArgs args;
	Declaration decl;
	char	   *run_as_name;
	CatalogScope scope;

	declare_args_open(fcinfo, &args);
	memset(&decl, 0, sizeof(decl));
	decl.name = arg_text(&args, "name");
	decl.owner = GetUserId();
	check_new_backfill_name(decl.name);
	check_not_standby("declare backfill", decl.name);
	/* a declaration that returned its checksum survives a crash (synchronous_commit aside) */
	ForceSyncCommit();

	read_batch_options(&args, &decl);
	read_timing_options(&args, &decl);
	read_adaptive_options(&args, &decl);
	read_lifecycle_options(&args, &decl);
	read_when_options(&args, &decl);
	run_as_name = read_trust_options(&args, &decl);

	read_action_options(&args, &decl);

	/* the source: a local relation or a pages function, exactly one */
	if (!arg_isnull(&args, "pages"))
		resolve_pages_source(&args, &decl);
	else
		resolve_table_source(&args, &decl, run_as_name);
	if (decl.action == NULL)
		decl.action = action_generate(&decl);

	check_role_can_login(decl.name, decl.run_as);
	decl.checksum = declaration_checksum(&decl);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/* never a Citus shard, nor a Citus table off the coordinator (citus.c) */
	if (OidIsValid(decl.relid))
		citus_check_declarable(decl.name, decl.relid);

	/* only a backfill of a role the declarer is a member of (checked at run too) */
	requires_check_backfill(decl.name, decl.owner, decl.requires_backfill);
	check_statements(&decl);
	ctid_check_declaration(&decl);
	check_throttle_when(&decl);

	/* stored as the extension's owner; lanes resolve names as the declarer did */
	decl.search_path = pstrdup(GetConfigOption("search_path", false, false));
	catalog_enter(&scope);
	check_redeclaration(&decl);
	declaration_store(&decl);
	catalog_leave(&scope);
	/* a watch needs the scheduler: one that left idle comes back at commit */
	if (decl.watch_ms > 0)
		backfill_wake_scheduler_at_commit();

	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(decl.checksum));
}
