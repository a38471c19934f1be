/*-------------------------------------------------------------------------
 *
 * state.h
 *	  The owner of a pass's state: the only C code that writes the rows of
 *	  backfill.ledger, backfill.run and backfill.partition.
 *
 * A ledger row's status, a run row's phase and a partition's state are
 * enums here; their SQL text comes from one table (states.c) and is
 * passed to SQL as a parameter.  Every change of state is a transition
 * named for the event that causes it (the table of edges is in states.c,
 * and doc/internals.md "## States" draws it: test/t/098_structure.pl
 * checks that the two agree).  Each transition runs in the caller's
 * transaction and catalog scope (catalog_enter), asserts in its WHERE the
 * state it leaves, and takes the rows in the documented lock order:
 * declaration, ledger, run, partitions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_STATE_H
#define BACKFILL_STATE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/itemptr.h"

typedef enum LedgerStatus
{
	LEDGER_RUNNING,
	LEDGER_COMPLETED,
	LEDGER_COMPLETED_WITH_FAILURES,
	LEDGER_FAILED,
	LEDGER_CANCELLED
} LedgerStatus;

typedef enum RunPhase
{
	PHASE_QUEUED,
	PHASE_RUNNING,
	PHASE_COUNTING,
	PHASE_DONE
} RunPhase;

typedef enum PartState
{
	PART_PENDING,
	PART_RUNNING,
	PART_DONE,
	PART_FAILED,
	PART_CANCELLED
} PartState;

/* the events of the transition table (states.c), one per edge kind */
typedef enum StateEvent
{
	EV_ENQUEUED,
	EV_PLANNED,
	EV_RETRIED,
	EV_COUNTING,
	EV_LEAVES_ATTACHED,
	EV_SWEPT,
	EV_COMPLETED,
	EV_COMPLETED_WITH_FAILURES,
	EV_FAILED,
	EV_CANCELLED,
	EV_PAUSED,
	EV_RESUMED,
	EV_CLAIMED,
	EV_RELEASED,
	EV_PART_FAILED,
	EV_PART_DONE,
	EV_CHECKPOINTED
} StateEvent;

/* ---- states.c: the SQL text of each state, and the transition table */
extern const char *ledger_status_text(LedgerStatus s);
extern const char *run_phase_text(RunPhase p);
extern const char *part_state_text(PartState s);
extern Datum ledger_status_datum(LedgerStatus s);
extern Datum run_phase_datum(RunPhase p);
extern Datum part_state_datum(PartState s);
extern bool state_missed(StateEvent event, const char *what, int64 run_id, int nrows);

/* ---- pass_state.c: a pass's ledger and run rows */
extern bool state_pass_lock(int64 run_id);
extern int64 state_pass_enqueue(Datum *values, const char *nulls);
extern void state_pass_lane_started(int64 run_id);
extern void state_pass_planned(int64 run_id, const char *method, Datum estimate,
							   bool has_estimate, const char *bound);
extern void state_pass_replanned(int64 run_id, const char *method, Datum estimate,
								 bool has_estimate);
extern void state_pass_interrupted(int64 run_id);
extern bool state_pass_counting(int64 run_id);
extern void state_pass_leaves_attached(int64 run_id);
extern void state_pass_swept(int64 run_id, const char *probe_key, int64 remaining);
extern bool state_pass_end(int64 run_id, LedgerStatus to, int failed_part, const char *code,
						   const char *message, int64 remaining);
extern void state_pass_set_beyond(int64 run_id, int64 beyond);
extern void state_pass_bound_grown(int64 run_id, const char *bound);
extern void state_pass_note_error(int64 run_id, const char *message, bool if_running);
extern bool state_pass_paused(int64 run_id);
extern int	state_passes_paused_all(const char *why);
extern bool state_pass_resumed(int64 run_id, const char *unserved_prefix);
extern void state_pass_retried(int64 run_id, int64 old_id);

/* what backfill.claim_partition answered, read by column name */
typedef struct StateClaim
{
	int			part_no;
	char	   *cursor;			/* where it goes on from (its lo at first), or NULL */
	char	   *hi;
	int64		rows;
	bool		reclaimed;		/* its holder had died */
	int			dead_pid;
} StateClaim;

/* ---- part_state.c: a pass's partition rows */
extern void state_parts_planned_ranges(int64 run_id, Datum bounds);
extern void state_parts_planned_shards(int64 run_id, Datum shards);
extern void state_parts_planned_leaves(int64 run_id, int first, Datum lo, Datum hi,
									   Datum leaf, Datum leaf_range);
extern int	state_parts_copied(int64 run_id, int64 old_id);
extern int	state_parts_of_failed_rows(int64 run_id, int64 old_id);
extern void state_parts_restarted(int64 run_id);
extern void state_part_failed(int64 run_id, int part_no, const char *message);
extern int	state_parts_retried(int64 run_id);
extern char *state_parts_tally(int64 run_id, int64 *open_parts, int64 *failed_parts);

/* ---- lease.c: a partition under a lane's lease */
extern Datum state_answer_column(const char *name, bool *isnull);
extern int	state_parts_claim(int64 run_id, int pid, TimestampTz start, StateClaim *claim);
extern void state_part_released(int64 run_id, int part_no, int pid);
extern void state_parts_released_held(int64 run_id, int pid, TimestampTz start);
extern bool state_part_checkpointed(ItemPointer tid, Oid *types, Datum *values,
									const char *nulls);
extern bool state_part_done(int64 run_id, int part_no, int pid, TimestampTz start);
extern void state_part_attempt_failed(int64 run_id, int part_no, const char *message);
extern bool state_part_skipped_to(int64 run_id, int part_no, const char *cursor, int pid,
								  TimestampTz start);
extern void state_part_throttle(int64 run_id, int part_no, int pid, const char *reason);
extern bool state_part_mirrored(int64 run_id, int part_no, int group, const char *cursor,
								int64 rows, int pid, TimestampTz start);
extern void state_part_split_child(int64 run_id, int part_no, const char *cursor,
								   int64 shardid, int min, int max);

#endif							/* BACKFILL_STATE_H */
