/*-------------------------------------------------------------------------
 *
 * events.h
 *	  Lifecycle events (events => topic): the topic checked at declaration.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_EVENTS_H
#define BACKFILL_EVENTS_H

#include "postgres.h"

/*
 * events => topic of a declaration: refuse a topic with no sink (BF045)
 * or one the declarer may not emit into (BF042).  In a catalog scope.
 */
extern void events_check_topic(const char *name, const char *topic, Oid declarer);

#endif							/* BACKFILL_EVENTS_H */
