/*-------------------------------------------------------------------------
 *
 * citus.h
 *	  Tables of Citus, the distributed engine: what kind a relation is, the
 *	  declarations refused for it, the fence of a coordinator-side batch,
 *	  the estimate from the shards' own statistics (citus.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_CITUS_H
#define BACKFILL_CITUS_H

#include "postgres.h"

/* what Citus makes of a relation */
typedef enum CitusKind
{
	CITUS_NONE,					/* no Citus in this database, or not a Citus table */
	CITUS_LOCAL,				/* a Citus local table: its data is here */
	CITUS_REFERENCE,			/* a reference table: a copy on every node */
	CITUS_DISTRIBUTED,			/* a distributed table: its shards on the workers */
	CITUS_SHARD					/* one shard of a distributed table, on this node */
} CitusKind;

typedef struct CitusTable
{
	CitusKind	kind;
	Oid			table;			/* a shard's distributed table */
	int64		shardid;		/* a shard's id in pg_dist_shard */
	int			group;			/* this node's Citus group: 0 on the coordinator */
} CitusTable;

/* is the citus extension installed in this database? */
extern bool citus_installed(void);

/* what kind relid is (SPI connected, in a transaction) */
extern void citus_describe(Oid relid, CitusTable *table);

/*
 * Refuse a declaration or a pass of backfill name over relid that Citus
 * would not keep exactly once: a shard (BF030), a Citus table on a node
 * other than the coordinator (BF031).  citus_refusal says the same
 * without raising it: NULL when allowed, else the message (and the code).
 */
extern void citus_check_declarable(const char *name, Oid relid);
extern char *citus_refusal(const char *name, Oid relid, int *sqlerrcode);

/* does a batch over relid write to other nodes (distributed, reference)? */
extern bool citus_writes_elsewhere(Oid relid);

/* a batch transaction that writes to other nodes: two-phase, synchronous */
extern void citus_fence_batch(void);

/* have Citus resolve what a crash left prepared on the workers, now */
extern void citus_recover_prepared(const char *name);

/*
 * The rows predicate matches in a distributed table, summed from each
 * shard's estimate on the node that holds it, as the current role: its
 * planner's, or a bounded sample's where its statistics are missing or
 * stale (*sampled shards); false when a shard does not answer.
 */
extern bool citus_estimate_rows(Oid relid, const char *predicate, int64 *estimate,
								int *shards, int *sampled);

/*
 * The shards of a distributed table relid (as an int8[]) for a pass worked
 * shard by shard (shards.c), or 0 and why not: the action or the predicate
 * (parsed as the current role) reads another table or calls a function of
 * a user's, or there are no shards.
 */
extern Datum citus_plan_shards(Oid relid, const char *relation, const char *action,
							   const char *predicate, Oid keytype, const char **why);

#endif							/* BACKFILL_CITUS_H */
