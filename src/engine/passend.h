/*-------------------------------------------------------------------------
 *
 * passend.h
 *	  The end of a pass (passend.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PASSEND_H
#define BACKFILL_PASSEND_H

#include "pass.h"

extern void pass_finish(Pass *pass);

#endif							/* BACKFILL_PASSEND_H */
