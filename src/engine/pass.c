/*-------------------------------------------------------------------------
 *
 * pass.c
 *	  The start of a pass, as a lane sees it: loading it (the ledger, run and
 *	  declaration rows, the source, the key), the refusals that fail it
 *	  before any of its SQL runs, and failing it (state/ writes the end).
 *
 * Each function runs one transaction of its own.  Bookkeeping runs as the
 * extension's owner (catalog.c); the estimate and the convergence count
 * run the declared predicate, so they run as the lane's own role, the
 * role that declared the backfill.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/lmgr.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/regproc.h"
#include "utils/lsyscache.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

#include "catalog.h"
#include "citus.h"
#include "config.h"
#include "declaration.h"
#include "errors.h"
#include "estimate.h"
#include "identity.h"
#include "keyset.h"
#include "pass.h"
#include "plan_blocks.h"
#include "searchpath.h"
#include "shmem.h"
#include "state.h"
#include "xact.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"
/* a copy in the pass's memory, which outlives the transaction */
char *
pass_strdup(Pass *pass, const char *s)
{
	return s ? MemoryContextStrdup(pass->cxt, s) : NULL;
}

/* a key (or cursor) read from its text form, in the lane's context */
Datum
pass_key_from_text(Pass *pass, const char *text)
{
	MemoryContext old = MemoryContextSwitchTo(pass->cxt);
	Datum		d = worker_key_input(pass->key_input, text, pass->key_ioparam);

	MemoryContextSwitchTo(old);
	return d;
}

/* One catalog statement whose one parameter, $1, is the pass's run id. */
int
exec_on_run(Pass *pass, const char *sql, int expected)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(pass->run_id)};

	return catalog_exec(sql, 1, types, values, NULL, expected);
}

/*
 * Refuse the pass: it fails (sqlerrcode, message) in a transaction of its
 * own, after the current one commits; the message is copied first, as the
 * transaction's memory goes with it.  Returns false, for the caller to
 * return.
 */
static bool
pass_refuse(Pass *pass, int sqlerrcode, const char *message)
{
	char	   *kept = pass_strdup(pass, message);

	worker_commit_xact();
	pass_fail(pass, -1, sqlerrcode, kept);
	return false;
}

/*
 * Is this lane the declaration's run_as role, and does the declaration
 * still name its table and roles (identity.c)?  If not, the pass fails
 * (ending the transaction) and the lane runs none of its SQL.
 */
static bool
lane_identity_ok(Pass *pass, Oid run_as)
{
	int			sqlerrcode;
	char	   *message;

	/* a backend working the pass itself (finalize) runs as run_as, logged in as the caller */
	if (GetUserId() != run_as || (!worker_in_session() && GetSessionUserId() != run_as))
	{
		sqlerrcode = ERRCODE_BACKFILL_PRIVILEGE;
		message = psprintf("the lane logged in as role \"%s\", but backfill \"%s\" runs as "
						   "role \"%s\"", GetUserNameFromId(GetSessionUserId(), true),
						   pass->name, GetUserNameFromId(run_as, true) ?
						   GetUserNameFromId(run_as, true) : "(dropped)");
	}
	else if (!identity_problem(pass->name, &sqlerrcode, &message))
		return true;
	return pass_refuse(pass, sqlerrcode, message);
}

/*
 * Is the owner still a member of run_as?  If not (a REVOKE since the run
 * started), the pass fails, ending the transaction.
 */
static bool
lane_run_as_ok(Pass *pass, Oid owner, Oid run_as)
{
	char	   *refused = tenancy_run_as_refused(owner, run_as);

	if (refused == NULL)
		return true;
	return pass_refuse(pass, ERRCODE_BACKFILL_PRIVILEGE,
					   psprintf("permission denied to run backfill \"%s\" as its run_as "
								"role: %s", pass->name, refused));
}

/*
 * May this node work the pass's table (citus.c)?  If not, the pass fails,
 * ending the transaction; if so, note whether its batches write to other
 * nodes, which fences each of them.
 */
static bool
lane_citus_ok(Pass *pass)
{
	int			sqlerrcode;
	char	   *refused;

	if (!OidIsValid(pass->relid))
		return true;
	refused = citus_refusal(pass->name, pass->relid, &sqlerrcode);
	if (refused == NULL)
	{
		pass->citus_remote = citus_writes_elsewhere(pass->relid);
		return true;
	}
	return pass_refuse(pass, sqlerrcode, refused);
}

/*
 * The declaration's columns a lane works with (read into the pass's
 * context).  A revert pass runs the revert over the revert predicate's
 * rows, which then prove it done; without a revert predicate it visits
 * every row of the table once, in key order, and the end of that walk is
 * its end (there is no count: every row would match).
 */
static void
pass_take_declaration(Pass *pass, const Declaration *d, bool reverting)
{
	pass->relid = d->relid;
	pass->key = d->key_column;
	pass->keytype = d->key_type;
	pass->blocks = blocks_key(d->key_column, d->key_type);
	pass->reverting = reverting;
	pass->predicate = reverting ? (d->revert_predicate ? d->revert_predicate : "true") :
		d->predicate;
	pass->action = reverting ? d->revert : d->action;
	pass->counted = !reverting || d->revert_predicate != NULL;
	pass->guarded = !reverting && (d->guarded || d->action_set != NULL || d->action_delete);
	pass->engine_action = !reverting && (d->action_set != NULL || d->action_delete);
	pass->batch_size = d->batch_size;
	pass->rate = d->rate;
	pass->max_wal_rate = d->max_wal_rate;
	pass->max_attempts = d->max_attempts;
	pass->backoff_base_ms = d->backoff_base_ms;
	pass->backoff_cap_ms = d->backoff_cap_ms;
	pass->batch_timeout_ms = d->batch_timeout_ms;
	pass->max_parallel = d->max_parallel;
	pass->lock_timeout_ms = d->lock_timeout_ms;
	pass->async_commit = d->async_commit;
	pass->target_batch_ms = d->target_batch_ms;
	pass->min_batch_size = d->min_batch_size;
	pass->max_batch_size = d->max_batch_size;
	pass->max_failed_rows = d->max_failed_rows;
	pass->settings = d->settings;
	pass->pages_fn = d->pages_fn;
	pass->count_fn = d->count_fn;
	pass->run_as = d->run_as;
	pass->search_path = d->search_path;
	pass->throttle_when = d->throttle_when;
	if (d->windows != NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(pass->cxt);

		pass->windows = windows_parse(d->name, d->windows, d->window_time_zone);
		pass->windows_said = NULL;	/* read again at the first hold or wake */
		MemoryContextSwitchTo(old);
	}
}

/*
 * The relation's name as it is now, and the key type's I/O, to keep cursors
 * as text (a pages source's cursor is text).  A dropped relation fails the
 * pass, ending the transaction, and returns false.
 */
static bool
pass_resolve_source(Pass *pass)
{
	bool		varlena;

	if (OidIsValid(pass->pages_fn))
		pass->keytype = TEXTOID;
	else
	{
		char	   *relname = get_rel_name(pass->relid);
		char	   *nspname = relname ? get_namespace_name(get_rel_namespace(pass->relid)) : NULL;
		MemoryContext old;

		if (relname == NULL)
			return pass_refuse(pass, ERRCODE_BACKFILL_SOURCE_INVALID,
							   "the relation of the backfill was dropped");
		old = MemoryContextSwitchTo(pass->cxt);
		pass->relation = quote_qualified_identifier(nspname, relname);
		MemoryContextSwitchTo(old);
		pass->partitioned = get_rel_relkind(pass->relid) == RELKIND_PARTITIONED_TABLE;
	}
	getTypeInputInfo(pass->keytype, &pass->key_input, &pass->key_ioparam);
	getTypeOutputInfo(pass->keytype, &pass->key_output, &varlena);
	get_typlenbyval(pass->keytype, &pass->key_len, &pass->key_byval);
	return true;
}

/* a composite key's columns, the index that serves it now and their I/O (keyset.c) */
static void
pass_keyset_resolve(Pass *pass, const Declaration *decl)
{
	pass->keyset.name = pass->name;
	pass->keyset.relid = pass->relid;
	pass->keyset.relation = pass->relation;
	keyset_resolve(&pass->keyset, decl->key_columns, decl->key_types, pass->cxt);
}

/*
 * A composite key (keyset.c): its columns, the index that serves it now,
 * their I/O, in a transaction of its own.  A key of one column is a keyset
 * of one.  A key column renamed or dropped, or its unique index dropped,
 * fails the pass (42703, BF001) and returns false, rather than kill the
 * lane before its first batch, which the scheduler would only start again.
 */
static bool
pass_resolve_keyset(Pass *pass, const Declaration *decl)
{
	MemoryContext cxt = CurrentMemoryContext;
	ErrorData  *volatile edata = NULL;

	pass->keyset.nkeys = 1;
	if (decl->key_columns == NULL || OidIsValid(pass->pages_fn))
		return true;
	worker_begin_xact("pg_backfill lane: finding the key's index");
	PG_TRY();
	{
		pass_keyset_resolve(pass, decl);
		worker_commit_xact();
	}
	PG_CATCH();
	{
		edata = worker_abort_xact(pass->cxt);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	if (edata == NULL)
		return true;
	/* anything else (a lock timeout, a cancel) may pass: the lane ends, another retries */
	if (edata->sqlerrcode != ERRCODE_UNDEFINED_COLUMN &&
		edata->sqlerrcode != ERRCODE_BACKFILL_SOURCE_INVALID)
		ReThrowError(edata);
	pass_fail(pass, -1, edata->sqlerrcode, edata->message);
	return false;
}

/* a column of the first row of the last catalog statement, by name, as text */
static char *
column_text(const char *column)
{
	return catalog_gettext(0, SPI_fnumber(SPI_tuptable->tupdesc, column));
}

/*
 * Has the table a unique index on its key column alone (valid, not
 * partial)?  Every key of one column has one (key.c); a declaration whose
 * key_column has none lost the further columns of its key.  Read from
 * pg_index, never locking the table: the lane loads its pass before any
 * retry could absorb a lock timeout.
 */
static bool
key_column_unique(Oid relid, const char *column)
{
	AttrNumber	attnum = get_attnum(relid, column);
	Relation	pg_index;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found = false;

	if (attnum == InvalidAttrNumber)
		return true;			/* the key's column is gone: BF007's to say */
	if (attnum < 0)
		return true;			/* ctid: the heap in block order (plan_blocks.c) */
	pg_index = table_open(IndexRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_index_indrelid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(relid));
	scan = systable_beginscan(pg_index, IndexIndrelidIndexId, true, NULL, 1, &key);
	while (!found && HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_index index = (Form_pg_index) GETSTRUCT(tuple);

		found = index->indisunique && index->indisvalid && index->indnkeyatts == 1 &&
			index->indkey.values[0] == attnum &&
			heap_attisnull(tuple, Anum_pg_index_indpred, NULL);
	}
	systable_endscan(scan);
	table_close(pg_index, AccessShareLock);
	return found;
}

/*
 * Why a running pass cannot go on with its declaration as it is now, or
 * NULL: the declaration was dropped or changed (BF007), a revert pass's
 * declaration no longer declares a revert (BF021), or its key column has
 * no unique index (BF027): dropped since, or a composite key declared
 * under catalogs older than 0.5 kept only its first column (its action's
 * $3 would fail every batch).
 */
static const char *
pass_declaration_refusal(Pass *pass, const Declaration *decl, const char *direction,
						 int *sqlerrcode)
{
	*sqlerrcode = ERRCODE_BACKFILL_CHANGED;
	if (decl->checksum == NULL)
		return "the declaration was dropped while the pass was running";
	if (strcmp(decl->checksum, pass->checksum) != 0)
		return "the declaration changed since the pass started";
	*sqlerrcode = ERRCODE_BACKFILL_NO_REVERT;
	if (strcmp(direction, "revert") == 0 && decl->revert == NULL)
		return "the declaration no longer declares a revert";
	*sqlerrcode = ERRCODE_BACKFILL_CATALOG_VERSION;
	if (!OidIsValid(decl->pages_fn) && decl->key_columns == NULL && decl->key_column != NULL &&
		get_rel_name(decl->relid) != NULL && !key_column_unique(decl->relid, decl->key_column))
		/* in the pass's memory: the message outlives the transaction (pass_fail) */
		return pass_strdup(pass,
						   psprintf("backfill \"%s\" has no unique index on its key column: "
									"the index was dropped since the declaration, or a "
									"composite key declared under catalogs older than 0.5 "
									"kept only its first column (%s, not unique); create the "
									"unique index again, or declare it again with "
									"backfill_declare",
									decl->name, decl->key_column));
	return NULL;
}

/*
 * The process takes the pass's settings: names resolve as they did for the
 * declarer's, pg_temp last (searchpath.c; a session working the pass has
 * its own), and backfill_input() reads the pass's input in the predicate,
 * the action and policies.
 */
static void
pass_apply_settings(Pass *pass, const char *search_path)
{
	if (!worker_in_session())
		searchpath_apply(search_path, GUC_ACTION_SET);
	if (pass->input != NULL)
		SetConfigOption("backfill.input", JsonbToCString(NULL, &pass->input->root, 0),
						PGC_SUSET, PGC_S_OVERRIDE);
}

/* the run's input (column run_input of the loaded row), into the pass's memory */
static void
pass_take_input(Pass *pass)
{
	bool		isnull;
	Datum		input = catalog_getdatum(0, SPI_fnumber(SPI_tuptable->tupdesc, "run_input"),
										 &isnull);
	MemoryContext old;

	if (isnull)
		return;
	old = MemoryContextSwitchTo(pass->cxt);
	pass->input = DatumGetJsonbPCopy(input);
	MemoryContextSwitchTo(old);
}

/*
 * May this lane work the pass?  It logged in as the role the declaration
 * names, and it is still that role; the owner is still a member of run_as
 * (a REVOKE since the run started takes effect here: the pass fails,
 * once); a Citus shard, or a Citus table off the coordinator, is never
 * worked (citus.c).  If not, the pass failed and the transaction ended.
 */
static bool
lane_may_work(Pass *pass, Oid owner, Oid run_as)
{
	return lane_identity_ok(pass, run_as) && lane_run_as_ok(pass, owner, run_as) &&
		lane_citus_ok(pass);
}

/*
 * Load the pass into cxt.  Returns false when there is nothing to do: the
 * pass has ended.  A pass whose declaration is gone or changed fails here,
 * at once.  The declaration's columns are read by name (declaration.c);
 * the ledger's and the run's carry names of their own.
 */
bool
pass_load(Pass *pass, int64 run_id, MemoryContext cxt)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(run_id)};
	char	   *status;
	Declaration decl;
	bool		ok = true;
	char	   *search_path = NULL;
	Oid			owner = InvalidOid;
	Oid			run_as = InvalidOid;
	const char *refusal;
	int			sqlerrcode;

	memset(pass, 0, sizeof(Pass));
	pass->cxt = cxt;
	pass->run_id = run_id;

	worker_begin_xact("pg_backfill lane: loading the pass");
	catalog_enter(&scope);
	if (catalog_exec(psprintf("SELECT l.status AS ledger_status, l.declaration AS ledger_declaration,"
							  "  l.ledger_name, l.checksum AS ledger_checksum, r.input AS run_input,"
							  "  l.direction AS ledger_direction, %s"
							  " FROM backfill.ledger l"
							  " JOIN backfill.run r ON r.run_id = l.run_id"
							  " LEFT JOIN backfill.declaration d ON d.name = l.declaration"
							  " WHERE l.run_id = $1", declaration_select_list("d")),
					 1, types, values, NULL, SPI_OK_SELECT) == 0)
		ok = false;
	else
	{
		status = column_text("ledger_status");
		pass->name = pass_strdup(pass, column_text("ledger_declaration"));
		pass->ledger_name = pass_strdup(pass, column_text("ledger_name"));
		pass->checksum = pass_strdup(pass, column_text("ledger_checksum"));
		(void) declaration_read(0, &decl, pass->cxt);
		if (strcmp(status, ledger_status_text(LEDGER_RUNNING)) != 0)
			ok = false;
		else if ((refusal = pass_declaration_refusal(pass, &decl,
													  column_text("ledger_direction"),
													  &sqlerrcode)) != NULL)
		{
			catalog_leave(&scope);
			return pass_refuse(pass, sqlerrcode, refusal);
		}
		else
		{
			pass_take_declaration(pass, &decl,
								  strcmp(column_text("ledger_direction"), "revert") == 0);
			pass_take_input(pass);
			search_path = decl.search_path;
			owner = decl.owner;
			run_as = decl.run_as;
			state_pass_lane_started(pass->run_id);
		}
	}
	catalog_leave(&scope);

	if (ok && !lane_may_work(pass, owner, run_as))
		return false;
	if (ok && !pass_resolve_source(pass))
		return false;
	worker_commit_xact();
	if (ok && !pass_resolve_keyset(pass, &decl))
		return false;

	if (ok)
		pass_apply_settings(pass, search_path);
	return ok;
}

/*
 * The declaration as it is now, loaded into a Pass of no run (run_id 0),
 * for a rehearsal (rehearse.c), in a process logged in as its run_as:
 * its statements, pacing and settings, the relation's name now and the
 * key's I/O, the search_path applied for the process.  Raises what the
 * reason it cannot be rehearsed is: not declared (BF002), a pages source
 * (BF001), scoped (BF028), the relation dropped (42P01).
 */
void
pass_load_declared(Pass *pass, const char *name, MemoryContext cxt)
{
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	Declaration decl;
	bool		found;

	memset(pass, 0, sizeof(Pass));
	pass->cxt = cxt;
	worker_begin_xact("pg_backfill rehearsal: loading the declaration");
	catalog_enter(&scope);
	found = catalog_exec(psprintf("SELECT %s FROM backfill.declaration d WHERE d.name = $1",
								  declaration_select_list("d")),
						 1, types, values, NULL, SPI_OK_SELECT) == 1 &&
		declaration_read(0, &decl, cxt);
	catalog_leave(&scope);
	if (!found)
		report_not_declared(name);
	if (OidIsValid(decl.pages_fn))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\" reads a pages source, which is not rehearsed", name),
				 errdetail("A page's cursor comes from the page before it: its batches cannot "
						   "be spread over a key space."),
				 errhint("Rehearse a backfill over a table.")));
	blocks_refuse_rehearsal(name, decl.key_column, decl.key_type);
	if (decl.scope != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SCOPED),
				 errmsg("backfill \"%s\" is scoped, which is not rehearsed", name),
				 errdetail("Its predicate and action read the input of a run."),
				 errhint("Rehearse a backfill that is not scoped.")));
	if (get_rel_name(decl.relid) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("the relation of backfill \"%s\" was dropped", name),
				 errhint("Declare the backfill again over the table.")));
	pass->name = pass_strdup(pass, name);
	pass->ledger_name = pass->name;
	pass->checksum = pass_strdup(pass, decl.checksum);
	pass_take_declaration(pass, &decl, false);
	(void) pass_resolve_source(pass);
	pass->keyset.nkeys = 1;
	if (decl.key_columns != NULL)
		pass_keyset_resolve(pass, &decl);
	worker_commit_xact();
	pass_apply_settings(pass, decl.search_path);
}

/*
 * End a running pass as failed, in the caller's transaction and catalog
 * scope, as backfill_cancel ends one: the ledger row and the run row
 * locked first (the order in which every writer of a pass's state locks
 * it, src/README.md), then the partition at fault (part_no >= 0) failed
 * and every other open partition stopped (cancelled).  That waits for
 * the batches committing their checkpoints now, and every later
 * checkpoint finds no lease, so its batch rolls back: the ledger's rows
 * and batches, summed after, are exactly what committed.  At commit the
 * pass's other lanes are told to stop (a batch in flight is cancelled).
 * Returns false, and changes nothing, when the pass has already ended.
 */
bool
pass_end_failed(int64 run_id, int part_no, int sqlerrcode, const char *message)
{
	if (!state_pass_end(run_id, LEDGER_FAILED, part_no, unpack_sql_state(sqlerrcode), message,
						-1))
		return false;
	backfill_wake_lanes_at_commit(run_id, true);
	return true;
}

/* Fail the pass (pass_end_failed) inside the caller's transaction, and say so. */
void
pass_fail_in_xact(Pass *pass, int part_no, int sqlerrcode, const char *message)
{
	CatalogScope scope;

	catalog_enter(&scope);
	if (pass_end_failed(pass->run_id, part_no, sqlerrcode, message))
		ereport(LOG,
				(errmsg("backfill \"%s\" run " INT64_FORMAT " failed: %s",
						pass->name ? pass->name : "?", pass->run_id, message),
				 errdetail("SQLSTATE %s.", unpack_sql_state(sqlerrcode))));
	catalog_leave(&scope);
}

/*
 * A checkpoint found the partition no longer this lane's (the pass was
 * cancelled): the batch rolls back.
 */
void
pass_lost_lease(Pass *pass, Claim *claim)
{
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_CONFLICT),
			 errmsg("lane of backfill \"%s\" lost its lease on partition %d",
					pass->name, claim->part_no)));
}

/*
 * Fail the pass (see pass_fail_in_xact) in a transaction of its own; the
 * caller must not be in one.
 */
void
pass_fail(Pass *pass, int part_no, int sqlerrcode, const char *message)
{
	worker_begin_xact("pg_backfill lane: failing the pass");
	pass_fail_in_xact(pass, part_no, sqlerrcode, message);
	worker_commit_xact();
}

/*
 * An error no step caught is ending this lane (the scheduler will start
 * another): say so in the run's last_error, which backfill_status shows
 * while the pass runs, so that a lane that keeps dying is never silent.
 * Called outside any transaction; the caller raises the error again.
 */
void
pass_note_lane_error(Pass *pass, const ErrorData *edata)
{
	CatalogScope scope;
	char	   *message = psprintf("a lane died: SQLSTATE %s: %s",
								   unpack_sql_state(edata->sqlerrcode), edata->message);

	worker_begin_xact("pg_backfill lane: recording why it dies");
	catalog_enter(&scope);
	state_pass_note_error(pass->run_id, message, true);
	catalog_leave(&scope);
	worker_commit_xact();
}

/*
 * The declaration's max_failed_rows as it is now (in the caller's catalog
 * scope): a re-declaration while the pass runs applies at its next row
 * that fails alone and at its end.  Kept when the declaration is gone.
 */
void
pass_reread_max_failed_rows(Pass *pass)
{
	bool		isnull;
	Datum		bound;

	if (exec_on_run(pass, "SELECT d.max_failed_rows FROM backfill.ledger l"
					" JOIN backfill.declaration d ON d.name = l.declaration"
					" WHERE l.run_id = $1", SPI_OK_SELECT) != 1)
		return;
	bound = catalog_getdatum(0, 1, &isnull);
	if (!isnull)
		pass->max_failed_rows = DatumGetInt32(bound);
}
