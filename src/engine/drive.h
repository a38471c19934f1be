/*-------------------------------------------------------------------------
 *
 * drive.h
 *	  The driver loop of a pass, for a lane and for a session that works a
 *	  pass itself (drive.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_DRIVE_H
#define BACKFILL_DRIVE_H

#include "postgres.h"

#include "pass.h"

/* who drives a pass: the difference between a lane's loop and a session's */
typedef enum PassDriver
{
	DRIVE_LANE,					/* a lane (worker mode): its session is the pass's, the
								 * declaration's settings hold for all of it */
	DRIVE_SESSION				/* a caller's session (xact.c's session mode, finalize):
								 * no settings; the plans freed when it is done */
} PassDriver;

/*
 * Prepare and plan the pass, claim and work partitions until none is left,
 * and end it (again while the end finds leaves attached since the plan);
 * the leases are this process's.  False when the work stopped before the
 * end: a step failed or a partition's work ended it (a pause, a cancel,
 * a deadline, a yield).
 */
extern bool drive_pass(Pass *pass, PassDriver driver, MemoryContext scratch);

#endif							/* BACKFILL_DRIVE_H */
