/*-------------------------------------------------------------------------
 *
 * identity.h
 *	  A declaration's table and roles: the oids it stores must still carry
 *	  the names it was declared with.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_IDENTITY_H
#define BACKFILL_IDENTITY_H

#include "postgres.h"

/*
 * Refuse (ERROR) to run a declaration whose owner, run_as role or table is
 * no longer the one it names.  Call inside SPI, outside a catalog scope.
 */
extern void identity_check(const char *name);

/*
 * The same question for a lane, which fails its pass instead: false when
 * the declaration may run, else true with the SQLSTATE and a message.
 */
extern bool identity_problem(const char *name, int *sqlerrcode, char **message);

#endif							/* BACKFILL_IDENTITY_H */
