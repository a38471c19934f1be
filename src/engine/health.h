/*-------------------------------------------------------------------------
 *
 * health.h
 *	  The server's health as a lane reads it: who waits on its locks, how
 *	  far the standbys are behind, how many dead tuples its table has, the
 *	  archiver's and the slots' backlog, and the switches that pause all.
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
	int			archive_ready;	/* WAL segments waiting for the archiver */
	int64		slot_retained;	/* WAL the most retaining replication slot holds */
	char		slot_name[NAMEDATALEN]; /* that slot */
	char		role_paused[NAMEDATALEN];	/* backfill_pause_all of the pass's role, or "" */
	double		foreground;		/* client sessions at work, smoothed */
	bool		foreground_fresh;	/* sampled by the last batch */
} Health;

/* read it now for backfill name (in a transaction, inside a catalog scope) */
extern void health_read(Health *health, Oid relid, const char *name);

/*
 * The same, at most once per backfill.throttle_delay; in between the last
 * reading stands, except that nobody is counted as blocked.
 */
extern void health_read_if_due(Health *health, Oid relid, const char *name);

/*
 * Sample the client sessions at work, at most every FOREGROUND_SAMPLE_MS
 * (in a transaction, inside a catalog scope); called by every batch.
 */
#define FOREGROUND_SAMPLE_MS	100
extern void health_sample_foreground(Health *health);

/*
 * why the reading says to hold back (paused for all, lag, archive or slot
 * backlog, dead tuples), or NULL
 */
extern char *health_reason(const Health *health, const char *relation);

/* bytes as a reason says them: "512 B", "5 MB", "1.2 GB" */
extern char *health_size_text(double bytes);

#endif							/* BACKFILL_HEALTH_H */
