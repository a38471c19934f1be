/*-------------------------------------------------------------------------
 *
 * spicols.c
 *	  The columns of an SPI result found by name, once per query, as
 *	  catalogs/declaration.c reads a declaration: a reader names the
 *	  columns it wants (each aliased in its SELECT) and reads each row by
 *	  the numbers found, never by a position counted in the query's text.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"

#include "spicols.h"

void
spi_columns(TupleDesc desc, const char *const *names, int n, int *numbers)
{
	for (int i = 0; i < n; i++)
	{
		numbers[i] = SPI_fnumber(desc, names[i]);
		if (numbers[i] <= 0)
			elog(ERROR, "column \"%s\" is not in the result", names[i]);
	}
}
