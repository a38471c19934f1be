/*-------------------------------------------------------------------------
 *
 * moves.c
 *	  A Citus shard move or split waits for the batches of a pass shard by
 *	  shard instead of failing: in any session of a server with
 *	  pg_backfill preloaded.
 *
 * Every batch of a pass shard by shard holds Citus's rebalance lock of its
 * table's colocation group (an advisory lock, class 13) in ShareLock, so
 * that no batch overlaps a move or split (shards.c).  Citus takes that
 * lock in ExclusiveLock without waiting, and fails at once when it is
 * held: with lanes that hold it back to back, a move retried by hand was
 * measured to need 194 tries over 32 s.
 *
 * So before a statement that calls citus_move_shard_placement (or
 * master_move_shard_placement, citus_copy_shard_placement,
 * citus_split_shard_by_split_points) starts, this session takes the same
 * lock in ExclusiveLock, waiting (for the batches that hold it: about one
 * batch; the session's lock_timeout applies).  A request of the lock that
 * conflicts with a waiting one queues behind it, and a batch asks for
 * the lock without waiting when it starts (shards_fence_moves), so no
 * batch starts meanwhile.  Citus's own request, later in the same transaction, is then
 * granted at once (the session holds the lock), and the lock is released
 * at the end of the transaction as Citus's is.  When another session holds
 * or awaits the lock in ExclusiveLock (another move), nothing waits: Citus
 * fails as it does without pg_backfill.
 *
 * Only a call in the statement's own target list (SELECT f(...)) whose
 * shard id is a constant or a parameter is seen; any other form runs as
 * Citus runs it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "storage/lock.h"
#include "utils/lsyscache.h"

#include "moves.h"

/* Citus's advisory lock class of a colocation group's moves (resource_lock.h) */
#define MOVES_REBALANCE_LOCK_CLASS 13

static ExecutorStart_hook_type prev_executor_start = NULL;

/* Does function fn move, copy or split a shard (its first argument the shard id)? */
static bool
moves_function(Oid fn)
{
	static const char *const names[] = {
		"citus_move_shard_placement", "master_move_shard_placement",
		"citus_copy_shard_placement", "citus_split_shard_by_split_points"
	};
	char	   *name;

	if (get_func_namespace(fn) != PG_CATALOG_NAMESPACE)
		return false;
	name = get_func_name(fn);
	for (int i = 0; name != NULL && i < lengthof(names); i++)
		if (strcmp(name, names[i]) == 0)
			return true;
	return false;
}

typedef struct MoveCall
{
	ParamListInfo params;
	int64		shardid;		/* 0: none found */
} MoveCall;

/* a call of a move function whose shard id is known before the statement runs */
static bool
find_move_call(Node *node, void *context)
{
	MoveCall   *call = (MoveCall *) context;

	if (node == NULL)
		return false;
	if (IsA(node, FuncExpr) && list_length(((FuncExpr *) node)->args) > 0 &&
		moves_function(((FuncExpr *) node)->funcid))
	{
		Node	   *arg = linitial(((FuncExpr *) node)->args);

		if (IsA(arg, Const) && !((Const *) arg)->constisnull &&
			((Const *) arg)->consttype == INT8OID)
			call->shardid = DatumGetInt64(((Const *) arg)->constvalue);
		else if (IsA(arg, Param) && ((Param *) arg)->paramkind == PARAM_EXTERN &&
				 ((Param *) arg)->paramtype == INT8OID && call->params != NULL &&
				 ((Param *) arg)->paramid > 0 &&
				 ((Param *) arg)->paramid <= call->params->numParams &&
				 call->params->paramFetch == NULL &&
				 !call->params->params[((Param *) arg)->paramid - 1].isnull)
			call->shardid = DatumGetInt64(call->params->params[((Param *) arg)->paramid - 1].value);
		if (call->shardid != 0)
			return true;
	}
	return expression_tree_walker(node, find_move_call, context);
}

/* the id Citus locks a shard's moves by: its colocation group's, or its table's */
static int64
move_lock_id(int64 shardid)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(shardid)};
	int64		id = 0;
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		return 0;
	if (SPI_execute_with_args("SELECT CASE WHEN d.colocationid <> 0"
							  "  THEN d.colocationid::pg_catalog.int8"
							  "  ELSE d.logicalrelid::pg_catalog.oid::pg_catalog.int8 END"
							  "  FROM pg_catalog.pg_dist_shard s"
							  "  JOIN pg_catalog.pg_dist_partition d ON d.logicalrelid = s.logicalrelid"
							  " WHERE s.shardid = $1",
							  1, types, values, NULL, true, 1) == SPI_OK_SELECT &&
		SPI_processed == 1)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			id = DatumGetInt64(d);
	}
	SPI_finish();
	return id;
}

/* Does another session hold or await the lock in ExclusiveLock (another move)? */
static bool
another_move(const LOCKTAG *tag)
{
	LockData   *data = GetLockStatusData();

	for (int i = 0; i < data->nelements; i++)
	{
		LockInstanceData *l = &data->locks[i];

		if (l->locktag.locktag_type != tag->locktag_type ||
			l->locktag.locktag_field1 != tag->locktag_field1 ||
			l->locktag.locktag_field2 != tag->locktag_field2 ||
			l->locktag.locktag_field3 != tag->locktag_field3 ||
			l->locktag.locktag_field4 != tag->locktag_field4 || l->pid == MyProcPid)
			continue;
		if ((l->holdMask & LOCKBIT_ON(ExclusiveLock)) != 0 || l->waitLockMode == ExclusiveLock)
			return true;
	}
	return false;
}

static void
moves_executor_start(QueryDesc *queryDesc, int eflags)
{
	Plan	   *plan = queryDesc->plannedstmt->planTree;

	/* SELECT f(...): a Result without an outer plan */
	if (queryDesc->operation == CMD_SELECT && plan != NULL && IsA(plan, Result) &&
		plan->lefttree == NULL && !(eflags & EXEC_FLAG_EXPLAIN_ONLY) && !RecoveryInProgress())
	{
		MoveCall	call = {queryDesc->params, 0};

		(void) expression_tree_walker((Node *) plan->targetlist, find_move_call, &call);
		if (call.shardid != 0)
		{
			int64		id = move_lock_id(call.shardid);
			LOCKTAG		tag;

			SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (id >> 32), (uint32) id,
								 MOVES_REBALANCE_LOCK_CLASS);
			if (id != 0 && LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL &&
				!another_move(&tag))
			{
				ereport(DEBUG1,
						(errmsg("waiting for the batches of colocation group " INT64_FORMAT
								" before moving shard " INT64_FORMAT, id, call.shardid)));
				(void) LockAcquire(&tag, ExclusiveLock, false, false);
			}
		}
	}
	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

void
moves_init(void)
{
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = moves_executor_start;
}
