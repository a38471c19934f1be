/*-------------------------------------------------------------------------
 *
 * declaration.h
 *	  A backfill's declaration as one table of columns: the row of
 *	  backfill.declaration in C, and how it is stored, loaded and
 *	  checksummed.
 *
 * Adding an option is one row in declaration_columns (declaration.c) and
 * a field here, its column and its argument of backfill_declare in the
 * upgrade script, and its validation in declare.c.  Until that script has
 * run (a new library under an older catalog), a column the catalog lacks
 * reads as its default and is not stored, and an argument the signature
 * lacks takes its default.  The INSERT ... ON
 * CONFLICT, the SELECT lists and the checksum are built from the table,
 * and backfill_declare refuses to run under a signature whose arguments
 * the table does not name.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_DECLARATION_H
#define BACKFILL_DECLARATION_H

#include "postgres.h"

#include "utils/array.h"
#include "utils/jsonb.h"

/* one row of backfill.declaration; NULL pointers, InvalidOid and 0 stand for NULL */
typedef struct Declaration
{
	char	   *name;

	/* the source: a table read by key ... */
	Oid			relid;
	char	   *relation;		/* schema-qualified, quoted */
	char	   *key_column;		/* the key's (first) column */
	Oid			key_type;
	ArrayType  *key_columns;	/* text[]: every column of a composite key, or NULL */
	ArrayType  *key_types;		/* regtype[] beside it, or NULL */
	char	   *predicate;
	/* ... or a pages function */
	Oid			pages_fn;
	Oid			count_fn;
	Oid			pages_owner;	/* who owned them at declaration: a function */
	Oid			count_owner;	/* of that name owned by another never runs */

	char	   *action;
	char	   *revert;			/* undoes the action for a range (issue 14) */
	char	   *revert_predicate;	/* the rows a revert pass visits */
	char	   *action_set;		/* set =>: the engine wrote the action (issue 24) */
	bool		action_delete;	/* delete =>: the engine wrote a DELETE */
	bool		guard;			/* a hand-written UPDATE/DELETE must repeat the predicate */
	bool		guarded;		/* the action changes only rows that match (set, delete, or guard checked) */

	/* pacing, retries and timeouts */
	int32		batch_size;
	double		rate;			/* batches per second */
	int64		max_wal_rate;	/* WAL bytes per second, 0: no budget (stored NULL) */
	char	   *throttle_when;	/* an SQL boolean expression: true holds the lanes back */
	ArrayType  *windows;		/* text[]: when the lanes may work (windows.c), or NULL */
	char	   *window_time_zone;	/* the windows' time zone (NULL with no windows) */
	char	   *events;			/* the outbox topic of its lifecycle events, or NULL */
	int32		max_parallel;
	int32		max_attempts;
	int32		backoff_base_ms;
	int32		backoff_cap_ms;
	int32		batch_timeout_ms;
	int32		lock_timeout_ms;
	int32		target_batch_ms;	/* 0: a fixed batch size (stored NULL) */
	int32		min_batch_size;
	int32		max_batch_size;
	bool		async_commit;	/* batches commit without waiting for disk */
	int32		max_failed_rows;	/* isolated rows a pass tolerates */
	int32		watch_ms;		/* 0: no drift watch (stored NULL) */

	/* where, for whom and after what it runs */
	ArrayType  *environments;
	Jsonb	   *input_shape;
	char	   *scope;
	char	   *requires;
	char	   *requires_backfill;
	Oid			run_as;
	Jsonb	   *settings;
	char	   *tenant;
	char	   *search_path;	/* the declarer's, which the lanes use */
	Oid			owner;
	char	   *checksum;
} Declaration;

/* the fields above: declaration_columns has one row for each */
#define DECLARATION_NCOLUMNS 49

/* the most columns a key may have */
#define DECLARATION_MAX_KEY_COLUMNS 4

/* how the C side holds a column */
typedef enum DeclarationField
{
	DECL_TEXT,					/* char * */
	DECL_NAME,					/* char *, stored as name */
	DECL_OID,					/* Oid (regclass, regtype, regrole) */
	DECL_FUNCTION,				/* Oid, stored as the function's name (text) */
	DECL_INT4,					/* int32 */
	DECL_INT8,					/* int64 */
	DECL_FLOAT8,				/* double */
	DECL_BOOL,					/* bool */
	DECL_JSONB,					/* Jsonb * */
	DECL_TEXT_ARRAY,			/* ArrayType * of text */
	DECL_OID_ARRAY				/* ArrayType * of oid (regtype[]) */
} DeclarationField;

/* how a column enters the checksum, in the order of the table */
typedef enum DeclarationChecksum
{
	DECL_NOT_SUMMED,			/* tuning: changing it keeps the checksum */
	DECL_SUM_LINE,				/* "label value\n" as it is */
	DECL_SUM_STATEMENT,			/* "label " and the value, white space normalized */
	DECL_SUM_WORD,				/* "label value" on the closing line, normalized */
	DECL_SUM_WORD_IF_SET		/* the same, only when not NULL */
} DeclarationChecksum;

typedef struct DeclarationColumn
{
	const char *column;			/* in backfill.declaration */
	Oid			sqltype;		/* its type there */
	DeclarationField field;		/* how struct Declaration holds it */
	size_t		offset;			/* offsetof(Declaration, ...) */
	bool		not_null;		/* NOT NULL there; if not, a 0 / NULL value stores NULL */
	DeclarationChecksum sum;	/* whether and how it enters the checksum */
	const char *sum_label;		/* its word in the checksum */
	const char *argument;		/* the backfill_declare argument it comes from, or NULL */
	Oid			argtype;		/* that argument's type */
	const char *argdefault;		/* its default in the signature; NULL: required */
} DeclarationColumn;

extern const DeclarationColumn declaration_columns[];
extern const int declaration_ncolumns;

/* the column that an argument of backfill_declare fills, or NULL */
extern const DeclarationColumn *declaration_column_of_argument(const char *argument);

/* sha256 (hex) of the normalized definition: the columns that enter it */
extern char *declaration_checksum(const Declaration *decl);

/* INSERT ... ON CONFLICT (name) DO UPDATE, inside a catalog scope */
extern void declaration_store(const Declaration *decl);

/* "alias.name, alias.relid, ...": every column, to read back by name */
extern char *declaration_select_list(const char *alias);

/*
 * Read the columns of declaration_select_list from row "row" of
 * SPI_tuptable by their names, copying into cxt.  False when the row's
 * name is NULL (an outer join found no declaration).
 */
extern bool declaration_read(int row, Declaration *decl, MemoryContext cxt);

/* lock a declaration's row (FOR UPDATE) and read it; false if there is none */
extern bool declaration_lock(const char *name, Declaration *decl);

/* is its action guarded over a table, so that a pass may sweep again (issue 31) */
extern bool declaration_sweeps(const char *name);

#endif							/* BACKFILL_DECLARATION_H */
