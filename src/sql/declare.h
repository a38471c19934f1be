/*-------------------------------------------------------------------------
 *
 * declare.h
 *	  backfill_declare(): validating and storing a declaration.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_DECLARE_H
#define BACKFILL_DECLARE_H

#include "postgres.h"

/* the role must be able to connect: lanes log in as it */
extern void check_role_can_login(const char *name, Oid roleid);

#endif							/* BACKFILL_DECLARE_H */
