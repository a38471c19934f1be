/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  A key column's statistics as planning reads them from pg_stats: its
 *	  histogram bounds and most common values (stats.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_STATS_H
#define BACKFILL_STATS_H

#include "postgres.h"

/* the statistics of one key column that planning uses */
typedef struct ColumnStats
{
	int			nhist;
	Datum	   *hist;			/* histogram bounds, in order */
	int			nmcv;
	Datum	   *mcv;			/* most common values, and their frequencies */
	float4	   *freqs;
} ColumnStats;

extern void stats_read_column(Oid relid, const char *column, Oid type, bool inherited,
							  ColumnStats *stats);

#endif							/* BACKFILL_STATS_H */
