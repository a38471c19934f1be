/*-------------------------------------------------------------------------
 *
 * catalog.h
 *	  Reading and writing pg_backfill's catalogs safely from any role.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_CATALOG_H
#define BACKFILL_CATALOG_H

#include "postgres.h"

#include "executor/spi.h"

/*
 * State saved by catalog_enter() and restored by catalog_leave().
 */
typedef struct CatalogScope
{
	Oid			saved_userid;
	int			saved_sec_context;
	int			guc_nest_level;
} CatalogScope;

/*
 * Between catalog_enter() and catalog_leave() SPI statements run as the
 * extension's owner with search_path = pg_catalog, pg_temp: the only way
 * the catalogs are written.  User SQL never runs inside such a scope.
 */
extern void catalog_enter(CatalogScope *scope);
extern void catalog_leave(CatalogScope *scope);

/* SPI helpers; values always travel as parameters */
extern int	catalog_exec(const char *sql, int nargs, Oid *types, Datum *values,
						 const char *nulls, int expected);
/* a SELECT whose only parameter ($1, text) is a backfill's name: its rows */
extern int	catalog_exec_named(const char *sql, const char *name);
extern int	catalog_exec_cached(SPIPlanPtr *cache, const char *sql, int nargs, Oid *types,
								Datum *values, const char *nulls, int expected);
/* a read with the newest committed data, whatever the transaction's snapshot */
extern int	catalog_exec_latest(const char *sql, int nargs, Oid *types, Datum *values,
								const char *nulls);
extern Datum catalog_getdatum(int row, int col, bool *isnull);
extern char *catalog_gettext(int row, int col);
/* a column as int8, oid or bool: 0, InvalidOid or false for NULL */
extern int64 catalog_getint64(int row, int col);
extern bool catalog_getbool(int row, int col);
extern Oid	catalog_getoid(int row, int col);
/* a varlena column copied out of SPI's memory, detoasted; 0 for NULL */
extern Datum catalog_getcopy(int row, int col);
/* a yes-or-no query (read-only, as the current user); its error says what failed */
/* how catalog_read_row reads a column: NULL reads as InvalidOid, NULL, 0, false */
typedef enum CatalogKind
{
	CATALOG_OID,
	CATALOG_TEXT,				/* a palloc'd copy */
	CATALOG_INT64,
	CATALOG_BOOL,
	CATALOG_COPY				/* a Datum, detoasted and copied (catalog_getcopy) */
} CatalogKind;

/* a column of an SPI result, by name, and the field of the caller's struct it fills */
typedef struct CatalogColumn
{
	const char *column;
	CatalogKind kind;
	size_t		offset;
} CatalogColumn;

/* a column whose name is its field's name in struct type */
#define CATALOG_FIELD(type, field, kind) {#field, kind, offsetof(type, field)}

extern void catalog_read_row(int row, const CatalogColumn *columns, int ncolumns, void *into);
extern bool catalog_ask(const char *what, const char *sql, int nargs, Oid *types,
						Datum *values);

/* a function's schema-qualified, quoted name, to call it in SQL */
extern char *function_name(Oid fn);

/* the backfill name checks every entry point shares */
extern void check_backfill_name(const char *name);
extern void check_new_backfill_name(const char *name);
extern bool text_has_invisible(const char *text);

/*
 * Are this database's catalogs at the library's version (cached per
 * transaction; *version: the version they are at)?  check_catalog_current raises BF027 when not, naming what
 * was refused ("run backfill", name), or (what NULL) only the versions;
 * every SQL entry point calls it, and so does every catalog_enter.
 */
extern bool catalog_is_current(char **version);
extern void check_catalog_current(const char *what, const char *name);

/* refuse what would write the catalogs on a hot standby (BF026) */
extern void check_not_standby(const char *what, const char *name);

/* is the caller allowed to act for the role that owns a backfill? */
extern void check_backfill_member(const char *name, Oid owner);

/* is declaration alias retired (backfill_retire), in SQL: an EXISTS over backfill.retired */
extern char *retired_sql(const char *alias);

/*
 * Refuse (BF041) to "what" (e.g. "run") a retired backfill.  Reads the
 * newest state (a retire committed while the caller waited for the
 * declaration's lock counts).  Inside SPI.
 */
extern void check_not_retired(const char *name, const char *what);

/*
 * A backfill a call acts on, as the caller read it (found, its owner):
 * declared (BF002), the caller a member of its owner, and not retired
 * (BF041, "what" as for check_not_retired).  Outside a catalog scope.
 */
extern void check_backfill_target(const char *name, bool found, Oid owner, const char *what);

/* BF002: no declaration of that name (hint: backfill_pending) */
extern void report_not_declared(const char *name) pg_attribute_noreturn();

#endif							/* BACKFILL_CATALOG_H */
