/*-------------------------------------------------------------------------
 *
 * declare.c
 *	  backfill_declare(): validate a declaration as the caller and store it
 *	  with the checksum of its normalized definition.
 *
 * Everything is checked before anything is written, and every refusal
 * names the backfill, carries a SQLSTATE of class BF and a hint.  The
 * relation, key, predicate and action are resolved and parsed with the
 * caller's privileges; only the catalog row is written as the extension's
 * owner (catalog.c).
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
#include "ctid.h"
#include "declaration.h"
#include "errors.h"
#include "key.h"
#include "events.h"
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

PG_FUNCTION_INFO_V1(backfill_declare);

static void
check_int_option(const char *name, const char *option, int value, int min, int max,
				 const char *hint)
{
	if (value < min || value > max)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("%s of backfill \"%s\" must be between %d and %d", option, name, min, max),
				 errdetail("It was %d.", value),
				 errhint("%s", hint)));
}

static Datum
text_array_or_null(ArrayType *arr, const char *name, bool *isnull)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	*isnull = (arr == NULL);
	if (arr == NULL)
		return (Datum) 0;
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("environments of backfill \"%s\" is an array of %d dimensions", name,
						ARR_NDIM(arr)),
				 errdetail("It is a list of environment names: one dimension."),
				 errhint("Pass environments => ARRAY['production', 'staging'].")));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("environments of backfill \"%s\" is an empty list", name),
				 errdetail("An empty list would let the backfill run nowhere."),
				 errhint("List the environments it may run in, or pass NULL for all of them.")));
	for (int i = 0; i < n; i++)
		if (nulls[i] || VARSIZE_ANY_EXHDR(DatumGetPointer(elems[i])) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
					 errmsg("environments of backfill \"%s\" contains %s", name,
							nulls[i] ? "a NULL" : "an empty name"),
					 errdetail("Element %d of the list is %s.", i + 1,
							   nulls[i] ? "NULL" : "''"),
					 errhint("List environment names such as 'production' or 'staging'.")));
	return PointerGetDatum(arr);
}

/*
 * max_wal_rate: WAL bytes per second, written as PostgreSQL sizes are
 * ('20MB', '512kB', bytes without a unit); NULL: no budget of its own.
 */
static int64
read_wal_budget(const DeclareArgs *a, const char *name)
{
	char	   *given;
	int			bytes;
	const char *hint = NULL;

	if (arg_isnull(a, "max_wal_rate"))
		return 0;
	given = arg_text(a, "max_wal_rate");
	if (!parse_int(given, &bytes, GUC_UNIT_BYTE, &hint) || bytes < 1024)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("max_wal_rate of backfill \"%s\" is not a size from 1kB to 2GB", name),
				 errdetail("It was given as \"%s\"%s%s", given, hint ? ": " : ".", hint ? hint : ""),
				 errhint("Give the WAL bytes per second as PostgreSQL sizes are written, "
						 "for example max_wal_rate => '20MB' (units B, kB, MB, GB).")));
	return bytes;
}

/* batch size, rate, lanes, attempts, and how a batch commits */
static void
read_batch_options(const DeclareArgs *a, Declaration *d)
{
	const char *name = d->name;

	refuse_null_option(a, name, "batch_size");
	d->batch_size = DatumGetInt32(arg_datum(a, "batch_size"));
	check_int_option(name, "batch_size", d->batch_size, 1, 1000000,
					 "Rows per batch; 1000 to 10000 suits most tables.");

	d->rate = arg_isnull(a, "rate") ? backfill_default_rate :
		DatumGetFloat8(arg_datum(a, "rate"));
	/* as backfill.default_rate: below one batch in 1000 s, the wait overflows */
	if (isnan(d->rate) || isinf(d->rate) || d->rate < 0.001 || d->rate > 100000)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("rate of backfill \"%s\" must be between 0.001 and 100000", name),
				 errdetail("The rate is batches per second; pacing cannot be switched off."),
				 errhint("Pass rate => 0.5 for one batch every two seconds, or rate => 50 to go fast.")));

	d->max_wal_rate = read_wal_budget(a, name);
	d->max_parallel = arg_int_or_default(a, "max_parallel");
	check_int_option(name, "max_parallel", d->max_parallel, 1, 64,
					 "The number of lanes that may work on the backfill at once.");
	d->max_attempts = arg_int_or_default(a, "max_attempts");
	check_int_option(name, "max_attempts", d->max_attempts, 1, 100,
					 "How often a failing batch is tried before the pass fails.");
	/* NULL takes the default: a batch's commit need not wait for disk */
	d->async_commit = arg_isnull(a, "async_commit") ||
		DatumGetBool(arg_datum(a, "async_commit"));
}

/* the batch's timeouts, where it may run, and the retries' backoff */
static void
read_timing_options(const DeclareArgs *a, Declaration *d)
{
	const char *name = d->name;
	bool		environments_null;

	refuse_null_option(a, name, "batch_timeout");
	d->batch_timeout_ms = arg_ms_or_default(a, name, "batch_timeout", INT64CONST(86400000));
	if (!arg_isnull(a, "environments"))
		d->environments = DatumGetArrayTypeP(
			text_array_or_null(DatumGetArrayTypeP(arg_datum(a, "environments")),
							   name, &environments_null));
	d->backoff_base_ms = arg_ms_or_default(a, name, "backoff_base", INT64CONST(3600000));
	d->backoff_cap_ms = arg_ms_or_default(a, name, "backoff_cap", INT64CONST(86400000));
	if (d->backoff_cap_ms < d->backoff_base_ms)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("backoff_cap of backfill \"%s\" is below its backoff_base", name),
				 errhint("The cap bounds the doubling delay between attempts; make it at least the base.")));
	d->lock_timeout_ms = arg_ms_or_default(a, name, "lock_timeout", INT64CONST(3600000));
}

/* the adaptive batch size: its target time and bounds */
static void
read_adaptive_options(const DeclareArgs *a, Declaration *d)
{
	const char *name = d->name;

	d->target_batch_ms = arg_isnull(a, "target_batch_time") ? 0 :
		arg_ms_or_default(a, name, "target_batch_time", INT64CONST(600000));
	d->min_batch_size = arg_isnull(a, "min_batch_size") ? Min(d->batch_size, 100) :
		DatumGetInt32(arg_datum(a, "min_batch_size"));
	check_int_option(name, "min_batch_size", d->min_batch_size, 1, 1000000,
					 "The adaptive batch size never goes below it.");
	d->max_batch_size = arg_isnull(a, "max_batch_size") ? Max(d->batch_size, 100000) :
		DatumGetInt32(arg_datum(a, "max_batch_size"));
	check_int_option(name, "max_batch_size", d->max_batch_size, 1, 1000000,
					 "The adaptive batch size never goes above it.");
	if (d->batch_size < d->min_batch_size || d->batch_size > d->max_batch_size)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("batch_size of backfill \"%s\" is outside min_batch_size..max_batch_size", name),
				 errdetail("batch_size is %d; the bounds are %d and %d.",
						   d->batch_size, d->min_batch_size, d->max_batch_size),
				 errhint("The batch size starts at batch_size and adapts within the bounds; "
						 "make batch_size lie between them.")));
}

/*
 * The rest of a backfill's life: how many isolated rows a pass tolerates,
 * the SQL that undoes it, and how often a completed backfill is watched
 * for drift.  (The revert's statements are checked with the source.)
 */
static void
read_lifecycle_options(const DeclareArgs *a, Declaration *d)
{
	const char *name = d->name;

	d->max_failed_rows = arg_int_or_default(a, "max_failed_rows");
	check_int_option(name, "max_failed_rows", d->max_failed_rows, 0, 1000000,
					 "How many rows that fail on their own a pass skips and records; 0 fails the pass at the first.");
	d->revert = arg_text(a, "revert");
	d->revert_predicate = arg_text(a, "revert_predicate");
	d->watch_ms = arg_isnull(a, "watch") ? 0 :
		arg_ms_or_default(a, name, "watch", INT64CONST(86400000));
}

/*
 * When the lanes may work: throttle_when (checked with the statements,
 * check_throttle_when) and the windows in their time zone, which defaults
 * to the server's TimeZone as a new session has it, stored so that the
 * scheduler, the lanes and backfill_status read the same zone.
 */
static void
read_when_options(const DeclareArgs *a, Declaration *d)
{
	d->throttle_when = arg_text(a, "throttle_when");
	if (d->throttle_when != NULL && strspn(d->throttle_when, " \t\r\n") == strlen(d->throttle_when))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("throttle_when of backfill \"%s\" is empty", d->name),
				 errhint("Write one SQL boolean expression, true while the lanes must hold back, "
						 "or leave throttle_when out.")));
	d->window_time_zone = arg_text(a, "window_time_zone");
	if (!arg_isnull(a, "windows"))
		d->windows = DatumGetArrayTypeP(arg_datum(a, "windows"));
	if (d->windows != NULL && d->window_time_zone == NULL)
		d->window_time_zone = pstrdup(GetConfigOptionResetString("TimeZone"));
	(void) windows_parse(d->name, d->windows, d->window_time_zone);
}

/* scope, tenancy, run_as and requirements; returns run_as's name */
static char *
read_trust_options(const DeclareArgs *a, Declaration *d)
{
	const char *name = d->name;
	char	   *run_as_name = arg_text(a, "run_as");

	d->input_shape = arg_jsonb(a, "input");
	d->scope = arg_text(a, "scope");
	d->settings = arg_jsonb(a, "settings");
	/* no settings, however written: '{}' is the declaration without them */
	if (d->settings != NULL && JB_ROOT_IS_OBJECT(d->settings) && JB_ROOT_COUNT(d->settings) == 0)
		d->settings = NULL;
	d->tenant = arg_text(a, "tenant");
	d->requires = arg_text(a, "requires");
	d->requires_backfill = arg_text(a, "requires_backfill");

	scope_check_declaration(name, d->input_shape, d->scope);
	if (d->input_shape != NULL && d->watch_ms > 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("scoped backfill \"%s\" cannot be watched", name),
				 errdetail("A watch heals drift with catch-up passes of the whole table; a scoped "
						   "backfill's passes each need an input."),
				 errhint("Leave watch out, and run each scope again with backfill_run('%s', "
						 "input => ...) when it drifts.", name)));
	tenancy_check_settings(name, d->settings, d->tenant, d->input_shape);
	d->run_as = tenancy_run_as(name, run_as_name);
	if (d->requires != NULL && d->requires[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("requires of backfill \"%s\" is an empty migration id", name),
				 errhint("Name the schema migration that must be applied first, or leave requires out.")));
	if (d->requires_backfill != NULL && strcmp(d->requires_backfill, name) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("backfill \"%s\" cannot require itself", name),
				 errhint("Name another backfill that must complete first.")));
	return run_as_name ? run_as_name : GetUserNameFromId(d->run_as, false);
}

/* two text[] alike, NULL alike */
static bool
text_array_alike(ArrayType *a, ArrayType *b)
{
	if (a == NULL || b == NULL)
		return a == NULL && b == NULL;
	return DatumGetBool(OidFunctionCall2Coll(F_ARRAY_EQ, DEFAULT_COLLATION_OID,
											 PointerGetDatum(a), PointerGetDatum(b)));
}

/*
 * Inside the catalog scope, with the row locked: a name declared by a role
 * the caller is not a member of is refused, and so is a new checksum while
 * a pass runs.  Lanes waiting out the old rate read the new one at once.
 */
static void
check_redeclaration(const Declaration *d)
{
	Declaration old;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(d->name)};
	bool		running;
	bool		reverting;
	bool		isnull;

	if (!declaration_lock(d->name, &old))
		return;
	/* no running pass: false, and NULL (false) for the revert */
	catalog_exec("SELECT pg_catalog.count(*) > 0, pg_catalog.bool_or(l.direction = 'revert')"
				 "  FROM backfill.ledger l WHERE l.declaration = $1 AND l.status = 'running'",
				 1, types, values, NULL, SPI_OK_SELECT);
	running = DatumGetBool(catalog_getdatum(0, 1, &isnull));
	reverting = DatumGetBool(catalog_getdatum(0, 2, &isnull));

	if (!has_privs_of_role(d->owner, old.owner))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_DUPLICATE),
				 errmsg("backfill \"%s\" is already declared by role \"%s\"", d->name,
						role_name(old.owner)),
				 errhint("Choose another name, or re-declare it as a member of that role.")));
	/* a retired backfill's declaration is its history: it stays as it was */
	check_not_retired(d->name, "be declared again");
	if (running)
		backfill_wake_lanes_at_commit(0, false);
	/* new windows: the scheduler looks again at once (it may sleep until a window's start) */
	if (running && !text_array_alike(old.windows, d->windows))
		backfill_wake_scheduler_at_commit();
	if (running && strcmp(old.checksum, d->checksum) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CHANGED),
				 errmsg("backfill \"%s\" cannot be redefined while a pass is running", d->name),
				 errdetail("The running pass started with checksum %s; the new definition has %s.",
						   old.checksum, d->checksum),
				 errhint("Wait for the pass to end, or cancel it, then declare again.")));
	/* the revert is outside the checksum, so a revert pass guards it here */
	if (reverting && (!text_equal(old.revert, d->revert) ||
					  !text_equal(old.revert_predicate, d->revert_predicate)))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CHANGED),
				 errmsg("backfill \"%s\" cannot change its revert while a revert pass is running",
						d->name),
				 errdetail("The lanes of the revert pass run the revert it started with."),
				 errhint("Wait for the revert pass to end, or cancel it, then declare again.")));
	/* the lanes read max_failed_rows again at each row that fails alone (poison.c) */
	if (running && old.max_failed_rows != d->max_failed_rows)
		ereport(NOTICE,
				(errmsg("backfill \"%s\": max_failed_rows => %d applies to the running pass at "
						"its next row that fails alone", d->name, d->max_failed_rows),
				 errdetail("The running pass tolerated %d; it ends failed (BF018) when it has "
						   "recorded more rows than the new bound.", old.max_failed_rows),
				 errhint("backfill_failed_rows('%s') lists the rows it has recorded so far.",
						 d->name)));
	/* a lane reads async_commit when it starts */
	if (running && old.async_commit != d->async_commit)
		ereport(NOTICE,
				(errmsg("backfill \"%s\": async_commit => %s applies to lanes started from now on",
						d->name, d->async_commit ? "true" : "false"),
				 errdetail("The lanes of the running pass keep committing %s.",
						   old.async_commit ? "asynchronously" : "synchronously"),
				 errhint("Pause and resume the pass to apply it now: its lanes start again "
						 "and read it.")));
}

/*
 * What runs per batch: an action as written, or set => / delete => for the
 * engine to write (action.c), exactly one; guard => false lets a
 * hand-written UPDATE or DELETE of the relation leave the predicate out.
 */
static void
read_action_options(const DeclareArgs *a, Declaration *d)
{
	int			given;

	d->action = arg_text(a, "action");
	d->action_set = arg_text(a, "set");
	d->action_delete = !arg_isnull(a, "delete") && DatumGetBool(arg_datum(a, "delete"));
	d->guard = arg_isnull(a, "guard") || DatumGetBool(arg_datum(a, "guard"));
	given = (d->action != NULL) + (d->action_set != NULL) + d->action_delete;
	if (given > 1)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" declares more than one of action, set and delete",
						d->name),
				 errdetail("set and delete declare the statement the engine writes; action is "
						   "one written by hand."),
				 errhint("Pass set => 'c = a * 2' (an UPDATE), delete => true (a DELETE of the "
						 "rows that match the predicate), or action => '...', only one.")));
	if ((d->action == NULL && given == 0) || (d->action != NULL && d->action[0] == '\0') ||
		(d->action_set != NULL && d->action_set[0] == '\0'))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" has no action", d->name),
				 errdetail("Each batch runs the action over its key range."),
				 errhint("Pass set => 'c = a * 2' and the engine writes the UPDATE (the batch's "
						 "range AND the predicate), delete => true for a DELETE, or action => "
						 "'...' for a statement of your own.")));
	if (d->action == NULL && !arg_isnull(a, "pages"))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" has a pages source and %s", d->name,
						d->action_set ? "set" : "delete"),
				 errdetail("The engine writes a statement over a relation's key range; a pages "
						   "source has neither."),
				 errhint("Write the action for the page's rows ($1, jsonb) by hand.")));
}

/*
 * backfill_declare(name, relation, predicate, action, ...): everything is
 * resolved and checked as the caller, in the steps above, before the row
 * is written as the extension's owner.
 */
Datum
backfill_declare(PG_FUNCTION_ARGS)
{
	DeclareArgs args;
	Declaration decl;
	char	   *run_as_name;
	CatalogScope scope;

	declare_args_open(fcinfo, &args);
	memset(&decl, 0, sizeof(decl));
	decl.name = arg_text(&args, "name");
	decl.owner = GetUserId();
	check_catalog_current("declare backfill", decl.name);
	check_new_backfill_name(decl.name);
	check_not_standby("declare backfill", decl.name);
	/* a declaration that returned its checksum survives a crash (synchronous_commit aside) */
	ForceSyncCommit();

	read_batch_options(&args, &decl);
	read_timing_options(&args, &decl);
	read_adaptive_options(&args, &decl);
	read_lifecycle_options(&args, &decl);
	read_when_options(&args, &decl);
	decl.events = arg_text(&args, "events");
	run_as_name = read_trust_options(&args, &decl);

	read_action_options(&args, &decl);

	/* the source: a local relation or a pages function, exactly one */
	if (!arg_isnull(&args, "pages"))
		resolve_pages_source(&args, &decl);
	else
		resolve_table_source(&args, &decl, run_as_name);
	if (decl.action == NULL)
		decl.action = action_generate(&decl);

	check_role_can_login(decl.name, decl.run_as);
	decl.checksum = declaration_checksum(&decl);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/* never a Citus shard, nor a Citus table off the coordinator (citus.c) */
	if (OidIsValid(decl.relid))
		citus_check_declarable(decl.name, decl.relid);

	/* only a backfill of a role the declarer is a member of (checked at run too) */
	requires_check_backfill(decl.name, decl.owner, decl.requires_backfill);
	check_statements(&decl);
	ctid_check_declaration(&decl);
	check_throttle_when(&decl);

	/* stored as the extension's owner; lanes resolve names as the declarer did */
	decl.search_path = pstrdup(GetConfigOption("search_path", false, false));
	catalog_enter(&scope);
	if (decl.events != NULL)	/* its owner may emit there (outbox/events.c) */
		events_check_topic(decl.name, decl.events, decl.owner);
	check_redeclaration(&decl);
	declaration_store(&decl);
	catalog_leave(&scope);
	/* a watch needs the scheduler: one that left idle comes back at commit */
	if (decl.watch_ms > 0)
		backfill_wake_scheduler_at_commit();

	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(decl.checksum));
}
