/*-------------------------------------------------------------------------
 *
 * shard.c
 *	  The worker's half of a Citus distributed table's pass shard by
 *	  shard: backfill.shard_checkpoint and backfill.shard_batch, which a
 *	  coordinator's lane calls on the node that holds a shard.
 *
 * A batch of a shard's partition is one local transaction on that node:
 * the fence against a move of the shard, the key scan and the action on the
 * shard table itself, and the partition's checkpoint, a row of
 * backfill.shard_cursor there.  So a crash of the worker keeps all of a
 * batch or none of it, exactly as a lane's batch on one server; the
 * coordinator's backfill.partition row only follows the worker's row (the
 * coordinator passes the cursor and rows it believes, and a row elsewhere
 * is returned instead of a batch: 'adopt').
 *
 * The fence.  Citus moves or splits a shard (citus_move_shard_placement,
 * shard_transfer.c; splits in shard_split.c) by blocking writes to it at
 * the cut-over: BlockWritesToShardList takes the shard's metadata lock in
 * ExclusiveLock on every node with metadata (an advisory lock in Citus's
 * lock space, by colocation group and shard index for a hash-distributed
 * table), waits for the new placement to catch up (or, moving with
 * block_writes, copies the shard under the lock), switches
 * pg_dist_placement and commits.  A batch takes the same lock in ShareLock
 * (through Citus's lock_shard_metadata) before anything else, then reads (in a
 * new snapshot) that the placement is still this node's group: a batch
 * either commits before the cut-over, and its writes are replicated to the
 * new placement, or sees the switch and fails with BF034, and its
 * partition goes on from the checkpoint on the shard's new node.
 *
 * The action names the distributed table: parse analysis of it is made to
 * read the shard table instead (the range table entries of that relation,
 * at the top level of the one statement only), so that Citus plans a local
 * statement.  The shard must have the table's columns (names and types);
 * where they sit at other attribute numbers (a shard Citus created after a
 * column of the table was dropped: a split's, a move's) the parsed action
 * is re-pointed at the shard's numbers (shardmap.c); a shard without them
 * fails its batches with BF035.
 *
 * Both functions run as the calling role (the lane's), with its
 * privileges; only the checkpoint row is written as the extension's owner:
 * the caller's own row (the role is part of its key), for a shard whose
 * table it may read.  Every name is looked up under the declaration's
 * search_path (pg_temp last, searchpath.c) or qualified: the session's (a role's or database's
 * setting on this node) never decides which table a batch writes.
 *
 *-------------------------------------------------------------------------
 */
#include "names.h"
#include "postgres.h"

#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "parser/analyze.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/varlena.h"

#include "catalog.h"
#include "citus.h"
#include "errors.h"
#include "keyset.h"
#include "searchpath.h"
#include "shardmap.h"
#include "worker.h"

PG_FUNCTION_INFO_V1(backfill_shard_checkpoint);
PG_FUNCTION_INFO_V1(backfill_shard_batch);

/* a partition's checkpoint row on this node */
typedef struct ShardRow
{
	bool		found;
	char	   *cursor;
	int64		rows;
} ShardRow;

/* the shard a batch works, and its table */
typedef struct ShardTarget
{
	int64		shardid;
	Oid			table;
	Oid			shard;
	char	   *shard_sql;		/* quoted, schema-qualified */
	AttrNumber	keyattno;
	Oid			keytype;
	ShardMap   *map;			/* its columns by the table's (shardmap.c) */
} ShardTarget;

/* the one parse analysis that reads the shard for its table (shard_parse_hook) */
static post_parse_analyze_hook_type prev_parse_hook = NULL;
static bool parse_hook_installed = false;
static Oid	swap_from = InvalidOid;	/* while a batch runs: its table, and its shard */
static Oid	swap_to = InvalidOid;
static bool swap_armed = false;	/* the next parse is the action's: swap the table */
static Oid	stray = InvalidOid;	/* a relation a parse named beside the shard */
static ShardMap *swap_map = NULL;	/* the shard's columns sit elsewhere: this map */
static const char *swap_sql = NULL;
static Query *swap_query = NULL;	/* the query level the walker is in */
static List *swap_queries = NIL;	/* the entries it pointed at the shard: query, */
static List *swap_rtis = NIL;	/* and index */

/*
 * Read, open or replace the caller's row of a partition, as the extension's
 * owner (the caller is part of the row's key).  for_update locks it until
 * the end of the transaction.
 */
static void
shard_row(Datum *args, const bool *argnull, const char *mode, bool for_update, ShardRow *row)
{
	CatalogScope scope;
	Oid			types[7] = {TEXTOID, INT8OID, INT4OID, INT8OID, TEXTOID, INT8OID, OIDOID};
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Oid			caller = GetUserId();

	memcpy(values, args, 6 * sizeof(Datum));
	nulls[4] = argnull[4] ? 'n' : ' ';
	values[6] = ObjectIdGetDatum(caller);
	catalog_enter(&scope);
	if (strcmp(mode, "open") == 0)
		catalog_exec("INSERT INTO backfill.shard_cursor (origin, run_id, part_no, shardid, owner,"
					 " cursor, rows) VALUES ($1, $2, $3, $4, $7, $5, $6)"
					 " ON CONFLICT (origin, run_id, part_no, owner) DO NOTHING",
					 7, types, values, nulls, SPI_OK_INSERT);
	/* the caller's own row: another role's under the same key is none of its business */
	row->found = catalog_exec(for_update || strcmp(mode, "replace") == 0 ?
							  "SELECT cursor, rows FROM backfill.shard_cursor"
							  " WHERE origin = $1 AND run_id = $2 AND part_no = $3 AND owner = $7"
							  "   FOR UPDATE" :
							  "SELECT cursor, rows FROM backfill.shard_cursor"
							  " WHERE origin = $1 AND run_id = $2 AND part_no = $3 AND owner = $7",
							  7, types, values, nulls, SPI_OK_SELECT) == 1;
	if (row->found)
	{
		row->cursor = catalog_gettext(0, 1);
		row->rows = catalog_getint64(0, 2);
	}
	if (strcmp(mode, "replace") == 0)
	{
		catalog_exec(row->found ?
					 "UPDATE backfill.shard_cursor SET cursor = $5, rows = $6, shardid = $4,"
					 " batches = batches + 1, updated_at = pg_catalog.now()"
					 " WHERE origin = $1 AND run_id = $2 AND part_no = $3 AND owner = $7" :
					 "INSERT INTO backfill.shard_cursor (origin, run_id, part_no, shardid, owner,"
					 " cursor, rows) VALUES ($1, $2, $3, $4, $7, $5, $6)",
					 7, types, values, nulls, row->found ? SPI_OK_UPDATE : SPI_OK_INSERT);
		row->found = true;
		row->cursor = argnull[4] ? NULL : TextDatumGetCString(args[4]);
		row->rows = DatumGetInt64(args[5]);
	}
	catalog_leave(&scope);
}

/* a (text, int8, ...) result of the row's cursor and rows, and one more column */
static Datum
shard_result(FunctionCallInfo fcinfo, const char *status, ShardRow *row, int64 keys,
			 bool found)
{
	TupleDesc	desc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	int			col = 0;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	desc = BlessTupleDesc(desc);
	if (status != NULL)
		values[col++] = CStringGetTextDatum(status);
	nulls[col] = row->cursor == NULL;
	values[col++] = row->cursor ? CStringGetTextDatum(row->cursor) : (Datum) 0;
	values[col++] = Int64GetDatum(row->rows);
	values[col++] = status != NULL ? Int64GetDatum(keys) : BoolGetDatum(found);
	return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}

/* No argument of function fn is null but those whose bit is set in nullable; the catalogs current. */
static void
check_args(FunctionCallInfo fcinfo, const char *fn, uint32 nullable)
{
	for (int i = 0; i < PG_NARGS(); i++)
		if (PG_ARGISNULL(i) && (nullable & (1U << i)) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SHARD_CHECKPOINT),
					 errmsg("argument %d of %s is null", i + 1, fn),
					 errhint("backfill.shard_checkpoint and backfill.shard_batch are called by "
							 "pg_backfill's lanes.")));
	check_catalog_current(NULL, NULL);
}

/*
 * Only a role that may read a shard's table keeps checkpoint rows for it.
 * may_be_gone: a shard no longer in pg_dist_shard (split) passes, for its
 * last checkpoint to be read (the caller's own row, nothing else).
 */
static void
check_shard_readable(int64 shardid, bool may_be_gone)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(shardid)};
	Oid			table = InvalidOid;

	catalog_enter(&scope);
	if (catalog_exec("SELECT s.logicalrelid::pg_catalog.oid FROM pg_catalog.pg_dist_shard s"
					 " WHERE s.shardid = $1", 1, types, values, NULL, SPI_OK_SELECT) == 1)
		table = catalog_getoid(0, 1);
	catalog_leave(&scope);
	/* a split shard's last checkpoint: the caller's own row, read once more */
	if (!OidIsValid(table) && may_be_gone)
		return;
	if (!OidIsValid(table))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SHARD_MOVED),
				 errmsg("shard " INT64_FORMAT " is not known on this node", shardid),
				 errhint("Nothing to do after a split: the lane gives the new shards partitions "
						 "that go on from its checkpoint.  After the table was dropped, start a "
						 "new pass with backfill_run(name, force => true).")));
	if (pg_class_aclcheck(table, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, get_rel_name(table));
}

/*
 * backfill.shard_checkpoint(origin, run_id, part_no, shardid, at_cursor,
 * at_rows, mode): 'read', 'open' or 'replace' the row.
 */
Datum
backfill_shard_checkpoint(PG_FUNCTION_ARGS)
{
	char	   *mode;
	ShardRow	row = {0};
	bool		argnull[6];
	Datum		args[6];
	bool		found;

	check_args(fcinfo, "backfill.shard_checkpoint", 1U << 4);
	mode = text_to_cstring(PG_GETARG_TEXT_PP(6));
	if (strcmp(mode, "read") != 0 && strcmp(mode, "open") != 0 && strcmp(mode, "replace") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown mode \"%s\" of backfill.shard_checkpoint", mode),
				 errhint("Use 'read', 'open' or 'replace'.")));
	for (int i = 0; i < 6; i++)
		argnull[i] = PG_ARGISNULL(i);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	check_shard_readable(PG_GETARG_INT64(3), strcmp(mode, "read") == 0);
	/* the coordinator records where the row is once this returns: durable first */
	(void) set_config_option("synchronous_commit", "on", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	for (int i = 0; i < 6; i++)
		args[i] = argnull[i] ? (Datum) 0 : PG_GETARG_DATUM(i);
	shard_row(args, argnull, mode, false, &row);
	found = row.found;
	SPI_finish();
	return shard_result(fcinfo, NULL, &row, 0, found);
}

/*
 * The shard table of shardid, which must be a shard of table: its name is
 * Citus's (shard_name), found in the table's schema.
 */
static void
shard_resolve(ShardTarget *t, const char *relation, const char *key)
{
	Oid			types[2] = {OIDOID, INT8OID};
	Datum		values[2];
	List	   *names;

	CatalogScope scope;
	char	   *name = NULL;

	t->table = RangeVarGetRelid(makeRangeVarFromNameList(textToQualifiedNameList(cstring_to_text(relation))),
								AccessShareLock, false);
	values[0] = ObjectIdGetDatum(t->table);
	values[1] = Int64GetDatum(t->shardid);
	/* the shard's name (Citus's: a long one truncated), in its table's schema */
	catalog_enter(&scope);
	if (catalog_exec("SELECT pg_catalog.shard_name(s.logicalrelid, s.shardid)"
					 "  FROM pg_catalog.pg_dist_shard s"
					 " WHERE s.shardid = $2 AND s.logicalrelid = $1::pg_catalog.regclass",
					 2, types, values, NULL, SPI_OK_SELECT) == 1)
		name = catalog_gettext(0, 1);
	catalog_leave(&scope);
	if (name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SHARD_MOVED),
				 errmsg("shard " INT64_FORMAT " of table %s is not known on this node",
						t->shardid, relation),
				 errhint("Nothing to do after a split: the lane gives the new shards partitions "
						 "that go on from its checkpoint.  After the table was dropped, start a "
						 "new pass with backfill_run(name, force => true).")));
	names = textToQualifiedNameList(cstring_to_text(name));
	t->shard = RangeVarGetRelid(makeRangeVar(get_namespace_name(get_rel_namespace(t->table)),
											 strVal(llast(names)), -1),
								RowExclusiveLock, true);
	t->keyattno = get_attnum(t->table, key);
	if (t->keyattno == InvalidAttrNumber)
		elog(ERROR, "column \"%s\" of %s does not exist", key, relation);
	t->keytype = get_atttype(t->table, t->keyattno);
}

/*
 * The fence: the shard's metadata lock in ShareLock (a move's cut-over
 * holds it in ExclusiveLock), then, in a new snapshot, its placement on
 * this node's group.  The lock is Citus's own, taken by Citus's
 * lock_shard_metadata (its tag depends on the table: a hash-distributed
 * table's shards lock by colocation group and shard index), which only the
 * table's owner may call: it is called as the extension's owner, once the
 * caller has shown it may read the table.
 */
static void
shard_fence(ShardTarget *t, const char *relation)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1];
	bool		placed;

	if (pg_class_aclcheck(t->table, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, get_rel_name(t->table));
	values[0] = Int64GetDatum(t->shardid);
	catalog_enter(&scope);
	catalog_exec("SELECT pg_catalog.lock_shard_metadata(5, ARRAY[$1]::pg_catalog.int8[])",
				 1, types, values, NULL, SPI_OK_SELECT);

	/*
	 * The placement row FOR SHARE: the move changes it on this node in a
	 * prepared transaction of its own, which may still be uncommitted when
	 * the lock above is already free; the row lock waits for it, and reads
	 * the row as it committed.
	 */
	placed = OidIsValid(t->shard) &&
		catalog_exec("SELECT 1 FROM pg_catalog.pg_dist_placement p"
					 " WHERE p.shardid = $1"
					 "   AND p.groupid = (SELECT g.groupid FROM pg_catalog.pg_dist_local_group g)"
					 "   FOR SHARE OF p", 1, types, values, NULL, SPI_OK_SELECT) == 1;
	catalog_leave(&scope);
	if (!placed)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SHARD_MOVED),
				 errmsg("shard " INT64_FORMAT " of table %s is no longer placed on this node",
						t->shardid, relation),
				 errdetail("Citus moved or split it; no batch writes to an old placement."),
				 errhint("Nothing to do: the partition goes on from its checkpoint on the "
						 "shard's new node.")));
	t->shard_sql = quote_qualified_identifier(get_namespace_name(get_rel_namespace(t->shard)),
											  get_rel_name(t->shard));
}

/* the index of a range table entry in its query's range table */
static int
rte_index(Query *query, RangeTblEntry *rte)
{
	ListCell   *lc;

	foreach(lc, query->rtable)
		if (lfirst(lc) == rte)
			return foreach_current_index(lc) + 1;
	elog(ERROR, "a range table entry of the action is not in its query's range table");
	return 0;
}

/*
 * Point every range table entry of the table at the shard, in this query
 * and below; where the shard's columns sit elsewhere, note each one.
 */
static bool
swap_relation_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblEntry))
	{
		RangeTblEntry *rte = (RangeTblEntry *) node;

		if (rte->rtekind != RTE_RELATION || rte->relid == swap_to)
			return false;
		if (swap_armed && rte->relid == swap_from)
		{
			rte->relid = swap_to;
			/* its attribute numbers, once the walk is over (shardmap.c) */
			if (swap_map != NULL && swap_map->moved)
			{
				swap_queries = lappend(swap_queries, swap_query);
				swap_rtis = lappend_int(swap_rtis, rte_index(swap_query, rte));
			}
		}
		else if (get_rel_namespace(rte->relid) != PG_CATALOG_NAMESPACE && !OidIsValid(stray))
			stray = rte->relid;
		return false;
	}
	if (IsA(node, Query))
	{
		Query	   *outer = swap_query;
		bool		r;
#if PG_VERSION_NUM >= 160000
		ListCell   *lc;

		foreach(lc, ((Query *) node)->rteperminfos)
		{
			RTEPermissionInfo *perm = lfirst_node(RTEPermissionInfo, lc);

			if (swap_armed && perm->relid == swap_from)
				perm->relid = swap_to;
		}
#endif
		swap_query = (Query *) node;
		r = query_tree_walker((Query *) node, swap_relation_walker, context,
							  QTW_EXAMINE_RTES_BEFORE);
		swap_query = outer;
		return r;
	}
	return expression_tree_walker(node, swap_relation_walker, context);
}

/*
 * The parse analysis hook, while a batch runs: the action's statement has
 * its table pointed at the shard; any statement parsed meanwhile (the key
 * scan, and whatever the predicate or the action reaches: a function's
 * body, a domain's CHECK, a query string) may name only the shard and
 * pg_catalog.  Anything else is refused before it runs (BF037): the table
 * there is a distributed query again (its rows once per shard), and another
 * name is whatever this node's search_path finds (a "$user" schema another
 * role created here).
 */
static void
shard_parse_hook(ParseState *pstate, Query *query, JumbleState *jstate)
{
	if (OidIsValid(swap_from))
	{
		ListCell   *q;
		ListCell   *i;

		stray = InvalidOid;
		swap_queries = NIL;
		swap_rtis = NIL;
		(void) swap_relation_walker((Node *) query, NULL);
		swap_armed = false;
		/* the entries pointed at a shard whose columns sit elsewhere: its numbers */
		forboth(q, swap_queries, i, swap_rtis)
			shardmap_apply(lfirst(q), lfirst_int(i), swap_to, swap_map, swap_sql);
		if (OidIsValid(stray))
			ereport(ERROR,
					(errcode(ERRCODE_BACKFILL_SHARD_REACH),
					 errmsg("a batch of shard %s reaches %s on this node",
							get_rel_name(swap_to),
							quote_qualified_identifier(get_namespace_name(get_rel_namespace(stray)),
													   get_rel_name(stray))),
					 errdetail("On a Citus worker the backfill's SQL may name only its table; "
							   "through a function, a domain or a query string it named this "
							   "relation, or the node's search_path found another table of "
							   "that name."),
					 errhint("Run the backfill coordinator-side: set backfill.citus_per_shard to "
							 "off and start a new pass with backfill_run(name, force => true); "
							 "qualify the table's name in the action.")));
	}
	if (prev_parse_hook)
		prev_parse_hook(pstate, query, jstate);
}

/* Watch every parse while fn runs with its arguments (the batch's SQL), then stop. */
static void
shard_guarded(ShardTarget *t, void (*fn) (void *), void *arg)
{
	if (!parse_hook_installed)
	{
		prev_parse_hook = post_parse_analyze_hook;
		post_parse_analyze_hook = shard_parse_hook;
		parse_hook_installed = true;
	}
	swap_from = t->table;
	swap_to = t->shard;
	swap_map = t->map;
	swap_sql = t->shard_sql;
	PG_TRY();
	{
		fn(arg);
	}
	PG_FINALLY();
	{
		swap_from = InvalidOid;
		swap_armed = false;
		swap_map = NULL;
	}
	PG_END_TRY();
}

/* Run the action on the shard ($1, $2 the first and last key), as the caller. */
static void
shard_action(ShardTarget *t, const char *action, Datum *range)
{
	Oid			types[2] = {t->keytype, t->keytype};
	int			rc;

	swap_armed = true;
	rc = SPI_execute_with_args(action, 2, types, range, NULL, false, 0);
	swap_armed = false;
	if (rc < 0)
		elog(ERROR, "action on shard %s failed: %s", t->shard_sql, SPI_result_code_string(rc));
}

/*
 * The batch's keys in the shard: after the cursor, up to hi, matching the
 * predicate, in key order; range gets the first and the last.
 */
static uint64
shard_key_scan(ShardTarget *t, const char *cursor, const char *hi, int limit,
			   const char *predicate, Datum *range)
{
	const char *key = quote_identifier(get_attname(t->table, t->keyattno, false));
	Oid			input;
	Oid			ioparam;
	Oid			types[3] = {INT8OID, t->keytype, t->keytype};
	Datum		values[3];
	char		nulls[3] = {' ', cursor ? ' ' : 'n', hi ? ' ' : 'n'};
	char	   *sql;
	bool		isnull;

	getTypeInputInfo(t->keytype, &input, &ioparam);
	values[0] = Int64GetDatum(limit);
	values[1] = cursor ? worker_key_input(input, cursor, ioparam) : (Datum) 0;
	values[2] = hi ? worker_key_input(input, hi, ioparam) : (Datum) 0;
	sql = psprintf("SELECT %s FROM %s WHERE ($2 IS NULL OR %s %s $2) AND ($3 IS NULL OR %s %s $3)"
				   " AND (%s) ORDER BY %s LIMIT $1",
				   key, t->shard_sql, key, keyset_operator(t->keytype, BTGreaterStrategyNumber),
				   key, keyset_operator(t->keytype, BTLessEqualStrategyNumber), predicate, key);
	if (SPI_execute_with_args(sql, 3, types, values, nulls, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "key scan of shard %s failed", t->shard_sql);
	if (SPI_processed == 0)
		return 0;
	range[0] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	range[1] = SPI_getbinval(SPI_tuptable->vals[SPI_processed - 1], SPI_tuptable->tupdesc, 1,
							 &isnull);
	return SPI_processed;
}

/* a batch's key scan and action, run under the parse guard (shard_guarded) */
typedef struct ShardWork
{
	ShardTarget *t;
	const char *cursor;
	const char *hi;
	int			limit;
	const char *predicate;
	const char *action;
	Datum	   *range;
	uint64		nkeys;
} ShardWork;

static void
shard_work(void *arg)
{
	ShardWork  *w = (ShardWork *) arg;

	w->nkeys = shard_key_scan(w->t, w->cursor, w->hi, w->limit, w->predicate, w->range);
	if (w->nkeys > 0)
		shard_action(w->t, w->action, w->range);
}

/* The batch's own settings, for the rest of its transaction. */
static void
shard_batch_settings(const char *path, bool async_commit, int lock_timeout_ms)
{
	searchpath_apply(path, GUC_ACTION_LOCAL);
	(void) set_config_option("lock_timeout", psprintf("%d", lock_timeout_ms), PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	(void) set_config_option("synchronous_commit", async_commit ? "off" : "on", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * Where the WAL inserted so far ends, as a flush request may name it: a
 * position up to which every commit the coordinator has seen is in WAL.
 *
 * Not GetXLogInsertRecPtr() as it is: it names where the next record will
 * start, and when the last one ended exactly at the end of a WAL page that
 * is after the next page's header, on a page nobody has written yet
 * (XLogBytePosToRecPtr skips the header).  XLogFlush then cuts the request
 * back to the end of what was inserted (the page boundary), flushes that,
 * finds its request not met and fails: XX000 "xlog flush request ... is not
 * satisfied --- flushed only to ...", one batch in about every 8 kB / (WAL
 * per batch) at random.  This transaction's own last record (the row lock
 * of its checkpoint row, which assigned it an xid) ends after every commit
 * before it, and XactLastRecEnd is an end position (XLogBytePosToEndRecPtr:
 * at a boundary it names the boundary).  Without a record of its own, the
 * insert position is moved back from just past a page header to that
 * page's start, which is where the WAL inserted so far ends.
 */
static XLogRecPtr
shard_wal_end(void)
{
	XLogRecPtr	end = XactLastRecEnd;
	uint32		in_page;

	if (end != InvalidXLogRecPtr)
		return end;
	end = GetXLogInsertRecPtr();
	in_page = (uint32) (end % XLOG_BLCKSZ);
	if (in_page == (XLogSegmentOffset(end, wal_segment_size) < XLOG_BLCKSZ ?
					SizeOfXLogLongPHD : SizeOfXLogShortPHD))
		end -= in_page;
	return end;
}

/*
 * backfill.shard_batch(origin, run_id, part_no, shardid, relation, key,
 * at_cursor, at_rows, hi, batch_size, predicate, action, path,
 * async_commit, lock_timeout_ms): one batch of the shard's partition.
 */
Datum
backfill_shard_batch(PG_FUNCTION_ARGS)
{
	ShardTarget t = {0};
	ShardRow	row = {0};
	bool		argnull[6] = {false, false, false, false, PG_ARGISNULL(6), false};
	Datum		rowargs[6];
	char	   *relation;
	char	   *expected;
	char	   *hi;
	Datum		range[2];
	uint64		nkeys;
	Oid			output;
	bool		varlena;
	ShardWork	work;

	check_args(fcinfo, "backfill.shard_batch", (1U << 6) | (1U << 8));
	relation = text_to_cstring(PG_GETARG_TEXT_PP(4));
	expected = PG_ARGISNULL(6) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(6));
	hi = PG_ARGISNULL(8) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(8));
	t.shardid = PG_GETARG_INT64(3);
	rowargs[0] = PG_GETARG_DATUM(0);
	rowargs[1] = PG_GETARG_DATUM(1);
	rowargs[2] = PG_GETARG_DATUM(2);
	rowargs[3] = PG_GETARG_DATUM(3);
	rowargs[4] = PG_ARGISNULL(6) ? (Datum) 0 : PG_GETARG_DATUM(6);
	rowargs[5] = PG_GETARG_DATUM(7);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* the declaration's search_path before anything is looked up by name */
	shard_batch_settings(text_to_cstring(PG_GETARG_TEXT_PP(12)), PG_GETARG_BOOL(13),
						 PG_GETARG_INT32(14));
	shard_resolve(&t, relation, text_to_cstring(PG_GETARG_TEXT_PP(5)));
	shard_fence(&t, relation);
	/* the shard's columns by name: a split's new shards have no dropped column (BF035) */
	t.map = shardmap_build(t.table, t.shard, t.shard_sql, relation);
	shard_row(rowargs, argnull, "read", true, &row);
	if (!row.found)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SHARD_CHECKPOINT),
				 errmsg("run " INT64_FORMAT " partition %d has no checkpoint on this node",
						PG_GETARG_INT64(1), PG_GETARG_INT32(2)),
				 errhint("A lane opens it first (backfill.shard_checkpoint).")));
	if (!text_equal(row.cursor, expected) || row.rows != PG_GETARG_INT64(7))
	{
		SPI_finish();
		return shard_result(fcinfo, "adopt", &row, 0, true);
	}
	work.t = &t;
	work.cursor = expected;
	work.hi = hi;
	work.limit = PG_GETARG_INT32(9);
	work.predicate = text_to_cstring(PG_GETARG_TEXT_PP(10));
	work.action = text_to_cstring(PG_GETARG_TEXT_PP(11));
	work.range = range;
	shard_guarded(&t, shard_work, &work);
	nkeys = work.nkeys;
	if (nkeys == 0)
	{
		/*
		 * The partition's end is final on the coordinator: the earlier
		 * batches, committed without waiting for disk, must not be lost in
		 * a crash of this node after it (their rows would never be done).
		 */
		XLogFlush(shard_wal_end());
		SPI_finish();
		return shard_result(fcinfo, "done", &row, 0, true);
	}

	getTypeOutputInfo(t.keytype, &output, &varlena);
	rowargs[4] = CStringGetTextDatum(worker_key_output(output, range[1]));
	rowargs[5] = Int64GetDatum(row.rows + (int64) nkeys);
	argnull[4] = false;
	shard_row(rowargs, argnull, "replace", true, &row);
	SPI_finish();
	return shard_result(fcinfo, "batch", &row, (int64) nkeys, true);
}
