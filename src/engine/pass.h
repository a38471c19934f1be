/*-------------------------------------------------------------------------
 *
 * pass.h
 *	  A pass as the engine runs it (the pass, the partition a lane claimed,
 *	  how a batch ended), and loading and failing it (pass.c); its plan
 *	  (plan.h), leases (claim.h) and end (passend.h) have headers of their own.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PASS_H
#define BACKFILL_PASS_H

#include "postgres.h"

#include "executor/spi.h"
#include "storage/itemptr.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "declaration.h"
#include "health.h"
#include "keyset.h"
#include "leaves.h"


/* the pass, as loaded when the lane starts (lives in cxt) */
typedef struct Pass
{
	MemoryContext cxt;			/* the lane's long-lived memory: this, the cursor */
	int64		run_id;
	char	   *name;			/* the declaration's name */
	char	   *ledger_name;
	char	   *checksum;		/* the checksum the pass started with */
	Oid			relid;
	char	   *relation;		/* quoted, schema-qualified */
	bool		partitioned;	/* a partitioned table: its key scans take a leaf's piece */
	bool		more_leaves;	/* the end found leaves attached since the plan (pass_finish) */
	List	   *leaves_seen;	/* the tree as the last look before the count saw it */
	char	   *key;			/* key column */
	Oid			keytype;
	char	   *predicate;		/* the rows the pass visits */
	char	   *action;			/* what it does to each batch of them */
	bool		reverting;		/* a revert pass: the declaration's revert and its predicate */
	bool		counted;		/* does the predicate prove the pass done (convergence) */
	bool		guarded;		/* its action changes only rows that match: it may sweep again */
	bool		engine_action;	/* its action is the engine's own (set, delete): it changes
								 * exactly the rows of its range that match (kind_range.c) */
	bool		blocks;			/* key => 'ctid': the heap in block order (plan_blocks.c) */
	int			sweep;			/* the run's sweeps so far (lock_pass_to_count) */
	char	   *probe_key;		/* the smallest key matching when the last sweep began */
	int			batch_size;
	int			max_parallel;
	double		rate;			/* batches per second */
	int64		max_wal_rate;	/* WAL bytes per second of the pass's lanes together, 0: none */
	int			max_attempts;
	int			backoff_base_ms;
	int			backoff_cap_ms;
	int			batch_timeout_ms;
	int			lock_timeout_ms;
	bool		async_commit;	/* batches commit without waiting for disk */
	bool		citus_remote;	/* a Citus table: batches write to other nodes (citus.c) */
	int			target_batch_ms;	/* 0: fixed batch size */
	int			min_batch_size;
	int			max_batch_size;
	int			max_failed_rows;	/* rows that failed alone the pass tolerates */

	/* scope, tenancy and the kind of source */
	Jsonb	   *input;			/* a scoped pass's input, or NULL */
	Jsonb	   *settings;		/* set per batch, or NULL */
	Oid			pages_fn;		/* a pages source, or InvalidOid for a table */
	Oid			count_fn;
	SPIPlanPtr	page_plan;
	int			claims;			/* partitions this process claimed (pass_claim) */
	struct PageCycle *page_cycle;	/* the cursors of this claim's pages (pagecycle.c) */
	int			page_cycle_claim;	/* the claim page_cycle is of */

	/* when its lanes may work (condition.c, windows.c) */
	Oid			run_as;			/* the lanes' role */
	char	   *search_path;	/* the declaration's */
	char	   *throttle_when;	/* the user's condition, or NULL */
	struct Windows *windows;	/* the time windows, or NULL: always */
	char	   *windows_said;	/* as the lane last read them, "{...} in zone" */
	TimestampTz condition_at;	/* when this lane last evaluated throttle_when */
	char	   *condition_said; /* why it held then, or NULL */

	/* key type I/O, to store cursors as text */
	Oid			key_input;
	Oid			key_ioparam;
	Oid			key_output;
	int16		key_len;
	bool		key_byval;

	/* a composite key (keyset.c): keyset.nkeys > 1; 1 for one column */
	Keyset		keyset;

	/* plans, prepared once per lane as the declaring role */
	SPIPlanPtr	keys_plan[4];	/* indexed by (has cursor) | (has upper bound) << 1 */
	bool		keys_aggregated;	/* keys_plan answers min, max, count */
	SPIPlanPtr	keys_sized_plan[4];	/* the same with LIMIT keys_sized_limit written in */
	int64		keys_sized_limit;	/* (batch.c; 0: none prepared) */
	SPIPlanPtr	keys_bare_plan[4];	/* the same without the predicate (kind_range.c) */
	SPIPlanPtr	action_plan;
	char	   *key_eq;			/* the key type's btree equality, spelled (batch.c) */
	char	   *bound;			/* the upper end of the pass's key range, as key text, or NULL */
	char	   *key_gt;			/* the key type's > and <=, spelled safely (batch.c) */
	char	   *key_le;
} Pass;

/* the partition a lane holds a lease on */
typedef struct Claim
{
	int			part_no;
	const struct BatchKind *kind;	/* its batches' routines, picked once (work.c) */
	/* as the catalog keeps them, until pass_claim_read_keys reads them as keys */
	bool		keys_read;
	char	   *cursor_text;
	char	   *hi_text;
	char	   *leaf_range_text;
	Oid			leaf;
	bool		has_cursor;		/* lower bound, exclusive: last key done or lo */
	Datum		cursor;
	bool		has_hi;			/* upper bound, inclusive */
	Datum		hi;
	Datum		cursor_key[DECLARATION_MAX_KEY_COLUMNS];	/* a composite key's */
	Datum		hi_key[DECLARATION_MAX_KEY_COLUMNS];
	bool		has_piece;		/* planned per leaf: the leaf's interval (leaves.c) */
	LeafPiece	piece;
	int64		rows;
	ItemPointerData checkpoint_tid; /* where the last checkpoint left the
									 * partition's row; a hint (batch.c) */

	/* pacing (pacing.c) */
	int			batch_size;		/* this lane's current batch size */
	int64		last_keys;		/* keys in the last batch */
	double		last_batch_ms;	/* how long its key scan and action took */
	Health		health;			/* as the last batch read it (health.c) */
	bool		health_fresh;	/* read since the claim (pacing.c) */
	double		foreground_share;	/* of its time the lane works (1: all) */
	char		foreground_reason[128]; /* why it works less, or "" */
	char		pace_reason[128];	/* the WAL budget it waited for before this batch, or "" */
	uint64		wal_seen;		/* the process's WAL bytes when last charged (pgWalUsage) */

	/* isolating a row that fails alone (poison.c) */
	int			bisect_size;	/* 0: not bisecting; else the batch size while halving */
	int64		suspect;		/* keys after the cursor among which a row failed */
	int			bisect_failures;	/* failed batches since the halving began, or the last row isolated */
	int64		scanned_keys;	/* keys the last key scan found (-1: it failed) */
	int			filtered_left;	/* batches before the key scan may leave the predicate out (kind_range.c) */

	/* a Citus shard's partition, worked on the shard's node (shards.c) */
	int64		shardid;		/* 0: not a shard's */
	int64		shard_run;		/* the run whose row on that node it is (a retry's: the first) */
	int			shard_group;	/* the node whose row is its checkpoint; -1: none yet */
	bool		shard_ready;	/* that row read since the claim and the last failure */
	char	   *shard_cursor;	/* the cursor as that row has it (in the pass's cxt) */
} Claim;

/* the batch size of the claim's next batch: halved while a failing row is isolated */
#define CLAIM_BATCH_LIMIT(claim) \
	((claim)->bisect_size > 0 ? (claim)->bisect_size : (claim)->batch_size)

/*
 * The batch size a checkpoint of nkeys keys shows: the partition's own once
 * those keys bring the last suspect one behind the cursor (poison.c).
 */
#define CLAIM_BATCH_LIMIT_AFTER(claim, nkeys) \
	((claim)->bisect_size > 0 && (claim)->suspect > (nkeys) ? (claim)->bisect_size : \
	 (claim)->batch_size)

/* how a batch ended */
typedef enum BatchOutcome
{
	BATCH_DONE,					/* committed; more may follow */
	BATCH_PARTITION_DONE,		/* nothing left in the partition */
	BATCH_PAUSED,				/* committed; the pass is paused: release and stop */
	BATCH_STOP,					/* the pass is no longer running, or the lane gave its
								 * partition back outside the time windows: stop */
	BATCH_AGAIN					/* no batch ran (a shard move went first): look again */
} BatchOutcome;

/* the lane's backend identity, which a lease records */
#define LANE_PID()		MyProcPid
#define LANE_START()	MyStartTimestamp

extern char *pass_strdup(Pass *pass, const char *s);
extern Datum pass_key_from_text(Pass *pass, const char *text);
extern int exec_on_run(Pass *pass, const char *sql, int expected);
extern bool pass_load(Pass *pass, int64 run_id, MemoryContext cxt);
extern void pass_load_declared(Pass *pass, const char *name, MemoryContext cxt);
extern bool pass_end_failed(int64 run_id, int part_no, int sqlerrcode, const char *message);
extern void pass_fail_in_xact(Pass *pass, int part_no, int sqlerrcode, const char *message);
extern void pass_fail(Pass *pass, int part_no, int sqlerrcode, const char *message);
extern void pass_lost_lease(Pass *pass, Claim *claim);
extern void pass_note_lane_error(Pass *pass, const ErrorData *edata);
extern void pass_reread_max_failed_rows(Pass *pass);

#endif							/* BACKFILL_PASS_H */
