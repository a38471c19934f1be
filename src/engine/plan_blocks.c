/*-------------------------------------------------------------------------
 *
 * plan_blocks.c
 *	  A pass in block order (key => 'ctid'): the heap split into block
 *	  ranges, the pass's bound, and what its convergence sweeps look at.
 *
 * A table whose physical order is far from its key order (years of
 * updates) makes every key-ordered batch read pages all over the heap; a
 * table with no unique key has no key order at all.  Such a pass walks
 * the heap in block order instead: a partition is a range of blocks,
 * [lo, hi), kept as TIDs '(b,0)' (the partition's lo and hi, its cursor
 * the next block to do), and each batch is one TID range scan of a few
 * blocks (kind_blocks.c).  The pass is bounded by the heap's size when it
 * was planned (run.bound, the first block past it).
 *
 * A row that a concurrent UPDATE writes anew lands wherever the heap has
 * room, perhaps behind the walk (a lower block, or past the bound), so
 * the walk alone may miss it.  The convergence count of a pass in block
 * order counts every row still matching, wherever it lies (no bound), and
 * a guarded pass then sweeps again: its partitions from their start, the
 * bound grown to the heap as it is now.  Sweeps go on while the count
 * falls, up to BLOCKS_MAX_SWEEPS; a count that no longer falls is rows
 * the application writes while the pass sweeps (a stream of inserts, how
 * small soever): the pass completes and records them as drift (run.beyond),
 * as a key pass does past its sweeps.  Never STALLED for that: only when
 * the probe row, the first row that matched when the sweep began, is still
 * there as the same version (the same heap file, its TID, its xmin) and
 * still matches: the sweep gave it to the action, which did not change it.
 * A row version moved by an UPDATE leaves a dead one behind, and its slot,
 * reused, holds another xmin.  A heap rewritten during the sweep (VACUUM
 * FULL, CLUSTER) keeps its rows' xmins but not their TIDs, and a bulk load
 * gives every row one xmin: another row, never given to the action, may
 * then sit at the probe's TID with its xmin.  So the probe records the
 * heap's file (pg_class.relfilenode), and a file changed since makes the
 * probe unknown: the pass sweeps again (within BLOCKS_MAX_SWEEPS), never
 * STALLED for that.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdio.h>

#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "storage/bufmgr.h"
#include "storage/itemptr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "catalog.h"
#include "errors.h"
#include "plan_blocks.h"
#include "state.h"

/* a sweep's probe row: its TID, its xmin, the heap file it was read in */
typedef struct ProbeRow
{
	unsigned int block;
	unsigned int offset;
	unsigned int xmin;
	unsigned int file;
} ProbeRow;

bool
blocks_key(const char *column, Oid type)
{
	return column != NULL && type == TIDOID && strcmp(column, BLOCKS_KEY) == 0;
}

void
blocks_refuse_rehearsal(const char *name, const char *column, Oid type)
{
	if (!blocks_key(column, type))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_SOURCE_INVALID),
			 errmsg("backfill \"%s\" walks its table in block order (key => 'ctid'), which is "
					"not rehearsed", name),
			 errdetail("A rehearsal's batches follow a key."),
			 errhint("Rehearse a declaration of the same action over a key, or run this one "
					 "with a low rate and watch backfill_batches('%s').", name)));
}

/* the heap's size in blocks now */
static BlockNumber
heap_blocks(Oid relid)
{
	Relation	rel = relation_open(relid, AccessShareLock);
	BlockNumber n = RelationGetNumberOfBlocks(rel);

	relation_close(rel, AccessShareLock);
	return n;
}

static char *
block_text(BlockNumber b)
{
	return psprintf("(%u,0)", b);
}

Datum
blocks_plan_bounds(Oid relid, int nparts, const char **method, char **bound)
{
	BlockNumber nblocks = heap_blocks(relid);
	int			n = (int) Min((BlockNumber) Max(nparts, 1), Max(nblocks, 1));
	Datum	   *elems = palloc(sizeof(Datum) * n);
	int			nelems = 0;
	BlockNumber last = 0;

	/* range i starts at block nblocks * i / n: n ranges of about equal size */
	for (int i = 1; i < n; i++)
	{
		BlockNumber b = (BlockNumber) (((uint64) nblocks * i) / n);

		if (b > last)
			elems[nelems++] = CStringGetTextDatum(block_text(b));
		last = b;
	}
	*method = psprintf("blocks (%u blocks in %d range%s)", nblocks, nelems + 1,
					   nelems == 0 ? "" : "s");
	*bound = block_text(nblocks);
	return PointerGetDatum(construct_array(elems, nelems, TEXTOID, -1, false, TYPALIGN_INT));
}

void
blocks_sweep_bound(int64 run_id, Oid relid)
{
	CatalogScope scope;
	char	   *bound = block_text(heap_blocks(relid));

	catalog_enter(&scope);
	state_pass_bound_grown(run_id, bound);
	catalog_leave(&scope);
}

/* the count a sweep began with (pass.c pass_sweep_again), or -1 */
static int64
count_before(int64 run_id)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(run_id)};
	int64		before = -1;
	bool		isnull;
	Datum		d;

	catalog_enter(&scope);
	if (catalog_exec("SELECT remaining FROM backfill.run WHERE run_id = $1", 1, types, values,
					 NULL, SPI_OK_SELECT) == 1)
	{
		d = catalog_getdatum(0, 1, &isnull);
		before = isnull ? -1 : DatumGetInt64(d);
	}
	catalog_leave(&scope);
	return before;
}

/*
 * The file of the table's heap now (pg_class.relfilenode): VACUUM FULL,
 * CLUSTER, TRUNCATE write a new one.  Read after a statement of this
 * transaction has locked the table, so that it is the file that statement
 * read.
 */
static Oid
heap_file(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			file;

	if (!HeapTupleIsValid(tuple))
		return InvalidOid;
	file = (Oid) ((Form_pg_class) GETSTRUCT(tuple))->relfilenode;
	ReleaseSysCache(tuple);
	return file;
}

char *
blocks_probe_row(Oid relid, const char *relation, const char *predicate)
{
	bool		isnull;
	ItemPointer tid;
	Datum		xmin;

	if (SPI_execute(psprintf("SELECT ctid, xmin FROM ONLY %s WHERE (\n%s\n) LIMIT 1", relation,
							 predicate), true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the first row left in %s", relation);
	if (SPI_processed == 0)
		return NULL;
	tid = (ItemPointer) DatumGetPointer(SPI_getbinval(SPI_tuptable->vals[0],
													  SPI_tuptable->tupdesc, 1, &isnull));
	xmin = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	return psprintf("(%u,%u) xmin %u in heap file %u",
					ItemPointerGetBlockNumberNoCheck(tid), ItemPointerGetOffsetNumberNoCheck(tid),
					DatumGetTransactionId(xmin), heap_file(relid));
}

/* a probe as blocks_probe_row writes it, parsed; false for any other text */
static bool
probe_parse(const char *probe, ProbeRow *row)
{
	return probe != NULL &&
		sscanf(probe, "(%u,%u) xmin %u in heap file %u", &row->block, &row->offset, &row->xmin,
			   &row->file) == 4;
}

/*
 * Is the probe row, that very version (its TID and xmin, in the same heap
 * file), there and still matching?  A heap rewritten since (VACUUM FULL,
 * CLUSTER) keeps xmins but not TIDs: another row, never given to the
 * action, may sit at that TID with that xmin; *rewritten says so, and the
 * probe is unknown (false).
 */
static bool
probe_matches(Oid relid, const char *relation, const char *predicate, const ProbeRow *row,
			  bool *rewritten)
{
	Oid			types[2] = {TIDOID, XIDOID};
	Datum		values[2];
	ItemPointerData tid;
	bool		found;

	ItemPointerSet(&tid, row->block, (OffsetNumber) row->offset);
	values[0] = PointerGetDatum(&tid);
	values[1] = TransactionIdGetDatum((TransactionId) row->xmin);
	if (SPI_execute_with_args(psprintf("SELECT 1 FROM ONLY %s WHERE ctid OPERATOR(pg_catalog.=) $1"
									   " AND xmin OPERATOR(pg_catalog.=) $2 AND (\n%s\n)",
									   relation, predicate),
							  2, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not look at row (%u,%u) of %s", row->block, row->offset, relation);
	found = SPI_processed > 0;
	/* the statement has locked the table: the file it read is the one pg_class names now */
	*rewritten = heap_file(relid) != (Oid) row->file;
	return found && !*rewritten;
}

bool
blocks_stalled(Oid relid, const char *relation, const char *predicate, int sweep,
			   const char *probe, char **row)
{
	ProbeRow	p;
	bool		rewritten;

	*row = NULL;
	if (sweep <= 0 || !probe_parse(probe, &p))
		return false;
	/* given to the action, and left as it was */
	if (!probe_matches(relid, relation, predicate, &p, &rewritten))
		return false;
	*row = psprintf("(%u,%u) xmin %u", p.block, p.offset, p.xmin);
	return true;
}

bool
blocks_sweep_falls(int64 run_id, Oid relid, int sweep, const char *probe, int64 remaining)
{
	int64		before;
	ProbeRow	p;

	if (sweep <= 0)
		return true;
	if (sweep >= BLOCKS_MAX_SWEEPS)
		return false;
	/* the heap rewritten during the sweep: what it did is unknown, sweep again */
	if (probe_parse(probe, &p) && heap_file(relid) != (Oid) p.file)
		return true;
	before = count_before(run_id);
	return before < 0 || remaining < before;
}
