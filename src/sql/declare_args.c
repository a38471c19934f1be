/*-------------------------------------------------------------------------
 *
 * declare_args.c
 *	  backfill_declare's arguments, found by name in its signature.
 *
 * Split from declare.c.  The signature must carry exactly the arguments of
 * declaration_columns (declaration.c), with their types; an older
 * signature lacks the newest, which then take their defaults.
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


#include "declare_args.h"

int
interval_to_ms(const char *name, const char *option, Interval *iv, int64 max_ms)
{
	int64		us;
	int64		days_us;
	bool		overflow;

	/* the whole interval, microseconds included; one too big for int64 is out of range */
	overflow = pg_mul_s64_overflow((int64) iv->month * DAYS_PER_MONTH + iv->day, USECS_PER_DAY,
								   &days_us) ||
		pg_add_s64_overflow(iv->time, days_us, &us);
	if (overflow || us < 1000 || us > max_ms * 1000)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("%s of backfill \"%s\" is out of range", option, name),
				 errdetail("It must be between 1 millisecond and " INT64_FORMAT " seconds.",
						   max_ms / 1000),
				 errhint("Pass an interval such as '30 seconds'.")));
	return (int) (us / 1000);
}

void
declare_args_open(FunctionCallInfo fcinfo, DeclareArgs *a)
{
	HeapTuple	proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	Oid		   *types;
	char	   *modes;
	if (!HeapTupleIsValid(proc))
		elog(ERROR, "cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
	a->fcinfo = fcinfo;
	a->nargs = get_func_arg_info(proc, &types, &a->names, &modes);
	ReleaseSysCache(proc);

	for (int i = 0; i < a->nargs; i++)
	{
		const DeclarationColumn *col;

		col = a->names ? declaration_column_of_argument(a->names[i]) : NULL;
		if (col == NULL || col->argtype != types[i])
			elog(ERROR, "argument %d (%s) of backfill_declare is not one of the declaration's columns",
				 i + 1, a->names ? a->names[i] : "unnamed");
	}
}

/*
 * The position of an argument, -1 when the signature has none: an older
 * signature (before ALTER EXTENSION ... UPDATE) lacks the newest options,
 * which then take their defaults.
 */
static int
arg_number(const DeclareArgs *a, const char *argument)
{
	for (int i = 0; i < a->nargs; i++)
		if (strcmp(a->names[i], argument) == 0)
			return i;
	if (declaration_column_of_argument(argument) == NULL)
		elog(ERROR, "backfill_declare has no argument \"%s\"", argument);
	return -1;
}

bool
arg_isnull(const DeclareArgs *a, const char *argument)
{
	int			i = arg_number(a, argument);

	return i < 0 || a->fcinfo->args[i].isnull;
}

Datum
arg_datum(const DeclareArgs *a, const char *argument)
{
	return a->fcinfo->args[arg_number(a, argument)].value;
}

char *
arg_text(const DeclareArgs *a, const char *argument)
{
	return arg_isnull(a, argument) ? NULL : TextDatumGetCString(arg_datum(a, argument));
}

Jsonb *
arg_jsonb(const DeclareArgs *a, const char *argument)
{
	return arg_isnull(a, argument) ? NULL : DatumGetJsonbP(arg_datum(a, argument));
}

/* the signature's default of an argument, as SQL text without its quotes */
static char *
arg_default(const char *argument)
{
	const char *def = declaration_column_of_argument(argument)->argdefault;
	size_t		len = strlen(def);

	if (len >= 2 && def[0] == '\'' && def[len - 1] == '\'')
		return pnstrdup(def + 1, len - 2);
	return pstrdup(def);
}

/* an integer option; NULL takes the signature's default */
int
arg_int_or_default(const DeclareArgs *a, const char *argument)
{
	if (arg_isnull(a, argument))
		return pg_strtoint32(arg_default(argument));
	return DatumGetInt32(arg_datum(a, argument));
}

/* an interval option in milliseconds; NULL takes the signature's default */
int
arg_ms_or_default(const DeclareArgs *a, const char *name, const char *argument, int64 max_ms)
{
	Interval   *iv;

	if (arg_isnull(a, argument))
		iv = DatumGetIntervalP(DirectFunctionCall3(interval_in,
												   CStringGetDatum(arg_default(argument)),
												   ObjectIdGetDatum(InvalidOid),
												   Int32GetDatum(-1)));
	else
		iv = DatumGetIntervalP(arg_datum(a, argument));
	return interval_to_ms(name, argument, iv, max_ms);
}

/* batch_size and batch_timeout have defaults, but an explicit NULL is refused */
void
refuse_null_option(const DeclareArgs *a, const char *name, const char *argument)
{
	if (arg_isnull(a, argument))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("%s of backfill \"%s\" must not be NULL", argument, name),
				 errhint("Pass %s => %s, or leave it out for the default.", argument,
						 declaration_column_of_argument(argument)->argdefault)));
}
