/*-------------------------------------------------------------------------
 *
 * pagecycle.c
 *	  The cursors a pages source has been asked for in a pass, to find a
 *	  cursor that comes again before its page is asked for twice.
 *
 * A pages source whose next cursors go round (A, B, A, ...) would keep a
 * pass running for ever, each page done again and again.  batch.c asks
 * before it runs a page's action whether the page's next cursor is one
 * the pass asked for before (pagecycle_find), and fails the pass with
 * BF001 if so: the page that leads back rolls back, no page is done twice.
 *
 * What is kept, and so the bounds: the 64-bit hash of the cursor of each
 * of the last PAGECYCLE_WINDOW pages of the walk (a ring), and of every
 * PAGECYCLE_WINDOW-th page's cursor before them (landmarks, never
 * forgotten: a pass of a thousand million pages keeps ten thousand).  A
 * cycle of at most PAGECYCLE_WINDOW pages is therefore found before any
 * of its pages is asked for again; a longer one reaches a landmark inside
 * it after at most PAGECYCLE_WINDOW pages asked for a second time, and
 * then ends the pass the same way.  About 3 MB at the bound.  Two
 * cursors with the same hash would be taken for one (a false BF001): with
 * 64 bits, a chance of about one in 10^14 per page.
 *
 * The walk is this process's: a lane that starts again (a crash, a pause
 * and resume, its fair share, finalize taking the partition over) walks
 * on from the checkpoint knowing only the cursors from then on, so a
 * cycle back to a cursor from before it is found within the same bounds,
 * counted from the new start: its pages up to there may be asked for
 * once more, which a pages source's at-least-once contract allows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/memutils.h"

#include "pagecycle.h"

/* a cursor kept: its hash, and the sequence number of its page in the walk */
typedef struct SeenCursor
{
	uint64		hash;
	int64		seq;
	char		status;
} SeenCursor;

#define SH_PREFIX seen
#define SH_ELEMENT_TYPE SeenCursor
#define SH_KEY_TYPE uint64
#define SH_KEY hash
#define SH_HASH_KEY(tb, key) ((uint32) ((key) ^ ((key) >> 32)))
#define SH_EQUAL(tb, a, b) ((a) == (b))
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

struct PageCycle
{
	MemoryContext cxt;
	seen_hash  *seen;
	uint64	   *ring;			/* hashes of the last pages' cursors, by seq % window */
	int64		ring_size;		/* allocated, up to PAGECYCLE_WINDOW */
	int64		first_page;		/* the page number of seq 0 */
	int64		next_seq;		/* the sequence number of the walk's next page */
};

PageCycle *
pagecycle_create(MemoryContext parent, int64 first_page)
{
	MemoryContext cxt = AllocSetContextCreate(parent, "pg_backfill page cursors",
											  ALLOCSET_DEFAULT_SIZES);
	PageCycle  *pc = MemoryContextAllocZero(cxt, sizeof(PageCycle));

	pc->cxt = cxt;
	pc->seen = seen_create(cxt, 1024, NULL);
	pc->ring_size = 1024;
	pc->ring = MemoryContextAlloc(cxt, pc->ring_size * sizeof(uint64));
	pc->first_page = first_page;
	return pc;
}

void
pagecycle_free(PageCycle *pc)
{
	if (pc != NULL)
		MemoryContextDelete(pc->cxt);
}

static uint64
cursor_hash(const char *cursor)
{
	return hash_bytes_extended((const unsigned char *) cursor, strlen(cursor), 0);
}

int64
pagecycle_find(PageCycle *pc, const char *cursor)
{
	SeenCursor *s = seen_lookup(pc->seen, cursor_hash(cursor));

	return s ? pc->first_page + s->seq : 0;
}

/* Make room for seq in the ring: grow it while the walk is short, else forget the oldest. */
static void
ring_make_room(PageCycle *pc, int64 seq)
{
	int64		slot = seq % PAGECYCLE_WINDOW;

	if (seq >= PAGECYCLE_WINDOW)
	{
		int64		old_seq = seq - PAGECYCLE_WINDOW;

		/* a landmark stays: a long cycle comes back to one */
		if (old_seq % PAGECYCLE_WINDOW != 0)
			(void) seen_delete(pc->seen, pc->ring[slot]);
		return;
	}
	if (slot >= pc->ring_size)
	{
		pc->ring_size = Min(pc->ring_size * 2, PAGECYCLE_WINDOW);
		pc->ring = repalloc(pc->ring, pc->ring_size * sizeof(uint64));
	}
}

void
pagecycle_done(PageCycle *pc, const char *cursor)
{
	int64		seq = pc->next_seq++;
	uint64		hash;
	bool		found;
	SeenCursor *s;

	/*
	 * the pass's first page (seq 0 of a walk from page 1, a landmark whose
	 * slot is never read): no cursor can lead back to it
	 */
	if (cursor == NULL)
		return;
	hash = cursor_hash(cursor);
	ring_make_room(pc, seq);
	pc->ring[seq % PAGECYCLE_WINDOW] = hash;
	s = seen_insert(pc->seen, hash, &found);
	s->seq = seq;
}

int64
pagecycle_next_page(PageCycle *pc)
{
	return pc->first_page + pc->next_seq;
}
