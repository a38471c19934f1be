/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  A key column's statistics as planning reads them: its histogram
 *	  bounds and most common values (with their frequencies) from
 *	  pg_stats, as the lane's role, so only what the role may see of the
 *	  table.  The plan of a composite key's space (keyset.c) and of one
 *	  leaf's piece (leaves.c) read them here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "stats.h"

/* the elements of an anyarray of pg_stats, if they are of the column's type */
static int
stats_array(HeapTuple tuple, TupleDesc desc, int fno, Oid type, Datum **elems)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, fno, &isnull);
	ArrayType  *arr;
	int16		len;
	bool		byval;
	char		align;
	bool	   *nulls;
	int			n;

	if (isnull)
		return 0;
	arr = DatumGetArrayTypeP(d);
	if (ARR_ELEMTYPE(arr) != type)
		return 0;
	get_typlenbyvalalign(type, &len, &byval, &align);
	deconstruct_array(arr, type, len, byval, align, elems, &nulls, &n);
	return n;
}

/*
 * pg_stats of a column of relid (inherited: the whole tree of a
 * partitioned table, else the relation's own rows); nothing (zeros) when
 * it has none or the role may not see them.
 */
void
stats_read_column(Oid relid, const char *column, Oid type, bool inherited, ColumnStats *stats)
{
	Oid			types[4] = {TEXTOID, TEXTOID, NAMEOID, BOOLOID};
	Datum		values[4];
	NameData	attname;

	memset(stats, 0, sizeof(ColumnStats));
	namestrcpy(&attname, column);
	values[0] = CStringGetTextDatum(get_namespace_name(get_rel_namespace(relid)));
	values[1] = CStringGetTextDatum(get_rel_name(relid));
	values[2] = NameGetDatum(&attname);
	values[3] = BoolGetDatum(inherited);
	if (SPI_execute_with_args("SELECT s.histogram_bounds, s.most_common_vals,"
							  "       s.most_common_freqs FROM pg_catalog.pg_stats s"
							  " WHERE s.schemaname = $1 AND s.tablename = $2"
							  "   AND s.attname = $3 AND s.inherited = $4",
							  4, types, values, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		return;
	stats->nhist = stats_array(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, type,
							   &stats->hist);
	stats->nmcv = stats_array(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, type,
							  &stats->mcv);
	if (stats->nmcv > 0)
	{
		Datum	   *f;
		int			nf = stats_array(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3,
									 FLOAT4OID, &f);

		stats->freqs = palloc0(sizeof(float4) * stats->nmcv);
		for (int j = 0; j < Min(nf, stats->nmcv); j++)
			stats->freqs[j] = DatumGetFloat4(f[j]);
	}
}
