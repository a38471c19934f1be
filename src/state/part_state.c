/*-------------------------------------------------------------------------
 *
 * part_state.c
 *	  The transitions of a pass's partitions that are not a lane's under
 *	  its lease (lease.c): planned, retried, failed, swept; each one event
 *	  of the table in states.c.
 *
 * Each runs in the caller's transaction and catalog scope, asserts in its
 * WHERE the state it leaves and says when it found none (state_missed).
 * A new partition is pending (its state passed from states.c's table).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "state.h"

/*
 * An INSERT of pending partitions of run_id: $1 the run_id, $2 arg (of
 * type), $3 the pending state.  Returns how many.
 */
static int
insert_pending(const char *sql, int64 run_id, Oid type, Datum arg)
{
	Oid			types[3] = {INT8OID, type, TEXTOID};
	Datum		values[3] = {Int64GetDatum(run_id), arg, part_state_datum(PART_PENDING)};

	return catalog_exec(sql, 3, types, values, NULL, SPI_OK_INSERT);
}

/*
 * new -> pending (planned): partition i covers (bounds[i-1], bounds[i]];
 * the ends are open, and the run's bound closes the last one when a lane
 * claims it.
 */
void
state_parts_planned_ranges(int64 run_id, Datum bounds)
{
	insert_pending("INSERT INTO backfill.partition (run_id, part_no, lo, hi, state)"
				   " SELECT $1, i - 1, $2[i - 1], $2[i], $3"
				   "   FROM pg_catalog.generate_series(1,"
				   "          coalesce(pg_catalog.array_length($2, 1), 0) + 1) i",
				   run_id, TEXTARRAYOID, bounds);
}

/*
 * new -> pending (planned): one partition per Citus shard; a
 * hash-distributed table's shard keeps its hash range, to follow a split
 * (shards.c).
 */
void
state_parts_planned_shards(int64 run_id, Datum shards)
{
	insert_pending("INSERT INTO backfill.partition (run_id, part_no, shard, shard_run, shard_min,"
				   "   shard_max, state)"
				   " SELECT $1, i - 1, $2[i], $1, h.lo, h.hi, $3"
				   "   FROM pg_catalog.generate_subscripts($2, 1) i"
				   "   LEFT JOIN LATERAL (SELECT s.shardminvalue::pg_catalog.int4 AS lo,"
				   "                             s.shardmaxvalue::pg_catalog.int4 AS hi"
				   "     FROM pg_catalog.pg_dist_shard s"
				   "     JOIN pg_catalog.pg_dist_partition d ON d.logicalrelid = s.logicalrelid"
				   "    WHERE s.shardid = $2[i] AND d.partmethod = 'h') h ON true",
				   run_id, INT8ARRAYOID, shards);
}

/*
 * new -> pending (planned): the partitions of a plan per leaf, numbered
 * from first; arrays lo, hi (text), leaf (oid, 0 for none), leaf_range.
 */
void
state_parts_planned_leaves(int64 run_id, int first, Datum lo, Datum hi, Datum leaf,
						   Datum leaf_range)
{
	Oid			types[7] = {INT8OID, INT4OID, TEXTARRAYOID, TEXTARRAYOID, OIDARRAYOID,
	TEXTARRAYOID, TEXTOID};
	Datum		values[7] = {Int64GetDatum(run_id), Int32GetDatum(first), lo, hi, leaf,
	leaf_range, part_state_datum(PART_PENDING)};

	catalog_exec("INSERT INTO backfill.partition (run_id, part_no, lo, hi, leaf, leaf_range,"
				 "   state)"
				 " SELECT $1, $2 + u.o::pg_catalog.int4 - 1, u.lo, u.hi,"
				 "        CASE WHEN u.leaf OPERATOR(pg_catalog.<>) 0::pg_catalog.oid THEN u.leaf END,"
				 "        u.leaf_range, $7"
				 "   FROM ROWS FROM (pg_catalog.unnest($3), pg_catalog.unnest($4),"
				 "                   pg_catalog.unnest($5), pg_catalog.unnest($6))"
				 "        WITH ORDINALITY AS u(lo, hi, leaf, leaf_range, o)",
				 7, types, values, NULL, SPI_OK_INSERT);
}

/*
 * new -> pending (retried): the partitions of failed run old_id copied
 * into run_id, each at its checkpoint (done stays done).  A partition
 * planned per leaf keeps its leaf's piece (engine/leaves.c); a Citus
 * shard's goes on from its row on the shard's node, the old run's
 * (shard_run), with the rows that row counts.  Returns how many.
 */
int
state_parts_copied(int64 run_id, int64 old_id)
{
	Oid			types[4] = {INT8OID, INT8OID, TEXTOID, TEXTOID};
	Datum		values[4] = {Int64GetDatum(run_id), Int64GetDatum(old_id),
	part_state_datum(PART_DONE), part_state_datum(PART_PENDING)};

	return catalog_exec("INSERT INTO backfill.partition (run_id, part_no, lo, hi, cursor, state,"
						"   leaf, leaf_range, shard, shard_group, shard_run, rows, shard_min,"
						"   shard_max, split_from)"
						" SELECT $1, part_no, lo, hi, cursor,"
						"        CASE WHEN state = $3 THEN $3 ELSE $4 END,"
						"        leaf, leaf_range, shard, shard_group,"
						"        CASE WHEN shard IS NOT NULL THEN coalesce(shard_run, run_id) END,"
						"        CASE WHEN shard IS NOT NULL THEN rows ELSE 0 END,"
						"        shard_min, shard_max, split_from"
						"   FROM backfill.partition WHERE run_id = $2",
						4, types, values, NULL, SPI_OK_INSERT);
}

/*
 * new -> pending (retried): the rows that failed alone in run old_id, each
 * a partition of its own in run_id: from the cursor before it (exclusive)
 * to its key (inclusive), where no other row matched when it was recorded;
 * numbered after the partitions copied; a row of a pass planned per leaf
 * keeps to its leaf's piece.  Returns how many.
 */
int
state_parts_of_failed_rows(int64 run_id, int64 old_id)
{
	return insert_pending("INSERT INTO backfill.partition (run_id, part_no, lo, hi, state,"
						  "   leaf, leaf_range)"
						  " SELECT $1, m.n + pg_catalog.row_number() OVER (ORDER BY f.at,"
						  "        f.part_no, f.key), f.after_key, f.key, $3,"
						  "        o.leaf, o.leaf_range"
						  "   FROM backfill.failed_row f"
						  "   LEFT JOIN backfill.partition o"
						  "     ON o.run_id = f.run_id AND o.part_no = f.part_no,"
						  "        (SELECT coalesce(pg_catalog.max(p.part_no), -1) AS n"
						  "           FROM backfill.partition p WHERE p.run_id = $1) m"
						  "  WHERE f.run_id = $2",
						  run_id, INT8OID, Int64GetDatum(old_id));
}

/*
 * A stalled pass retried as a sweep: the partitions just copied into the
 * new run all pending from their start (done -> pending, swept).
 */
void
state_parts_restarted(int64 run_id)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2] = {Int64GetDatum(run_id), part_state_datum(PART_PENDING)};

	catalog_exec("UPDATE backfill.partition SET cursor = NULL, state = $2"
				 " WHERE run_id = $1", 2, types, values, NULL, SPI_OK_UPDATE);
}

/*
 * running -> failed (failed): a partition whose batch failed max_attempts
 * times in a row; the run row before the partition (the lock order), its
 * last_error the partition's.
 */
void
state_part_failed(int64 run_id, int part_no, const char *message)
{
	Oid			types[5] = {INT8OID, INT4OID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[5] = {Int64GetDatum(run_id), Int32GetDatum(part_no),
	CStringGetTextDatum(message), part_state_datum(PART_FAILED), part_state_datum(PART_RUNNING)};

	state_pass_note_error(run_id, message, false);
	(void) state_missed(EV_PART_FAILED, "partition", run_id,
						catalog_exec("UPDATE backfill.partition SET state = $4, last_error = $3,"
									 " failures = failures + 1, finished_at = pg_catalog.now()"
									 " WHERE run_id = $1 AND part_no = $2 AND state = $5",
									 5, types, values, NULL, SPI_OK_UPDATE));
}

/*
 * failed -> pending (retried): backfill_retry on a running pass, locked
 * (state_pass_lock).  Returns how many.
 */
int
state_parts_retried(int64 run_id)
{
	Oid			types[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum		values[3] = {Int64GetDatum(run_id), part_state_datum(PART_PENDING),
	part_state_datum(PART_FAILED)};

	return catalog_exec("UPDATE backfill.partition SET state = $2,"
						" failures = 0, holder_pid = NULL, holder_start = NULL,"
						" finished_at = NULL"
						" WHERE run_id = $1 AND state = $3 ",
						3, types, values, NULL, SPI_OK_UPDATE);
}

/*
 * How many partitions of run_id are open (neither done nor failed) and
 * failed; the last_error of the first that failed, or NULL.
 */
char *
state_parts_tally(int64 run_id, int64 *open_parts, int64 *failed_parts)
{
	Oid			types[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum		values[3] = {Int64GetDatum(run_id), part_state_datum(PART_DONE),
	part_state_datum(PART_FAILED)};
	bool		isnull;

	catalog_exec("SELECT pg_catalog.count(*) FILTER (WHERE state NOT IN ($2, $3)) AS open,"
				 "  pg_catalog.count(*) FILTER (WHERE state = $3) AS failed,"
				 "  (pg_catalog.array_agg(last_error ORDER BY part_no)"
				 "     FILTER (WHERE state = $3))[1] AS first_error"
				 " FROM backfill.partition WHERE run_id = $1",
				 3, types, values, NULL, SPI_OK_SELECT);
	*open_parts = DatumGetInt64(state_answer_column("open", &isnull));
	*failed_parts = DatumGetInt64(state_answer_column("failed", &isnull));
	return catalog_gettext(0, SPI_fnumber(SPI_tuptable->tupdesc, "first_error"));
}
