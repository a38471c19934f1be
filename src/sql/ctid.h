/*-------------------------------------------------------------------------
 *
 * ctid.h
 *	  key => 'ctid' at declaration: the heap in block order, what it is
 *	  refused for, and the range form of its batch statement (ctid.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_CTID_H
#define BACKFILL_CTID_H

#include "postgres.h"

#include "declaration.h"

/* does key (as backfill_declare got it) name ctid, alone? */
extern bool ctid_named(const char *name, const char *key);

/* the table as the engine's statements name it: ONLY it in block order */
extern char *ctid_target(const Declaration *d);

/* the WHERE clause of a batch in block order: $1, $2 the TID range, or NULL */
extern char *ctid_range_form(const Declaration *d);

/*
 * refuse what a pass in block order cannot do (BF001, BF011), once the
 * statements are checked (d->guarded known; SPI connected)
 */
extern void ctid_check_declaration(const Declaration *d);

#endif							/* BACKFILL_CTID_H */
