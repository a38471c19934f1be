/*-------------------------------------------------------------------------
 *
 * health.h
 *	  The server's health as a lane reads it: who waits on its locks, how
 *	  far the standbys are behind, how many dead tuples its table has.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_HEALTH_H
#define BACKFILL_HEALTH_H

#include "postgres.h"

/* one reading */
typedef struct Health
{
	int			blocking;		/* sessions waiting on this process's locks */
	int64		lag_bytes;		/* replay lag of the furthest standby */
	int64		dead_tuples;	/* the table's dead tuples */
	double		foreground;		/* client sessions at work, smoothed */
	bool		foreground_fresh;	/* sampled by the last batch */
} Health;

/* read it now (in a transaction, inside a catalog scope) */
extern void health_read(Health *health, Oid relid);

/*
 * The same, at most once per backfill.throttle_delay; in between the last
 * reading stands, except that nobody is counted as blocked.
 */
extern void health_read_if_due(Health *health, Oid relid);

/*
 * Sample the client sessions at work, at most every FOREGROUND_SAMPLE_MS
 * (in a transaction, inside a catalog scope); called by every batch.
 */
#define FOREGROUND_SAMPLE_MS	100
extern void health_sample_foreground(Health *health);

/* why the reading says to hold back (lag or dead tuples), or NULL */
extern char *health_reason(const Health *health, const char *relation);

#endif							/* BACKFILL_HEALTH_H */
