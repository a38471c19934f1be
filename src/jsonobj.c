/*-------------------------------------------------------------------------
 *
 * jsonobj.c
 *	  Reading the JSON objects a declaration carries (input shapes, inputs,
 *	  settings) and the pages a pages source returns: whether a value is an
 *	  object, one key's value, every key and value in order.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/jsonb.h"

#include "jsonobj.h"

bool
jsonobj_is_object(Jsonb *j)
{
	return JB_ROOT_IS_OBJECT(j) && !JB_ROOT_IS_SCALAR(j);
}

void
jsonobj_require(Jsonb *j, int sqlerrcode, const char *what, const char *name,
				const char *hint)
{
	if (jsonobj_is_object(j))
		return;
	ereport(ERROR,
			(errcode(sqlerrcode),
			 errmsg("%s of backfill \"%s\" is not a JSON object", what, name),
			 errhint("%s", hint)));
}

JsonbValue *
jsonobj_field(Jsonb *obj, const char *key)
{
	JsonbValue	kv;

	kv.type = jbvString;
	kv.val.string.val = (char *) key;
	kv.val.string.len = strlen(key);
	return findJsonbValueFromContainer(&obj->root, JB_FOBJECT, &kv);
}

int
jsonobj_pairs(Jsonb *obj, char ***keys, JsonbValue **values)
{
	int			n = JsonContainerSize(&obj->root);
	int			i = 0;
	JsonbIterator *it = JsonbIteratorInit(&obj->root);
	JsonbValue	v;
	JsonbIteratorToken tok;

	*keys = palloc(sizeof(char *) * Max(n, 1));
	*values = palloc(sizeof(JsonbValue) * Max(n, 1));
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok != WJB_KEY)
			continue;
		Assert(i < n);
		(*keys)[i] = pnstrdup(v.val.string.val, v.val.string.len);
		(void) JsonbIteratorNext(&it, &(*values)[i], true);
		i++;
	}
	return i;
}
