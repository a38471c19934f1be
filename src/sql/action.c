/*-------------------------------------------------------------------------
 *
 * action.c
 *	  The batch statement the engine writes, and the guard of the ones a
 *	  user writes.
 *
 * set => 'c = a * 2' declares UPDATE relation SET c = a * 2, delete =>
 * true a DELETE FROM relation; either way the engine writes the WHERE
 * clause: the batch's key range in the form that reads only that range
 * for this key (a BETWEEN for one column; for a composite key the
 * disjunction of bounded index ranges, one per prefix of the key, so that
 * no batch reads to the end of a big leading value on PostgreSQL 15), AND
 * the predicate.  The statement written is stored as the declaration's
 * action, so the checksum covers it and every path that runs an action (a
 * lane, finalize, a Citus shard's batch) runs it as it would a
 * hand-written one.
 *
 * A hand-written UPDATE or DELETE of the declared relation must carry the
 * predicate as a top-level conjunct of its WHERE clause: compared as
 * analyzed expressions (locations aside), each conjunct of the predicate
 * must be one of the WHERE clause's.  Without it, a forced pass rewrites
 * rows the application wrote since (the batch visits a key range, and the
 * range holds rows that no longer match).  guard => false declares such an
 * action on purpose.  Other statements (a SELECT of a function, an INSERT
 * elsewhere, MERGE) are not looked at.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "lib/stringinfo.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "nodes/primnodes.h"
#include "parser/parser.h"
#include "parser/parsetree.h"
#include "rewrite/rewriteManip.h"
#include "utils/builtins.h"
#include "utils/plancache.h"

#include "action.h"
#include "ctid.h"
#include "errors.h"
#include "key.h"

/* a key's columns (quoted) and the numbers of its parameters */
typedef struct RangeKey
{
	int			n;
	const char *col[DECLARATION_MAX_KEY_COLUMNS];
} RangeKey;

static void span_both(const RangeKey *k, StringInfo out, const char *prefix, int i);

/* one branch of the disjunction: "(prefix last)" */
static void
span_branch(StringInfo out, const char *prefix, const char *last)
{
	appendStringInfo(out, "%s(%s%s)", out->len > 0 ? "\n    OR " : "", prefix, last);
}

/* keys from column i on at or above the lower bound, equal before it */
static void
span_lower(const RangeKey *k, StringInfo out, const char *prefix, int i)
{
	if (i == k->n - 1)
	{
		span_branch(out, prefix, psprintf("%s >= $%d", k->col[i], i + 1));
		return;
	}
	span_lower(k, out, psprintf("%s%s = $%d AND ", prefix, k->col[i], i + 1), i + 1);
	span_branch(out, prefix, psprintf("%s > $%d", k->col[i], i + 1));
}

/* keys from column i on at or below the upper bound */
static void
span_upper(const RangeKey *k, StringInfo out, const char *prefix, int i)
{
	int			u = k->n + i + 1;

	if (i == k->n - 1)
	{
		span_branch(out, prefix, psprintf("%s <= $%d", k->col[i], u));
		return;
	}
	span_upper(k, out, psprintf("%s%s = $%d AND ", prefix, k->col[i], u), i + 1);
	span_branch(out, prefix, psprintf("%s < $%d", k->col[i], u));
}

/*
 * Keys from column i on between both bounds: column i equal to both (the
 * rest between them), equal to the lower only (the rest above it),
 * strictly between, equal to the upper only (the rest below it).  A branch
 * that does not apply to a batch contradicts itself (c = $1 AND c < $1)
 * and reads nothing.
 */
static void
span_both(const RangeKey *k, StringInfo out, const char *prefix, int i)
{
	const char *c = k->col[i];
	int			l = i + 1;
	int			u = k->n + i + 1;

	if (i == k->n - 1)
	{
		span_branch(out, prefix, psprintf("%s BETWEEN $%d AND $%d", c, l, u));
		return;
	}
	span_both(k, out, psprintf("%s%s = $%d AND %s = $%d AND ", prefix, c, l, c, u), i + 1);
	span_lower(k, out, psprintf("%s%s = $%d AND %s < $%d AND ", prefix, c, l, c, u), i + 1);
	span_branch(out, prefix, psprintf("%s > $%d AND %s < $%d", c, l, c, u));
	span_upper(k, out, psprintf("%s%s = $%d AND %s > $%d AND ", prefix, c, u, c, l), i + 1);
}

char *
action_range_form(const Declaration *d)
{
	RangeKey	k;
	StringInfoData out;

	memset(&k, 0, sizeof(k));
	if (ctid_range_form(d) != NULL)
		return ctid_range_form(d);
	if (d->key_columns == NULL)
	{
		k.n = 1;
		k.col[0] = quote_identifier(d->key_column);
	}
	else
	{
		KeyResolved key;

		key_from_declaration(d, &key);
		k.n = key.nkeys;
		for (int i = 0; i < k.n; i++)
			k.col[i] = quote_identifier(key.columns[i]);
	}
	if (k.n == 1)
		return psprintf("%s BETWEEN $1 AND $2", k.col[0]);
	initStringInfo(&out);
	span_both(&k, &out, "", 0);
	return psprintf("(%s)", out.data);
}

/*
 * set is pasted between SET and the engine's WHERE: alone after
 * "UPDATE relation SET" it must parse as assignments and nothing more (no
 * WHERE, FROM or RETURNING of its own, no second statement).
 */
static void
check_set_list(const Declaration *d)
{
	List	   *stmts = NIL;
	UpdateStmt *upd = NULL;
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		stmts = raw_parser(psprintf("UPDATE %s SET\n%s\n", d->relation, d->action_set),
						   RAW_PARSE_DEFAULT);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		stmts = NIL;
	}
	PG_END_TRY();
	if (list_length(stmts) == 1 && IsA(((RawStmt *) linitial(stmts))->stmt, UpdateStmt))
		upd = (UpdateStmt *) ((RawStmt *) linitial(stmts))->stmt;
	if (upd == NULL || upd->whereClause != NULL || upd->fromClause != NIL ||
		upd->returningList != NIL || upd->withClause != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("set of backfill \"%s\" is not a list of assignments", d->name),
				 errdetail("It is \"%s\"; the engine adds the WHERE clause (the batch's key "
						   "range and the predicate) itself.", d->action_set),
				 errhint("Pass only what follows SET, such as set => 'total_cents = total * 100'; "
						 "for a FROM or a RETURNING write the action and repeat the predicate.")));
}

char *
action_generate(const Declaration *d)
{
	if (d->action_set != NULL)
	{
		check_set_list(d);
		return psprintf("UPDATE %s SET\n%s\nWHERE %s\n  AND (\n%s\n)", ctid_target(d),
						d->action_set, action_range_form(d), d->predicate);
	}
	return psprintf("DELETE FROM %s\nWHERE %s\n  AND (\n%s\n)", ctid_target(d),
					action_range_form(d), d->predicate);
}

/* the first analyzed query of a plan (one statement: checked before) */
static Query *
plan_query(SPIPlanPtr plan)
{
	CachedPlanSource *source = linitial(SPI_plan_get_plan_sources(plan));

	return linitial_node(Query, source->query_list);
}

/* the conjuncts of an expression, nested ANDs flattened */
static List *
conjuncts(Node *expr, List *out)
{
	ListCell   *lc;

	if (expr == NULL)
		return out;
	if (!is_andclause(expr))
		return lappend(out, expr);
	foreach(lc, ((BoolExpr *) expr)->args)
		out = conjuncts(lfirst(lc), out);
	return out;
}

/* the action as written, its trailing semicolons and white space cut */
static char *
action_trimmed(const char *action)
{
	char	   *s = pstrdup(action);
	size_t		len = strlen(s);

	while (len > 0 && (s[len - 1] == ';' || isspace((unsigned char) s[len - 1])))
		s[--len] = '\0';
	return s;
}

/*
 * The predicate's conjuncts must each be a conjunct of q's WHERE: q is
 * an UPDATE or DELETE of the relation, the action itself (top) or a
 * query of its WITH.  Else SOURCE_INVALID.
 */
static void
check_repeats_predicate(const Declaration *d, Query *q, SPIPlanPtr predicate_plan, bool top)
{
	Node	   *predicate = copyObject(plan_query(predicate_plan)->jointree->quals);
	List	   *where;
	ListCell   *lc;
	const char *kind = q->commandType == CMD_UPDATE ? "UPDATE" : "DELETE";

	if (q->resultRelation != 1)
		ChangeVarNodes(predicate, 1, q->resultRelation, 0);
	where = conjuncts(q->jointree->quals, NIL);
	foreach(lc, conjuncts(predicate, NIL))
	{
		if (list_member(where, lfirst(lc)))
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("the action of backfill \"%s\" does not repeat its predicate",
						d->name),
				 errdetail("%s %s of %s whose WHERE clause lacks the predicate (%s) as "
						   "a condition of its own: a batch would also change the rows of its "
						   "key range that no longer need work.",
						   top ? "It is" : "A query of its WITH is",
						   q->commandType == CMD_UPDATE ? "an UPDATE" : "a DELETE",
						   d->relation, d->predicate),
				 /* appended after a top-level OR, the predicate would bind to its last operand */
				 top && q->jointree->quals != NULL && is_orclause(q->jointree->quals) ?
				 errhint("Put its WHERE clause in parentheses and add AND (%s) after them; or "
						 "declare set => '...' (delete => true) and let the engine write the "
						 "statement; or pass guard => false to run it as written.",
						 d->predicate) :
				 top ?
				 errhint("Write %s%s (%s); or declare set => '...' (delete => true) and let the "
						 "engine write the statement; or pass guard => false to run it as "
						 "written.", action_trimmed(d->action),
						 q->jointree->quals ? " AND" : " WHERE", d->predicate) :
				 errhint("Repeat the predicate (%s) in that %s's WHERE clause too; or pass "
						 "guard => false to run it as written.", d->predicate, kind)));
	}
}

/*
 * Is the action guarded: an UPDATE or DELETE of the relation whose WHERE
 * repeats the predicate (the engine's set / delete always are)?  One that
 * does not, and every UPDATE or DELETE of the relation in its WITH that
 * does not, is refused unless guard => false; any other action (one whose
 * WITH adds rows to the relation too) is not guarded.
 */
bool
action_check_guard(const Declaration *d, SPIPlanPtr predicate_plan, SPIPlanPtr action_plan)
{
	Query	   *action = plan_query(action_plan);
	ListCell   *lc;

	if (d->action_set != NULL || d->action_delete)
		return true;			/* the engine's statement: AND the predicate */
	if (!d->guard ||
		(action->commandType != CMD_UPDATE && action->commandType != CMD_DELETE) ||
		rt_fetch(action->resultRelation, action->rtable)->relid != d->relid)
		return false;
	check_repeats_predicate(d, action, predicate_plan, true);
	foreach(lc, action->cteList)
	{
		Query	   *q = castNode(Query, ((CommonTableExpr *) lfirst(lc))->ctequery);

		if (q->resultRelation == 0 ||
			rt_fetch(q->resultRelation, q->rtable)->relid != d->relid)
			continue;			/* reads, or writes another table */
		if (q->commandType != CMD_UPDATE && q->commandType != CMD_DELETE)
			return false;		/* it adds rows to the relation (INSERT, MERGE) */
		check_repeats_predicate(d, q, predicate_plan, false);
	}
	return true;
}
