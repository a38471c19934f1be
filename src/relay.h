/*-------------------------------------------------------------------------
 *
 * relay.h
 *	  The outbox relay worker.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_RELAY_H
#define BACKFILL_RELAY_H

#include "postgres.h"

PGDLLEXPORT void backfill_relay_main(Datum main_arg);

/* in lane.h too: a function's quoted, qualified name */
extern char *function_name(Oid fn);

#endif							/* BACKFILL_RELAY_H */
