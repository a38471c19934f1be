/*-------------------------------------------------------------------------
 *
 * declare_source.c
 *	  backfill_declare: resolve a declaration's source as the caller: the
 *	  relation and its key, or a pages function and its count function.
 *
 * Split from declare.c.  Names are resolved with the caller's privileges;
 * every refusal is SOURCE_INVALID (or PRIVILEGE for a function another
 * role owns) with the backfill's name and a hint.
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
#include "catalog/pg_am.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
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
#include "outbox.h"
#include "requires.h"
#include "scope.h"
#include "shmem.h"
#include "tenancy.h"
#include "windows.h"
#include "condition.h"


#include "declare_args.h"
#include "declare_check.h"
#include "declare_source.h"
#include "names.h"

/* the resolved source of a declaration */
typedef struct DeclaredSource
{
	Oid			relid;
	char	   *relation;		/* schema-qualified, quoted */
	char	   *key;			/* key column name (a composite key's first) */
	Oid			keytype;
	KeyResolved composite;		/* nkeys > 1: a composite key (key.c) */
} DeclaredSource;

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
	if (get_rel_persistence(relid) == RELPERSISTENCE_TEMP)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("relation \"%s\" of backfill \"%s\" is a temporary table", relation,
						name),
				 errdetail("A backfill's passes run in background workers, which cannot read "
						   "the temporary tables of this session."),
				 errhint("Backfill a permanent (or unlogged) table; a temporary one is "
						 "this session's to update itself.")));

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

/* what the unique indexes of a key column of one column offer */
typedef enum KeyColumnIndex
{
	KEY_COLUMN_INDEXED,			/* a btree that orders it as the batches do */
	KEY_COLUMN_OTHER_ORDER,		/* only under another collation or operator class */
	KEY_COLUMN_NO_INDEX
} KeyColumnIndex;

/*
 * Is attnum the single column of a valid, unique, non-partial btree index
 * under the column's own collation and its type's default operator class?
 * Batches walk the key in that order (ORDER BY key, key > cursor): an index
 * in another order (COLLATE "C" on a column of another collation) would
 * give partitions and batches that overlap, and rows done twice or never.
 */
static KeyColumnIndex
key_column_index(Relation rel, AttrNumber attnum)
{
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	Oid			opclass = GetDefaultOpClass(att->atttypid, BTREE_AM_OID);
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	KeyColumnIndex found = KEY_COLUMN_NO_INDEX;

	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = idx->rd_index;

		if (form->indisunique && form->indisvalid && form->indnkeyatts == 1 &&
			form->indkey.values[0] == attnum &&
			heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, NULL))
		{
			if (idx->rd_rel->relam == BTREE_AM_OID && idx->rd_indcollation[0] == att->attcollation &&
				OidIsValid(opclass) && idx->rd_opfamily[0] == get_opclass_family(opclass))
				found = KEY_COLUMN_INDEXED;
			else
				found = KEY_COLUMN_OTHER_ORDER;
		}
		index_close(idx, AccessShareLock);
		if (found == KEY_COLUMN_INDEXED)
			break;
	}
	list_free(indexes);
	return found;
}

/*
 * A key of one column must have a unique index that orders it as the
 * batches walk it (key_column_index), else BF001, with the index to create.
 */
static void
refuse_unindexed_key(Relation rel, AttrNumber attnum, const char *key, const char *name,
					 const char *relation)
{
	KeyColumnIndex index = key_column_index(rel, attnum);

	if (index == KEY_COLUMN_OTHER_ORDER)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("key column \"%s\" of backfill \"%s\" has a unique index only under "
						"another collation or operator class than its own", key, name),
				 errdetail("Batches walk the key in the column's own order; an index in another "
						   "order would give batches that overlap or skip rows."),
				 errhint("CREATE UNIQUE INDEX ON %s (%s); then declare again.",
						 relation, quote_identifier(key))));
	if (index != KEY_COLUMN_INDEXED)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("key column \"%s\" of backfill \"%s\" has no unique index", key, name),
				 errdetail("Batches walk the table in key order; two rows with one key could be skipped."),
				 errhint("CREATE UNIQUE INDEX ON %s (%s); then declare again.",
						 relation, quote_identifier(key))));
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

/*
 * The primary key's column, or InvalidAttrNumber when the key is composite
 * (then resolved into src, rel closed).  SOURCE_INVALID without one.
 */
static AttrNumber
resolve_primary_key(const char *name, Relation rel, DeclaredSource *src)
{
	Oid			pkoid;
	Relation	pk;
	AttrNumber	attnum;

	list_free(RelationGetIndexList(rel));
	pkoid = rel->rd_pkindex;
	if (!OidIsValid(pkoid))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("relation \"%s\" of backfill \"%s\" has no primary key",
						src->relation, name),
				 errdetail("Batches walk the table in key order; they need a unique, not-null key."),
				 errhint("Pass key => 'column' naming a NOT NULL column with a unique index, "
						 "or key => 'ctid' to walk the heap in block order.")));
	pk = index_open(pkoid, AccessShareLock);
	if (pk->rd_index->indnkeyatts != 1)
	{
		int			n = pk->rd_index->indnkeyatts;
		char	  **columns = palloc(sizeof(char *) * n);

		for (int i = 0; i < n; i++)
			columns[i] = get_attname(src->relid, pk->rd_index->indkey.values[i], false);
		index_close(pk, AccessShareLock);
		resolve_composite_key(name, rel, NULL, n, columns, src);
		return InvalidAttrNumber;
	}
	attnum = pk->rd_index->indkey.values[0];
	index_close(pk, AccessShareLock);
	return attnum;
}

static void
resolve_key(const char *name, const char *key, DeclaredSource *src)
{
	Relation	rel = relation_open(src->relid, AccessShareLock);
	AttrNumber	attnum;
	Form_pg_attribute att;

	if (key == NULL)
	{
		attnum = resolve_primary_key(name, rel, src);
		if (attnum == InvalidAttrNumber)
			return;				/* composite */
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
		refuse_unindexed_key(rel, attnum, key, name, src->relation);
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

/* a pages source: the pages function and its optional count function */
void
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
void
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

