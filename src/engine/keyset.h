/*-------------------------------------------------------------------------
 *
 * keyset.h
 *	  A key of several columns: the unique index that serves it, its SQL
 *	  (row comparisons in index order), its text form (a row literal) and
 *	  the plan of its key space (keyset.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_KEYSET_H
#define BACKFILL_KEYSET_H

#include "postgres.h"

#include "utils/array.h"
#include "utils/rel.h"

#include "declaration.h"

/* one column of a composite key, in the order of its unique index */
typedef struct KeyColumn
{
	char	   *name;
	Oid			type;
	Oid			collation;		/* the index's, InvalidOid if not collatable */
	Oid			input;
	Oid			ioparam;
	Oid			output;
	int16		len;
	bool		byval;
} KeyColumn;

/* a composite key as a lane works with it (nkeys 1: a key of one column) */
typedef struct Keyset
{
	const char *name;			/* the backfill's, for errors */
	Oid			relid;
	const char *relation;		/* quoted, schema-qualified */
	int			nkeys;
	KeyColumn	cols[DECLARATION_MAX_KEY_COLUMNS];
	char	   *gt;				/* OPERATOR(schema.>) of every column */
	char	   *le;
	char	   *lead_ge;		/* the leading column's >= and <= */
	char	   *le_first;
} Keyset;

/*
 * Where a plan of the key space looks (keyset_plan_bounds): NULL, the
 * whole table; else one leaf's piece of it, a condition on the
 * parameters $3 and $4, and the leaf whose own statistics split it.
 */
typedef struct KeyPlanScope
{
	Oid			stats_relid;
	const char *where;
	int			nargs;
	Datum		args[2];
} KeyPlanScope;

/* how the unique indexes of a table serve the columns a key names */
typedef enum KeyIndexMatch
{
	KEY_INDEX_OK,				/* a valid, unique, non-partial btree index on exactly them */
	KEY_INDEX_NONE,				/* no unique index on them */
	KEY_INDEX_OTHER_ORDER,		/* one on the same columns in another order */
	KEY_INDEX_PARTIAL,			/* only a partial one */
	KEY_INDEX_EXPRESSION,		/* only one that has an expression among its columns */
	KEY_INDEX_OPCLASS			/* only one with a non-default operator class */
} KeyIndexMatch;

typedef struct KeyIndex
{
	KeyIndexMatch match;
	Oid			indexid;		/* the index that matched (or nearly did) */
	Oid			collations[DECLARATION_MAX_KEY_COLUMNS];
	char	   *columns;		/* its columns as SQL: "a, b" or "a, lower(b)" */
} KeyIndex;

extern char *keyset_operator(Oid keytype, int16 strategy);
extern void keyset_find_index(Relation rel, int nkeys, const AttrNumber *attnums,
							  KeyIndex *found);
extern char *keyset_common_operator(int nkeys, const Oid *types, int16 strategy);

extern void keyset_resolve(Keyset *ks, ArrayType *columns, ArrayType *types,
						   MemoryContext cxt);
extern char *keyset_row_text(Keyset *ks, const Datum *values);
extern void keyset_row_parse(Keyset *ks, const char *text, Datum *values, MemoryContext cxt);
extern char *keyset_columns_sql(Keyset *ks);
extern char *keyset_scan_sql(Keyset *ks, const char *predicate, int variant,
							 const char *more);
extern char *keyset_max_sql(Keyset *ks);
extern char *keyset_bound_sql(Keyset *ks, bool beyond, int first);
extern char *keyset_lead_sql(Keyset *ks);
extern Datum keyset_plan_bounds(Keyset *ks, int nparts, const KeyPlanScope *scope,
								const char **method);

#endif							/* BACKFILL_KEYSET_H */
