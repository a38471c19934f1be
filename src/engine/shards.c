/*-------------------------------------------------------------------------
 *
 * shards.c
 *	  A Citus distributed table's pass shard by shard, from the
 *	  coordinator: each batch sent to the node that holds the partition's
 *	  shard, and the partition's checkpoint there.
 *
 * Work follows the data.  A coordinator-side batch of a distributed table
 * is a distributed transaction over every shard (citus.c); a shard's batch
 * is instead one local transaction on the node that holds the shard
 * (backfill.shard_batch, src/sql/shard.c), which also moves the partition's
 * checkpoint there: a row of that node's backfill.shard_cursor.  The lane
 * runs on the coordinator, holds the partition's lease as for any pass,
 * and calls the function over a connection of its own to that node, as its
 * role (the way Citus connects: the node's address from pg_dist_node, the
 * options of citus.node_conninfo).  Pause, cancel, retry and the reports
 * are the coordinator's, as for any pass.
 *
 * The node's row is the checkpoint that counts; the coordinator's
 * partition row follows it after each batch, in a transaction of the lane
 * that may be lost in a crash.  So every call passes the cursor and rows
 * the lane believes, and a node whose row says otherwise does nothing and
 * returns its own ('adopt'): a batch is never done twice, whichever side
 * crashed.  Before a partition's first batch (and after any failed one) the
 * lane reads the row where the shard is now: on the node that has the row
 * (shard_group), or, after Citus moved the shard, on its old node, whose
 * row is final (its batches are fenced against the move), and writes it to
 * the new node before it records the new node, synchronously, in the
 * coordinator's row.  A shard gone from pg_dist_shard was split: its
 * partition ends, and each shard that now covers its hash range gets a
 * partition that goes on from its last checkpoint (follow_split).
 *
 * Which passes (pass.c plan_per_shard, citus.c citus_plan_shards): a
 * distributed table (hash, range, append or single shard) with a key of
 * one column, not scoped, without settings or pages, with max_failed_rows
 * 0 (isolating a row that fails alone would move only the coordinator's
 * cursor), whose action and predicate read no other Citus table (they run
 * on the worker, against the shard), while backfill.citus_per_shard is on.
 * Any other pass of a Citus table is coordinator-side, and its plan_method
 * says why.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "libpq-fe.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "catalog.h"
#include "citus.h"
#include "errors.h"
#include "pacing.h"
#include "searchpath.h"
#include "shards.h"
#include "state.h"
#include "xact.h"

/* the lane's connections to the nodes that hold its shards */
#define SHARDS_MAX_NODES 64

/* Citus's advisory lock class of a colocation group's moves (resource_lock.h) */
#define CITUS_REBALANCE_LOCK_CLASS 13

typedef struct NodeConn
{
	int			group;
	PGconn	   *conn;
	char	   *where;			/* host:port, for messages */
	int			timeout_ms;		/* the statement_timeout set on it */
} NodeConn;

static NodeConn nodes[SHARDS_MAX_NODES];
static int	nnodes = 0;

/* ---- connections to the nodes ---- */

/* the node of a Citus group: its primary's address, from pg_dist_node */
static void
node_address(int group, char **host, char **port)
{
	CatalogScope scope;
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(group)};

	catalog_enter(&scope);
	if (catalog_exec("SELECT n.nodename, n.nodeport::pg_catalog.text FROM pg_catalog.pg_dist_node n"
					 " WHERE n.groupid = $1 AND n.noderole = 'primary' AND n.isactive"
					 " ORDER BY n.nodeid LIMIT 1", 1, types, values, NULL, SPI_OK_SELECT) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SHARD_MOVED),
				 errmsg("Citus group %d has no active primary node in pg_dist_node", group),
				 errhint("Add or activate the node (citus_activate_node); the partition is "
						 "retried.")));
	*host = MemoryContextStrdup(TopMemoryContext, catalog_gettext(0, 1));
	*port = MemoryContextStrdup(TopMemoryContext, catalog_gettext(0, 2));
	catalog_leave(&scope);
}

/*
 * The session on the node is the lane's role and nothing else (a role's or
 * database's setting there, role or session_authorization, would make it
 * another), and names nothing through the node's search_path settings:
 * backfill.shard_batch sets the declaration's for each batch.
 */
static void
node_check_identity(NodeConn *node)
{
	const char *params[1] = {GetUserNameFromId(GetUserId(), false)};
	PGresult   *res = PQexecParams(node->conn,
								   "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp',"
								   " false), current_user = $1 AND session_user = $1",
								   1, NULL, params, NULL, NULL, 0);
	bool		ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		strcmp(PQgetvalue(res, 0, 1), "t") == 0;

	PQclear(res);
	if (!ok)
	{
		PQfinish(node->conn);
		nnodes--;
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("the session on Citus node %s is not role \"%s\"", node->where,
						params[0]),
				 errdetail("A setting of the role or the database on that node (role, "
						   "session_authorization) made it another role, or the session failed."),
				 errhint("Remove the setting on that node (ALTER ROLE/DATABASE ... RESET role); "
						 "the batch is retried.")));
	}
}

/* Connect to the node of group as the current role, as Citus does. */
static NodeConn *
node_connect(int group)
{
	const char *keys[48];
	const char *vals[48];
	int			n = 0;
	char	   *host;
	char	   *port;
	const char *conninfo = GetConfigOption("citus.node_conninfo", true, false);
	PQconninfoOption *opts = NULL;
	NodeConn   *node;

	if (nnodes == SHARDS_MAX_NODES)
		elog(ERROR, "a lane of pg_backfill connects to at most %d Citus nodes", SHARDS_MAX_NODES);
	node_address(group, &host, &port);
	if (conninfo != NULL && conninfo[0] != '\0')
		opts = PQconninfoParse(conninfo, NULL);
	for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL && n < 40; o++)
		if (o->val != NULL && o->val[0] != '\0')
		{
			keys[n] = o->keyword;
			vals[n++] = o->val;
		}
	keys[n] = "host", vals[n++] = host;
	keys[n] = "port", vals[n++] = port;
	keys[n] = "dbname", vals[n++] = get_database_name(MyDatabaseId);
	keys[n] = "user", vals[n++] = GetUserNameFromId(GetUserId(), false);
	keys[n] = "application_name", vals[n++] = "pg_backfill lane";
	keys[n] = NULL, vals[n] = NULL;
	node = &nodes[nnodes];
	node->group = group;
	node->where = MemoryContextStrdup(TopMemoryContext, psprintf("%s:%s", host, port));
	node->timeout_ms = -1;
	node->conn = PQconnectdbParams(keys, vals, false);
	if (opts)
		PQconninfoFree(opts);
	if (PQstatus(node->conn) != CONNECTION_OK)
	{
		char	   *message = pchomp(PQerrorMessage(node->conn));

		PQfinish(node->conn);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("cannot connect to Citus node %s (group %d): %s", node->where, group,
						message),
				 errhint("The lane connects as its role, with citus.node_conninfo, as Citus "
						 "does; the batch is retried.")));
	}
	nnodes++;
	node_check_identity(node);
	return node;
}

/* Close a connection, cancelling what runs on it. */
static void
node_drop(NodeConn *node)
{
	PGcancel   *cancel = PQgetCancel(node->conn);
	char		errbuf[256];

	if (cancel != NULL && PQtransactionStatus(node->conn) == PQTRANS_ACTIVE)
		(void) PQcancel(cancel, errbuf, sizeof(errbuf));
	if (cancel != NULL)
		PQfreeCancel(cancel);
	PQfinish(node->conn);
	*node = nodes[--nnodes];
}

void
shards_disconnect(void)
{
	while (nnodes > 0)
		node_drop(&nodes[nnodes - 1]);
}

static NodeConn *
node_of(int group)
{
	for (int i = 0; i < nnodes; i++)
		if (nodes[i].group == group)
		{
			if (PQstatus(nodes[i].conn) == CONNECTION_OK)
				return &nodes[i];
			node_drop(&nodes[i]);
			break;
		}
	return node_connect(group);
}

/* Wait for the node's answer, interruptibly; the last result. */
static PGresult *
node_wait(NodeConn *node)
{
	PGresult   *last = NULL;
	PGresult   *res;

	for (;;)
	{
		while (PQisBusy(node->conn))
		{
			int			rc = WaitLatchOrSocket(MyLatch,
											   WL_LATCH_SET | WL_SOCKET_READABLE |
											   WL_EXIT_ON_PM_DEATH,
											   PQsocket(node->conn), -1L, PG_WAIT_EXTENSION);

			if (rc & WL_LATCH_SET)
				ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			if ((rc & WL_SOCKET_READABLE) && !PQconsumeInput(node->conn))
				break;
		}
		res = PQgetResult(node->conn);
		if (res == NULL)
			break;
		if (last)
			PQclear(last);
		last = res;
	}
	return last;
}

/* a field of the node's error, copied (NULL: none) */
static char *
node_error_field(PGresult *res, int field)
{
	char	   *value = res ? PQresultErrorField(res, field) : NULL;

	return value ? pstrdup(value) : NULL;
}

/*
 * Run sql on the node of group and return its one row (PQclear it); a
 * failure there is raised here with the node's SQLSTATE, message (the
 * backfill's name before it: the node does not know it), detail and hint.
 * A cancel or any error while waiting closes the connection.
 */
static PGresult *
node_query(const char *name, int group, const char *sql, int nparams, const char *const *params)
{
	NodeConn   *node = node_of(group);
	PGresult   *volatile res = NULL;
	char	   *message;
	char	   *detail;
	char	   *hint;
	char	   *where;
	const char *state;

	PG_TRY();
	{
		if (!PQsendQueryParams(node->conn, sql, nparams, NULL, params, NULL, NULL, 0))
			res = NULL;
		else
			res = node_wait(node);
	}
	PG_CATCH();
	{
		node_drop(node);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		return res;
	message = node_error_field(res, PG_DIAG_MESSAGE_PRIMARY);
	if (message == NULL)
		message = pchomp(res ? PQresultErrorMessage(res) : PQerrorMessage(node->conn));
	detail = node_error_field(res, PG_DIAG_MESSAGE_DETAIL);
	hint = node_error_field(res, PG_DIAG_MESSAGE_HINT);
	state = node_error_field(res, PG_DIAG_SQLSTATE);
	state = state ? state : "08006";
	where = node->where;		/* the slot goes with the connection */
	if (res)
		PQclear(res);
	if (PQstatus(node->conn) != CONNECTION_OK || PQtransactionStatus(node->conn) != PQTRANS_IDLE)
		node_drop(node);
	ereport(ERROR,
			(errcode(MAKE_SQLSTATE(state[0], state[1], state[2], state[3], state[4])),
			 errmsg("backfill \"%s\": %s", name, message),
			 detail ? errdetail("%s", detail) : 0,
			 hint ? errhint("%s", hint) : 0,
			 errcontext("a batch on Citus group %d (%s)", group, where)));
	return NULL;
}

/* the pass's batch_timeout as the connection's statement_timeout */
static void
node_set_timeout(Pass *pass, int group)
{
	NodeConn   *node = node_of(group);
	const char *params[1];
	PGresult   *res;

	if (node->timeout_ms == pass->batch_timeout_ms)
		return;
	params[0] = psprintf("%d", pass->batch_timeout_ms);
	res = node_query(pass->name, group,
					 "SELECT pg_catalog.set_config('statement_timeout', $1, false)", 1, params);
	PQclear(res);
	node->timeout_ms = pass->batch_timeout_ms;
}

/* ---- a shard partition's checkpoint and batches ---- */

static char *
origin_text(void)
{
	return psprintf(UINT64_FORMAT ":%u", GetSystemIdentifier(), MyDatabaseId);
}

/* the node's checkpoint row: read, open or replace (backfill.shard_checkpoint) */
static bool
node_checkpoint(Pass *pass, Claim *claim, int group, const char *mode, char **cursor,
				int64 *rows)
{
	const char *params[7];
	PGresult   *res;
	bool		found;

	params[0] = origin_text();
	params[1] = psprintf(INT64_FORMAT, claim->shard_run);
	params[2] = psprintf("%d", claim->part_no);
	params[3] = psprintf(INT64_FORMAT, claim->shardid);
	params[4] = *cursor;
	params[5] = psprintf(INT64_FORMAT, *rows);
	params[6] = mode;
	res = node_query(pass->name, group,
					 "SELECT cursor, rows, found FROM backfill.shard_checkpoint($1::pg_catalog.text,"
					 " $2::pg_catalog.int8, $3::pg_catalog.int4, $4::pg_catalog.int8,"
					 " $5::pg_catalog.text, $6::pg_catalog.int8, $7::pg_catalog.text)",
					 7, params);
	found = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
	*cursor = PQgetisnull(res, 0, 0) ? NULL : pstrdup(PQgetvalue(res, 0, 0));
	*rows = strtoi64(PQgetvalue(res, 0, 1), NULL, 10);
	PQclear(res);
	return found;
}

/* the Citus group that holds the shard now */
static int
shard_placement(Claim *claim)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(claim->shardid)};
	int			group = -1;
	bool		isnull;

	catalog_enter(&scope);
	if (catalog_exec_latest("SELECT p.groupid FROM pg_catalog.pg_dist_placement p"
							" WHERE p.shardid = $1 ORDER BY p.placementid LIMIT 1",
							1, types, values, NULL) == 1)
		group = DatumGetInt32(catalog_getdatum(0, 1, &isnull));
	catalog_leave(&scope);
	if (group < 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SHARD_MOVED),
				 errmsg("shard " INT64_FORMAT " has no placement in pg_dist_placement",
						claim->shardid),
				 errhint("The partition is retried; a split shard is followed once it is gone "
						 "from pg_dist_shard.")));
	return group;
}

/* the checkpoint of a partition lost on its node (restored from an older backup, say) */
static void
checkpoint_lost(Pass *pass, Claim *claim, int group)
{
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_SHARD_CHECKPOINT),
			 errmsg("backfill \"%s\": the checkpoint of partition %d (shard " INT64_FORMAT
					") is missing on Citus group %d", pass->name, claim->part_no,
					claim->shardid, group),
			 errhint("Start a new pass with backfill_run(name, force => true).")));
}

/* Record where the checkpoint lives now and what it says, synchronously. */
static void
mirror_open(Pass *pass, Claim *claim, int group, const char *cursor, int64 rows)
{
	CatalogScope scope;

	(void) set_config_option("synchronous_commit", "on", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	catalog_enter(&scope);
	if (!state_part_mirrored(pass->run_id, claim->part_no, group, cursor, rows, LANE_PID(),
							 LANE_START()))
		pass_lost_lease(pass, claim);
	catalog_leave(&scope);
}

/* ---- a shard split mid-pass ---- */

/* Is the shard gone from Citus's metadata (split, or its table dropped)? */
static bool
shard_gone(Claim *claim)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(claim->shardid)};
	bool		gone;

	catalog_enter(&scope);
	gone = catalog_exec_latest("SELECT 1 FROM pg_catalog.pg_dist_shard s WHERE s.shardid = $1",
							   1, types, values, NULL) == 0;
	catalog_leave(&scope);
	return gone;
}

/* a shard that now covers a piece of a split shard's hash range */
typedef struct SplitChild
{
	int64		shardid;
	int32		min;
	int32		max;
} SplitChild;

/*
 * The shards of the pass's table that cover [min, max] now, in hash order;
 * BF040 unless they cover exactly that range (a split makes them so).
 */
static int
split_children(Pass *pass, Claim *claim, int32 min, int32 max, SplitChild **out)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(pass->relid)};
	int			n;
	int			k = 0;
	int64		next = min;
	bool		covered = true;
	SplitChild *c;

	/* no split: the table itself is gone, dropped or replaced (alter_distributed_table) */
	if (catalog_exec_latest("SELECT 1 FROM pg_catalog.pg_dist_partition d"
							" WHERE d.logicalrelid = $1::pg_catalog.regclass",
							1, types, values, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
				 errmsg("backfill \"%s\": table %s is no longer the distributed table the pass "
						"started on", pass->name, pass->relation),
				 errdetail("Shard " INT64_FORMAT " of partition %d is gone from pg_dist_shard, "
						   "and so is the table (oid %u) from pg_dist_partition: it was dropped, "
						   "undistributed or replaced by a new table of its name "
						   "(alter_distributed_table).", claim->shardid, claim->part_no,
						   pass->relid),
				 errhint("Declare the backfill again if the table was replaced, then start a "
						 "new pass with backfill_run(name, force => true).")));
	n = catalog_exec_latest("SELECT s.shardid, s.shardminvalue, s.shardmaxvalue"
							"  FROM pg_catalog.pg_dist_shard s"
							"  JOIN pg_catalog.pg_dist_partition d ON d.logicalrelid = s.logicalrelid"
							" WHERE s.logicalrelid = $1::pg_catalog.regclass AND d.partmethod = 'h'",
							1, types, values, NULL);
	c = palloc0(sizeof(SplitChild) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		int32		lo = pg_strtoint32(catalog_gettext(i, 2));
		int32		hi = pg_strtoint32(catalog_gettext(i, 3));

		if (hi < min || lo > max)
			continue;
		if (lo < min || hi > max)
			covered = false;	/* reaches outside: a merge, or not this shard's range */
		c[k].shardid = catalog_getint64(i, 1);
		c[k].min = lo;
		c[k++].max = hi;
	}
	/* in hash order, each starting where the last ended */
	for (int i = 1; i < k; i++)
		for (int j = i; j > 0 && c[j].min < c[j - 1].min; j--)
		{
			SplitChild	t = c[j];

			c[j] = c[j - 1];
			c[j - 1] = t;
		}
	for (int i = 0; covered && i < k; i++)
	{
		covered = c[i].min == next;
		next = (int64) c[i].max + 1;
	}
	if (!covered || k == 0 || next != (int64) max + 1)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SHARD_SPLIT),
				 errmsg("backfill \"%s\": the shards of table %s no longer cover the hash range "
						"of shard " INT64_FORMAT " as a split would", pass->name, pass->relation,
						claim->shardid),
				 errdetail("Shard " INT64_FORMAT " (partition %d, hashes %d to %d) is gone from "
						   "pg_dist_shard, and %d shard%s of the table overlap its range without "
						   "covering exactly that range.", claim->shardid, claim->part_no, min,
						   max, k, k == 1 ? "" : "s"),
				 errhint("Start a new pass with backfill_run(name, force => true).")));
	*out = c;
	return k;
}

/* the parameters of a split's statements: $1 run, $2 part_no, $3..$10 (follow_split) */
/*
 * The split partition's hash range (min, max) and the first partition made
 * of it already (done again after a crash), or -1 when none is.
 */
static int
split_range(Pass *pass, Claim *claim, Oid *types, Datum *values, int32 *min, int32 *max)
{
	bool		isnull_min;
	bool		isnull_max;
	int			first = -1;

	catalog_exec("SELECT shard_min, shard_max, (SELECT min(c.part_no) FROM backfill.partition c"
				 "  WHERE c.run_id = p.run_id AND c.split_from = p.part_no)"
				 "  FROM backfill.partition p WHERE p.run_id = $1 AND p.part_no = $2",
				 2, types, values, NULL, SPI_OK_SELECT);
	{
		Datum		d = catalog_getdatum(0, 1, &isnull_min);
		bool		none;

		*min = isnull_min ? 0 : DatumGetInt32(d);
		d = catalog_getdatum(0, 2, &isnull_max);
		*max = isnull_max ? 0 : DatumGetInt32(d);
		d = catalog_getdatum(0, 3, &none);
		if (!none)
			first = DatumGetInt32(d);
	}
	if (isnull_min || isnull_max)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_SHARD_SPLIT),
				 errmsg("backfill \"%s\": shard " INT64_FORMAT " of partition %d is gone from "
						"pg_dist_shard, and the partition has no hash range to follow",
						pass->name, claim->shardid, claim->part_no),
				 errdetail("The table was dropped, or it is not hash-distributed, or the pass "
						   "was planned before pg_backfill 0.6 kept shards' hash ranges."),
				 errhint("Start a new pass with backfill_run(name, force => true).")));
	return first;
}

/* the old partition's final checkpoint, under its lease, synchronously */
static void
split_final_checkpoint(Pass *pass, Claim *claim, const char *cursor, int64 rows)
{
	(void) set_config_option("synchronous_commit", "on", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	if (!state_part_mirrored(pass->run_id, claim->part_no, -1, cursor, rows, LANE_PID(),
							 LANE_START()))
		pass_lost_lease(pass, claim);
}

/*
 * The claimed partition's shard was split: each shard that covers a piece
 * of its hash range gets a partition of its own, pending, whose cursor is
 * the split shard's checkpoint (final since the split's cut-over, which
 * fenced its batches off).  A row of the old shard is in exactly one new
 * shard (by the hash of its key), with the same key: the keys up to the
 * cursor were done in the old shard, and were copied done; those after it
 * are still to do there.  So no row is done twice, and none skipped.  The
 * new partitions and the old one's final checkpoint are written in one
 * synchronous transaction; the old partition then ends (done, with the
 * rows it did).  Done again after a crash, it finds its partitions made.
 */
static void
follow_split(Pass *pass, Claim *claim)
{
	CatalogScope scope;
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2];
	char	   *cursor = claim->cursor_text;
	int64		rows = claim->rows;
	SplitChild *child = NULL;
	int			nchildren;
	int32		min;
	int32		max;
	int			first;
	bool		isnull;

	/* the old shard's checkpoint, on the node that kept it */
	if (claim->shard_group >= 0 &&
		!node_checkpoint(pass, claim, claim->shard_group, "read", &cursor, &rows))
		checkpoint_lost(pass, claim, claim->shard_group);

	values[0] = Int64GetDatum(pass->run_id);
	values[1] = Int32GetDatum(claim->part_no);
	catalog_enter(&scope);
	first = split_range(pass, claim, types, values, &min, &max);
	if (first < 0)
	{
		nchildren = split_children(pass, claim, min, max, &child);
		/* numbered after every partition there is; the old one's lo, hi */
		for (int i = 0; i < nchildren; i++)
			state_part_split_child(pass->run_id, claim->part_no, cursor, child[i].shardid,
								   child[i].min, child[i].max);
		split_final_checkpoint(pass, claim, cursor, rows);
		catalog_exec("SELECT min(c.part_no) FROM backfill.partition c"
					 " WHERE c.run_id = $1 AND c.split_from = $2",
					 2, types, values, NULL, SPI_OK_SELECT);
		first = DatumGetInt32(catalog_getdatum(0, 1, &isnull));
	}
	catalog_leave(&scope);
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": shard " INT64_FORMAT " was split; "
					"partition %d goes on in partitions %d and after, one per new shard, from "
					"its checkpoint (%s)", pass->name, pass->run_id, claim->shardid,
					claim->part_no, first, cursor ? cursor : "the start")));
	claim->rows = rows;
}

bool
shards_open(Pass *pass, Claim *claim)
{
	int			group;
	char	   *cursor = claim->cursor_text;
	int64		rows = claim->rows;

	worker_begin_xact(psprintf("pg_backfill lane: backfill \"%s\" opening shard " INT64_FORMAT,
							   pass->name, claim->shardid));
	if (shard_gone(claim))
	{
		follow_split(pass, claim);
		worker_commit_xact();
		return false;
	}
	group = shard_placement(claim);
	if (claim->shard_group < 0)
		(void) node_checkpoint(pass, claim, group, "open", &cursor, &rows);
	else if (claim->shard_group == group)
	{
		if (!node_checkpoint(pass, claim, group, "read", &cursor, &rows))
			checkpoint_lost(pass, claim, group);
	}
	else
	{
		/* moved: the old node's row is final, its batches fenced off since the cut-over */
		if (!node_checkpoint(pass, claim, claim->shard_group, "read", &cursor, &rows))
			checkpoint_lost(pass, claim, claim->shard_group);
		ereport(LOG,
				(errmsg("backfill \"%s\" run " INT64_FORMAT ": shard " INT64_FORMAT
						" moved from Citus group %d to %d; partition %d goes on from its "
						"checkpoint there", pass->name, pass->run_id, claim->shardid,
						claim->shard_group, group, claim->part_no)));
		(void) node_checkpoint(pass, claim, group, "replace", &cursor, &rows);
	}
	mirror_open(pass, claim, group, cursor, rows);
	worker_commit_xact();
	claim->shard_group = group;
	claim->rows = rows;
	if (claim->shard_cursor != NULL)
		pfree(claim->shard_cursor);
	claim->shard_cursor = cursor ? MemoryContextStrdup(pass->cxt, cursor) : NULL;
	node_set_timeout(pass, group);
	claim->shard_ready = true;
	return true;
}

/* the tag of Citus's rebalance lock of the pass's table's colocation group; its id */
static int64
rebalance_tag(Pass *pass, LOCKTAG *tag)
{
	static Oid	cached_relid = InvalidOid;
	static int64 cached_id = 0;

	if (cached_relid != pass->relid)
	{
		CatalogScope scope;
		Oid			types[1] = {OIDOID};
		Datum		values[1] = {ObjectIdGetDatum(pass->relid)};
		int64		id = 0;

		catalog_enter(&scope);
		if (catalog_exec("SELECT p.colocationid::pg_catalog.int8 FROM pg_catalog.pg_dist_partition p"
						 " WHERE p.logicalrelid = $1::pg_catalog.regclass",
						 1, types, values, NULL, SPI_OK_SELECT) == 1)
			id = catalog_getint64(0, 1);
		catalog_leave(&scope);
		cached_id = id != 0 ? id : (int64) pass->relid;
		cached_relid = pass->relid;
	}
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (cached_id >> 32), (uint32) cached_id,
						 CITUS_REBALANCE_LOCK_CLASS);
	return cached_id;
}

/*
 * No batch overlaps a move or split in its table's colocation group: Citus
 * holds its rebalance lock of the group (an advisory lock, class 13,
 * ExclusiveLock) on the coordinator for the whole operation, and a batch
 * holds it in ShareLock from its start to its commit.  A batch that
 * committed on the old placement while a move with logical replication ran
 * was measured lost on the new one though its checkpoint counted it.
 * Citus takes its lock without waiting; a move or split in a session of a
 * server with pg_backfill preloaded first waits for it behind the batches
 * that hold it (moves.c).  The batch asks for it without waiting: a
 * request that conflicts with a waiting ExclusiveLock is refused too, so a
 * move that waits is seen, and no batch starts until it is over.
 */
bool
shards_fence_moves(Pass *pass)
{
	LOCKTAG		tag;

	(void) rebalance_tag(pass, &tag);
	return LockAcquire(&tag, ShareLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * A move or split of the group holds or awaits the rebalance lock, and the
 * batch did not start (its transaction ended): the lane says so
 * (backfill_status: "a shard move of group N"), waits until the move is
 * over in a transaction of its own that holds nothing else, queued behind
 * the move's request, and goes on.  Its caller then does what comes before
 * any batch again (the pass paused, cancelled or held by a switch since:
 * no batch), and reads where the shard is now: it may have moved or been
 * split meanwhile.  A cancel interrupts the wait.
 */
void
shards_wait_out_move(Pass *pass, Claim *claim)
{
	LOCKTAG		tag;
	int64		group;
	TimestampTz since = GetCurrentTimestamp();

	group = rebalance_tag(pass, &tag);
	pacing_say_throttle(pass, claim, psprintf("a shard move of group " INT64_FORMAT, group));
	worker_begin_xact(psprintf("pg_backfill lane: backfill \"%s\" waiting out a shard move of "
							   "group " INT64_FORMAT, pass->name, group));
	(void) set_config_option("lock_timeout", "0", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	(void) LockAcquire(&tag, ShareLock, false, false);
	worker_commit_xact();
	pacing_say_throttle(pass, claim, NULL);
	ereport(LOG,
			(errmsg("backfill \"%s\" run " INT64_FORMAT ": partition %d held back %ld ms for a "
					"shard move or split of colocation group " INT64_FORMAT, pass->name,
					pass->run_id, claim->part_no,
					(long) ((GetCurrentTimestamp() - since) / 1000), group)));
}

void
shards_batch(Pass *pass, Claim *claim, int limit, ShardAnswer *answer)
{
	const char *params[15];
	PGresult   *res;
	const char *status;

	params[0] = origin_text();
	params[1] = psprintf(INT64_FORMAT, claim->shard_run);
	params[2] = psprintf("%d", claim->part_no);
	params[3] = psprintf(INT64_FORMAT, claim->shardid);
	params[4] = pass->relation;
	params[5] = pass->key;
	params[6] = claim->shard_cursor;
	params[7] = psprintf(INT64_FORMAT, claim->rows);
	params[8] = claim->hi_text;
	params[9] = psprintf("%d", limit);
	params[10] = pass->predicate;
	params[11] = pass->action;
	/* the lane's own (the declaration's, pg_temp last); the node applies it the same way */
	params[12] = searchpath_temp_last(GetConfigOption("search_path", false, false));
	params[13] = pass->async_commit ? "true" : "false";
	params[14] = psprintf("%d", pass->lock_timeout_ms);
	res = node_query(pass->name, claim->shard_group,
					 "SELECT status, cursor, rows, keys FROM backfill.shard_batch("
					 "$1::pg_catalog.text, $2::pg_catalog.int8, $3::pg_catalog.int4,"
					 " $4::pg_catalog.int8, $5::pg_catalog.text, $6::pg_catalog.text,"
					 " $7::pg_catalog.text, $8::pg_catalog.int8, $9::pg_catalog.text,"
					 " $10::pg_catalog.int4, $11::pg_catalog.text, $12::pg_catalog.text,"
					 " $13::pg_catalog.text, $14::pg_catalog.bool, $15::pg_catalog.int4)",
					 15, params);
	status = PQgetvalue(res, 0, 0);
	answer->status = strcmp(status, "done") == 0 ? SHARD_DONE :
		strcmp(status, "adopt") == 0 ? SHARD_ADOPT : SHARD_BATCH;
	answer->cursor = PQgetisnull(res, 0, 1) ? NULL : pstrdup(PQgetvalue(res, 0, 1));
	answer->rows = strtoi64(PQgetvalue(res, 0, 2), NULL, 10);
	answer->keys = strtoi64(PQgetvalue(res, 0, 3), NULL, 10);
	PQclear(res);
}

void
shards_took(Pass *pass, Claim *claim, const ShardAnswer *answer)
{
	if (claim->shard_cursor != NULL)
		pfree(claim->shard_cursor);
	claim->shard_cursor = answer->cursor ? MemoryContextStrdup(pass->cxt, answer->cursor) : NULL;
	claim->rows = answer->rows;
}
