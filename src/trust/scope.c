/*-------------------------------------------------------------------------
 *
 * scope.c
 *	  Scoped backfills: the declared input shape, the scope expression and
 *	  the input each run carries.
 *
 * A scoped declaration says what input a run takes (a JSON object whose
 * keys map to SQL type names, e.g. {"tenant_id": "integer"}) and a scope
 * expression over that input (e.g. input->>'tenant_id').  Each run carries
 * an input; its pass is recorded under the ledger name "name:scope", so
 * two scopes keep two histories and skip/force apply per scope.  The
 * predicate and the action read the input with backfill_input().
 *
 * Input values travel as parameters, never as SQL text.  The input's casts
 * and the scope expression run as the declaration's owner, restricted and
 * rolled back (asrole.c), whoever calls backfill_run; for a caller whose
 * session is not the owner's own, in a worker logged in as the owner
 * (backfill_scope_main), never in the caller's session.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "parser/parse_type.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "asrole.h"
#include "compat.h"
#include "catalog.h"
#include "config.h"
#include "deadline.h"
#include "errors.h"
#include "jsonobj.h"
#include "scope.h"
#include "worker.h"

#define SHAPE_HINT	"Map each input key to a SQL type name: '{\"tenant_id\": \"integer\"}'."

/* each key of the shape names a type: returns the type's OID */
static Oid
shape_type(const char *name, const char *key, JsonbValue *v)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			typid;
	int32		typmod;
	char	   *typname;

	if (v->type != jbvString)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("input shape of backfill \"%s\" gives key \"%s\" no type name", name, key),
				 errhint(SHAPE_HINT)));
	typname = pnstrdup(v->val.string.val, v->val.string.len);
	typid = InvalidOid;
	/* either way an unknown type ends in the error below, never goes on */
	PG_TRY();
	{
		compat_parse_type_missing_ok(typname, &typid, &typmod);
	}
	PG_CATCH();
	{
		/* a name that does not even parse as a type: as unknown as can be */
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		typid = InvalidOid;
	}
	PG_END_TRY();
	if (!OidIsValid(typid))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("input shape of backfill \"%s\" names unknown type \"%s\" for key \"%s\"",
						name, typname, key),
				 errhint("Use a SQL type name such as integer, bigint, text, uuid or date.")));
	return typid;
}

void
scope_check_declaration(const char *name, Jsonb *shape, const char *scope)
{
	char	  **keys;
	JsonbValue *values;
	int			nkeys;

	if ((shape == NULL) != (scope == NULL || scope[0] == '\0'))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" declares %s without %s", name,
						shape ? "an input" : "a scope", shape ? "a scope" : "an input"),
				 errdetail("A scoped backfill needs both: the input each run carries and the "
						   "scope that names its history."),
				 errhint("Pass input => '{\"tenant_id\": \"integer\"}' together with "
						 "scope => 'input->>''tenant_id''', or neither.")));
	if (shape == NULL)
		return;

	jsonobj_require(shape, ERRCODE_BACKFILL_SOURCE_INVALID, "input shape", name, SHAPE_HINT);
	nkeys = jsonobj_pairs(shape, &keys, &values);
	for (int i = 0; i < nkeys; i++)
		(void) shape_type(name, keys[i], &values[i]);
	if (nkeys == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("input shape of backfill \"%s\" has no keys", name),
				 errhint(SHAPE_HINT)));
}

/*
 * The input's value of a key must read as its type: cast as SQL, the
 * value a parameter.
 */
static void
check_input_value(const char *name, Jsonb *input, const char *key, Oid typid)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		Oid			types[2] = {JSONBOID, TEXTOID};
		Datum		values[2] = {JsonbPGetDatum(input), CStringGetTextDatum(key)};
		char	   *sql = psprintf("SELECT ($1 OPERATOR(pg_catalog.->>) $2)::%s",
								   format_type_extended(typid, -1, FORMAT_TYPE_FORCE_QUALIFY));

		if (SPI_execute_with_args(sql, 2, types, values, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not cast an input value");
	}
	PG_CATCH();
	{
		ErrorData  *edata = backfill_take_error(cxt);

		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("input key \"%s\" of backfill \"%s\" is not a valid %s", key, name,
						format_type_be(typid)),
				 errdetail("%s", edata->message),
				 errhint("Pass a value of the type the input shape declares.")));
	}
	PG_END_TRY();
}

/*
 * Check the input against the shape: the same keys, each value castable to
 * its type.
 */
static void
check_input(const char *name, Jsonb *shape, Jsonb *input)
{
	char	  **keys;
	JsonbValue *types;
	char	  **input_keys;
	JsonbValue *input_values;
	int			nshape;
	int			ninput;

	if (input == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" is scoped: each run needs an input", name),
				 errhint("Pass input => '{...}' with the keys its shape declares.")));
	jsonobj_require(input, ERRCODE_BACKFILL_OPTION_INVALID, "input", name,
					"Pass input => '{\"key\": value}'.");

	ninput = jsonobj_pairs(input, &input_keys, &input_values);
	nshape = jsonobj_pairs(shape, &keys, &types);
	for (int i = 0; i < nshape; i++)
	{
		Oid			typid = shape_type(name, keys[i], &types[i]);
		JsonbValue *found = jsonobj_field(input, keys[i]);

		if (found == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
					 errmsg("input of backfill \"%s\" lacks key \"%s\"", name, keys[i]),
					 errhint("Give every key the input shape declares a value.")));
		if (found->type == jbvNull)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
					 errmsg("key \"%s\" of the input of backfill \"%s\" is null", keys[i], name),
					 errdetail("A scope is named by its input's values; a null names none."),
					 errhint("Give key \"%s\" a value of its declared type.", keys[i])));
		check_input_value(name, input, keys[i], typid);
	}
	if (ninput != nshape)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("input of backfill \"%s\" has %d keys; its shape declares %d",
						name, ninput, nshape),
				 errhint("Pass exactly the keys of the declared input shape.")));
}

/* what scope_evaluate is given, and answers */
typedef struct ScopeEval
{
	const char *name;
	Jsonb	   *shape;
	const char *scope;
	Jsonb	   *input;
	MemoryContext result_cxt;
	char	   *ledger_name;
} ScopeEval;

/*
 * A scope's value names a history in the ledger ("name:value"): it is
 * shown by backfill_status, the CLI and the metrics, one line each, so it
 * has no control characters, and it is bounded like a name.
 */
static void
check_scope_value(const char *name, const char *value)
{
	size_t		len = strlen(value);

	if (len > BACKFILL_NAME_MAXLEN)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("the scope of backfill \"%s\" is too long for this input", name),
				 errdetail("The scope's value has %zu bytes; at most %d are allowed.",
						   len, BACKFILL_NAME_MAXLEN),
				 errhint("Make the scope name the pass by a short value, such as a tenant's id.")));
	if (text_has_invisible(value))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("the scope of backfill \"%s\" contains a control character for this input",
						name),
				 errdetail("The scope's value names the pass's history in the ledger, "
						   "one line in every report."),
				 errhint("Strip control characters in the scope expression, e.g. with "
						 "pg_catalog.regexp_replace(..., '[[:cntrl:]]', '', 'g').")));
}

/* check the input and evaluate the scope: run through asrole_call */
static void
scope_evaluate(void *arg)
{
	ScopeEval  *e = (ScopeEval *) arg;
	Oid			types[1] = {JSONBOID};
	Datum		values[1];
	char	   *value;
	StringInfoData sql;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	check_input(e->name, e->shape, e->input);

	/* the scope expression, over the input as a parameter */
	values[0] = JsonbPGetDatum(e->input);
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT (\n%s\n)::pg_catalog.text FROM (SELECT $1 AS input) s",
					 e->scope);
	if (SPI_execute_with_args(sql.data, 1, types, values, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not evaluate the scope of backfill \"%s\"", e->name);
	value = catalog_gettext(0, 1);
	if (value == NULL || value[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("the scope of backfill \"%s\" is empty for this input", e->name),
				 errhint("The scope names the pass's history; give an input it can name.")));
	check_scope_value(e->name, value);
	e->ledger_name = MemoryContextStrdup(e->result_cxt, psprintf("%s:%s", e->name, value));
	SPI_finish();
}

/*
 * The scope's evaluation in a worker of its own: a caller whose session is
 * not the owner's (a superuser's, a member's) must not have the owner's
 * casts and scope expression run beside what its session holds (cursors,
 * prepared statements, temporary objects, advisory locks).  A dynamic
 * background worker logs in as the owner, evaluates them as above (its
 * session is the owner's own and holds nothing of the caller's), and
 * answers through a shared memory segment: the ledger name, or the error.
 * The caller waits for it; with no worker slot free it refuses (BF038).
 */
#define SCOPE_TEXT_MAX		8192
#define SCOPE_WORKER_TIMEOUT "30s"

typedef struct ScopeRequest
{
	Oid			dboid;
	Oid			owner;
	bool		has_search_path;
	int			state;			/* 0: no answer, 1: ledger name, 2: error,
								 * 3: terminated past its bound (deadline.c) */
	int			elapsed_ms;		/* 3: how long it had run */
	int			sqlerrcode;
	char		name[NAMEDATALEN * 4];
	char		search_path[SCOPE_TEXT_MAX];
	char		shape[SCOPE_TEXT_MAX];
	char		scope[SCOPE_TEXT_MAX];
	char		input[SCOPE_TEXT_MAX];
	char		answer[SCOPE_TEXT_MAX]; /* the ledger name, or the error's message */
	char		detail[SCOPE_TEXT_MAX];
	char		hint[SCOPE_TEXT_MAX];
} ScopeRequest;

static void
copy_text(char *to, const char *from)
{
	strlcpy(to, from ? from : "", SCOPE_TEXT_MAX);
}

static char *
scope_evaluate_here(const char *name, Jsonb *shape, const char *scope, Jsonb *input,
					Oid owner, const char *search_path)
{
	ScopeEval	e;

	/*
	 * The casts (the type may be the declarer's domain, with a CHECK that
	 * calls its function) and the scope expression are the declarer's SQL:
	 * evaluated as the owner with the declaration's search_path, never as
	 * the caller, and rolled back (asrole.c).
	 */
	e = (ScopeEval) {.name = name, .shape = shape, .scope = scope, .input = input,
	.result_cxt = CurrentMemoryContext};
	(void) asrole_call(name, owner, search_path, scope_evaluate, &e, false);
	return e.ledger_name;
}

static Jsonb *
jsonb_from_text(const char *text)
{
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
}

/* the worker's evaluation, its answer written into the request */
static void
scope_worker_answer(ScopeRequest *req)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		char	   *ledger = scope_evaluate_here(req->name, jsonb_from_text(req->shape),
												 req->scope, jsonb_from_text(req->input),
												 req->owner,
												 req->has_search_path ? req->search_path : NULL);

		copy_text(req->answer, ledger);
		req->state = 1;
	}
	PG_CATCH();
	{
		ErrorData  *edata = backfill_take_error(cxt);

		req->sqlerrcode = edata->sqlerrcode;
		copy_text(req->answer, edata->message);
		copy_text(req->detail, edata->detail);
		copy_text(req->hint, edata->hint);
		req->state = 2;
	}
	PG_END_TRY();
}

/* the request the worker answers, while its segment is attached */
static ScopeRequest *worker_request = NULL;

/* the worker's exit: terminated past its bound, it says so in the request */
static void
scope_worker_exit(int code, Datum arg)
{
	ScopeRequest *req = worker_request;
	int			elapsed_ms;

	if (req != NULL && deadline_fired(&elapsed_ms) && req->state == 0)
	{
		req->elapsed_ms = elapsed_ms;
		req->state = 3;
	}
}

void
backfill_scope_main(Datum main_arg)
{
	dsm_segment *seg;
	ScopeRequest *req = (ScopeRequest *) worker_attach_caller(main_arg, &seg);

	BackgroundWorkerInitializeConnectionByOid(req->dboid, req->owner, 0);
	/* before the segment's detach at exit: callbacks run in reverse order */
	worker_request = req;
	before_shmem_exit(scope_worker_exit, (Datum) 0);
	worker_own_identity(PGC_S_OVERRIDE);
	pgstat_report_appname("pg_backfill scope");
	SetConfigOption("statement_timeout", psprintf("%d", backfill_probe_timeout), PGC_SUSET,
					PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", psprintf("%d", backfill_probe_lock_timeout), PGC_SUSET,
					PGC_S_OVERRIDE);

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "evaluating a backfill's scope");
	scope_worker_answer(req);
	PopActiveSnapshot();
	/* nothing of it stays: the evaluation was rolled back already */
	AbortCurrentTransaction();
	pgstat_report_activity(STATE_IDLE, NULL);
	worker_request = NULL;
	dsm_detach(seg);
	proc_exit(0);
}

/*
 * Wait for the scope worker to stop.  It ends itself past
 * backfill.probe_timeout and a grace (deadline.c); should it still live
 * after twice the grace more, it is terminated from here.
 */
static void
wait_for_scope_worker(BackgroundWorkerHandle *handle)
{
	TimestampTz kill_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													  backfill_probe_timeout +
													  3 * BACKFILL_TERMINATE_GRACE_MS);
	pid_t		pid;

	while (GetBackgroundWorkerPid(handle, &pid) != BGWH_STOPPED)
	{
		if (GetCurrentTimestamp() >= kill_at)
			TerminateBackgroundWorker(handle);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1000L,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* the worker's answer, in the caller: the ledger name, or its error raised */
static char *
scope_worker_result(const char *name, ScopeRequest *req, const char *role)
{
	if (req->state == 3)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PROBE_FAILED),
				 errmsg("the scope of backfill \"%s\" was not evaluated: its worker was "
						"terminated after %d s", name, (req->elapsed_ms + 999) / 1000),
				 errdetail("The input casts or the scope expression, run as role %s, outlived "
						   "backfill.probe_timeout (%d ms) by %d ms, catching its cancel.",
						   role ? role : "(dropped)", backfill_probe_timeout,
						   BACKFILL_TERMINATE_GRACE_MS),
				 errhint("Make the scope expression and the casts of the input's types end "
						 "within backfill.probe_timeout.")));
	if (req->state == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("the scope of backfill \"%s\" could not be evaluated as role %s", name,
						role ? role : "(dropped)"),
				 errdetail("The worker that logs in as that role to evaluate it ended without "
						   "an answer (a role without LOGIN cannot have one); the server log "
						   "says why."),
				 errhint("Let role %s log in, or call it in a session logged in as that role.",
						 role ? quote_identifier(role) : "(dropped)")));
	if (req->state == 2)
		backfill_raise_answer(req->sqlerrcode, req->answer, req->detail, req->hint);
	return pstrdup(req->answer);
}

/* the caller's side: start the worker, wait for it, take its answer */
static char *
scope_evaluate_in_worker(const char *name, Jsonb *shape, const char *scope, Jsonb *input,
						 Oid owner, const char *search_path)
{
	dsm_segment *seg = dsm_create(sizeof(ScopeRequest), 0);
	ScopeRequest *req = (ScopeRequest *) dsm_segment_address(seg);
	BackgroundWorkerHandle *handle;
	const char *role = GetUserNameFromId(owner, true);
	char	   *volatile ledger = NULL;

	memset(req, 0, sizeof(ScopeRequest));
	req->dboid = MyDatabaseId;
	req->owner = owner;
	strlcpy(req->name, name, sizeof(req->name));
	req->has_search_path = search_path != NULL;
	copy_text(req->search_path, search_path);
	copy_text(req->shape, JsonbToCString(NULL, &shape->root, VARSIZE(shape)));
	copy_text(req->scope, scope);
	copy_text(req->input, JsonbToCString(NULL, &input->root, VARSIZE(input)));

	handle = worker_start("backfill_scope_main", "pg_backfill scope", "pg_backfill scope",
						  UInt32GetDatum(dsm_segment_handle(seg)), &owner, sizeof(Oid),
						  CurrentMemoryContext);
	if (handle == NULL)
		dsm_detach(seg);
	if (handle == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_NO_WORKER),
				 errmsg("the scope of backfill \"%s\" cannot be evaluated: no background worker "
						"slot is free", name),
				 errdetail("Its input casts and scope expression run as role %s, in a worker "
						   "logged in as that role, never in another role's session.",
						   role ? role : "(dropped)"),
				 errhint("Raise max_worker_processes (a restart is needed), or call it again "
						 "later, or in a session logged in as role %s.",
						 role ? quote_identifier(role) : "(dropped)")));
	/* the segment is detached on every path: no "still referenced" at commit */
	PG_TRY();
	{
		wait_for_scope_worker(handle);
		ledger = scope_worker_result(name, req, role);
	}
	PG_FINALLY();
	{
		pid_t		pid;

		/* the caller cancelled: its worker goes too */
		if (GetBackgroundWorkerPid(handle, &pid) != BGWH_STOPPED)
			TerminateBackgroundWorker(handle);
		dsm_detach(seg);
	}
	PG_END_TRY();
	return ledger;
}

char *
scope_ledger_name(const char *name, Jsonb *shape, const char *scope, Jsonb *input,
				  Oid owner, const char *search_path)
{
	if (shape == NULL)
	{
		if (input != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
					 errmsg("backfill \"%s\" is not scoped: its runs take no input", name),
					 errhint("Leave input out, or declare the backfill with input and scope.")));
		return pstrdup(name);
	}
	/* another role's client session: evaluated in a worker logged in as the owner */
	if (input != NULL && !IsBackgroundWorker && !asrole_own_session(owner))
		return scope_evaluate_in_worker(name, shape, scope, input, owner, search_path);
	return scope_evaluate_here(name, shape, scope, input, owner, search_path);
}
