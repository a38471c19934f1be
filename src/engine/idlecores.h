/*-------------------------------------------------------------------------
 *
 * idlecores.h
 *	  The machine's idle cores between two readings (idlecores.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_IDLECORES_H
#define BACKFILL_IDLECORES_H

extern double idle_cores_since_last(int cores);

#endif							/* BACKFILL_IDLECORES_H */
