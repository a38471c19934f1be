/*-------------------------------------------------------------------------
 *
 * key.h
 *	  A declaration's composite key and the parameters of its action
 *	  (key.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_KEY_H
#define BACKFILL_KEY_H

#include "postgres.h"

#include "utils/array.h"
#include "utils/rel.h"

#include "declaration.h"

/* a composite key as declare.c stores it */
typedef struct KeyResolved
{
	int			nkeys;
	char	  **columns;		/* in the index's order */
	Oid			types[DECLARATION_MAX_KEY_COLUMNS];
	ArrayType  *key_columns;	/* text[] of the columns */
	ArrayType  *key_types;		/* regtype[] of their types */
} KeyResolved;

extern void key_resolve_composite(const char *name, Relation rel, const char *relation,
								  const char *key, int pk_n, char **pk_columns,
								  KeyResolved *out);
extern List *key_names(const char *name, const char *key);
extern void key_from_declaration(const Declaration *d, KeyResolved *out);
extern char *key_action_form(int n, char **columns);
extern void key_check_action(const char *name, const char *what, const char *action,
							 const KeyResolved *key);

#endif							/* BACKFILL_KEY_H */
