/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  A partition's lease as a lane takes and gives it: claiming (its cursor
 *	  and bounds read back as keys: BF033 when they no longer read),
 *	  releasing, failing the partition.
 *
 * Each function that writes runs one transaction of its own (or says
 * whose it runs in).  Bookkeeping runs as the extension's owner
 * (catalog.c); what reads the table runs as the lane's own role.
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
#include "claim.h"
#include "searchpath.h"
#include "shmem.h"
#include "state.h"
#include "xact.h"
#include "tenancy.h"
#include "windows.h"
#include "worker.h"

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
		/* its first batch filters in the scan: a partition with nothing to do does no batch */
		claim->filtered_left = 1;
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
