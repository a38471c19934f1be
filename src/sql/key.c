/*-------------------------------------------------------------------------
 *
 * key.c
 *	  A declaration's composite key: two to four NOT NULL columns of a
 *	  unique btree index, named in the index's order, and an action whose
 *	  parameters fit it ($1..$k the first key, $k+1..$2k the last).
 *
 * Every refusal is BF001 with a hint that shows the form this key takes:
 * the index to create, the order to name, the WHERE clause to write.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/stratnum.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "nodes/makefuncs.h"
#include "parser/parse_node.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/varlena.h"

#include "errors.h"
#include "key.h"
#include "keyset.h"

/* "a, b", the key's columns quoted */
static char *
key_list(int n, char **columns)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < n; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? ", " : "", quote_identifier(columns[i]));
	return buf.data;
}

/* "$from, $from+1, ..." for n parameters */
static char *
param_list(int n, int from)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < n; i++)
		appendStringInfo(&buf, "%s$%d", i > 0 ? ", " : "", from + i);
	return buf.data;
}

/* the WHERE clause an action of this key writes */
char *
key_action_form(int n, char **columns)
{
	return psprintf("WHERE (%s) BETWEEN (%s) AND (%s)", key_list(n, columns),
					param_list(n, 1), param_list(n, n + 1));
}

/*
 * The columns a key names, split as SQL identifiers (unquoted ones folded
 * to lower case, spaces around each trimmed, "Quoted" ones kept as
 * written); an expression, or an empty name, is refused.
 */
List *
key_names(const char *name, const char *key)
{
	List	   *names = NIL;
	char	   *raw = pstrdup(key);

	if (strchr(key, '(') != NULL || !SplitIdentifierString(raw, ',', &names) || names == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("key of backfill \"%s\" is not a list of columns", name),
				 errdetail("It is \"%s\"; a key names columns, never an expression.", key),
				 errhint("Name the columns of a unique index, in its order: key => 'tenant_id, id'.")));
	return names;
}

/* five columns or more */
static void
refuse_too_many(const char *name, const char *relation, int n, char **columns)
{
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
			 errmsg("key of backfill \"%s\" has %d columns; at most %d are supported",
					name, n, DECLARATION_MAX_KEY_COLUMNS),
			 errdetail("The key is (%s) of \"%s\".", key_list(n, columns), relation),
			 errhint("Create a unique index on at most %d NOT NULL columns and name them: "
					 "key => '%s'.", DECLARATION_MAX_KEY_COLUMNS,
					 key_list(Min(n, DECLARATION_MAX_KEY_COLUMNS), columns))));
}

/* one column of the key: it exists, is a user column, NOT NULL and named once */
static AttrNumber
key_column(const char *name, Relation rel, const char *relation, char **columns, int i)
{
	AttrNumber	attnum = get_attnum(RelationGetRelid(rel), columns[i]);
	Form_pg_attribute att;

	if (attnum == InvalidAttrNumber || attnum < 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("key column \"%s\" of backfill \"%s\" does not exist in \"%s\"",
						columns[i], name, relation),
				 errhint("Name columns of the table, or leave key out to use the primary key.")));
	for (int j = 0; j < i; j++)
		if (strcmp(columns[j], columns[i]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("key of backfill \"%s\" names column \"%s\" twice", name, columns[i]),
					 errhint("Name each column of the unique index once, in its order.")));
	att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	if (!att->attnotnull)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("key column \"%s\" of backfill \"%s\" may be NULL", columns[i], name),
				 errdetail("Rows whose key has a NULL would never be visited."),
				 errhint("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL;", relation,
						 quote_identifier(columns[i]))));
	return attnum;
}

/* the refusal for a key no index serves as it is */
static void
refuse_index(const char *name, const char *relation, int n, char **columns, KeyIndex *index)
{
	char	   *list = key_list(n, columns);
	char	   *idxname = OidIsValid(index->indexid) ? get_rel_name(index->indexid) : NULL;

	switch (index->match)
	{
		case KEY_INDEX_OK:
			return;
		case KEY_INDEX_OTHER_ORDER:
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("key (%s) of backfill \"%s\" is not in the order of its unique index",
							list, name),
					 errdetail("Index \"%s\" orders the rows by (%s).", idxname, index->columns),
					 errhint("Name the columns in the index's order: key => '%s'.",
							 index->columns)));
			break;
		case KEY_INDEX_PARTIAL:
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("the unique index on (%s) of backfill \"%s\" is partial", list, name),
					 errdetail("Index \"%s\" has a WHERE clause: rows outside it may repeat a key.",
							   idxname),
					 errhint("CREATE UNIQUE INDEX ON %s (%s); then declare again.", relation,
							 list)));
			break;
		case KEY_INDEX_EXPRESSION:
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("the unique index of backfill \"%s\" on (%s) is an expression index",
							name, index->columns),
					 errdetail("A key walks columns; index \"%s\" orders by an expression.",
							   idxname),
					 errhint("CREATE UNIQUE INDEX ON %s (%s); then declare again.", relation,
							 list)));
			break;
		case KEY_INDEX_OPCLASS:
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("the unique index on (%s) of backfill \"%s\" has another ordering",
							list, name),
					 errdetail("Index \"%s\" uses an operator class that is not its types' "
							   "default btree one.", idxname),
					 errhint("CREATE UNIQUE INDEX ON %s (%s); then declare again.", relation,
							 list)));
			break;
		case KEY_INDEX_NONE:
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("key (%s) of backfill \"%s\" has no unique index", list, name),
					 errdetail("Batches walk the table in key order; two rows with one key "
							   "could be skipped."),
					 errhint("CREATE UNIQUE INDEX ON %s (%s); then declare again.", relation,
							 list)));
			break;
	}
}

/*
 * The index compares each text column under its own collation; the
 * action compares under the column's.  They must be one, or the action's
 * range would not be the batch's.
 */
static void
check_collations(const char *name, const char *relation, Relation rel, int n,
				 char **columns, const AttrNumber *attnums, KeyIndex *index)
{
	for (int i = 0; i < n; i++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnums[i] - 1);

		if (OidIsValid(att->attcollation) && att->attcollation != index->collations[i])
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("key column \"%s\" of backfill \"%s\" has another collation than "
							"its unique index", columns[i], name),
					 errdetail("The column's collation is \"%s\", the index's \"%s\".",
							   get_collation_name(att->attcollation),
							   get_collation_name(index->collations[i])),
					 errhint("CREATE UNIQUE INDEX ON %s (%s) with the columns' own collations; "
							 "then declare again.", relation, key_list(n, columns))));
	}
}

/* the types' btree operators must share a schema: a row comparison names one */
static void
check_operators(const char *name, int n, char **columns, const Oid *types)
{
	if (keyset_common_operator(n, types, BTGreaterStrategyNumber) == NULL ||
		keyset_common_operator(n, types, BTLessEqualStrategyNumber) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("the key (%s) of backfill \"%s\" mixes orderings of several schemas",
						key_list(n, columns), name),
				 errdetail("A row comparison names one operator for all its columns."),
				 errhint("Use key columns whose types' btree operators live in one schema, "
						 "such as the built-in types'.")));
}

/* an array of n Datums of a type (text or regtype) */
static ArrayType *
array_of(Datum *elems, int n, Oid type)
{
	return type == TEXTOID ?
		construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT) :
		construct_array(elems, n, type, sizeof(Oid), true, TYPALIGN_INT);
}

/*
 * Resolve a composite key: the columns key names (a comma-separated
 * list), or when key is NULL, the primary key's (pk_columns, pk_n).  Sets
 * the first column and type, and the arrays of all of them.
 */
void
key_resolve_composite(const char *name, Relation rel, const char *relation, const char *key,
					  int pk_n, char **pk_columns, KeyResolved *out)
{
	char	  **columns = pk_columns;
	int			n = pk_n;
	AttrNumber	attnums[DECLARATION_MAX_KEY_COLUMNS];
	Oid			types[DECLARATION_MAX_KEY_COLUMNS];
	Datum		names_d[DECLARATION_MAX_KEY_COLUMNS];
	Datum		types_d[DECLARATION_MAX_KEY_COLUMNS];
	KeyIndex	index;

	if (key != NULL)
	{
		List	   *names = key_names(name, key);
		ListCell   *lc;
		int			i = 0;

		n = list_length(names);
		columns = palloc(sizeof(char *) * n);
		foreach(lc, names)
			columns[i++] = pstrdup((char *) lfirst(lc));
	}
	if (n > DECLARATION_MAX_KEY_COLUMNS)
		refuse_too_many(name, relation, n, columns);
	for (int i = 0; i < n; i++)
	{
		attnums[i] = key_column(name, rel, relation, columns, i);
		types[i] = TupleDescAttr(RelationGetDescr(rel), attnums[i] - 1)->atttypid;
		names_d[i] = CStringGetTextDatum(columns[i]);
		types_d[i] = ObjectIdGetDatum(types[i]);
	}
	keyset_find_index(rel, n, attnums, &index);
	refuse_index(name, relation, n, columns, &index);
	check_collations(name, relation, rel, n, columns, attnums, &index);
	check_operators(name, n, columns, types);

	out->nkeys = n;
	out->columns = columns;
	out->key_columns = array_of(names_d, n, TEXTOID);
	out->key_types = array_of(types_d, n, REGTYPEOID);
	memcpy(out->types, types, sizeof(Oid) * n);
}

/* a stored composite key (the declaration's arrays) read back */
void
key_from_declaration(const Declaration *d, KeyResolved *out)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	memset(out, 0, sizeof(KeyResolved));
	deconstruct_array(d->key_columns, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	out->nkeys = Min(n, DECLARATION_MAX_KEY_COLUMNS);
	out->columns = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < out->nkeys; i++)
		out->columns[i] = TextDatumGetCString(elems[i]);
	deconstruct_array(d->key_types, REGTYPEOID, sizeof(Oid), true, TYPALIGN_INT, &elems,
					  &nulls, &n);
	for (int i = 0; i < out->nkeys && i < n; i++)
		out->types[i] = DatumGetObjectId(elems[i]);
	out->key_columns = d->key_columns;
	out->key_types = d->key_types;
}

/* which of the action's parameters it uses */
typedef struct ParamUse
{
	int			nparams;
	const Oid  *types;
	bool		used[2 * DECLARATION_MAX_KEY_COLUMNS];
} ParamUse;

/* the parser's hook for $n: typed as the key's column, and noted */
static Node *
param_use_ref(ParseState *pstate, ParamRef *pref)
{
	ParamUse   *use = (ParamUse *) pstate->p_ref_hook_state;
	Param	   *param;

	if (pref->number < 1 || pref->number > use->nparams)
		return NULL;			/* "there is no parameter $n" */
	use->used[pref->number - 1] = true;
	param = makeNode(Param);
	param->paramkind = PARAM_EXTERN;
	param->paramid = pref->number;
	param->paramtype = use->types[pref->number - 1];
	param->paramtypmod = -1;
	param->paramcollid = get_typcollation(param->paramtype);
	param->location = pref->location;
	return (Node *) param;
}

static void
param_use_setup(ParseState *pstate, void *arg)
{
	pstate->p_paramref_hook = param_use_ref;
	pstate->p_ref_hook_state = arg;
}

/*
 * A composite key's action (or revert) must use every parameter of the batch's
 * range: $1..$k (the first key) and $k+1..$2k (the last).  One that uses
 * fewer reads the range as something else, say $1 and $2 as a key of one
 * column.  (That it parses with them typed was checked before.)
 */
void
key_check_action(const char *name, const char *what, const char *action,
				 const KeyResolved *key)
{
	ParamUse	use;
	Oid			types[2 * DECLARATION_MAX_KEY_COLUMNS];
	SPIPlanPtr	plan;
	int			k = key->nkeys;

	for (int i = 0; i < 2 * k; i++)
		types[i] = key->types[i % k];
	memset(&use, 0, sizeof(use));
	use.nparams = 2 * k;
	use.types = types;
	plan = SPI_prepare_params(action, param_use_setup, &use, 0);
	if (plan == NULL)
		elog(ERROR, "could not prepare the action of backfill \"%s\": %s", name,
			 SPI_result_code_string(SPI_result));
	SPI_freeplan(plan);
	for (int i = 0; i < 2 * k; i++)
		if (!use.used[i])
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("%s of backfill \"%s\" does not use $%d", what, name, i + 1),
					 k == 1 ?
					 errdetail("A batch gets its first key as $1 and its last as $2: a statement "
							   "that does not bound itself by both would do rows outside its "
							   "batch, which the ledger would not count.") :
					 errdetail("The key (%s) has %d columns: the action gets the batch's first "
							   "key as %s and its last as %s.", key_list(k, key->columns), k,
							   param_list(k, 1), param_list(k, k + 1)),
					 k == 1 ?
					 errhint("Write the range as WHERE %s BETWEEN $1 AND $2 (and repeat the "
							 "predicate), or declare set => '...' and let the engine write the "
							 "statement.", quote_identifier(key->columns[0])) :
					 errhint("Write the range as %s.", key_action_form(k, key->columns))));
}
