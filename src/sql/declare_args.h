/*-------------------------------------------------------------------------
 *
 * declare_args.h
 *	  backfill_declare's arguments, found by name (declare_args.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_DECLARE_ARGS_H
#define BACKFILL_DECLARE_ARGS_H

#include "postgres.h"

#include "fmgr.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

/*
 * backfill_declare's arguments, found by name: the SQL signature must
 * carry exactly the arguments of declaration_columns, with their types.
 */
typedef struct DeclareArgs
{
	FunctionCallInfo fcinfo;
	int			nargs;
	char	  **names;
} DeclareArgs;

extern void declare_args_open(FunctionCallInfo fcinfo, DeclareArgs *a);
extern bool arg_isnull(const DeclareArgs *a, const char *argument);
extern Datum arg_datum(const DeclareArgs *a, const char *argument);
extern char *arg_text(const DeclareArgs *a, const char *argument);
extern Jsonb *arg_jsonb(const DeclareArgs *a, const char *argument);
extern int arg_int_or_default(const DeclareArgs *a, const char *argument);
extern int arg_ms_or_default(const DeclareArgs *a, const char *name, const char *argument, int64 max_ms);
extern void refuse_null_option(const DeclareArgs *a, const char *name, const char *argument);
extern int interval_to_ms(const char *name, const char *option, Interval *iv, int64 max_ms);

#endif							/* BACKFILL_DECLARE_ARGS_H */
