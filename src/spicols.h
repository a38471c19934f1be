/*-------------------------------------------------------------------------
 *
 * spicols.h
 *	  The columns of an SPI result found by name, once per query
 *	  (spicols.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_SPICOLS_H
#define BACKFILL_SPICOLS_H

#include "postgres.h"

#include "access/tupdesc.h"

/*
 * The numbers of the columns names[0..n-1] in the result desc describes,
 * into numbers[0..n-1]; a name the result lacks is an error.
 */
extern void spi_columns(TupleDesc desc, const char *const *names, int n, int *numbers);

#endif							/* BACKFILL_SPICOLS_H */
