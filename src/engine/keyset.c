/*-------------------------------------------------------------------------
 *
 * keyset.c
 *	  A key of several columns (tenant_id, id): the unique index that
 *	  serves it, the keyset scan of a batch as a row comparison in index
 *	  order, cursors and bounds as row literals, and the plan of its key
 *	  space.
 *
 * The key scan of a composite key is
 *
 *	  SELECT a, b FROM rel
 *	   WHERE ROW(a, b) OPERATOR(pg_catalog.>) ROW($2, $3)
 *	     AND ROW(a, b) OPERATOR(pg_catalog.<=) ROW($4, $5) AND (predicate)
 *	   ORDER BY a, b LIMIT $1
 *
 * which the btree index on (a, b) answers as one range scan: the row
 * comparison is an index condition, the order is the index's.  Each
 * collatable column is compared under the index's collation, spelled out
 * (a COLLATE "C"), so that the comparison and the index agree.  The
 * operators are the columns' default btree operators, named with their
 * schema: a declarer's own ">" cannot stand in for them.
 *
 * A cursor, lo or hi is stored as the text record_out would write for the
 * row, "(1,42)" or "(acme,\"a b\")", and read back column by column with
 * each type's input function (as the lane's role: a domain's CHECK is the
 * declarer's code).
 *
 * The plan splits the key space into bounds that are real keys: for a
 * point of one or two leading values, the last key at or before it (one
 * backward index probe).  The points come from the leading column's
 * histogram; where the leading column has few distinct values (tenants),
 * each value is a bound and a value that holds many rows is split by the
 * second column, proportionally to its share in the most common values.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <math.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/pg_am.h"
#include "access/stratnum.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_opclass.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/ruleutils.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "errors.h"
#include "keyset.h"
#include "names.h"
#include "stats.h"
#include "worker.h"

/* at most this many leading values are looked at one by one when planning */
#define KEYSET_FEW_VALUES 64

/*
 * The key type's btree operator of a strategy, spelled so that no search
 * path can stand another in for it: "OPERATOR(schema.op)", found through
 * the type's default btree operator class, not by name.  A bare "key >
 * $2" would pick any role's exact-match operator on the declarer's
 * search_path (say a public.>(varchar, varchar)) over the built-in one
 * reached by a cast, and run it as the declarer in every batch.
 */
char *
keyset_operator(Oid keytype, int16 strategy)
{
	TypeCacheEntry *entry = lookup_type_cache(keytype, TYPECACHE_BTREE_OPFAMILY);
	Oid			opno = InvalidOid;
	HeapTuple	tuple;
	Form_pg_operator form;
	char	   *spelled;

	if (OidIsValid(entry->btree_opf))
		opno = get_opfamily_member(entry->btree_opf, entry->btree_opintype,
								   entry->btree_opintype, strategy);
	if (!OidIsValid(opno))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("key type %s has no default btree ordering", format_type_be(keytype)),
				 errhint("Use a key whose type has a btree operator class.")));
	tuple = SearchSysCache1(OPEROID, ObjectIdGetDatum(opno));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for operator %u", opno);
	form = (Form_pg_operator) GETSTRUCT(tuple);
	spelled = psprintf("OPERATOR(%s.%s)", quote_identifier(get_namespace_name(form->oprnamespace)),
					   NameStr(form->oprname));
	ReleaseSysCache(tuple);
	return spelled;
}

/*
 * A row comparison names one operator for all its columns: the spelled
 * operator of a strategy when every column's type has the same one (all
 * of pg_catalog, say), else NULL.
 */
char *
keyset_common_operator(int nkeys, const Oid *types, int16 strategy)
{
	char	   *first = keyset_operator(types[0], strategy);

	for (int i = 1; i < nkeys; i++)
		if (strcmp(first, keyset_operator(types[i], strategy)) != 0)
			return NULL;
	return first;
}

/* an index's key columns as SQL, "a, b" or "a, lower(b)" */
static char *
index_columns_text(Relation idx)
{
	return pg_get_indexdef_columns(RelationGetRelid(idx), false);
}

/* does the index cover exactly these columns, in any order? */
static bool
same_columns(Form_pg_index form, int nkeys, const AttrNumber *attnums, bool *in_order)
{
	int			matched = 0;

	*in_order = true;
	for (int i = 0; i < nkeys; i++)
	{
		if (form->indkey.values[i] != attnums[i])
			*in_order = false;
		for (int j = 0; j < nkeys; j++)
			if (form->indkey.values[j] == attnums[i])
				matched++;
	}
	return matched == nkeys;
}

/* does the index hold an expression, and only columns the key names besides? */
static bool
expression_over(Relation idx, int nkeys, const AttrNumber *attnums)
{
	bool		expression = false;

	for (int i = 0; i < idx->rd_index->indnkeyatts; i++)
	{
		AttrNumber	a = idx->rd_index->indkey.values[i];
		bool		named = false;

		if (a == 0)
		{
			expression = true;
			continue;
		}
		for (int j = 0; j < nkeys; j++)
			named |= (attnums[j] == a);
		if (!named)
			return false;
	}
	return expression;
}

/* are the index's operator classes the types' default btree ones? */
static bool
default_opclasses(Relation idx, int nkeys)
{
	for (int i = 0; i < nkeys; i++)
	{
		Oid			type = TupleDescAttr(RelationGetDescr(idx), i)->atttypid;
		TypeCacheEntry *entry = lookup_type_cache(type, TYPECACHE_BTREE_OPFAMILY);

		if (idx->rd_opfamily[i] != entry->btree_opf)
			return false;
	}
	return true;
}

/* how near one index comes to serving the key: the better of two matches */
static KeyIndexMatch
index_match(Relation idx, int nkeys, const AttrNumber *attnums)
{
	Form_pg_index form = idx->rd_index;
	bool		in_order;
	bool		partial = !heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, NULL);

	if (!form->indisunique || !form->indisvalid || idx->rd_rel->relam != BTREE_AM_OID)
		return KEY_INDEX_NONE;
	if (form->indnkeyatts == nkeys && same_columns(form, nkeys, attnums, &in_order))
	{
		if (partial)
			return KEY_INDEX_PARTIAL;
		if (!in_order)
			return KEY_INDEX_OTHER_ORDER;
		return default_opclasses(idx, nkeys) ? KEY_INDEX_OK : KEY_INDEX_OPCLASS;
	}
	if (expression_over(idx, nkeys, attnums))
		return KEY_INDEX_EXPRESSION;
	return KEY_INDEX_NONE;
}

/*
 * The unique index that serves a key of these columns, in this order; or,
 * when none does, the one that comes nearest (same columns in another
 * order, partial, with an expression, another operator class), for the
 * refusal to name.
 */
void
keyset_find_index(Relation rel, int nkeys, const AttrNumber *attnums, KeyIndex *found)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;

	memset(found, 0, sizeof(KeyIndex));
	found->match = KEY_INDEX_NONE;
	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		KeyIndexMatch match = index_match(idx, nkeys, attnums);

		/* the enum is in order of preference, OK first */
		if (match != KEY_INDEX_NONE &&
			(found->match == KEY_INDEX_NONE || match < found->match))
		{
			found->match = match;
			found->indexid = RelationGetRelid(idx);
			found->columns = index_columns_text(idx);
			for (int i = 0; i < nkeys && i < idx->rd_index->indnkeyatts; i++)
				found->collations[i] = idx->rd_indcollation[i];
		}
		index_close(idx, AccessShareLock);
	}
	list_free(indexes);
}

/*
 * The lane's view of a composite key: its columns and types as declared,
 * the collations of the unique index that serves it now, and each type's
 * I/O.  A column renamed away, or an index dropped, fails the pass.
 */
void
keyset_resolve(Keyset *ks, ArrayType *columns, ArrayType *types, MemoryContext cxt)
{
	Datum	   *names;
	Datum	   *typoids;
	bool	   *nulls;
	int			n;
	int			ntypes;
	AttrNumber	attnums[DECLARATION_MAX_KEY_COLUMNS];
	Oid			typelist[DECLARATION_MAX_KEY_COLUMNS];
	KeyIndex	index;
	Relation	rel;
	MemoryContext old;

	deconstruct_array(columns, TEXTOID, -1, false, TYPALIGN_INT, &names, &nulls, &n);
	deconstruct_array(types, REGTYPEOID, sizeof(Oid), true, TYPALIGN_INT, &typoids, &nulls,
					  &ntypes);
	if (n < 2 || n > DECLARATION_MAX_KEY_COLUMNS || ntypes != n)
		elog(ERROR, "backfill \"%s\" has a key of %d columns and %d types", ks->name, n, ntypes);
	old = MemoryContextSwitchTo(cxt);
	ks->nkeys = n;
	for (int i = 0; i < n; i++)
	{
		KeyColumn  *col = &ks->cols[i];
		bool		varlena;

		col->name = TextDatumGetCString(names[i]);
		col->type = DatumGetObjectId(typoids[i]);
		typelist[i] = col->type;
		attnums[i] = get_attnum(ks->relid, col->name);
		if (attnums[i] == InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("key column \"%s\" of backfill \"%s\" does not exist", col->name,
							ks->name)));
		getTypeInputInfo(col->type, &col->input, &col->ioparam);
		getTypeOutputInfo(col->type, &col->output, &varlena);
		get_typlenbyval(col->type, &col->len, &col->byval);
	}
	ks->gt = keyset_common_operator(n, typelist, BTGreaterStrategyNumber);
	ks->le = keyset_common_operator(n, typelist, BTLessEqualStrategyNumber);
	ks->lead_ge = keyset_operator(typelist[0], BTGreaterEqualStrategyNumber);
	ks->le_first = keyset_operator(typelist[0], BTLessEqualStrategyNumber);
	MemoryContextSwitchTo(old);

	rel = relation_open(ks->relid, AccessShareLock);
	keyset_find_index(rel, n, attnums, &index);
	relation_close(rel, AccessShareLock);
	if (index.match != KEY_INDEX_OK || ks->gt == NULL || ks->le == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("the key of backfill \"%s\" has no unique index any more", ks->name),
				 errhint("Create the unique index on the key's columns again, then retry.")));
	for (int i = 0; i < n; i++)
		ks->cols[i].collation = OidIsValid(get_typcollation(ks->cols[i].type)) ?
			index.collations[i] : InvalidOid;
}

/* a key as a row literal, "(1,42)", as record_out writes it */
char *
keyset_row_text(Keyset *ks, const Datum *values)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '(');
	for (int i = 0; i < ks->nkeys; i++)
	{
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		/* record_out's rule: quote an empty value and one with a special character */
		append_literal_field(&buf, worker_key_output(ks->cols[i].output, values[i]), "(),",
							 '\0');
	}
	appendStringInfoChar(&buf, ')');
	return buf.data;
}

/* the text of one field of a row literal; p is moved past it */
static char *
read_row_field(const char **p)
{
	StringInfoData buf;
	bool		quoted = false;

	initStringInfo(&buf);
	while (**p != '\0' && (quoted || (**p != ',' && **p != ')')))
	{
		char		ch = *(*p)++;

		if (ch == '\\' && **p != '\0')
			appendStringInfoChar(&buf, *(*p)++);
		else if (ch == '"' && quoted && **p == '"')
			appendStringInfoChar(&buf, *(*p)++);
		else if (ch == '"')
			quoted = !quoted;
		else
			appendStringInfoChar(&buf, ch);
	}
	return buf.data;
}

/*
 * A row literal back into the key's values, in the lane's context, each
 * through its type's input function.  A literal that is not one key of
 * this shape is an error, not a guess.
 */
void
keyset_row_parse(Keyset *ks, const char *text, Datum *values, MemoryContext cxt)
{
	const char *p = text;
	MemoryContext old;

	if (*p++ != '(')
		goto malformed;
	old = MemoryContextSwitchTo(cxt);
	for (int i = 0; i < ks->nkeys; i++)
	{
		KeyColumn  *col = &ks->cols[i];
		char	   *field;

		if (i > 0 && *p++ != ',')
			goto malformed;
		if (*p == ',' || *p == ')')
			goto malformed;		/* a NULL: a key has none */
		field = read_row_field(&p);
		values[i] = worker_key_input(col->input, field, col->ioparam);
	}
	MemoryContextSwitchTo(old);
	if (*p++ != ')' || *p != '\0')
		goto malformed;
	return;

malformed:
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
			 errmsg("\"%s\" is not a key of backfill \"%s\"", text, ks->name),
			 errdetail("A key of %d columns is stored as a row literal such as (1,42).",
					   ks->nkeys)));
}

/* a collation's name with its schema, quoted */
static char *
collation_sql(Oid collation)
{
	HeapTuple	tuple = SearchSysCache1(COLLOID, ObjectIdGetDatum(collation));
	Form_pg_collation form;
	char	   *spelled;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for collation %u", collation);
	form = (Form_pg_collation) GETSTRUCT(tuple);
	spelled = quote_qualified_identifier(get_namespace_name(form->collnamespace),
										 NameStr(form->collname));
	ReleaseSysCache(tuple);
	return spelled;
}

/* column i as the scan names it: under the index's collation when it has one */
static char *
column_sql(Keyset *ks, int i)
{
	KeyColumn  *col = &ks->cols[i];
	char	   *name = (char *) quote_identifier(col->name);

	if (!OidIsValid(col->collation))
		return name;
	return psprintf("%s COLLATE %s", name, collation_sql(col->collation));
}

/* the leading column as the scan names it */
char *
keyset_lead_sql(Keyset *ks)
{
	return column_sql(ks, 0);
}

/* "a, b" (with their collations), or "$n, $n+1", or "a DESC, b DESC" */
static char *
columns_sql(Keyset *ks, int ncols, int first_param, const char *suffix)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < ncols; i++)
	{
		if (i > 0)
			appendStringInfoString(&buf, ", ");
		if (first_param > 0)
			appendStringInfo(&buf, "$%d", first_param + i);
		else
			appendStringInfo(&buf, "%s%s", column_sql(ks, i), suffix);
	}
	return buf.data;
}

/* the key's columns as SQL, "a, b", each under its index's collation */
char *
keyset_columns_sql(Keyset *ks)
{
	return columns_sql(ks, ks->nkeys, 0, "");
}

/* the largest key of the table: "SELECT a, b FROM rel ORDER BY a DESC, b DESC LIMIT 1" */
char *
keyset_max_sql(Keyset *ks)
{
	return psprintf("SELECT %s FROM %s ORDER BY %s LIMIT 1", columns_sql(ks, ks->nkeys, 0, ""),
					ks->relation, columns_sql(ks, ks->nkeys, 0, " DESC"));
}

/*
 * A pass's bound as a condition on rows, its key in parameters $first..:
 * "ROW(a, b) <= ROW($n, $n+1)" within it, or "... > ..." beyond it.
 */
char *
keyset_bound_sql(Keyset *ks, bool beyond, int first)
{
	return psprintf("ROW(%s) %s ROW(%s)", columns_sql(ks, ks->nkeys, 0, ""),
					beyond ? ks->gt : ks->le, columns_sql(ks, ks->nkeys, first, ""));
}

/*
 * The key scan of one variant: bit 1, a lower bound ($2..$k+1,
 * exclusive); bit 2, an upper bound ($k+2..$2k+1, inclusive); $1 the batch
 * size; then the conditions in more (a partitioned table's leaf: "...
 * AND "), or NULL.  It returns the batch's keys in order.
 */
char *
keyset_scan_sql(Keyset *ks, const char *predicate, int variant, const char *more)
{
	StringInfoData sql;
	int			k = ks->nkeys;
	char	   *cols = columns_sql(ks, k, 0, "");
	char	   *lead = column_sql(ks, 0);

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s FROM %s WHERE ", cols, ks->relation);
	/*
	 * Each row comparison comes with the bound it implies on the leading
	 * column: a partitioned table's leaves are pruned by it (a row
	 * comparison prunes none), and a btree scan stops at it.
	 */
	if (variant & 1)
		appendStringInfo(&sql, "ROW(%s) %s ROW(%s) AND %s %s $2 AND ", cols, ks->gt,
						 columns_sql(ks, k, 2, ""), lead, ks->lead_ge);
	if (variant & 2)
		appendStringInfo(&sql, "ROW(%s) %s ROW(%s) AND %s %s $%d AND ", cols, ks->le,
						 columns_sql(ks, k, k + 2, ""), lead, ks->le_first, k + 2);
	if (more != NULL)
		appendStringInfoString(&sql, more);
	/* between newlines: a trailing "--" comment in it cannot reach further */
	appendStringInfo(&sql, "(\n%s\n) ORDER BY %s LIMIT $1", predicate, cols);
	return sql.data;
}

/* pg_stats of key column i, as the lane's role (it may read the table) */
static void
read_column_stats(Keyset *ks, Oid relid, int i, ColumnStats *stats)
{
	stats_read_column(relid, ks->cols[i].name, ks->cols[i].type,
					  get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE, stats);
}

/* the probes planning runs, prepared once per plan */
typedef struct KeyProbes
{
	Keyset	   *ks;
	SPIPlanPtr	last_at[2];		/* the last key at or before a point of 1 or 2 values */
	SPIPlanPtr	next_lead[2];	/* the first leading value; the first after $1 */
	SPIPlanPtr	second_end[2];	/* the first and last second value under a leading one */
	List	   *bounds;			/* the bounds found, as row literals, in order */
	const KeyPlanScope *scope;	/* a leaf's piece ($3, $4), or NULL */
} KeyProbes;

/* the probes' parameters: $1, $2 their own, $3, $4 the piece they keep to */
#define PROBE_NARGS 4

static SPIPlanPtr
probe_prepare(const char *sql, Oid *types)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, PROBE_NARGS, types, CURSOR_OPT_CUSTOM_PLAN);

	if (plan == NULL)
		elog(ERROR, "could not prepare a plan probe: %s", SPI_result_code_string(SPI_result));
	return plan;
}

static void
probes_prepare(KeyProbes *probes, Keyset *ks, const KeyPlanScope *scope)
{
	Oid			types[PROBE_NARGS] = {ks->cols[0].type, ks->cols[1].type,
	ks->cols[0].type, ks->cols[0].type};
	char	   *all = columns_sql(ks, ks->nkeys, 0, "");
	char	   *desc = columns_sql(ks, ks->nkeys, 0, " DESC");
	char	   *lead = column_sql(ks, 0);
	char	   *second = column_sql(ks, 1);
	char	   *eq = keyset_operator(types[0], BTEqualStrategyNumber);
	const char *in = scope ? scope->where : "true";

	probes->ks = ks;
	probes->bounds = NIL;
	probes->scope = scope;
	probes->last_at[0] = probe_prepare(psprintf("SELECT %s FROM %s WHERE %s %s $1 AND %s"
												" ORDER BY %s LIMIT 1",
												all, ks->relation, lead,
												keyset_operator(types[0], BTLessEqualStrategyNumber),
												in, desc), types);
	probes->last_at[1] = probe_prepare(psprintf("SELECT %s FROM %s WHERE ROW(%s, %s) %s ROW($1, $2)"
												" AND %s ORDER BY %s LIMIT 1",
												all, ks->relation, lead, second,
												keyset_common_operator(2, types,
																	   BTLessEqualStrategyNumber),
												in, desc), types);
	probes->next_lead[0] = probe_prepare(psprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT 1",
												  lead, ks->relation, in, lead), types);
	probes->next_lead[1] = probe_prepare(psprintf("SELECT %s FROM %s WHERE %s %s $1 AND %s"
												  " ORDER BY %s LIMIT 1", lead, ks->relation, lead,
												  keyset_operator(types[0], BTGreaterStrategyNumber),
												  in, lead), types);
	for (int end = 0; end < 2; end++)
		probes->second_end[end] = probe_prepare(psprintf("SELECT %s FROM %s WHERE %s %s $1 AND %s"
														 " ORDER BY %s%s, %s%s LIMIT 1",
														 second, ks->relation, lead, eq, in,
														 lead, end ? " DESC" : "",
														 second, end ? " DESC" : ""),
												types);
}

/* a probe's parameters: its own two, then the piece's bounds */
static void
probe_args(KeyProbes *probes, Datum a0, Datum a1, Datum *args, char *nulls)
{
	args[0] = a0;
	args[1] = a1;
	for (int i = 0; i < 2; i++)
	{
		bool		set = probes->scope != NULL && i < probes->scope->nargs;

		args[2 + i] = set ? probes->scope->args[i] : (Datum) 0;
		nulls[2 + i] = set ? ' ' : 'n';
	}
	nulls[0] = nulls[1] = ' ';
}

/* run a probe; its first column, or false when it found no row */
static bool
probe_value(KeyProbes *probes, SPIPlanPtr plan, Datum a0, Datum *value)
{
	bool		isnull;
	Datum		args[PROBE_NARGS];
	char		nulls[PROBE_NARGS];

	probe_args(probes, a0, (Datum) 0, args, nulls);
	if (SPI_execute_plan(plan, args, nulls, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "a plan probe failed");
	if (SPI_processed == 0)
		return false;
	*value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return !isnull;
}

/* a bound: the last key at or before a point of npoint values */
static void
add_bound(KeyProbes *probes, int npoint, Datum v0, Datum v1)
{
	Datum		args[PROBE_NARGS];
	char		nulls[PROBE_NARGS];
	Datum		key[DECLARATION_MAX_KEY_COLUMNS];
	bool		isnull;
	char	   *text;

	probe_args(probes, v0, v1, args, nulls);
	if (SPI_execute_plan(probes->last_at[npoint - 1], args, nulls, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "a plan probe failed");
	if (SPI_processed == 0)
		return;
	for (int i = 0; i < probes->ks->nkeys; i++)
		key[i] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1, &isnull);
	text = keyset_row_text(probes->ks, key);
	/* the points come in order, so the bounds do: a repeat is the last one */
	if (probes->bounds != NIL && strcmp(llast(probes->bounds), text) == 0)
		return;
	probes->bounds = lappend(probes->bounds, text);
}

/* nparts - 1 points picked evenly from the leading column's histogram */
static void
bounds_from_histogram(KeyProbes *probes, ColumnStats *lead, int nparts)
{
	int			last = -1;

	for (int i = 1; i < nparts; i++)
	{
		int			pick = (i * (lead->nhist - 1)) / nparts;

		if (pick != last)
			add_bound(probes, 1, lead->hist[pick], (Datum) 0);
		last = pick;
	}
}

/* is the type a whole number of 2, 4 or 8 bytes? */
static bool
integer_type(Oid type)
{
	return type == INT2OID || type == INT4OID || type == INT8OID;
}

static int64
integer_value(Oid type, Datum d)
{
	return type == INT2OID ? DatumGetInt16(d) :
		type == INT4OID ? DatumGetInt32(d) : DatumGetInt64(d);
}

static Datum
integer_datum(Oid type, int64 v)
{
	return type == INT2OID ? Int16GetDatum((int16) v) :
		type == INT4OID ? Int32GetDatum((int32) v) : Int64GetDatum(v);
}

/* the share of a leading value in the table, from the most common values */
static double
value_share(Keyset *ks, ColumnStats *lead, Datum value, int nvalues)
{
	char	   *text = OidOutputFunctionCall(ks->cols[0].output, value);
	double		common = 0;

	for (int i = 0; i < lead->nmcv; i++)
		if (strcmp(OidOutputFunctionCall(ks->cols[0].output, lead->mcv[i]), text) == 0)
			return lead->freqs[i];
	for (int i = 0; i < lead->nmcv; i++)
		common += lead->freqs[i];
	return Max(0.0, 1.0 - common) / Max(nvalues - lead->nmcv, 1);
}

/*
 * Split the rows of one leading value into pieces by the second column:
 * evenly between its first and last value for a whole number, else at
 * values picked from the second column's histogram between them.
 */
static void
split_by_second(KeyProbes *probes, ColumnStats *second, Datum lead, int pieces)
{
	Keyset	   *ks = probes->ks;
	Oid			type = ks->cols[1].type;
	Datum		lo;
	Datum		hi;
	FmgrInfo   *cmp;
	List	   *inside = NIL;

	if (!probe_value(probes, probes->second_end[0], lead, &lo) ||
		!probe_value(probes, probes->second_end[1], lead, &hi))
		return;
	if (integer_type(type))
	{
		int64		a = integer_value(type, lo);
		int64		b = integer_value(type, hi);

		for (int j = 1; j < pieces && b - a >= pieces; j++)
			add_bound(probes, 2, lead, integer_datum(type, a + (int64) ((double) (b - a) * j / pieces)));
		return;
	}
	cmp = &lookup_type_cache(type, TYPECACHE_CMP_PROC_FINFO)->cmp_proc_finfo;
	for (int i = 0; i < second->nhist; i++)
		if (DatumGetInt32(FunctionCall2Coll(cmp, ks->cols[1].collation, second->hist[i], lo)) > 0 &&
			DatumGetInt32(FunctionCall2Coll(cmp, ks->cols[1].collation, second->hist[i], hi)) < 0)
			inside = lappend(inside, DatumGetPointer(second->hist[i]));
	for (int j = 1; j < pieces && list_length(inside) > 0; j++)
		add_bound(probes, 2, lead,
				  PointerGetDatum(list_nth(inside, (j * list_length(inside)) / pieces)));
}

/*
 * A leading column with few distinct values (a handful of tenants): each
 * value closes a partition once the values since the last bound hold a
 * partition's share of the rows, and a value that holds more than that
 * is split by the second column.  Returns false when there are too many
 * values to look at one by one.
 */
static bool
bounds_from_few_values(KeyProbes *probes, ColumnStats *lead, int nparts)
{
	Keyset	   *ks = probes->ks;
	Datum		values[KEYSET_FEW_VALUES + 1];
	int			n = 0;
	double		since_bound = 0;
	ColumnStats second;

	/* (the probes' rows stay in SPI's memory until the transaction ends) */
	while (n <= KEYSET_FEW_VALUES &&
		   probe_value(probes, probes->next_lead[n > 0], n > 0 ? values[n - 1] : (Datum) 0,
					   &values[n]))
		n++;
	if (n > KEYSET_FEW_VALUES || n == 0)
		return false;
	read_column_stats(ks, probes->scope ? probes->scope->stats_relid : ks->relid, 1, &second);
	for (int i = 0; i < n; i++)
	{
		double		share = value_share(ks, lead, values[i], n) * nparts;
		int			pieces = (int) floor(share + 0.5);

		if (pieces >= 2)
			split_by_second(probes, &second, values[i], pieces);
		since_bound += share;
		if (i < n - 1 && (since_bound >= 1.0 || pieces >= 1))
		{
			add_bound(probes, 1, values[i], (Datum) 0);
			since_bound = 0;
		}
	}
	return true;
}

/* an integer leading column without statistics: its range cut evenly */
static void
bounds_from_minmax(KeyProbes *probes, int nparts)
{
	Keyset	   *ks = probes->ks;
	Oid			type = ks->cols[0].type;
	char	   *lead = column_sql(ks, 0);
	int64		lo;
	int64		hi;
	bool		isnull;
	Oid			types[PROBE_NARGS] = {INT4OID, INT4OID, type, type};
	Datum		args[PROBE_NARGS];
	char		nulls[PROBE_NARGS];

	/* $1 and $2 are not used: the piece's bounds are $3 and $4, as in the probes */
	probe_args(probes, (Datum) 0, (Datum) 0, args, nulls);
	nulls[0] = nulls[1] = 'n';
	if (SPI_execute_with_args(psprintf("SELECT pg_catalog.min(%s)::pg_catalog.int8,"
									   " pg_catalog.max(%s)::pg_catalog.int8 FROM %s WHERE %s",
									   lead, lead, ks->relation,
									   probes->scope ? probes->scope->where : "true"),
							  PROBE_NARGS, types, args, nulls, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the range of the key of backfill \"%s\"", ks->name);
	lo = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (isnull)
		return;
	hi = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	for (int i = 1; i < nparts && hi - lo >= nparts; i++)
		add_bound(probes, 1, integer_datum(type, lo + (int64) ((double) (hi - lo) * i / nparts)),
				  (Datum) 0);
}

/*
 * The interior bounds of about nparts partitions of a composite key, as a
 * text[] of row literals in key order, and how they were found:
 * histogram (the leading column's), few_values (each leading value, the
 * big ones split by the next column), minmax (an integer leading column's
 * range) or single.  Runs as the declaring role, in the planning
 * transaction.  With a scope, only within one leaf's piece, from that
 * leaf's own statistics (what the role may see of them in pg_stats).
 */
Datum
keyset_plan_bounds(Keyset *ks, int nparts, const KeyPlanScope *scope, const char **method)
{
	KeyProbes	probes;
	ColumnStats lead;
	Datum	   *elems;
	int			n = 0;
	ListCell   *lc;

	*method = "single";
	if (nparts <= 1)
		return PointerGetDatum(construct_empty_array(TEXTOID));
	probes_prepare(&probes, ks, scope);
	read_column_stats(ks, scope ? scope->stats_relid : ks->relid, 0, &lead);
	if (lead.nhist > nparts)
	{
		bounds_from_histogram(&probes, &lead, nparts);
		*method = "histogram";
	}
	else if (bounds_from_few_values(&probes, &lead, nparts))
		*method = "few_values";
	else if (integer_type(ks->cols[0].type))
	{
		bounds_from_minmax(&probes, nparts);
		*method = "minmax";
	}
	elems = palloc(sizeof(Datum) * Max(list_length(probes.bounds), 1));
	foreach(lc, probes.bounds)
		elems[n++] = CStringGetTextDatum((char *) lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}
