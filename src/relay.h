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

#endif							/* BACKFILL_RELAY_H */
