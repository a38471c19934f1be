/*-------------------------------------------------------------------------
 *
 * requires.h
 *	  What a declaration requires before a pass may start: a schema
 *	  migration, read as the declaring role, and another backfill, which
 *	  must belong to a role the declaring role is a member of.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_REQUIRES_H
#define BACKFILL_REQUIRES_H

#include "postgres.h"

/*
 * Refuse (BF016) a requires_backfill that names a backfill declared by a
 * role that owner is not a member of.  A name nobody has declared yet
 * passes: it is checked again at every run.  Must be called inside SPI.
 */
extern void requires_check_backfill(const char *name, Oid owner, const char *required);

#endif							/* BACKFILL_REQUIRES_H */
