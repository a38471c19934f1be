/*-------------------------------------------------------------------------
 *
 * scheduler.h
 *	  A database's scheduler: starts and supervises its lanes and relay.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_SCHEDULER_H
#define BACKFILL_SCHEDULER_H

#include "postgres.h"

PGDLLEXPORT void backfill_scheduler_main(Datum main_arg);

#endif							/* BACKFILL_SCHEDULER_H */
