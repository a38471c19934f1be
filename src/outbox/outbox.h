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

/* the longest topic, in bytes (a sink's trigger says the same in SQL) */
#define OUTBOX_TOPIC_MAX 200

/* refuse a topic longer than OUTBOX_TOPIC_MAX (BF011) */
extern void outbox_check_topic_length(const char *topic);

/*
 * May role emit into a topic whose sink owner is owner and which is
 * granted to grantees (an oid[] datum, or NULL)?
 */
extern bool outbox_role_allowed(Oid role, Oid owner, Datum grantees, bool grantees_null);

/* a topic's owner and grantees (an oid[] datum); false: it has no sink */
extern bool outbox_topic_owner(Datum topic, Oid *owner, Datum *grantees, bool *grantees_null);

/*
 * Queue a message in the caller's transaction (connected to SPI), its
 * commit made synchronous; check_emitter refuses an emitter the topic's
 * owner did not allow (BF016).  Returns its id.
 */
extern int64 outbox_insert(Datum topic, Datum key, Datum payload, Oid emitter,
						   bool check_emitter);

#endif							/* BACKFILL_OUTBOX_H */
