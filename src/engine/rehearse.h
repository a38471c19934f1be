/*-------------------------------------------------------------------------
 *
 * rehearse.h
 *	  A rehearsal: real batches of a declaration, each rolled back, and a
 *	  projection of its pass (rehearse.c); what a rehearsal worker answers
 *	  through shared memory.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_REHEARSE_H
#define BACKFILL_REHEARSE_H

#include "postgres.h"

#include "config.h"

/* the most batches one rehearsal runs */
#define REHEARSAL_MAX_BATCHES	100

#define REHEARSAL_KEY_TEXT		200
#define REHEARSAL_LONG_TEXT		1024

/* one rehearsed batch */
typedef struct RehearsalBatch
{
	char		position[16];	/* start, middle, end, or "NN%" of the key space */
	char		first_key[REHEARSAL_KEY_TEXT];
	char		last_key[REHEARSAL_KEY_TEXT];
	int64		rows;			/* keys the key scan found */
	double		ms;				/* key scan and action */
	int64		wal_bytes;
	int64		shared_hit;
	int64		shared_read;
	char		locks[REHEARSAL_LONG_TEXT];	/* "relation mode" lines */
	int8		key_scan_index;	/* -1: unknown, 0: no, 1: an index scan */
	int8		action_index;
	char		key_scan_plan[512];	/* its scans, "Index Scan using t_pkey" ... */
	char		action_plan[512];
	char		error[512];		/* "SQLSTATE: message" of a batch that failed, or "" */
} RehearsalBatch;

/* a rehearsal asked for (the caller fills the first fields) and its answer */
typedef struct Rehearsal
{
	Oid			dboid;
	Oid			run_as;
	int			batches;
	char		name[BACKFILL_NAME_MAXLEN + 1];

	int			state;			/* 0: no answer, 1: answered, 2: failed */
	int			sqlerrcode;
	char		message[REHEARSAL_LONG_TEXT];
	char		detail[REHEARSAL_LONG_TEXT];
	char		hint[REHEARSAL_LONG_TEXT];

	int			nbatches;
	RehearsalBatch batch[REHEARSAL_MAX_BATCHES];

	/* the projection of the whole pass */
	bool		has_estimate;
	int64		rows_to_do;
	int64		batches_to_do;
	bool		projected;		/* some batch found rows: the times below mean something */
	double		duration_ms;
	int64		wal_bytes;
	char		assumptions[2048];
} Rehearsal;

/*
 * In a rehearsal worker logged in as the declaration's run_as: run the
 * rehearsal r asks for and write its answer into r (an error that ends it
 * too, state 2).
 */
extern void rehearse_run(Rehearsal *r);

#endif							/* BACKFILL_REHEARSE_H */
