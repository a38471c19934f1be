/*-------------------------------------------------------------------------
 *
 * declare_check.c
 *	  backfill_declare: parse and plan the declaration's statements as the
 *	  caller: predicate, action, revert, scope and throttle_when.
 *
 * Split from declare.c.  Each statement is planned as it will run, with
 * its parameters' types; an error from below comes back as
 * SOURCE_INVALID naming the statement and the backfill.
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
#include "rewrite/prs2lock.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "action.h"
#include "compat.h"
#include "config.h"
#include "catalog.h"
#include "citus.h"
#include "declaration.h"
#include "errors.h"
#include "key.h"
#include "outbox.h"
#include "requires.h"
#include "scope.h"
#include "shmem.h"
#include "tenancy.h"
#include "windows.h"
#include "condition.h"


#include "declare_check.h"

/* Raise a SOURCE_INVALID error that carries an error caught from below. */
void
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

/*
 * The one statement of a raw parse tree when it is a plain SELECT of one
 * target: no set operation, WITH, INTO, DISTINCT, VALUES, GROUP BY,
 * HAVING, WINDOW, ORDER BY, LIMIT, OFFSET nor locking clause (its FROM and
 * WHERE are the caller's to check); NULL otherwise.
 */
static SelectStmt *
one_plain_select(List *stmts)
{
	SelectStmt *sel;

	if (list_length(stmts) != 1 ||
		!IsA(((RawStmt *) linitial(stmts))->stmt, SelectStmt))
		return NULL;
	sel = (SelectStmt *) ((RawStmt *) linitial(stmts))->stmt;
	if (sel->op == SETOP_NONE && sel->larg == NULL && sel->rarg == NULL &&
		sel->withClause == NULL && sel->intoClause == NULL &&
		sel->distinctClause == NIL && sel->valuesLists == NIL &&
		list_length(sel->targetList) == 1 && sel->groupClause == NIL &&
		sel->havingClause == NULL && sel->windowClause == NIL &&
		sel->sortClause == NIL && sel->limitCount == NULL &&
		sel->limitOffset == NULL && sel->lockingClause == NIL)
		return sel;
	return NULL;
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
	SelectStmt *sel = one_plain_select(stmts);

	return sel != NULL && list_length(sel->fromClause) == 1 && sel->whereClause != NULL;
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

/*
 * The engine's own statement (set, delete) must change the table's rows: a
 * DO INSTEAD rule on UPDATE (DELETE) of the table would run something else,
 * and the batches would count its rows as the table's (attack s34).
 */
static void
check_no_instead_rule(const Declaration *d)
{
	CmdType		event = d->action_delete ? CMD_DELETE : CMD_UPDATE;
	Relation	rel = relation_open(d->relid, AccessShareLock);
	RuleLock   *rules = rel->rd_rules;
	bool		found = false;

	for (int i = 0; rules != NULL && i < rules->numLocks; i++)
		if (rules->rules[i]->event == event && rules->rules[i]->isInstead)
			found = true;
	relation_close(rel, AccessShareLock);
	if (found)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("table %s of backfill \"%s\" has a DO INSTEAD rule on %s",
						d->relation, d->name, d->action_delete ? "DELETE" : "UPDATE"),
				 errdetail("The engine's statement would run the rule's instead of changing the "
						   "table's rows, and count what the rule changed as the table's."),
				 errhint("Drop the rule, or write the action yourself (action => '...').")));
}

/* the predicate, the scope, the action and the revert parse and plan as the caller; d->guarded found */
void
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
	if (!OidIsValid(d->pages_fn) && (d->action_set != NULL || d->action_delete))
		check_no_instead_rule(d);
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
	SelectStmt *sel = one_plain_select(stmts);

	return sel != NULL && sel->fromClause == NIL && sel->whereClause == NULL;
}

/*
 * throttle_when must be one boolean expression.  It is parsed and analyzed
 * here, as the caller under the search_path the lanes will use, and never
 * run: analysis resolves names and types but calls no function, so no
 * user code runs in the caller's session.  A lane evaluates it
 * (condition.c), as run_as, restricted, with timeouts.
 */
void
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
