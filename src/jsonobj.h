/*-------------------------------------------------------------------------
 *
 * jsonobj.h
 *	  Reading the JSON objects a declaration carries (input shapes, inputs,
 *	  settings) and the pages a pages source returns.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_JSONOBJ_H
#define BACKFILL_JSONOBJ_H

#include "postgres.h"

#include "utils/jsonb.h"

/* a JSON object, not an array or a scalar */
extern bool jsonobj_is_object(Jsonb *j);

/*
 * Refuse a value that is not a JSON object: "<what> of backfill "<name>" is
 * not a JSON object", with the given SQLSTATE and hint.
 */
extern void jsonobj_require(Jsonb *j, int sqlerrcode, const char *what, const char *name,
							const char *hint);

/* the value of an object's key, NULL when the key is absent */
extern JsonbValue *jsonobj_field(Jsonb *obj, const char *key);

/*
 * The keys of an object (palloc'd strings) and their values (nested ones as
 * jbvBinary), in the object's order; returns how many.
 */
extern int	jsonobj_pairs(Jsonb *obj, char ***keys, JsonbValue **values);

#endif							/* BACKFILL_JSONOBJ_H */
