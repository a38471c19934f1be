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

#include <math.h>

#include "access/htup_details.h"
#include "access/genam.h"
#include "access/relation.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "common/cryptohash.h"
#include "common/keywords.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "fmgr.h"
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
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "parser/parse_func.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/plancache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "pg_backfill.h"
#include "catalog.h"
#include "declare.h"
#include "errors.h"
#include "requires.h"
#include "scope.h"
#include "shmem.h"
#include "tenancy.h"

PG_FUNCTION_INFO_V1(backfill_declare);

/* the resolved source of a declaration */
typedef struct DeclaredSource
{
	Oid			relid;
	char	   *relation;		/* schema-qualified, quoted */
	char	   *key;			/* key column name */
	Oid			keytype;
} DeclaredSource;

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

char *
declaration_checksum(const char *relation, const char *key,
					 const char *predicate, const char *action, const char *extra)
{
	StringInfoData buf;
	pg_cryptohash_ctx *ctx;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char	   *hex = palloc(PG_SHA256_DIGEST_LENGTH * 2 + 1);

	initStringInfo(&buf);
	appendStringInfo(&buf, "pg_backfill declaration v1\nrelation %s\nkey %s\n",
					 relation ? relation : "", key ? key : "");
	appendStringInfoString(&buf, "predicate ");
	append_normalized(&buf, predicate ? predicate : "");
	appendStringInfoString(&buf, "action ");
	append_normalized(&buf, action);
	/* the rest of what decides what is done: source, scope, tenancy */
	if (extra != NULL)
		append_normalized(&buf, extra);

	ctx = pg_cryptohash_create(PG_SHA256);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (uint8 *) buf.data, buf.len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute the sha256 checksum of a declaration: %s",
			 pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);

	for (int i = 0; i < PG_SHA256_DIGEST_LENGTH; i++)
		sprintf(hex + 2 * i, "%02x", digest[i]);
	pfree(buf.data);
	return hex;
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
			index_close(pk, AccessShareLock);
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("the primary key of \"%s\" has several columns; backfill \"%s\" needs one",
							src->relation, name),
					 errdetail("Composite keys are not supported in this version."),
					 errhint("Pass key => 'column' naming a NOT NULL column with a unique index.")));
		}
		attnum = pk->rd_index->indkey.values[0];
		index_close(pk, AccessShareLock);
	}
	else
	{
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
 * Parse and analyze one statement as the caller, with the batch's bounds
 * typed.  expression_text: the predicate, when sql is its probe query
 * (NULL for an action).
 */
static SPIPlanPtr
check_statement(const char *name, const char *what, const char *sql, Oid keytype,
				const char *expression_text, const char *hint)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			argtypes[2] = {keytype, keytype};
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
					(errmsg("the action must be SELECT, INSERT, UPDATE, DELETE or MERGE"),
					 errdetail("It runs inside each batch's transaction, which commits the checkpoint.")));
		plan = SPI_prepare(sql, 2, argtypes);
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
check_predicate_not_volatile(const char *name, SPIPlanPtr plan)
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
						 errmsg("predicate of backfill \"%s\" is volatile", name),
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

	us = iv->time + (int64) iv->day * USECS_PER_DAY +
		(int64) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
	if (us < 1000 || us / 1000 > max_ms)
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
					 errmsg("environments of backfill \"%s\" contains an empty name", name),
					 errhint("List environment names such as 'production' or 'staging'.")));
	return PointerGetDatum(arr);
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
	if (compat_proc_aclcheck(fn, run_as, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("permission denied to run %s function \"%s\" of backfill \"%s\"",
						option, fname, name),
				 errhint("GRANT EXECUTE ON FUNCTION %s TO %s;", format_procedure(fn),
						 quote_identifier(GetUserNameFromId(run_as, false)))));
	return fn;
}

#define ARG_TEXT(n) (PG_ARGISNULL(n) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(n)))

Datum
backfill_declare(PG_FUNCTION_ARGS)
{
	char	   *name = ARG_TEXT(0);
	char	   *relation = ARG_TEXT(1);
	char	   *predicate = ARG_TEXT(2);
	char	   *action = ARG_TEXT(3);
	char	   *key = ARG_TEXT(4);
	DeclaredSource src;
	int			batch_size;
	double		rate;
	int			max_parallel;
	int			max_attempts;
	int			batch_timeout_ms;
	int			backoff_base_ms;
	int			backoff_cap_ms;
	int			lock_timeout_ms;
	int			target_batch_ms;
	int			min_batch_size;
	int			max_batch_size;
	Datum		environments;
	bool		environments_null;
	char	   *checksum;
	StringInfoData sql;
	CatalogScope scope;
	Oid			owner = GetUserId();
	Jsonb	   *input_shape = PG_ARGISNULL(17) ? NULL : PG_GETARG_JSONB_P(17);
	char	   *scope_expr = ARG_TEXT(18);
	char	   *pages = ARG_TEXT(19);
	char	   *count_function = ARG_TEXT(20);
	char	   *requires = ARG_TEXT(21);
	char	   *requires_backfill = ARG_TEXT(22);
	char	   *run_as_name = ARG_TEXT(23);
	Jsonb	   *settings = PG_ARGISNULL(24) ? NULL : PG_GETARG_JSONB_P(24);
	char	   *tenant = ARG_TEXT(25);
	Oid			run_as;
	Oid			pages_fn = InvalidOid;
	Oid			count_fn = InvalidOid;
	char	   *declared_search_path;

	check_backfill_name(name);
	check_not_standby("declare backfill", name);

	/* the options */
	if (PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("batch_size of backfill \"%s\" must not be NULL", name),
				 errhint("Pass batch_size => 1000, or leave it out for the default.")));
	batch_size = PG_GETARG_INT32(5);
	check_int_option(name, "batch_size", batch_size, 1, 1000000,
					 "Rows per batch; 1000 to 10000 suits most tables.");

	rate = PG_ARGISNULL(6) ? backfill_default_rate : PG_GETARG_FLOAT8(6);
	if (isnan(rate) || isinf(rate) || rate <= 0 || rate > 100000)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("rate of backfill \"%s\" must be above 0 and at most 100000", name),
				 errdetail("The rate is batches per second; pacing cannot be switched off."),
				 errhint("Pass rate => 0.5 for one batch every two seconds, or rate => 50 to go fast.")));

	max_parallel = PG_ARGISNULL(7) ? 1 : PG_GETARG_INT32(7);
	check_int_option(name, "max_parallel", max_parallel, 1, 64,
					 "The number of lanes that may work on the backfill at once.");
	max_attempts = PG_ARGISNULL(8) ? 5 : PG_GETARG_INT32(8);
	check_int_option(name, "max_attempts", max_attempts, 1, 100,
					 "How often a failing batch is tried before the pass fails.");
	if (PG_ARGISNULL(9))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("batch_timeout of backfill \"%s\" must not be NULL", name),
				 errhint("Pass batch_timeout => '1 minute', or leave it out for the default.")));
	batch_timeout_ms = interval_to_ms(name, "batch_timeout", PG_GETARG_INTERVAL_P(9),
									  INT64CONST(86400000));
	environments = text_array_or_null(PG_ARGISNULL(10) ? NULL : PG_GETARG_ARRAYTYPE_P(10),
									  name, &environments_null);
	backoff_base_ms = PG_ARGISNULL(11) ? 1000 :
		interval_to_ms(name, "backoff_base", PG_GETARG_INTERVAL_P(11), INT64CONST(3600000));
	backoff_cap_ms = PG_ARGISNULL(12) ? 60000 :
		interval_to_ms(name, "backoff_cap", PG_GETARG_INTERVAL_P(12), INT64CONST(86400000));
	if (backoff_cap_ms < backoff_base_ms)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("backoff_cap of backfill \"%s\" is below its backoff_base", name),
				 errhint("The cap bounds the doubling delay between attempts; make it at least the base.")));

	lock_timeout_ms = PG_ARGISNULL(13) ? 2000 :
		interval_to_ms(name, "lock_timeout", PG_GETARG_INTERVAL_P(13), INT64CONST(3600000));
	target_batch_ms = PG_ARGISNULL(14) ? 0 :
		interval_to_ms(name, "target_batch_time", PG_GETARG_INTERVAL_P(14), INT64CONST(600000));
	min_batch_size = PG_ARGISNULL(15) ? Min(batch_size, 100) : PG_GETARG_INT32(15);
	check_int_option(name, "min_batch_size", min_batch_size, 1, 1000000,
					 "The adaptive batch size never goes below it.");
	max_batch_size = PG_ARGISNULL(16) ? Max(batch_size, 100000) : PG_GETARG_INT32(16);
	check_int_option(name, "max_batch_size", max_batch_size, 1, 1000000,
					 "The adaptive batch size never goes above it.");
	if (batch_size < min_batch_size || batch_size > max_batch_size)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("batch_size of backfill \"%s\" is outside min_batch_size..max_batch_size", name),
				 errdetail("batch_size is %d; the bounds are %d and %d.",
						   batch_size, min_batch_size, max_batch_size),
				 errhint("The batch size starts at batch_size and adapts within the bounds; "
						 "make batch_size lie between them.")));

	/* scope, tenancy and requirements */
	scope_check_declaration(name, input_shape, scope_expr);
	tenancy_check_settings(name, settings, tenant);
	run_as = tenancy_run_as(name, run_as_name);
	if (requires != NULL && requires[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("requires of backfill \"%s\" is an empty migration id", name),
				 errhint("Name the schema migration that must be applied first, or leave requires out.")));
	if (requires_backfill != NULL && strcmp(requires_backfill, name) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("backfill \"%s\" cannot require itself", name),
				 errhint("Name another backfill that must complete first.")));

	if (action == NULL || action[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" has no action", name),
				 errhint("Pass action => 'UPDATE t SET c = a * 2 WHERE id BETWEEN $1 AND $2 AND c IS NULL'.")));

	/* the source: a local relation or a pages function, exactly one */
	memset(&src, 0, sizeof(src));
	if (pages != NULL)
	{
		Oid			page_args[2] = {TEXTOID, JSONBOID};
		Oid			count_args[1] = {JSONBOID};

		if (relation != NULL || key != NULL || predicate != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("backfill \"%s\" names both a relation and a pages source", name),
					 errdetail("A pages source has no relation, key or predicate: the function "
							   "decides what each page holds."),
					 errhint("Pass either relation (with predicate) or pages (with an optional "
							 "count_function), not both.")));
		pages_fn = resolve_function(name, "pages", pages, 2, page_args, JSONBOID, JSONBOID, run_as,
									"A pages function takes (cursor text, input jsonb) and returns "
									"jsonb: {\"rows\": [...], \"next\": \"cursor\" or null}.");
		if (count_function != NULL)
			count_fn = resolve_function(name, "count", count_function, 1, count_args, INT8OID,
										INT4OID, run_as,
										"A count function takes (input jsonb) and returns the "
										"bigint number of rows still to do.");
		src.keytype = JSONBOID;
	}
	else
	{
		if (count_function != NULL)
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
		resolve_relation(name, relation, &src);
		if (run_as != GetUserId() &&
			(pg_class_aclcheck(src.relid, run_as, ACL_SELECT) != ACLCHECK_OK ||
			 pg_class_aclcheck(src.relid, run_as, ACL_UPDATE) != ACLCHECK_OK))
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_PRIVILEGE),
					 errmsg("role \"%s\" may not rewrite \"%s\" for backfill \"%s\"",
							run_as_name, src.relation, name),
					 errhint("GRANT SELECT, UPDATE ON %s TO %s;", src.relation,
							 quote_identifier(run_as_name))));
		resolve_key(name, key, &src);
		if (predicate == NULL || predicate[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("backfill \"%s\" has no predicate", name),
					 errdetail("The predicate selects the rows that still need work; it is also "
							   "how the pass proves it is done."),
					 errhint("Pass predicate => 'total IS NULL', true for rows still to do.")));
		tenancy_check_rls(name, src.relid, src.relation, run_as, settings, tenant);
	}

	check_role_can_login(name, run_as);
	{
		StringInfoData extra;

		initStringInfo(&extra);
		appendStringInfo(&extra, "pages %s count %s input %s scope %s settings %s run_as %s",
						 OidIsValid(pages_fn) ? format_procedure(pages_fn) : "",
						 OidIsValid(count_fn) ? format_procedure(count_fn) : "",
						 input_shape ? JsonbToCString(NULL, &input_shape->root, 0) : "",
						 scope_expr ? scope_expr : "",
						 settings ? JsonbToCString(NULL, &settings->root, 0) : "",
						 GetUserNameFromId(run_as, false));
		checksum = declaration_checksum(src.relation, src.key, predicate, action, extra.data);
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/* only a backfill of a role the declarer is a member of (checked at run too) */
	requires_check_backfill(name, owner, requires_backfill);

	if (pages_fn == InvalidOid)
	{
		initStringInfo(&sql);
		appendStringInfo(&sql, "SELECT 1 FROM %s WHERE (\n%s\n)", src.relation, predicate);
		check_predicate_not_volatile(name,
									 check_statement(name, "the predicate", sql.data, src.keytype,
													 predicate,
													 "Write a boolean SQL expression over the "
													 "table's columns, such as 'c IS NULL'."));
	}
	if (scope_expr != NULL)
	{
		initStringInfo(&sql);
		appendStringInfo(&sql, "SELECT 1 FROM (SELECT $1::jsonb AS input) s WHERE (\n(\n%s\n) IS NOT NULL\n)",
						 scope_expr);
		check_statement(name, "the scope", sql.data, JSONBOID, scope_expr,
						"Write an expression over input, such as input->>'tenant_id'.");
	}
	check_statement(name, "the action", action, src.keytype, NULL,
					pages_fn ? "Write one DML statement; $1 is the page's rows as a jsonb array." :
					"Write one DML statement; $1 and $2 are the first and last key of the batch; "
					"wrap anything else in a function and SELECT it.");

	/* store it, as the extension's owner, with the declarer's search_path */
	declared_search_path = pstrdup(GetConfigOption("search_path", false, false));
	catalog_enter(&scope);
	{
		Oid			types[1] = {TEXTOID};
		Datum		values[1] = {CStringGetTextDatum(name)};

		if (catalog_exec("SELECT d.owner, d.checksum,"
						 "       EXISTS (SELECT 1 FROM backfill.ledger l"
						 "                WHERE l.declaration = d.name AND l.status = 'running')"
						 "  FROM backfill.declaration d WHERE d.name = $1 FOR UPDATE",
						 1, types, values, NULL, SPI_OK_SELECT) > 0)
		{
			bool		isnull;
			Oid			old_owner = DatumGetObjectId(catalog_getdatum(0, 1, &isnull));
			char	   *old_checksum = catalog_gettext(0, 2);
			bool		running = DatumGetBool(catalog_getdatum(0, 3, &isnull));

			if (!has_privs_of_role(owner, old_owner))
				ereport(ERROR,
						(errcode(ERRCODE_BACKFILL_DUPLICATE),
						 errmsg("backfill \"%s\" is already declared by role \"%s\"", name,
								GetUserNameFromId(old_owner, true) ?
								GetUserNameFromId(old_owner, true) : "(dropped)"),
						 errhint("Choose another name, or re-declare it as a member of that role.")));
			/* lanes waiting out the old rate read the new one at once */
			if (running)
				backfill_wake_lanes_at_commit(0, false);
			if (running && strcmp(old_checksum, checksum) != 0)
				ereport(ERROR,
						(errcode(ERRCODE_BACKFILL_CHANGED),
						 errmsg("backfill \"%s\" cannot be redefined while a pass is running", name),
						 errdetail("The running pass started with checksum %s; the new definition has %s.",
								   old_checksum, checksum),
						 errhint("Wait for the pass to end, or cancel it, then declare again.")));
		}
	}
	{
		Oid			types[31] = {TEXTOID, OIDOID, TEXTOID, NAMEOID, OIDOID, TEXTOID,
			TEXTOID, INT4OID, FLOAT8OID, INT4OID, INT4OID, INT4OID, INT4OID, INT4OID,
			TEXTARRAYOID, OIDOID, TEXTOID, INT4OID, INT4OID, INT4OID, INT4OID,
		OIDOID, OIDOID, JSONBOID, TEXTOID, TEXTOID, TEXTOID, OIDOID, JSONBOID, TEXTOID, TEXTOID};
		Datum		values[31];
		char		nulls[31];
		NameData	keyname;

		memset(nulls, ' ', sizeof(nulls));
		namestrcpy(&keyname, src.key ? src.key : "");
		values[0] = CStringGetTextDatum(name);
		values[1] = ObjectIdGetDatum(src.relid);
		nulls[1] = OidIsValid(src.relid) ? ' ' : 'n';
		values[2] = src.relation ? CStringGetTextDatum(src.relation) : (Datum) 0;
		nulls[2] = src.relation ? ' ' : 'n';
		values[3] = NameGetDatum(&keyname);
		nulls[3] = src.key ? ' ' : 'n';
		values[4] = ObjectIdGetDatum(src.keytype);
		nulls[4] = pages_fn ? 'n' : ' ';
		values[5] = predicate ? CStringGetTextDatum(predicate) : (Datum) 0;
		nulls[5] = predicate ? ' ' : 'n';
		values[6] = CStringGetTextDatum(action);
		values[7] = Int32GetDatum(batch_size);
		values[8] = Float8GetDatum(rate);
		values[9] = Int32GetDatum(max_parallel);
		values[10] = Int32GetDatum(max_attempts);
		values[11] = Int32GetDatum(backoff_base_ms);
		values[12] = Int32GetDatum(backoff_cap_ms);
		values[13] = Int32GetDatum(batch_timeout_ms);
		values[14] = environments;
		nulls[14] = environments_null ? 'n' : ' ';
		values[15] = ObjectIdGetDatum(owner);
		values[16] = CStringGetTextDatum(checksum);
		values[17] = Int32GetDatum(lock_timeout_ms);
		values[18] = Int32GetDatum(target_batch_ms);
		nulls[18] = target_batch_ms == 0 ? 'n' : ' ';
		values[19] = Int32GetDatum(min_batch_size);
		values[20] = Int32GetDatum(max_batch_size);
		values[21] = ObjectIdGetDatum(pages_fn);
		nulls[21] = pages_fn ? ' ' : 'n';
		values[22] = ObjectIdGetDatum(count_fn);
		nulls[22] = count_fn ? ' ' : 'n';
		values[23] = input_shape ? JsonbPGetDatum(input_shape) : (Datum) 0;
		nulls[23] = input_shape ? ' ' : 'n';
		values[24] = scope_expr ? CStringGetTextDatum(scope_expr) : (Datum) 0;
		nulls[24] = scope_expr ? ' ' : 'n';
		values[25] = requires ? CStringGetTextDatum(requires) : (Datum) 0;
		nulls[25] = requires ? ' ' : 'n';
		values[26] = requires_backfill ? CStringGetTextDatum(requires_backfill) : (Datum) 0;
		nulls[26] = requires_backfill ? ' ' : 'n';
		values[27] = ObjectIdGetDatum(run_as);
		values[28] = settings ? JsonbPGetDatum(settings) : (Datum) 0;
		nulls[28] = settings ? ' ' : 'n';
		values[29] = tenant ? CStringGetTextDatum(tenant) : (Datum) 0;
		nulls[29] = tenant ? ' ' : 'n';
		/* the lanes resolve the predicate's and action's names as the declarer did */
		values[30] = CStringGetTextDatum(declared_search_path);

		catalog_exec("INSERT INTO backfill.declaration AS d"
					 " (name, relid, relation, key_column, key_type, predicate, action,"
					 "  batch_size, rate, max_parallel, max_attempts, backoff_base_ms,"
					 "  backoff_cap_ms, batch_timeout_ms, environments, owner, checksum,"
					 "  lock_timeout_ms, target_batch_ms, min_batch_size, max_batch_size,"
					 "  pages_fn, count_fn, input_shape, scope, requires, requires_backfill,"
					 "  run_as, settings, tenant, search_path)"
					 " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,"
					 "         $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27,"
					 "         $28, $29, $30, $31)"
					 " ON CONFLICT (name) DO UPDATE SET"
					 "  relid = EXCLUDED.relid, relation = EXCLUDED.relation,"
					 "  key_column = EXCLUDED.key_column, key_type = EXCLUDED.key_type,"
					 "  predicate = EXCLUDED.predicate, action = EXCLUDED.action,"
					 "  batch_size = EXCLUDED.batch_size, rate = EXCLUDED.rate,"
					 "  max_parallel = EXCLUDED.max_parallel, max_attempts = EXCLUDED.max_attempts,"
					 "  backoff_base_ms = EXCLUDED.backoff_base_ms,"
					 "  backoff_cap_ms = EXCLUDED.backoff_cap_ms,"
					 "  batch_timeout_ms = EXCLUDED.batch_timeout_ms,"
					 "  environments = EXCLUDED.environments, checksum = EXCLUDED.checksum,"
					 "  lock_timeout_ms = EXCLUDED.lock_timeout_ms,"
					 "  target_batch_ms = EXCLUDED.target_batch_ms,"
					 "  min_batch_size = EXCLUDED.min_batch_size,"
					 "  max_batch_size = EXCLUDED.max_batch_size,"
					 "  pages_fn = EXCLUDED.pages_fn, count_fn = EXCLUDED.count_fn,"
					 "  input_shape = EXCLUDED.input_shape, scope = EXCLUDED.scope,"
					 "  requires = EXCLUDED.requires, requires_backfill = EXCLUDED.requires_backfill,"
					 "  run_as = EXCLUDED.run_as, settings = EXCLUDED.settings,"
					 "  tenant = EXCLUDED.tenant, search_path = EXCLUDED.search_path,"
					 "  updated_at = now()",
					 31, types, values, nulls, SPI_OK_INSERT);
	}
	catalog_leave(&scope);

	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(checksum));
}
