/*-------------------------------------------------------------------------
 *
 * citus.c
 *	  Tables of Citus, the distributed engine for PostgreSQL: what kind a
 *	  relation is, what is refused for it, and how a coordinator-side
 *	  batch over one keeps exactly once.
 *
 * Citus is optional.  Nothing here runs unless the citus extension is
 * installed in the database (get_extension_oid), and nothing of Citus is
 * ever created: its metadata (pg_catalog.pg_dist_partition, pg_dist_shard,
 * pg_dist_local_group) is read with qualified names as the extension's
 * owner (catalog.c).
 *
 * What is allowed, and why:
 *
 * - A shard table (t_102008 on a worker) is refused at declaration
 *   (BF030).  A pass over it runs locally and fast, but Citus may move the
 *   shard to another node mid-pass (citus_move_shard_placement): the
 *   lane's later batches then write to the orphaned old placement, and the
 *   pass would still report success (measured: about 22,000 updates lost).
 *   Citus hides shards from pg_class queries (citus.override_table_
 *   visibility), not from the syscache, so a shard is found by its name:
 *   <table>_<shardid>, with a row in pg_dist_shard for that id whose table
 *   is in the same schema and names the prefix (Citus truncates a long
 *   name and adds a hash before the id: only a prefix is compared then).
 *   Without the metadata on this node (a worker whose metadata Citus does
 *   not sync) a shard cannot be told from a table, and is not refused.
 *
 * - A distributed or reference table is declared and run on the
 *   coordinator only (BF031 elsewhere): a worker with synced metadata can
 *   run distributed queries too, but its backfill catalogs are its own,
 *   and nothing would keep two nodes from running the same backfill.
 *
 * - On the coordinator, a pass that is not worked shard by shard runs
 *   coordinator-side:
 *   each batch's key scan and action are distributed queries, and its
 *   checkpoint is a row of the coordinator's own backfill.partition.  Citus
 *   commits a transaction that wrote over several connections with two-
 *   phase commit (transaction/transaction_management.c): PREPARE
 *   TRANSACTION on each worker, its gid recorded in pg_dist_transaction in
 *   the local transaction, the local commit, then COMMIT PREPARED; a
 *   prepared transaction left behind is committed or rolled back by
 *   Citus's recovery (the maintenance daemon, citus.recover_2pc_interval)
 *   as the local commit says.  So the batch's writes on the shards and its
 *   checkpoint commit together only if (a) two-phase commit is used: a
 *   write over a single connection (one shard: a single-shard table, or an
 *   action Citus routes to one shard) is committed on the worker in the
 *   local PRE_COMMIT, before the local commit, and a crash in between
 *   keeps the write and loses the checkpoint; and (b) the local commit
 *   reaches disk before COMMIT PREPARED is sent: a lane commits
 *   asynchronously, and a coordinator crash after COMMIT PREPARED but
 *   before its WAL flush would lose the checkpoint and the gid's record of
 *   a batch the worker has committed.  citus_fence_batch makes both hold
 *   for each batch of such a table: it asks Citus for two-phase commit
 *   (Use2PCForCoordinatedTransaction, the function Citus's own executor
 *   calls for a multi-shard write; looked up in citus.so: a Citus without
 *   it cannot run the pass) and makes the commit synchronous.
 *
 * - The estimate: the coordinator's planner knows nothing of the shards
 *   (Citus answers a fixed 100,000 rows), so the pass asks each shard's
 *   own planner, on the node that holds it (run_command_on_shards with
 *   backfill.estimate_rows), and sums.
 *
 * A distributed table's pass whose batches can run on the shards' own
 * nodes is not coordinator-side at all: it is planned shard by shard and
 * each batch is a local transaction on the shard's node (shards.c, and
 * src/sql/shard.c on the worker).  What is here serves the rest: reference
 * tables, and the passes shards.c says why it leaves to the coordinator.
 *
 * What was measured (Citus 12.1.9, PostgreSQL 15, coordinator and two
 * workers on loopback) and what is assumed is in test/t/160_citus.pl and
 * doc/multinode.md.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/nodeFuncs.h"
#include "parser/parser.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"

#include "catalog.h"
#include "errors.h"
#include "citus.h"

/* Citus's requests for a coordinated and for a two-phase transaction */
typedef void (*CitusRequest) (void);
static CitusRequest use_coordinated = NULL;
static CitusRequest use_2pc = NULL;

bool
citus_installed(void)
{
	return OidIsValid(get_extension_oid("citus", true));
}

/* the id a shard's name ends with (_<digits>), or 0 */
static int64
shardid_of_name(const char *relname)
{
	const char *underscore = strrchr(relname, '_');
	int64		id = 0;

	if (underscore == NULL || underscore[1] == '\0')
		return 0;
	for (const char *p = underscore + 1; *p; p++)
	{
		if (*p < '0' || *p > '9' || id > PG_INT64_MAX / 10 - 10)
			return 0;
		id = id * 10 + (*p - '0');
	}
	return id;
}

/*
 * Is relid the shard shardid of table (same schema, its name the table's
 * with _<shardid>, or a prefix of it when Citus truncated a long name)?
 */
static bool
name_is_shard_of(Oid relid, Oid table, int64 shardid)
{
	const char *relname = get_rel_name(relid);
	const char *tabname = get_rel_name(table);
	char	   *suffix = psprintf("_" INT64_FORMAT, shardid);
	size_t		prefix_len = strlen(relname) - strlen(suffix);

	if (tabname == NULL || get_rel_namespace(relid) != get_rel_namespace(table))
		return false;
	if (strlen(tabname) == prefix_len && strncmp(relname, tabname, prefix_len) == 0)
		return true;
	/* a truncated name: <prefix of the table's>_<hash>_<shardid> */
	return strlen(tabname) + strlen(suffix) >= NAMEDATALEN - 1 &&
		strncmp(relname, tabname, Min(prefix_len, NAMEDATALEN / 2)) == 0;
}

/* the shard relid is, from pg_dist_shard by the id its name ends with */
static bool
describe_shard(Oid relid, CitusTable *table)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1];
	int64		shardid = shardid_of_name(get_rel_name(relid));
	Oid			logical;

	if (shardid == 0)
		return false;
	values[0] = Int64GetDatum(shardid);
	catalog_exec("SELECT s.logicalrelid::pg_catalog.oid FROM pg_catalog.pg_dist_shard s"
				 " WHERE s.shardid = $1", 1, types, values, NULL, SPI_OK_SELECT);
	if (SPI_processed != 1)
		return false;
	logical = catalog_getoid(0, 1);
	if (logical == relid || !name_is_shard_of(relid, logical, shardid))
		return false;
	table->kind = CITUS_SHARD;
	table->table = logical;
	table->shardid = shardid;
	return true;
}

/*
 * What Citus makes of relid.  A table in pg_dist_partition: hash, range or
 * append distributed ('h', 'r', 'a'), or without a distribution column
 * ('n'): a reference table (replicated, 't'), a single-shard distributed
 * table (colocated), or a Citus local table.
 */
void
citus_describe(Oid relid, CitusTable *table)
{
	CatalogScope scope;
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(relid)};

	memset(table, 0, sizeof(*table));
	if (!citus_installed())
		return;
	catalog_enter(&scope);
	catalog_exec("SELECT coalesce((SELECT g.groupid FROM pg_catalog.pg_dist_local_group g"
				 "                 LIMIT 1), 0)::pg_catalog.int8", 0, NULL, NULL, NULL,
				 SPI_OK_SELECT);
	table->group = (int) catalog_getint64(0, 1);
	catalog_exec("SELECT CASE WHEN p.partmethod OPERATOR(pg_catalog.<>) 'n' THEN 'd'"
				 "            WHEN p.repmodel OPERATOR(pg_catalog.=) 't' THEN 'r'"
				 "            WHEN p.colocationid OPERATOR(pg_catalog.<>) 0 THEN 'd'"
				 "            ELSE 'l' END"
				 "  FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = $1",
				 1, types, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 1)
	{
		char	   *kind = catalog_gettext(0, 1);

		table->kind = kind[0] == 'd' ? CITUS_DISTRIBUTED :
			kind[0] == 'r' ? CITUS_REFERENCE : CITUS_LOCAL;
	}
	else
		(void) describe_shard(relid, table);
	catalog_leave(&scope);
}

char *
citus_refusal(const char *name, Oid relid, int *sqlerrcode)
{
	CitusTable	t;

	citus_describe(relid, &t);
	if (t.kind == CITUS_SHARD)
	{
		*sqlerrcode = ERRCODE_BACKFILL_CITUS_SHARD;
		return psprintf("backfill \"%s\" may not rewrite \"%s\": it is shard " INT64_FORMAT
						" of distributed table %s", name, get_rel_name(relid), t.shardid,
						quote_qualified_identifier(get_namespace_name(get_rel_namespace(t.table)),
												   get_rel_name(t.table)));
	}
	if ((t.kind == CITUS_DISTRIBUTED || t.kind == CITUS_REFERENCE) && t.group != 0)
	{
		*sqlerrcode = ERRCODE_BACKFILL_CITUS_NODE;
		return psprintf("backfill \"%s\" over Citus table \"%s\" may run on the coordinator only",
						name, get_rel_name(relid));
	}
	return NULL;
}

void
citus_check_declarable(const char *name, Oid relid)
{
	CitusTable	t;
	char	   *table;

	citus_describe(relid, &t);
	if (t.kind == CITUS_SHARD)
	{
		table = quote_qualified_identifier(get_namespace_name(get_rel_namespace(t.table)),
										   get_rel_name(t.table));
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CITUS_SHARD),
				 errmsg("backfill \"%s\" may not rewrite shard \"%s\"", name,
						get_rel_name(relid)),
				 errdetail("\"%s\" is shard " INT64_FORMAT " of Citus distributed table %s. "
						   "Citus may move a shard to another node while a pass runs, and "
						   "the pass's later batches would then write to the old placement "
						   "and be lost.", get_rel_name(relid), t.shardid, table),
				 errhint("Declare the backfill on the Citus coordinator, against %s.",
						 table)));
	}
	if ((t.kind == CITUS_DISTRIBUTED || t.kind == CITUS_REFERENCE) && t.group != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_CITUS_NODE),
				 errmsg("backfill \"%s\" over Citus table \"%s\" may be declared and run on "
						"the coordinator only", name, get_rel_name(relid)),
				 errdetail("This node is a Citus worker (group %d); its backfill catalogs "
						   "are its own, and nothing would keep the coordinator from running "
						   "the same backfill.", t.group),
				 errhint("Connect to the Citus coordinator and declare it there.")));
}

bool
citus_writes_elsewhere(Oid relid)
{
	CitusTable	t;

	citus_describe(relid, &t);
	return t.kind == CITUS_DISTRIBUTED || t.kind == CITUS_REFERENCE;
}

/*
 * A function of citus.so, by name, once per process: the two requests
 * citus_fence_batch makes are what Citus's own executor calls for a
 * statement in a transaction block and for a multi-shard write.
 */
static CitusRequest
citus_function(CitusRequest *cache, const char *funcname)
{
	if (*cache == NULL)
		*cache = (CitusRequest) load_external_function("$libdir/citus", funcname, false,
														NULL);
	if (*cache == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("this Citus has no function %s", funcname),
				 errdetail("Without it a batch that writes to one worker would commit there "
						   "before its checkpoint commits on the coordinator."),
				 errhint("Use Citus 11.0 to 13.x.")));
	return *cache;
}

/*
 * At the start of a batch transaction over a distributed or reference
 * table (see the header).  A lane's transaction is no transaction block,
 * so Citus would run a statement that touches one shard in autocommit on
 * its worker (measured: each UPDATE of a one-shard table committed there
 * as it ended, before the checkpoint): the batch becomes a coordinated
 * transaction (every remote statement inside BEGIN on its worker), to be
 * committed with two-phase commit on every worker it wrote to, and the
 * local commit, which records the prepared transactions and holds the
 * checkpoint, waits for disk before Citus sends COMMIT PREPARED
 * (measured without it: a lane killed with SIGKILL or the coordinator
 * stopped with -m immediate left batches done on the shards whose
 * checkpoints were lost, 200 and 600 rows the ledger never counted).
 */
void
citus_fence_batch(void)
{
	citus_function(&use_coordinated, "UseCoordinatedTransaction") ();
	citus_function(&use_2pc, "Use2PCForCoordinatedTransaction") ();
	(void) set_config_option("synchronous_commit", "on", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * Ask Citus to resolve the prepared transactions a crash left on the
 * workers now, instead of at its maintenance daemon's next round
 * (citus.recover_2pc_interval, a minute by default): a batch whose local
 * commit (and checkpoint) went through while a worker was down is
 * committed there only by this recovery, and until then its rows are
 * locked and still read as not done.  So a lane asks before it retries a
 * failed batch and before the convergence count.  As the extension's
 * owner (Citus lets no one else), in a subtransaction: a worker still
 * down is logged, and the caller goes on; it waits at most two seconds
 * for a worker's connection (measured: a lane waited Citus's default 30 s,
 * twice, for a worker that was starting again).
 */
void
citus_recover_prepared(const char *name)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	CatalogScope scope;

	BeginInternalSubTransaction(NULL);
	PG_TRY();
	{
		catalog_enter(&scope);
		/* a worker still down costs two seconds, not Citus's 30 (undone by catalog_leave) */
		catalog_exec("SELECT pg_catalog.set_config('citus.node_connection_timeout', '2000', true)",
					 0, NULL, NULL, NULL, SPI_OK_SELECT);
		catalog_exec("SELECT pg_catalog.recover_prepared_transactions()", 0, NULL, NULL, NULL,
					 SPI_OK_SELECT);
		catalog_leave(&scope);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		ereport(LOG,
				(errmsg("backfill \"%s\" could not have Citus recover its prepared "
						"transactions: %s", name, edata->message)));
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
}

bool
citus_estimate_rows(Oid relid, const char *predicate, int64 *estimate, int *shards,
					int *sampled)
{
	Oid			types[2] = {OIDOID, TEXTOID};
	Datum		values[2] = {ObjectIdGetDatum(relid), CStringGetTextDatum(predicate)};
	bool		isnull;
	Datum		d;

	/* (before 0.6 the function has no column sampled: every shard by its planner) */
	*sampled = 0;
	if (SPI_execute_with_args("SELECT * FROM backfill.citus_estimate_rows($1, $2)",
							  2, types, values, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		return false;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return false;
	*estimate = DatumGetInt64(d);
	*shards = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2,
										  &isnull));
	if (SPI_tuptable->tupdesc->natts >= 3)
	{
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
		*sampled = isnull ? 0 : DatumGetInt32(d);
	}
	return true;
}

/* ---- a distributed table's pass shard by shard: its plan (shards.c runs it) ---- */

/* what a query tree reaches: its relations, and a function of a user's (or InvalidOid) */
typedef struct SqlReach
{
	List	   *relids;
	Oid			user_function;
} SqlReach;

/* a function outside pg_catalog (it may read any table, as a distributed query on a worker) */
static bool
user_function_checker(Oid func, void *context)
{
	SqlReach   *reach = (SqlReach *) context;

	if (get_func_namespace(func) != PG_CATALOG_NAMESPACE && !OidIsValid(reach->user_function))
		reach->user_function = func;
	return false;
}

static bool
reach_walker(Node *node, SqlReach *reach)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblEntry))
	{
		RangeTblEntry *rte = (RangeTblEntry *) node;

		if (rte->rtekind == RTE_RELATION)
			reach->relids = list_append_unique_oid(reach->relids, rte->relid);
		return false;
	}
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, reach_walker, reach, QTW_EXAMINE_RTES_BEFORE);
	(void) check_functions_in_node(node, user_function_checker, reach);
	return expression_tree_walker(node, reach_walker, reach);
}

/* what sql reaches once rewritten (views expanded), parsed as the current role */
static void
sql_reach(const char *sql, int nparams, Oid *types, SqlReach *reach)
{
	ListCell   *lc;

	foreach(lc, raw_parser(sql, RAW_PARSE_DEFAULT))
	{
		List	   *queries = pg_analyze_and_rewrite_fixedparams(lfirst_node(RawStmt, lc), sql,
																 types, nparams, NULL);
		ListCell   *q;

		foreach(q, queries)
			(void) reach_walker((Node *) lfirst(q), reach);
	}
}

/*
 * Why the action and the predicate cannot run on a shard's node alone, or
 * NULL: they read another table than relid (another Citus table, or one of
 * the coordinator's: on a worker that name is another table, or none), or
 * call a function of a user's (which may name the distributed table: on a
 * worker, a distributed query over every shard again).
 */
static char *
not_shard_local(Oid relid, const char *relation, const char *action, const char *predicate,
				Oid keytype)
{
	Oid			types[2] = {keytype, keytype};
	SqlReach	reach = {NIL, InvalidOid};
	ListCell   *lc;

	sql_reach(action, 2, types, &reach);
	sql_reach(psprintf("SELECT 1 FROM %s WHERE (%s)", relation, predicate), 0, NULL, &reach);
	foreach(lc, reach.relids)
	{
		CitusTable	other;
		char	   *name;

		if (lfirst_oid(lc) == relid || get_rel_namespace(lfirst_oid(lc)) == PG_CATALOG_NAMESPACE)
			continue;
		name = quote_qualified_identifier(get_namespace_name(get_rel_namespace(lfirst_oid(lc))),
										  get_rel_name(lfirst_oid(lc)));
		citus_describe(lfirst_oid(lc), &other);
		if (other.kind != CITUS_NONE)
			return psprintf("the action or predicate reads %s, another Citus table", name);
		/* a table of the coordinator's: on a worker the name is another table, or none */
		return psprintf("the action or predicate reads %s, a table of the coordinator only", name);
	}
	if (OidIsValid(reach.user_function))
		return psprintf("the action or predicate calls %s(), which would run on the workers",
						quote_qualified_identifier(get_namespace_name(get_func_namespace(reach.user_function)),
												   get_func_name(reach.user_function)));
	return NULL;
}

Datum
citus_plan_shards(Oid relid, const char *relation, const char *action, const char *predicate,
				  Oid keytype, const char **why)
{
	CatalogScope scope;
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(relid)};
	Datum		shards = (Datum) 0;
	bool		isnull = true;
	char	   *other = not_shard_local(relid, relation, action, predicate, keytype);

	if (other != NULL)
	{
		*why = other;
		return (Datum) 0;
	}
	catalog_enter(&scope);
	if (catalog_exec("SELECT pg_catalog.array_agg(s.shardid ORDER BY s.shardid)"
					 "  FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid = $1::pg_catalog.regclass",
					 1, types, values, NULL, SPI_OK_SELECT) == 1)
		shards = catalog_getdatum(0, 1, &isnull);
	if (!isnull)
		shards = SPI_datumTransfer(shards, false, -1);
	catalog_leave(&scope);
	if (isnull)
		*why = "no shards in pg_dist_shard";
	return isnull ? (Datum) 0 : shards;
}
