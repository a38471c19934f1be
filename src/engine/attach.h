/*-------------------------------------------------------------------------
 *
 * attach.h
 *	  A leaf attached while a pass runs (attach.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_ATTACH_H
#define BACKFILL_ATTACH_H

#include "pass.h"

extern bool cover_new_leaves(Pass *pass);
extern void note_leaves_seen(Pass *pass);
extern bool leaves_unchanged_since_count(Pass *pass);
extern void pass_count_again(Pass *pass);

#endif							/* BACKFILL_ATTACH_H */
