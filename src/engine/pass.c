/*-------------------------------------------------------------------------
 *
 * pass.c
 *	  The start and end of a pass, as a lane sees it: loading it, planning
 *	  its partitions, claiming a partition lease, proving convergence and
 *	  writing the ledger's final word.
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
#include "searchpath.h"
#include "shmem.h"
#include "state.h"
#include "xact.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"

/* a copy in the pass's memory, which outlives the transaction */
static char *
pass_strdup(Pass *pass, const char *s)
{
	return s ? MemoryContextStrdup(pass->cxt, s) : NULL;
}

/* a key (or cursor) read from its text form, in the lane's context */
static Datum
pass_key_from_text(Pass *pass, const char *text)
{
	MemoryContext old = MemoryContextSwitchTo(pass->cxt);
	Datum		d = worker_key_input(pass->key_input, text, pass->key_ioparam);

	MemoryContextSwitchTo(old);
	return d;
}

/* One catalog statement whose one parameter, $1, is the pass's run id. */
static int
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
	pass->reverting = reverting;
	pass->predicate = reverting ? (d->revert_predicate ? d->revert_predicate : "true") :
		d->predicate;
	pass->action = reverting ? d->revert : d->action;
	pass->counted = !reverting || d->revert_predicate != NULL;
	pass->guarded = !reverting && (d->guarded || d->action_set != NULL || d->action_delete);
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
 * declaration no longer declares a revert (BF021), or it was declared
 * with a composite key under catalogs older than 0.5, which kept only
 * the key's first column (BF027: its action's $3 would fail every batch).
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
						   psprintf("backfill \"%s\" was declared with a composite key under "
									"catalogs older than 0.5, which kept only its first column "
									"(%s, not unique); declare it again with backfill_declare "
									"now that the catalogs are at 0.5",
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
	bool		isnull;
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
							  "  %s AS ledger_direction, %s"
							  " FROM backfill.ledger l"
							  " JOIN backfill.run r ON r.run_id = l.run_id"
							  " LEFT JOIN backfill.declaration d ON d.name = l.declaration"
							  " WHERE l.run_id = $1", "l.direction",
							  declaration_select_list("d")),
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
			Datum		input = catalog_getdatum(0, SPI_fnumber(SPI_tuptable->tupdesc,
																"run_input"), &isnull);

			pass_take_declaration(pass, &decl,
								  strcmp(column_text("ledger_direction"), "revert") == 0);
			if (!isnull)
			{
				MemoryContext old = MemoryContextSwitchTo(pass->cxt);

				pass->input = DatumGetJsonbPCopy(input);
				MemoryContextSwitchTo(old);
			}
			search_path = decl.search_path;
			owner = decl.owner;
			run_as = decl.run_as;
			state_pass_lane_started(pass->run_id);
		}
	}
	catalog_leave(&scope);

	/* the lane logged in as the role the declaration names, and it is still that role */
	if (ok && !lane_identity_ok(pass, run_as))
		return false;

	/* a REVOKE since the run started takes effect here: the pass fails, once */
	if (ok && !lane_run_as_ok(pass, owner, run_as))
		return false;

	/* a Citus shard, or a Citus table off the coordinator, is never worked (citus.c) */
	if (ok && !lane_citus_ok(pass))
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

/* what planning a pass found: its partitions' bounds and the rows to do */
typedef struct PassPlan
{
	const char *method;			/* histogram, minmax, single or pages; per leaf (n leaves) */
	Datum		bounds;			/* text[]: partition i covers (bounds[i-1], bounds[i]] */
	Datum		estimate;		/* int8 */
	bool		has_estimate;
	char	   *bound;			/* the largest key when planned (key text), or NULL */
	/* planned per leaf: partition i is (lo[i], hi[i]] within leaf_range[i] of leaf[i] */
	int			nleafparts;
	int			room;			/* allocated for that many */
	Datum	   *lo;
	bool	   *lo_null;
	Datum	   *hi;
	bool	   *hi_null;
	Datum	   *leaf;
	Datum	   *leaf_range;
	/* a Citus distributed table shard by shard: partition i is shard shards[i] (int8[]) */
	Datum		shards;
} PassPlan;

/* An int8 from the first row SPI returned, as the plan's estimate. */
static void
plan_take_estimate(PassPlan *plan)
{
	bool		isnull;

	plan->estimate = catalog_getdatum(0, 1, &isnull);
	plan->has_estimate = !isnull;
}

/*
 * Call a pages source's count function with the pass's input, as the lane's
 * role; true when it answered one row (its count is column 1 of SPI's).
 */
static bool
call_count_fn(Pass *pass, bool read_only)
{
	Oid			types[1] = {JSONBOID};
	Datum		values[1] = {pass->input ? JsonbPGetDatum(pass->input) : (Datum) 0};
	char		nulls[1] = {pass->input ? ' ' : 'n'};

	return SPI_execute_with_args(psprintf("SELECT %s($1)::pg_catalog.int8",
										  function_name(pass->count_fn)),
								 1, types, values, nulls, read_only, 1) == SPI_OK_SELECT &&
		SPI_processed == 1;
}

/*
 * A pages source is one sequence of pages: one partition; its estimate is
 * what its count function (if any) says, as the declaring role.
 */
static void
plan_pages(Pass *pass, PassPlan *plan)
{
	plan->method = "pages";
	plan->bounds = PointerGetDatum(construct_empty_array(TEXTOID));
	if (OidIsValid(pass->count_fn) && call_count_fn(pass, false))
		plan_take_estimate(plan);
}

/*
 * The largest key the table holds now, as key text, read as the declaring
 * role: the upper end of the pass's key range.  Rows written above it
 * while the pass runs are not chased (a writer faster than the pass would
 * keep it going for ever): they are drift, for the watch or the next pass.
 * NULL for an empty table (the pass is then not bounded), and under a
 * catalog older than 0.5.
 */
static char *
plan_upper_bound(Pass *pass)
{
	const char *key = quote_identifier(pass->key);
	bool		isnull;
	Datum		last;

	if (SPI_execute(pass->keyset.nkeys > 1 ? keyset_max_sql(&pass->keyset) :
					psprintf("SELECT %s FROM %s ORDER BY %s DESC LIMIT 1", key, pass->relation,
							 key), true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the largest key of backfill \"%s\"", pass->name);
	if (SPI_processed == 0)
		return NULL;
	/* a composite key's bound is a row literal, as its cursors are */
	if (pass->keyset.nkeys > 1)
	{
		Datum		values[DECLARATION_MAX_KEY_COLUMNS];

		for (int i = 0; i < pass->keyset.nkeys; i++)
			values[i] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1,
									  &isnull);
		return keyset_row_text(&pass->keyset, values);
	}
	last = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? NULL : worker_key_output(pass->key_output, last);
}

/* the bounds of a key of one column, from backfill.plan_bounds */
static void
plan_key_bounds(Pass *pass, PassPlan *plan, int nparts)
{
	Oid			ptypes[4] = {OIDOID, NAMEOID, OIDOID, INT4OID};
	Datum		pvalues[4];
	NameData	keyname;
	bool		isnull;

	namestrcpy(&keyname, pass->key ? pass->key : "");
	pvalues[0] = ObjectIdGetDatum(pass->relid);
	pvalues[1] = NameGetDatum(&keyname);
	pvalues[2] = ObjectIdGetDatum(pass->keytype);
	pvalues[3] = Int32GetDatum(nparts);
	if (SPI_execute_with_args("SELECT method, bounds FROM backfill.plan_bounds($1, $2, $3, $4)",
							  4, ptypes, pvalues, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not plan the partitions of backfill \"%s\"", pass->name);
	plan->method = catalog_gettext(0, 1);
	plan->bounds = PointerGetDatum(PG_DETOAST_DATUM_COPY(catalog_getdatum(0, 2, &isnull)));
}

/* the leading key column: its name, type, collation and how a scan names it */
static void
pass_lead(Pass *pass, const char **column, Oid *type, Oid *collation, char **sql)
{
	if (pass->keyset.nkeys > 1)
	{
		*column = pass->keyset.cols[0].name;
		*type = pass->keyset.cols[0].type;
		*collation = pass->keyset.cols[0].collation;
		*sql = keyset_lead_sql(&pass->keyset);
	}
	else
	{
		int32		typmod;

		*column = pass->key;
		get_atttypetypmodcoll(pass->relid, get_attnum(pass->relid, pass->key), type, &typmod,
							  collation);
		*type = pass->keytype;
		*sql = (char *) quote_identifier(pass->key);
	}
}

/* how many partitions a piece gets: its leaf's share of the rows, at least one */
static int
piece_parts(LeafPiece *piece, double total, int npieces, int nparts)
{
	if (nparts <= 1)
		return 1;
	if (total <= 0)
		return Max(1, nparts / npieces);
	return Max(1, (int) (nparts * piece->tuples / total + 0.5));
}

/* the interior bounds of one piece, as text[], from its leaf's statistics */
static Datum
piece_bounds(Pass *pass, LeafPiece *piece, int n, const char *lead_sql, Oid lead_type,
			 Oid collation)
{
	const char *method;

	if (pass->keyset.nkeys > 1)
	{
		KeyPlanScope scope = {0};

		scope.stats_relid = piece->leaf;
		scope.where = leaves_piece_sql(piece, lead_sql, lead_type, 3, scope.args, &scope.nargs);
		return keyset_plan_bounds(&pass->keyset, n, &scope, &method);
	}
	return leaves_single_bounds(piece, pass->relation, pass->key, pass->keytype, collation, n,
								&method);
}

/* the partitions of one piece into the plan: (NULL, b1], (b1, b2], ... (bn, NULL] */
static void
plan_add_piece(PassPlan *plan, LeafPiece *piece, Datum bounds, Oid lead_type)
{
	ArrayType  *arr = DatumGetArrayTypeP(bounds);
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	Datum		range = CStringGetTextDatum(leaves_range_text(piece, lead_type));

	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (plan->nleafparts + n + 1 > plan->room)
	{
		plan->room = 2 * (plan->nleafparts + n + 1);
		plan->lo = repalloc(plan->lo, sizeof(Datum) * plan->room);
		plan->hi = repalloc(plan->hi, sizeof(Datum) * plan->room);
		plan->lo_null = repalloc(plan->lo_null, sizeof(bool) * plan->room);
		plan->hi_null = repalloc(plan->hi_null, sizeof(bool) * plan->room);
		plan->leaf = repalloc(plan->leaf, sizeof(Datum) * plan->room);
		plan->leaf_range = repalloc(plan->leaf_range, sizeof(Datum) * plan->room);
	}
	for (int i = 0; i <= n; i++)
	{
		int			j = plan->nleafparts++;

		plan->lo_null[j] = (i == 0);
		plan->lo[j] = i > 0 ? elems[i - 1] : (Datum) 0;
		plan->hi_null[j] = (i == n);
		plan->hi[j] = i < n ? elems[i] : (Datum) 0;
		plan->leaf[j] = ObjectIdGetDatum(piece->leaf);
		plan->leaf_range[j] = range;
	}
}

/*
 * A partitioned table whose leaves keep apart in key order (leaves.c) is
 * planned leaf by leaf: each piece of a leaf gets partitions in
 * proportion to the leaf's reltuples, split from that leaf's own
 * statistics, every bound inside the piece.  Returns false, with *why
 * when the table is partitioned, when the pass walks the parent instead.
 * Needs the 0.5 catalog (partition.leaf).
 */
static bool
plan_per_leaf(Pass *pass, PassPlan *plan, int nparts, const char **why)
{
	const char *column;
	Oid			type;
	Oid			collation;
	char	   *lead_sql;
	List	   *pieces;
	double		total = 0;
	int			nleaves;
	int			nintervals;
	int			merged = 0;
	ListCell   *lc;

	if (!pass->partitioned)
		return false;
	pass_lead(pass, &column, &type, &collation, &lead_sql);
	pieces = leaves_pieces(pass->relid, column, type, collation, why);
	if (pieces == NIL)
		return false;
	foreach(lc, pieces)
		total += ((LeafPiece *) lfirst(lc))->tuples;
	nleaves = leaves_count(pieces);
	nintervals = list_length(pieces);
	/*
	 * Neighbours with few rows together share a partition: no more than a
	 * partition's share of the rows (what a walk of the parent gives each
	 * of its nparts), nor fewer than a few batches' worth.  Without
	 * statistics (reltuples unknown) every piece stays apart.
	 */
	if (total > 0)
		pieces = leaves_coalesce(pieces, Max(total / nparts, 4.0 * pass->batch_size), type,
								 collation, &merged);
	/* each piece's partitions are its bounds and one more (grown as needed) */
	plan->room = list_length(pieces) * 2;
	plan->lo = palloc(sizeof(Datum) * plan->room);
	plan->hi = palloc(sizeof(Datum) * plan->room);
	plan->lo_null = palloc(sizeof(bool) * plan->room);
	plan->hi_null = palloc(sizeof(bool) * plan->room);
	plan->leaf = palloc(sizeof(Datum) * plan->room);
	plan->leaf_range = palloc(sizeof(Datum) * plan->room);
	foreach(lc, pieces)
	{
		LeafPiece  *piece = lfirst(lc);
		int			n = Min(piece_parts(piece, total, list_length(pieces), nparts), nparts);

		/* a union of several leaves' pieces is small: one partition, no bounds */
		plan_add_piece(plan, piece, OidIsValid(piece->leaf) ?
					   piece_bounds(pass, piece, n, lead_sql, type, collation) :
					   PointerGetDatum(construct_empty_array(TEXTOID)), type);
	}
	plan->method = psprintf("per leaf (%d %s", nleaves, nleaves == 1 ? "leaf" : "leaves");
	if (nintervals != nleaves)
		plan->method = psprintf("%s, %d intervals", plan->method, nintervals);
	if (merged > 0)
		plan->method = psprintf("%s; small neighbours merged: %d partition%s", plan->method,
								plan->nleafparts, plan->nleafparts == 1 ? "" : "s");
	plan->method = psprintf("%s)", plan->method);
	plan->bounds = PointerGetDatum(construct_empty_array(TEXTOID));
	return true;
}

/* an array of n values of a type, NULL where nulls says so */
static Datum
plan_array(Datum *values, bool *nulls, int n, Oid type)
{
	int			dims[1] = {n};
	int			lbs[1] = {1};
	int16		len;
	bool		byval;
	char		align;

	get_typlenbyvalalign(type, &len, &byval, &align);
	return PointerGetDatum(construct_md_array(values, nulls, 1, dims, lbs, type, len, byval,
											  align));
}

/* the partitions of a plan per leaf, numbered from first, pending (in the catalog scope) */
static void
insert_leaf_partitions(Pass *pass, PassPlan *plan, int first)
{
	state_parts_planned_leaves(pass->run_id, first,
							   plan_array(plan->lo, plan->lo_null, plan->nleafparts, TEXTOID),
							   plan_array(plan->hi, plan->hi_null, plan->nleafparts, TEXTOID),
							   plan_array(plan->leaf, NULL, plan->nleafparts, OIDOID),
							   plan_array(plan->leaf_range, NULL, plan->nleafparts, TEXTOID));
}

/*
 * A Citus table's rows are on its shards, which the coordinator's planner
 * does not see: the estimate is the sum of the shards' own (citus.c), and
 * the method says so.
 */
static void
plan_citus_estimate(Pass *pass, PassPlan *plan)
{
	int64		estimate;
	int			shards;
	int			sampled;

	if (!citus_estimate_rows(pass->relid, pass->predicate, &estimate, &shards, &sampled))
		return;
	plan->estimate = Int64GetDatum(estimate);
	plan->has_estimate = true;
	plan->method = psprintf("%s, rows from %d Citus shard%s", plan->method, shards,
								shards == 1 ? "" : "s");
	if (sampled > 0)
		ereport(LOG,
				(errmsg("backfill \"%s\": the rows to do in %d of the %d Citus shards counted in "
						"a sample of their pages (statistics missing or stale)",
						pass->name, sampled, shards)));
}

/*
 * A Citus distributed table whose batches can run on the shards' nodes:
 * one partition per shard (shards.c); else the method says why not.
 */
static bool
plan_per_shard(Pass *pass, PassPlan *plan, const char **why)
{
	CitusTable	table;

	citus_describe(pass->relid, &table);
	if (table.kind != CITUS_DISTRIBUTED)
		return false;
	if (!backfill_citus_per_shard)
		*why = "backfill.citus_per_shard is off";
	else if (pass->keyset.nkeys > 1)
		*why = "a composite key";
	else if (pass->partitioned)
		*why = "a partitioned table";
	else if (pass->input != NULL)
		*why = "a scoped backfill";
	else if (pass->settings != NULL)
		*why = "settings";
	else if (pass->max_failed_rows > 0)
		*why = "max_failed_rows above 0";
	if (*why != NULL)
		return false;
	plan->shards = citus_plan_shards(pass->relid, pass->relation, pass->action, pass->predicate,
									 pass->keytype, why);
	if (plan->shards != (Datum) 0)
	{
		ArrayType  *shards = DatumGetArrayTypeP(plan->shards);

		plan->method = psprintf("per shard: %d Citus shards",
								ArrayGetNItems(ARR_NDIM(shards), ARR_DIMS(shards)));
		plan->bounds = PointerGetDatum(construct_empty_array(TEXTOID));
		return true;
	}
	return false;
}

/* the rows to do (estimate.c): the planner's, or a sample's, which plan_method then names */
static void
plan_estimate_rows(Pass *pass, PassPlan *plan)
{
	int64		rows;
	char	   *note;

	plan->has_estimate = estimate_pass_rows(pass->name, pass->relid, pass->relation,
											pass->predicate, &rows, &note);
	if (plan->has_estimate)
		plan->estimate = Int64GetDatum(rows);
	if (note != NULL)
		plan->method = psprintf("%s; %s", plan->method, note);
}

/*
 * A table: bounds about four partitions per lane (a composite key's from
 * keyset.c), and the planner's estimate of the rows the predicate
 * matches; both as the declaring role.
 */
static void
plan_table(Pass *pass, PassPlan *plan)
{
	Oid			etypes[2] = {TEXTOID, TEXTOID};
	Datum		evalues[2];
	int			nparts = pass->max_parallel > 1 ? pass->max_parallel * 4 : 1;
	const char *why = NULL;
	const char *not_per_shard = NULL;

	if (pass->citus_remote && plan_per_shard(pass, plan, &not_per_shard))
		;
	else if (!plan_per_leaf(pass, plan, nparts, &why))
	{
		if (pass->keyset.nkeys > 1)
			plan->bounds = keyset_plan_bounds(&pass->keyset, nparts, NULL, &plan->method);
		else
			plan_key_bounds(pass, plan, nparts);
		if (why != NULL)
			plan->method = psprintf("parent walk: %s; %s", why, plan->method);
	}
	if (not_per_shard != NULL)
		plan->method = psprintf("coordinator-side (%s); %s", not_per_shard, plan->method);
	plan->bound = plan_upper_bound(pass);

	if (pass->citus_remote)
	{
		evalues[0] = CStringGetTextDatum(pass->relation);
		evalues[1] = CStringGetTextDatum(pass->predicate);
		if (SPI_execute_with_args("SELECT backfill.estimate_rows($1, $2)", 2, etypes, evalues,
								  NULL, false, 1) == SPI_OK_SELECT && SPI_processed == 1)
			plan_take_estimate(plan);
		plan_citus_estimate(pass, plan);
	}
	else
		plan_estimate_rows(pass, plan);
}

/* how many partitions plan_store inserts: one a leaf piece, a shard, or a range */
static int
plan_partition_count(PassPlan *plan, ArrayType *bounds)
{
	ArrayType  *shards;

	if (plan->nleafparts > 0)
		return plan->nleafparts;
	if (plan->shards != (Datum) 0)
	{
		shards = DatumGetArrayTypeP(plan->shards);
		return ArrayGetNItems(ARR_NDIM(shards), ARR_DIMS(shards));
	}
	return 1 + ArrayGetNItems(ARR_NDIM(bounds), ARR_DIMS(bounds));
}

/* Insert the partitions and move the run to running; say so in the log. */
static void
plan_store(Pass *pass, PassPlan *plan)
{
	CatalogScope scope;
	ArrayType  *bounds = DatumGetArrayTypeP(plan->bounds);

	catalog_enter(&scope);
	/*
	 * partition i covers (bounds[i-1], bounds[i]]; the ends are open, and
	 * the run's bound closes the last one when a lane claims it (per leaf:
	 * within the piece of its leaf)
	 */
	if (plan->nleafparts > 0)
		insert_leaf_partitions(pass, plan, 0);
	else if (plan->shards != (Datum) 0)
		state_parts_planned_shards(pass->run_id, plan->shards);
	else
		state_parts_planned_ranges(pass->run_id, plan->bounds);
	state_pass_planned(pass->run_id, plan->method, plan->estimate, plan->has_estimate,
					   plan->bound);
	catalog_leave(&scope);
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT " started: %d partitions by %s, "
					"about %s rows to do",
					pass->name, pass->run_id, plan_partition_count(plan, bounds),
					plan->method,
					plan->has_estimate ? psprintf(INT64_FORMAT, DatumGetInt64(plan->estimate)) :
					"?")));
}

/*
 * A retried pass (backfill_retry) goes on from the failed one's partitions,
 * which the retry copied; its first lane describes it as the table is now,
 * not as it was: for partitions of Citus shards, the shards the table has
 * now (a split shard's partition goes on in the new ones when a lane claims
 * it), else the failed pass's method; and the rows to do now, estimated as
 * a new plan's are (from a sample where the statistics are missing or
 * stale), not the failed pass's estimate of its start.
 */
static void
plan_resumed(Pass *pass)
{
	CatalogScope scope;
	PassPlan	plan = {0};
	int64		previous;
	int			nparts;
	int			nshards;
	char	   *old_method;
	Oid			types[1] = {OIDOID};
	Datum		values[1];
	bool		isnull;

	catalog_enter(&scope);
	exec_on_run(pass, "SELECT l.previous_run_id, (SELECT o.plan_method FROM backfill.run o"
				"   WHERE o.run_id = l.previous_run_id),"
				" (SELECT pg_catalog.count(*)::pg_catalog.int4 FROM backfill.partition p"
				"   WHERE p.run_id = l.run_id),"
				" (SELECT pg_catalog.count(p.shard)::pg_catalog.int4 FROM backfill.partition p"
				"   WHERE p.run_id = l.run_id)"
				"  FROM backfill.ledger l WHERE l.run_id = $1", SPI_OK_SELECT);
	(void) catalog_getdatum(0, 1, &isnull);
	previous = isnull ? 0 : catalog_getint64(0, 1);
	old_method = catalog_gettext(0, 2);
	nparts = DatumGetInt32(catalog_getdatum(0, 3, &isnull));
	nshards = DatumGetInt32(catalog_getdatum(0, 4, &isnull));
	if (nshards > 0 && pass->citus_remote)
	{
		values[0] = ObjectIdGetDatum(pass->relid);
		catalog_exec("SELECT pg_catalog.count(*)::pg_catalog.int4 FROM pg_catalog.pg_dist_shard s"
					 " WHERE s.logicalrelid = $1::pg_catalog.regclass",
					 1, types, values, NULL, SPI_OK_SELECT);
		plan.method = psprintf("per shard: %d Citus shards",
							   DatumGetInt32(catalog_getdatum(0, 1, &isnull)));
	}
	else
		plan.method = old_method ? old_method : "?";
	catalog_leave(&scope);
	/* the rows to do now, as the lane's role (as a new plan estimates them) */
	if (pass->citus_remote)
		plan_citus_estimate(pass, &plan);
	else if (!OidIsValid(pass->pages_fn))
		plan_estimate_rows(pass, &plan);
	plan.method = psprintf("%s; resumed from run " INT64_FORMAT " (%d partitions)",
						   plan.method, previous, nparts);
	catalog_enter(&scope);
	state_pass_replanned(pass->run_id, plan.method, plan.estimate, plan.has_estimate);
	catalog_leave(&scope);
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT " resumes run " INT64_FORMAT ": %d "
					"partitions by %s, about %s rows to do", pass->name, pass->run_id, previous,
					nparts, plan.method,
					plan.has_estimate ? psprintf(INT64_FORMAT, DatumGetInt64(plan.estimate)) :
					"?")));
}

/* the claimed partition's Citus shard and the node of its checkpoint, from its row */
static void
claim_read_shard(Pass *pass, Claim *claim)
{
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2];
	Datum		group;
	bool		isnull;

	claim->shardid = 0;
	claim->shard_group = -1;
	claim->shard_ready = false;
	claim->shard_cursor = NULL;
	if (!pass->citus_remote)
		return;
	values[0] = Int64GetDatum(pass->run_id);
	values[1] = Int32GetDatum(claim->part_no);
	catalog_exec("SELECT shard, shard_group, coalesce(shard_run, run_id) FROM backfill.partition"
				 " WHERE run_id = $1 AND part_no = $2", 2, types, values, NULL, SPI_OK_SELECT);
	claim->shardid = catalog_getint64(0, 1);
	group = catalog_getdatum(0, 2, &isnull);
	if (!isnull)
		claim->shard_group = DatumGetInt32(group);
	claim->shard_run = catalog_getint64(0, 3);
}

/*
 * The first lane of a pass splits the key space into partitions, about
 * four per lane so that a lane that finishes early takes another: from the
 * key's histogram in pg_stats when there is one, else from min/max of an
 * integer key, else one partition.  Bounds come from backfill.plan_bounds,
 * run as the declaring role (it reads the table and its statistics).  The
 * run row stays locked while planning: one lane plans, a control waits.
 */
void
pass_plan(Pass *pass)
{
	CatalogScope scope;
	char	   *phase;
	bool		isnull;
	bool		resumed;

	worker_begin_xact("pg_backfill lane: planning the pass");
	catalog_enter(&scope);
	exec_on_run(pass, "SELECT r.phase, r.plan_method IS NULL AND EXISTS (SELECT 1"
				"  FROM backfill.partition p WHERE p.run_id = r.run_id)"
				"  FROM backfill.run r WHERE r.run_id = $1 FOR UPDATE OF r",
				SPI_OK_SELECT);
	phase = catalog_gettext(0, 1);
	resumed = DatumGetBool(catalog_getdatum(0, 2, &isnull));
	catalog_leave(&scope);

	if (strcmp(phase, "queued") == 0)
	{
		PassPlan	plan = {0};

		if (OidIsValid(pass->pages_fn))
			plan_pages(pass, &plan);
		else
			plan_table(pass, &plan);
		plan_store(pass, &plan);
	}
	else if (strcmp(phase, "running") == 0 && resumed)
		plan_resumed(pass);
	worker_commit_xact();
}

/* the type of the leading key column */
static Oid
pass_lead_type(Pass *pass)
{
	return pass->keyset.nkeys > 1 ? pass->keyset.cols[0].type : pass->keytype;
}

/* a claim's piece into the pass's memory: it outlives the claiming transaction */
static void
pass_copy_piece(Pass *pass, LeafPiece *piece)
{
	Oid			type = pass_lead_type(pass);
	int16		len;
	bool		byval;
	MemoryContext old = MemoryContextSwitchTo(pass->cxt);

	get_typlenbyval(type, &len, &byval);
	if (piece->has_lo)
		piece->lo = datumCopy(piece->lo, byval, len);
	if (piece->has_hi)
		piece->hi = datumCopy(piece->hi, byval, len);
	MemoryContextSwitchTo(old);
}

/*
 * Take the lease on a partition that is pending, or whose holder is dead.
 * Returns false when no partition is left to claim.
 */
bool
pass_claim(Pass *pass, Claim *claim)
{
	CatalogScope scope;
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2];
	StateClaim	got = {0};
	bool		found = false;
	int			nclaimed;
	char	   *cursor = NULL;
	char	   *hi = NULL;
	char	   *leaf_range = NULL;
	Oid			leaf = InvalidOid;
	bool		isnull;

	values[0] = Int64GetDatum(pass->run_id);

	pass->claims++;
	worker_begin_xact("pg_backfill lane: claiming a partition");
	catalog_enter(&scope);
	nclaimed = state_parts_claim(pass->run_id, LANE_PID(), LANE_START(), &got);
	if (nclaimed > 1)
		elog(ERROR, "a lane of backfill \"%s\" claimed %d partitions at once", pass->name,
			 nclaimed);
	if (nclaimed == 1)
	{
		cursor = got.cursor;
		hi = got.hi;
		found = true;
		claim->part_no = got.part_no;
		claim->rows = got.rows;
		ItemPointerSetInvalid(&claim->checkpoint_tid);
		if (got.reclaimed)
		{
			state_pass_interrupted(pass->run_id);
			ereport(LOG,
					(errmsg("backfill \"%s\" run " INT64_FORMAT ": resuming partition %d "
							"from its checkpoint after lane %d died",
							pass->name, pass->run_id, claim->part_no, got.dead_pid),
					 errdetail("%s", cursor ? psprintf("Last key done: %s.", cursor) :
							   "No batch of that partition had committed.")));
		}
	}
	/* the partition open at the top ends at the pass's bound */
	if (found && hi == NULL)
	{
		exec_on_run(pass, "SELECT bound FROM backfill.run WHERE run_id = $1", SPI_OK_SELECT);
		hi = catalog_gettext(0, 1);
	}
	/* a pass planned per leaf: the partition keeps to its leaf's piece */
	if (found && pass->partitioned)
	{
		values[1] = Int32GetDatum(claim->part_no);
		types[1] = INT4OID;
		catalog_exec("SELECT leaf::pg_catalog.oid, leaf_range FROM backfill.partition"
					 " WHERE run_id = $1 AND part_no = $2", 2, types, values, NULL, SPI_OK_SELECT);
		leaf_range = catalog_gettext(0, 2);
		if (leaf_range != NULL)
			leaf = DatumGetObjectId(catalog_getdatum(0, 1, &isnull));
	}
	/* a Citus shard's partition: its shard and the node of its checkpoint (shards.c) */
	if (found)
		claim_read_shard(pass, claim);
	catalog_leave(&scope);

	/* read as keys by pass_claim_read_keys, as an attempt of the partition */
	claim->keys_read = false;
	claim->cursor_text = pass_strdup(pass, cursor);
	claim->hi_text = pass_strdup(pass, hi);
	claim->leaf_range_text = pass_strdup(pass, leaf_range);
	claim->leaf = leaf;
	worker_commit_xact();
	return found;
}

/* the key's type as a message names it: "integer", or "(text, integer)" */
static char *
pass_key_type_name(Pass *pass)
{
	StringInfoData buf;

	if (pass->keyset.nkeys <= 1)
		return format_type_be(pass->keytype);
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '(');
	for (int i = 0; i < pass->keyset.nkeys; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? ", " : "", format_type_be(pass->keyset.cols[i].type));
	appendStringInfoChar(&buf, ')');
	return buf.data;
}

/* the claimed partition's bounds, its leaf's piece and its cursor as values */
static void
claim_parse_keys(Pass *pass, Claim *claim, const char *volatile *reading)
{
	claim->has_piece = false;
	if (claim->leaf_range_text != NULL)
	{
		*reading = claim->leaf_range_text;
		if (!leaves_range_parse(claim->leaf_range_text, pass_lead_type(pass), &claim->piece))
			elog(ERROR, "it is not a range of the key's leading column");
		claim->piece.leaf = claim->leaf;
		claim->has_piece = true;
		pass_copy_piece(pass, &claim->piece);
	}
	claim->has_cursor = (claim->cursor_text != NULL);
	claim->has_hi = (claim->hi_text != NULL);
	if (claim->cursor_text)
	{
		*reading = claim->cursor_text;
		if (pass->keyset.nkeys > 1)
			keyset_row_parse(&pass->keyset, claim->cursor_text, claim->cursor_key, pass->cxt);
		else
			claim->cursor = pass_key_from_text(pass, claim->cursor_text);
	}
	if (claim->hi_text)
	{
		*reading = claim->hi_text;
		if (pass->keyset.nkeys > 1)
			keyset_row_parse(&pass->keyset, claim->hi_text, claim->hi_key, pass->cxt);
		else
			claim->hi = pass_key_from_text(pass, claim->hi_text);
	}
}

/*
 * The claimed partition's bounds and cursor, kept as text, read back as
 * keys, in a transaction of their own, as the lane's role and outside the
 * catalog scope: the key's type may be the declarer's domain, whose CHECK
 * runs its functions.  A text that no longer reads as a key (a CHECK added
 * to the domain, an enum label renamed, the leaf range of a changed type)
 * is BF033, an error of the partition: work.c records it and retries it
 * like a failed batch, and fails the pass after max_attempts.
 */
void
pass_claim_read_keys(Pass *pass, Claim *claim)
{
	MemoryContext cxt = CurrentMemoryContext;
	const char *volatile reading = NULL;

	worker_begin_xact("pg_backfill lane: reading a partition's keys");
	PG_TRY();
	{
		claim_parse_keys(pass, claim, &reading);
	}
	PG_CATCH();
	{
		ErrorData  *edata = backfill_take_error(cxt);

		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED || reading == NULL)
			ReThrowError(edata);
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_KEY_UNREADABLE),
				 errmsg("backfill \"%s\" cannot read \"%s\" of partition %d as its key %s: %s",
						pass->name, reading, claim->part_no, pass_key_type_name(pass),
						edata->message),
				 errdetail("The partition's %s was written as text by an earlier batch or the plan.",
						   reading == claim->cursor_text ? "cursor" :
						   reading == claim->hi_text ? "upper bound" : "leaf range"),
				 errhint("The key's type changed under the pass: change it back so that the text "
						 "reads again and call backfill_retry('%s'), or start a new pass with "
						 "backfill_run('%s', force => true).", pass->name, pass->name)));
	}
	PG_END_TRY();
	worker_commit_xact();
	claim->keys_read = true;
}

/* Give the lease back (the pass was paused): the partition is pending again. */
void
pass_release(Pass *pass, Claim *claim)
{
	CatalogScope scope;

	worker_begin_xact("pg_backfill lane: releasing a partition");
	catalog_enter(&scope);
	state_part_released(pass->run_id, claim->part_no, LANE_PID());
	catalog_leave(&scope);
	worker_commit_xact();
}

/*
 * Give back every lease of run_id this backend holds, each partition
 * pending again at its checkpoint: a finalizing session whose work ended
 * on an error, while it lives on, so that a lane can take them.
 */
void
pass_release_held(int64 run_id)
{
	CatalogScope scope;

	worker_begin_xact("pg_backfill: giving partitions back");
	catalog_enter(&scope);
	state_parts_released_held(run_id, LANE_PID(), LANE_START());
	catalog_leave(&scope);
	worker_commit_xact();
}

/*
 * A partition whose batch failed max_attempts times in a row fails; the
 * pass goes on with its other partitions and ends failed when nothing is
 * left (pass_finish).  backfill_retry puts it back to pending.
 */
void
pass_fail_partition(Pass *pass, Claim *claim, const char *message)
{
	CatalogScope scope;

	worker_begin_xact("pg_backfill lane: failing a partition");
	catalog_enter(&scope);
	state_part_failed(pass->run_id, claim->part_no, message);
	catalog_leave(&scope);
	worker_commit_xact();
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": partition %d failed: %s",
					pass->name, pass->run_id, claim->part_no, message),
			 errhint("backfill_retry('%s') puts it back to pending.", pass->name)));
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
static void
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

/* a leaf's schema-qualified name for the log, "?" when it is gone */
static char *
leaf_name(Oid leaf)
{
	char	   *name = get_rel_name(leaf);

	if (name == NULL)
		return "?";
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(leaf)), name);
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
 * A pass planned per leaf, before it is counted: the leaves are listed
 * again, and a leaf attached since the plan, in a gap no partition's piece
 * reaches, gets a partition of its own (pending: lanes cover it, each row
 * once, up to the pass's bound).  A leaf attached where a planned piece
 * lies is covered by that piece's partitions; one attached after this
 * look is found by the count (STALLED).  A partition over the union of
 * small neighbours (leaf NULL, leaves_coalesce) is planned like any: the
 * union has no gap a leaf could be attached in.  Called with the ledger
 * row locked, outside the catalog scope: the planned pieces become
 * values as the lane's role.  True when partitions were added.
 */
static bool
cover_new_leaves(Pass *pass)
{
	CatalogScope scope;
	const char *column;
	Oid			type;
	Oid			collation;
	char	   *lead_sql;
	List	   *planned = NIL;
	List	   *fresh;
	PassPlan	plan = {0};
	int			n;
	int			next_part;
	ListCell   *lc;

	if (!pass->partitioned)
		return false;
	catalog_enter(&scope);
	n = exec_on_run(pass, "SELECT leaf_range, (SELECT pg_catalog.max(q.part_no) + 1"
					"   FROM backfill.partition q WHERE q.run_id = $1)::pg_catalog.int8"
					" FROM backfill.partition WHERE run_id = $1 AND leaf_range IS NOT NULL",
					SPI_OK_SELECT);
	next_part = n > 0 ? (int) catalog_getint64(0, 2) : 0;
	for (int i = 0; i < n; i++)
		planned = lappend(planned, catalog_gettext(i, 1));
	catalog_leave(&scope);
	if (n == 0)
		return false;			/* the pass walks the parent */

	pass_lead(pass, &column, &type, &collation, &lead_sql);
	foreach(lc, planned)
	{
		LeafPiece  *piece = palloc(sizeof(LeafPiece));

		if (!leaves_range_parse((char *) lfirst(lc), type, piece))
			elog(ERROR, "backfill \"%s\" has a leaf range that is not one: %s", pass->name,
				 (char *) lfirst(lc));
		lfirst(lc) = piece;
	}
	fresh = leaves_uncovered(leaves_attached(pass->relid, column, type, collation),
							 planned, type, collation);
	if (fresh == NIL)
		return false;
	plan.room = 2 * list_length(fresh);
	plan.lo = palloc(sizeof(Datum) * plan.room);
	plan.hi = palloc(sizeof(Datum) * plan.room);
	plan.lo_null = palloc(sizeof(bool) * plan.room);
	plan.hi_null = palloc(sizeof(bool) * plan.room);
	plan.leaf = palloc(sizeof(Datum) * plan.room);
	plan.leaf_range = palloc(sizeof(Datum) * plan.room);
	foreach(lc, fresh)
	{
		LeafPiece  *piece = lfirst(lc);

		plan_add_piece(&plan, piece, PointerGetDatum(construct_empty_array(TEXTOID)), type);
		ereport(LOG,
				(errmsg("backfill \"%s\" run " INT64_FORMAT ": leaf %s was attached since the "
						"plan; partition %d covers it", pass->name, pass->run_id,
						leaf_name(piece->leaf),
						next_part + plan.nleafparts - 1),
				 errdetail("Its interval of the leading key column: %s.",
						   leaves_range_text(piece, type))));
	}
	catalog_enter(&scope);
	insert_leaf_partitions(pass, &plan, next_part);
	catalog_leave(&scope);
	return true;
}

/*
 * The tree of a partitioned table as this look sees it, kept for the look
 * after the count (leaves_unchanged_since_count).  Taken before the
 * count's transaction begins, so before its snapshot: whatever it lists
 * was committed when the count began, and the count sees its rows.
 */
static void
note_leaves_seen(Pass *pass)
{
	MemoryContext old;

	if (!pass->partitioned)
		return;
	old = MemoryContextSwitchTo(pass->cxt);
	if (pass->leaves_seen != NIL)
		list_free_deep(pass->leaves_seen);
	pass->leaves_seen = leaves_versions(pass->relid);
	MemoryContextSwitchTo(old);
}

/*
 * After the count of a partitioned table, in the transaction that ends the
 * pass: may it end on that count, or was a leaf attached that the count
 * may have missed (its snapshot was taken before the ATTACH committed)?
 *
 * ATTACH PARTITION holds SHARE UPDATE EXCLUSIVE on the parent from its
 * start to its commit; this takes the same mode, which conflicts with
 * itself, and keeps it until the pass's end commits.  So every ATTACH
 * either committed before the lock was granted, and the look below (a
 * fresh catalog snapshot, after the lock's invalidations) lists it, or
 * waits for this transaction: its leaf joins a pass that has ended, as a
 * row inserted after the end would (drift).  One that committed just
 * before the look but after note_leaves_seen is new to the look, so the
 * pass does not end: a gap leaf gets partitions (cover_new_leaves), and
 * the count runs again, with a snapshot that sees the leaf.  One that
 * committed before note_leaves_seen committed before the count began.
 *
 * The lock is tried, not waited for, for up to a second: an ATTACH that
 * validates a large table holds the parent longer, and the lane must not
 * wait on it with the ledger row locked, nor queue the DBA's next ATTACH
 * behind it.  Not having the lock is the same answer as a change: the
 * lane counts again.  Holding it, the lane blocks an ATTACH only for the
 * look and the end's commit.
 */
#define LEAVES_LOCK_TRIES 100
#define LEAVES_LOCK_SLEEP_MS 10
static bool
leaves_unchanged_since_count(Pass *pass)
{
	bool		locked = false;
	List	   *now;

	if (!pass->partitioned)
		return true;
	for (int i = 0; i < LEAVES_LOCK_TRIES && !locked; i++)
	{
		locked = ConditionalLockRelationOid(pass->relid, ShareUpdateExclusiveLock);
		if (!locked)
		{
			CHECK_FOR_INTERRUPTS();
			pg_usleep(LEAVES_LOCK_SLEEP_MS * 1000L);
		}
	}
	if (!locked)
	{
		ereport(LOG,
				(errmsg("backfill \"%s\" run " INT64_FORMAT ": the count did not end the pass: "
						"the leaves of %s are being changed (its lock is taken); counting again",
						pass->name, pass->run_id, pass->relation)));
		return false;
	}
	now = leaves_versions(pass->relid);
	if (!leaves_changed(pass->leaves_seen, now))
		return true;
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": a partition of %s was attached "
					"while the pass was counted; counting again", pass->name, pass->run_id,
					pass->relation)));
	return false;
}

/*
 * The count may not end the pass: back to running, leaves attached in a
 * gap covered, and the lane goes on (more_leaves) to count again.
 */
static void
pass_count_again(Pass *pass)
{
	CatalogScope scope;

	(void) cover_new_leaves(pass);
	catalog_enter(&scope);
	state_pass_leaves_attached(pass->run_id);
	catalog_leave(&scope);
	pass->more_leaves = true;
}

/*
 * With the ledger row locked, as backfill_retry and backfill_cancel lock
 * it: a retry that puts failed partitions back to pending comes wholly
 * before this look (the pass goes on) or wholly after it (it resumes the
 * failed pass in a new one).  Returns true when the pass is to be counted
 * now: no partition is open and none failed (the run is then counting).
 * A pass with failed partitions fails here; one with open partitions is
 * another lane's to end.
 */
static bool
pass_ready_to_count(Pass *pass)
{
	CatalogScope scope;
	int64		open_parts;
	int64		failed_parts;
	char	   *first_error;

	worker_begin_xact("pg_backfill lane: checking the partitions");
	catalog_enter(&scope);
	if (!state_pass_lock(pass->run_id))
	{
		catalog_leave(&scope);
		worker_commit_xact();
		return false;			/* it has ended */
	}
	first_error = state_parts_tally(pass->run_id, &open_parts, &failed_parts);
	if (open_parts == 0 && failed_parts > 0)
	{
		char	   *message = psprintf("%lld partitions failed; the first: %s",
									   (long long) failed_parts, first_error);

		catalog_leave(&scope);
		pass_fail_in_xact(pass, -1, ERRCODE_BACKFILL_BATCH_FAILED, message);
		worker_commit_xact();
		return false;
	}
	pass->more_leaves = false;
	if (open_parts == 0)
	{
		catalog_leave(&scope);
		note_leaves_seen(pass);
		pass->more_leaves = cover_new_leaves(pass);
		catalog_enter(&scope);
	}
	if (open_parts == 0 && !pass->more_leaves)
		(void) state_pass_counting(pass->run_id);
	catalog_leave(&scope);
	worker_commit_xact();
	return open_parts == 0 && !pass->more_leaves;
}

/*
 * In the counting transaction: lock the ledger row and say whether the
 * pass is still running and not paused.  The lock stays while counting: a
 * cancel or pause waits for the count and then finds the pass ended.  A
 * pass paused before the count began is not counted now: resuming it
 * starts a lane that counts.
 */
static bool
lock_pass_to_count(Pass *pass)
{
	CatalogScope scope;
	bool		isnull;
	char	   *status;
	bool		paused;

	catalog_enter(&scope);
	exec_on_run(pass, "SELECT l.status, r.paused, r.bound, r.sweep::pg_catalog.int8, r.probe_key"
				" FROM backfill.ledger l JOIN backfill.run r ON r.run_id = l.run_id"
				" WHERE l.run_id = $1 FOR UPDATE OF l",
				SPI_OK_SELECT);
	status = catalog_gettext(0, 1);
	paused = DatumGetBool(catalog_getdatum(0, 2, &isnull));
	pass->bound = pass_strdup(pass, catalog_gettext(0, 3));
	pass->sweep = (int) catalog_getint64(0, 4);
	pass->probe_key = pass_strdup(pass, catalog_gettext(0, 5));
	catalog_leave(&scope);
	return strcmp(status, ledger_status_text(LEDGER_RUNNING)) == 0 && !paused;
}

/* the keys of the rows this pass recorded as failed alone, as text; their number */
static int
recorded_key_texts(Pass *pass, char ***texts)
{
	CatalogScope scope;
	int			n;

	catalog_enter(&scope);
	n = exec_on_run(pass, "SELECT key FROM backfill.failed_row WHERE run_id = $1", SPI_OK_SELECT);
	*texts = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
		(*texts)[i] = catalog_gettext(i, 1);
	catalog_leave(&scope);
	return n;
}

/*
 * The keys of the rows this pass recorded as failed alone (poison.c), as an
 * array of the key type, or NULL when there are none.  They are read as the
 * extension's owner and become keys as the lane's role (a domain's CHECK).
 * A composite key's stay text: its row literals, as ROW(...)::text writes
 * them.
 */
static ArrayType *
recorded_keys(Pass *pass)
{
	char	  **texts;
	int			n = recorded_key_texts(pass, &texts);
	Datum	   *keys;
	char		align;

	if (n == 0)
		return NULL;
	keys = palloc(sizeof(Datum) * n);
	if (pass->keyset.nkeys > 1)
	{
		for (int i = 0; i < n; i++)
			keys[i] = CStringGetTextDatum(texts[i]);
		return construct_array(keys, n, TEXTOID, -1, false, TYPALIGN_INT);
	}
	for (int i = 0; i < n; i++)
		keys[i] = worker_key_input(pass->key_input, texts[i], pass->key_ioparam);
	get_typlenbyvalalign(pass->keytype, &pass->key_len, &pass->key_byval, &align);
	return construct_array(keys, n, pass->keytype, pass->key_len, pass->key_byval, align);
}

/* a composite bound's columns as parameters: their types and values; returns how many */
static int
bound_params(Pass *pass, Oid *types, Datum *values)
{
	keyset_row_parse(&pass->keyset, pass->bound, values, CurrentMemoryContext);
	for (int i = 0; i < pass->keyset.nkeys; i++)
		types[i] = pass->keyset.cols[i].type;
	return pass->keyset.nkeys;
}

/*
 * The condition of a table's rows still to do, appended to sql: they match
 * the predicate, are not rows the pass recorded as failed alone (those are
 * its result, completed_with_failures, not a sign that it stalled), and lie
 * within its bound.  Its parameters go to types and values; returns how many.
 */
static int
remaining_where(Pass *pass, StringInfo sql, Oid *types, Datum *values)
{
	ArrayType  *keys = recorded_keys(pass);
	int			nargs = 0;

	appendStringInfo(sql, " WHERE (\n%s\n)", pass->predicate);
	if (keys != NULL && pass->keyset.nkeys > 1)
	{
		appendStringInfo(sql, " AND NOT (ROW(%s)::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($1))",
						 keyset_columns_sql(&pass->keyset));
		types[nargs] = TEXTARRAYOID;
		values[nargs++] = PointerGetDatum(keys);
	}
	else if (keys != NULL)
	{
		appendStringInfo(sql, " AND NOT (%s %s ANY ($1))", quote_identifier(pass->key),
						 pass->key_eq);
		types[nargs] = get_array_type(pass->keytype);
		values[nargs++] = PointerGetDatum(keys);
	}
	/* a bounded pass converges within its bound: what lies beyond is drift */
	if (pass->bound != NULL && pass->keyset.nkeys > 1)
	{
		appendStringInfo(sql, " AND %s", keyset_bound_sql(&pass->keyset, false, nargs + 1));
		nargs += bound_params(pass, types + nargs, values + nargs);
	}
	else if (pass->bound != NULL)
	{
		appendStringInfo(sql, " AND %s %s $%d", quote_identifier(pass->key), pass->key_le,
						 nargs + 1);
		types[nargs] = pass->keytype;
		values[nargs++] = pass_key_from_text(pass, pass->bound);
	}
	return nargs;
}

/* a table's rows still to do (remaining_where) */
static int64
count_table_remaining(Pass *pass)
{
	StringInfoData sql;
	Oid			types[1 + DECLARATION_MAX_KEY_COLUMNS];
	Datum		values[1 + DECLARATION_MAX_KEY_COLUMNS];
	bool		isnull;
	int			nargs;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT pg_catalog.count(*) FROM %s", pass->relation);
	nargs = remaining_where(pass, &sql, types, values);
	if (SPI_execute_with_args(sql.data, nargs, types, values, NULL, true, 0) !=
		SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not count the rows left by backfill \"%s\"", pass->name);
	return DatumGetInt64(catalog_getdatum(0, 1, &isnull));
}

/*
 * The smallest key of a row still to do (remaining_where), as key text (a
 * composite key's row literal), or NULL when none is: where a sweep
 * begins to prove itself (pass_sweep_or_end).
 */
static char *
smallest_remaining_key(Pass *pass)
{
	StringInfoData sql;
	Oid			types[1 + DECLARATION_MAX_KEY_COLUMNS];
	Datum		values[1 + DECLARATION_MAX_KEY_COLUMNS];
	Datum		key[DECLARATION_MAX_KEY_COLUMNS];
	const char *cols = pass->keyset.nkeys > 1 ? keyset_columns_sql(&pass->keyset) :
		quote_identifier(pass->key);
	bool		isnull;
	int			nargs;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s FROM %s", cols, pass->relation);
	nargs = remaining_where(pass, &sql, types, values);
	appendStringInfo(&sql, " ORDER BY %s LIMIT 1", cols);
	if (SPI_execute_with_args(sql.data, nargs, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the first row left by backfill \"%s\"", pass->name);
	if (SPI_processed == 0)
		return NULL;
	for (int i = 0; i < Max(pass->keyset.nkeys, 1); i++)
		key[i] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1, &isnull);
	if (pass->keyset.nkeys > 1)
		return keyset_row_text(&pass->keyset, key);
	return worker_key_output(pass->key_output, key[0]);
}

/* does the row of key text still match the predicate (as the lane's role)? */
static bool
key_still_matches(Pass *pass, const char *key)
{
	StringInfoData sql;
	Oid			types[DECLARATION_MAX_KEY_COLUMNS];
	Datum		values[DECLARATION_MAX_KEY_COLUMNS];
	int			nargs = 1;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT 1 FROM %s WHERE ", pass->relation);
	if (pass->keyset.nkeys > 1)
	{
		const char *cols = keyset_columns_sql(&pass->keyset);
		StringInfoData params;

		initStringInfo(&params);
		keyset_row_parse(&pass->keyset, key, values, CurrentMemoryContext);
		nargs = pass->keyset.nkeys;
		for (int i = 0; i < nargs; i++)
		{
			types[i] = pass->keyset.cols[i].type;
			appendStringInfo(&params, "%s$%d", i > 0 ? ", " : "", i + 1);
		}
		/* equal: at most it both ways, with the key's own operators (its index) */
		appendStringInfo(&sql, "ROW(%s) %s ROW(%s) AND ROW(%s) %s ROW(%s)", cols,
						 pass->keyset.le, params.data, params.data, pass->keyset.le, cols);
	}
	else
	{
		types[0] = pass->keytype;
		values[0] = pass_key_from_text(pass, key);
		appendStringInfo(&sql, "%s %s $1", quote_identifier(pass->key), pass->key_eq);
	}
	appendStringInfo(&sql, " AND (\n%s\n) LIMIT 1", pass->predicate);
	if (SPI_execute_with_args(sql.data, nargs, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not look at key %s of backfill \"%s\"", key, pass->name);
	return SPI_processed > 0;
}

/*
 * What matches beyond the bound of a bounded pass that converged within
 * it, as the lane's role, at most DRIFT_BEYOND_LIMIT rows (a LIMIT, never
 * a full count): -1 when the pass is not bounded or its predicate is not
 * its proof.
 */
#define DRIFT_BEYOND_LIMIT 1000
static int64
count_beyond(Pass *pass)
{
	Oid			types[DECLARATION_MAX_KEY_COLUMNS] = {pass->keytype};
	Datum		values[DECLARATION_MAX_KEY_COLUMNS];
	int			nargs = 1;
	char	   *beyond;

	if (pass->bound == NULL || !pass->counted || OidIsValid(pass->pages_fn))
		return -1;
	if (pass->keyset.nkeys > 1)
	{
		beyond = keyset_bound_sql(&pass->keyset, true, 1);
		nargs = bound_params(pass, types, values);
	}
	else
	{
		beyond = psprintf("%s %s $1", quote_identifier(pass->key), pass->key_gt);
		values[0] = pass_key_from_text(pass, pass->bound);
	}
	if (SPI_execute_with_args(psprintf("SELECT pg_catalog.count(*) FROM (SELECT 1 FROM %s"
									   " WHERE %s AND (\n%s\n) LIMIT %d) beyond",
									   pass->relation, beyond,
									   pass->predicate, DRIFT_BEYOND_LIMIT),
							  nargs, types, values, NULL, true, 0) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not probe beyond the bound of backfill \"%s\"", pass->name);
	return catalog_getint64(0, 1);
}

/*
 * Convergence, as the declaring role: for a table the predicate is the
 * count; a pages source may declare a count function (none: 0).  A count
 * that is NULL or negative is an error, never "converged".
 */
static int64
count_remaining(Pass *pass)
{
	bool		isnull;
	int64		remaining;

	if (!pass->counted)
		return 0;				/* a revert without a predicate: the walk is the proof */
	/* a batch a crash left prepared on a worker is done: Citus commits it first */
	if (pass->citus_remote)
		citus_recover_prepared(pass->name);
	if (!OidIsValid(pass->pages_fn))
		return count_table_remaining(pass);
	if (!OidIsValid(pass->count_fn))
		return 0;
	if (!call_count_fn(pass, true))
		elog(ERROR, "could not count the rows left by backfill \"%s\"", pass->name);
	remaining = DatumGetInt64(catalog_getdatum(0, 1, &isnull));
	if (isnull || remaining < 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("count function of backfill \"%s\" answered %s", pass->name,
						isnull ? "NULL" : psprintf(INT64_FORMAT, remaining)),
				 errdetail("A count must be a whole number of rows still to do, zero or more."),
				 errhint("Fix the count function; the pass did not converge.")));
	return remaining;
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

/*
 * Every other row is done; failed rows were recorded and skipped: within
 * max_failed_rows the pass ends completed_with_failures, beyond it (rows
 * recorded by lanes at once, or before a crash) failed with BF018.
 */
static void
end_with_failed_rows(Pass *pass, int64 failed)
{
	char	   *message;

	pass_reread_max_failed_rows(pass);
	if (failed > pass->max_failed_rows)
	{
		message = psprintf("backfill \"%s\" has " INT64_FORMAT " row(s) that failed alone, more "
						   "than max_failed_rows (%d); backfill_failed_rows('%s') lists them",
						   pass->name, failed, pass->max_failed_rows, pass->name);
		(void) state_pass_end(pass->run_id, LEDGER_FAILED, -1,
							  unpack_sql_state(ERRCODE_BACKFILL_FAILED_ROWS), message, 0);
	}
	else
	{
		message = psprintf(INT64_FORMAT " row(s) failed alone and were skipped (max_failed_rows "
						   "%d); backfill_failed_rows('%s') lists them, backfill_retry('%s') "
						   "tries them again", failed, pass->max_failed_rows, pass->name,
						   pass->name);
		(void) state_pass_end(pass->run_id, LEDGER_COMPLETED_WITH_FAILURES, -1, NULL, message, 0);
	}
	ereport(LOG, (errmsg("backfill \"%s\" run " INT64_FORMAT " ended: %s",
						 pass->name, pass->run_id, message)));
}

/* the message and hint of a pass that ends stalled (BF006): what is true of it */
static char *
stalled_message(Pass *pass, int64 remaining, const char *key, const char **hint)
{
	if (key != NULL)
	{
		*hint = psprintf("The action does not fix the rows it is given: fix it, declare the "
						 "backfill again, and run it with backfill_run('%s', force => true).",
						 pass->name);
		return psprintf("backfill \"%s\" stalled: %lld rows still match the predicate after "
						"sweep %d; the row of key %s was given to the action and still "
						"matches (the action does not fix it)", pass->name,
						(long long) remaining, pass->sweep, key);
	}
	if (!pass->guarded && !OidIsValid(pass->pages_fn))
		*hint = psprintf("Its action is not guarded (guard => false, or a statement other than "
						 "an UPDATE or DELETE of its table): a sweep could do a row twice, so "
						 "it does not sweep; once the writers stop, backfill_run('%s', "
						 "force => true) starts a new pass.", pass->name);
	else
		*hint = "Rows may be written faster than the backfill fixes them, or the action may "
			"not fix every row it is given.";
	return psprintf("backfill \"%s\" stalled: %lld rows still match the predicate after the "
					"source was exhausted", pass->name, (long long) remaining);
}

/*
 * End the counted pass: completed, completed with the failed rows it
 * tolerates, or failed as stalled (BF006; key: the probe key a sweep left
 * matching, or NULL).  A pass that completed within its bound records
 * what matches beyond it (beyond >= 0), which backfill_status shows and
 * backfill_pending calls drift.
 */
static void
pass_end_counted(Pass *pass, int64 remaining, int64 beyond, const char *key)
{
	CatalogScope scope;
	int64		failed;

	catalog_enter(&scope);
	if (remaining > 0)
	{
		const char *hint;
		char	   *message = stalled_message(pass, remaining, key, &hint);

		(void) state_pass_end(pass->run_id, LEDGER_FAILED, -1,
							  unpack_sql_state(ERRCODE_BACKFILL_STALLED), message, remaining);
		ereport(LOG, (errmsg("%s", message), errhint("%s", hint)));
	}
	else if ((failed = exec_on_run(pass, "SELECT 1 FROM backfill.failed_row WHERE run_id = $1",
								   SPI_OK_SELECT)) > 0)
		end_with_failed_rows(pass, failed);
	else
	{
		(void) state_pass_end(pass->run_id, LEDGER_COMPLETED, -1, NULL, NULL, 0);
		if (beyond >= 0)
			state_pass_set_beyond(pass->run_id, beyond);
		if (beyond > 0)
			ereport(LOG, (errmsg("backfill \"%s\" run " INT64_FORMAT " completed; %s" INT64_FORMAT
								 " rows match beyond its bound %s", pass->name, pass->run_id,
								 beyond >= DRIFT_BEYOND_LIMIT ? "at least " : "", beyond,
								 pass->bound),
						  errdetail("They were written after the pass was planned: drift, for "
									"the watch or the next pass.")));
		else
			ereport(LOG, (errmsg("backfill \"%s\" run " INT64_FORMAT " completed",
								 pass->name, pass->run_id)));
	}
	catalog_leave(&scope);
}

/*
 * May a pass whose count found rows left within its bound sweep its
 * partitions again?  Only a pass over a table's keys (a plain table, a
 * partitioned table's leaves) whose action is guarded: a row it is given
 * twice is changed only while it matches, so a sweep does no row twice.
 * Not a pages source (no key range), not a Citus table (a shard's
 * checkpoint lives on its node), not a revert, not an unguarded action,
 * not a pass that recorded rows as failed alone (a sweep would record them
 * again), nor a catalog older than 0.6 (no run.sweep).
 */
static bool
pass_may_sweep(Pass *pass)
{
	CatalogScope scope;
	bool		shards = false;
	bool		recorded;

	if (!pass->guarded || !pass->counted || pass->reverting || pass->sweep < 0 ||
		OidIsValid(pass->pages_fn) || pass->citus_remote)
		return false;
	catalog_enter(&scope);
	shards = exec_on_run(pass, "SELECT 1 FROM backfill.partition WHERE run_id = $1"
							 " AND shard IS NOT NULL LIMIT 1", SPI_OK_SELECT) > 0;
	/* a sweep would give a row recorded as failed alone to the action again */
	recorded = exec_on_run(pass, "SELECT 1 FROM backfill.failed_row WHERE run_id = $1 LIMIT 1",
						   SPI_OK_SELECT) > 0;
	catalog_leave(&scope);
	return !shards && !recorded;
}

/*
 * A further sweep, with the ledger row locked: every partition back to its
 * start (cursor NULL: its lo), pending, its lease free; its rows and
 * batches kept (the ledger sums them); the run running again, its sweep
 * counted and the probe key (the smallest key left now) recorded.  The
 * lane goes on (more_leaves); the scheduler may start others.
 */
static void
pass_sweep_again(Pass *pass, int64 remaining)
{
	CatalogScope scope;
	char	   *probe = smallest_remaining_key(pass);

	catalog_enter(&scope);
	state_pass_swept(pass->run_id, probe, remaining);
	catalog_leave(&scope);
	backfill_wake_scheduler_at_commit();
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": %lld rows match within its bound "
					"behind the lanes' cursors; sweep %d from key %s", pass->name,
					pass->run_id, (long long) remaining, pass->sweep + 1,
					probe ? probe : "(none now)"),
			 errdetail("They were written while the pass ran; its action is guarded, so its "
					   "partitions are worked again from their start.")));
	pass->more_leaves = true;
}

/*
 * Rows left within the bound of a pass that may sweep: the probe key of
 * the last sweep still matching means the action does not fix what it is
 * given (STALLED, naming it); past PASS_MAX_SWEEPS the rows left are
 * drift, written while it swept (completed, recorded beyond the bound);
 * else another sweep.
 */
#define PASS_MAX_SWEEPS 3
static void
pass_sweep_or_end(Pass *pass, int64 remaining)
{
	int64		beyond;

	if (pass->sweep > 0 && pass->probe_key != NULL &&
		key_still_matches(pass, pass->probe_key))
		pass_end_counted(pass, remaining, -1, pass->probe_key);
	else if (pass->sweep < PASS_MAX_SWEEPS)
		pass_sweep_again(pass, remaining);
	else
	{
		beyond = count_beyond(pass);
		ereport(LOG,
				(errmsg("backfill \"%s\" run " INT64_FORMAT ": %lld rows were written within "
						"its bound while it swept %d times; they are left as drift",
						pass->name, pass->run_id, (long long) remaining, pass->sweep),
				 errdetail("The sweeps fixed every row they were given; the watch, finalize or "
						   "the next pass takes up the rest.")));
		pass_end_counted(pass, 0, remaining + Max(beyond, 0), NULL);
	}
}

/*
 * Once no partition is left to work on: count the rows that still match
 * the predicate and end the pass, completed or stalled, or sweep again.  Only one lane
 * gets to write the end; the others find the pass ended.
 */
void
pass_finish(Pass *pass)
{
	if (!pass_ready_to_count(pass))
		return;
	worker_begin_xact("pg_backfill lane: counting the rows left");
	if (lock_pass_to_count(pass))
	{
		int64		remaining = count_remaining(pass);

		if (!leaves_unchanged_since_count(pass))
			pass_count_again(pass);
		else if (remaining > 0 && pass_may_sweep(pass))
			pass_sweep_or_end(pass, remaining);
		else
			pass_end_counted(pass, remaining, remaining == 0 ? count_beyond(pass) : -1, NULL);
	}
	worker_commit_xact();
}
