/*-------------------------------------------------------------------------
 *
 * pagecycle.h
 *	  The cursors a pages source has been asked for in a pass, to find a
 *	  cursor that comes again before its page is asked for twice.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_PAGECYCLE_H
#define BACKFILL_PAGECYCLE_H

#include "postgres.h"

/* the cursors of the most recent pages kept, each; of the pages before, one in so many */
#define PAGECYCLE_WINDOW	100000

typedef struct PageCycle PageCycle;

/*
 * A walk of a partition's pages by this process, in a memory context of
 * its own under parent; first_page is the number of the next page the
 * walk asks for (1 for the first page of the pass).
 */
extern PageCycle *pagecycle_create(MemoryContext parent, int64 first_page);
extern void pagecycle_free(PageCycle *pc);

/*
 * The number of the page that was asked for with cursor earlier in the
 * walk, or 0 when none (as far as the walk keeps: see pagecycle.c).
 */
extern int64 pagecycle_find(PageCycle *pc, const char *cursor);

/* The walk's next page, asked for with cursor (NULL: none), is done. */
extern void pagecycle_done(PageCycle *pc, const char *cursor);

/* the number of the page the walk asks for next */
extern int64 pagecycle_next_page(PageCycle *pc);

#endif							/* BACKFILL_PAGECYCLE_H */
