/*-------------------------------------------------------------------------
 *
 * shardmap.h
 *	  A shard whose columns sit at other attribute numbers than its
 *	  distributed table's: the map, and a parsed action re-pointed by it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_SHARDMAP_H
#define BACKFILL_SHARDMAP_H

#include "postgres.h"

#include "nodes/parsenodes.h"

/* the table's attribute i + 1 is the shard's attno[i] (0: dropped in the table) */
typedef struct ShardMap
{
	int			natts;			/* the table's attributes */
	AttrNumber *attno;
	bool		moved;			/* some column sits elsewhere in the shard */
} ShardMap;

/*
 * The shard's attribute of each live column of the table, by name; BF035
 * when one is missing, of another type, or the shard has more.
 */
extern ShardMap *shardmap_build(Oid table, Oid shard, const char *shard_sql,
								const char *relation);

/*
 * Rewrite query, whose range table entry rti was the table and is now the
 * shard, for the shard's attribute numbers.
 */
extern void shardmap_apply(Query *query, Index rti, Oid shard, const ShardMap *map,
						   const char *shard_sql);

#endif							/* BACKFILL_SHARDMAP_H */
