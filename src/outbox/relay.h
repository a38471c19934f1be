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

/* is there outbox work (delivery or pruning)?  In a transaction, SPI connected */
extern bool relay_has_work(void);

#endif							/* BACKFILL_RELAY_H */
