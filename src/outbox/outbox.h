/*-------------------------------------------------------------------------
 *
 * outbox.h
 *	  Emitting outbox messages, and who may emit into a topic.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_OUTBOX_H
#define BACKFILL_OUTBOX_H

#include "postgres.h"

/*
 * May role emit into a topic whose sink owner is owner and which is
 * granted to grantees (an oid[] datum, or NULL)?
 */
extern bool outbox_role_allowed(Oid role, Oid owner, Datum grantees, bool grantees_null);

#endif							/* BACKFILL_OUTBOX_H */
