/*-------------------------------------------------------------------------
 *
 * drift.c
 *	  Drift: probes of a completed backfill's predicate, recorded; the
 *	  watch's catch-up passes; reopening a required backfill that drifted.
 *
 * A completed table backfill has drifted when its predicate matches rows
 * again (rows written since by an application still on the old code,
 * say).  A probe asks the predicate, bounded (LIMIT 1,000: never a full
 * count), and records what it found, and when, in backfill.probe, which
 * backfill_pending reads: reports evaluate no declarer's SQL.
 *
 * A probe runs only in a "pg_backfill probe" worker (workers/probe.c),
 * logged in as the backfill's run_as role, its SQL through asrole.c
 * (restricted, pg_temp last, rolled back) under backfill.probe_lock_timeout
 * and backfill.probe_timeout: never in the scheduler's loop, never in a
 * report or another role's session (but for finalize's, in a session
 * logged in as run_as itself: drift_probe_here).  Five things start one:
 *
 *   watch     a completed backfill declared with watch => interval, due:
 *             the scheduler starts the probe; on drift the probe enqueues a
 *             catch-up pass (forced, ledger column watch) over the rows
 *             that match again, and backfill.watch counts the probes.  A
 *             catch-up pass that healed no row doubles the interval, up to
 *             a day, until one heals rows or the backfill is declared again
 *             (watch_interval_in_force).
 *   asked     backfill_probe(name), which waits for the answer.
 *   required  a pass of A that requires backfill B is about to start: the
 *             scheduler keeps it queued until a probe of B has run; if B's
 *             predicate matches again the probe enqueues a new pass of B
 *             (forced: its last one completed) and A waits for it, but only
 *             when the reopen is something B's owner could do and A's owner
 *             may ask for (a member of B's owner): a role never force-runs
 *             another role's backfill.
 *   requires  a queued pass whose declaration requires a migration: the
 *             probe reads only the migrations table.
 *   finalize  CALL backfill_finalize once the newest pass completed: in a
 *             probe worker, or in the caller's session when it is run_as's
 *             own (drift_probe_here); on drift finalize enqueues a catch-up
 *             pass as the watch does (drift_catch_up) and waits for it.
 *
 * Every probe also reads the migration the backfill requires (requires.c,
 * as its owner, bounded) into backfill.requirement: the scheduler lets a
 * queued pass start on that record, and backfill_pending shows it.
 *
 * The convergence count at a pass's end (pass.c) records the rest: what
 * matches beyond the pass's bound (run.beyond), when the pass completed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "storage/ipc.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "asrole.h"
#include "catalog.h"
#include "config.h"
#include "deadline.h"
#include "drift.h"
#include "requires.h"
#include "enqueue.h"
#include "errors.h"
#include "tenancy.h"
#include "xact.h"

PG_FUNCTION_INFO_V1(backfill_drift_probe);

/* a drift probe reads at most this many rows */
#define DRIFT_PROBE_LIMIT	1000

int64
drift_name_hash(const char *name)
{
	return DatumGetInt64(DirectFunctionCall2Coll(hashtextextended, DEFAULT_COLLATION_OID,
												 CStringGetTextDatum(name), Int64GetDatum(0)));
}

/*
 * A reopen is a forced run of B on behalf of A's owner: only what B's own
 * owner could do here (B's environment, its run_as role, a role that can
 * log in), asked by a role that may act for B's owner.  Raises BF016 or
 * BF004 otherwise.
 */
static void
check_reopen_allowed(const char *a_name, Oid a_owner, const char *b_name, Oid b_owner,
					 Oid b_run_as, Datum b_environments, const char *b_envlist)
{
	requires_check_backfill(a_name, a_owner, b_name);
	check_environment(b_name, b_environments, b_envlist);
	tenancy_check_run_as(b_name, b_owner, b_run_as);
	check_role_can_login(b_name, b_run_as);
}

/*
 * How many rows (at most DRIFT_PROBE_LIMIT) match a predicate now, as
 * run_as with its search_path (asrole.c: bounded, rolled back).  Errors
 * are raised.  The caller is connected to SPI.
 */
static int64
probe_rows(const char *name, Oid run_as, const char *search_path, const char *relation,
		   const char *predicate)
{
	char	   *answer;

	answer = asrole_query(name, run_as, search_path,
						  psprintf("SELECT pg_catalog.count(*) FROM (SELECT 1 FROM %s WHERE (\n%s\n)"
								   " LIMIT %d) probe", relation, predicate, DRIFT_PROBE_LIMIT),
						  0, NULL, NULL, NULL, NULL);
	return answer != NULL ? strtoll(answer, NULL, 10) : 0;
}

/*
 * backfill.drift_probe(name) evaluated a predicate in the caller's session
 * (0.5).  0.6 drops it (backfill_probe replaces it); the symbol stays so
 * that the upgrade chain from 0.1 can create the function on its way.
 */
Datum
backfill_drift_probe(PG_FUNCTION_ARGS)
{
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_PROBE_FAILED),
			 errmsg("backfill.drift_probe is gone: backfill \"%s\" is probed by backfill_probe",
					text_to_cstring(PG_GETARG_TEXT_PP(0))),
			 errdetail("A drift probe runs in a background worker as the backfill's role, "
					   "never in the caller's session."),
			 errhint("Finish the update (ALTER EXTENSION pg_backfill UPDATE) and call "
					 "backfill_probe(name).")));
	PG_RETURN_NULL();
}

/*
 * B, the table backfill that the declaration of the waiting pass ($1)
 * requires; never one whose oids no longer carry the roles it names.
 */
#define REQUIRED_SQL \
	"SELECT b.name AS b_name, b.relation AS b_relation, b.predicate AS b_predicate," \
	"  b.run_as AS b_run_as, b.checksum AS b_checksum, b.owner AS b_owner," \
	"  b.search_path AS b_search_path, a.name AS a_name," \
	"  (SELECT pg_catalog.max(l.run_id) FROM backfill.ledger l" \
	"    WHERE l.ledger_name = b.name) AS b_last," \
	"  a.owner AS a_owner, b.environments AS b_environments," \
	"  pg_catalog.array_to_string(b.environments, ', ') AS b_envlist" \
	" FROM backfill.ledger la" \
	" JOIN backfill.declaration a ON a.name = la.declaration" \
	" JOIN backfill.declaration b ON b.name = a.requires_backfill" \
	" WHERE la.run_id = $1 AND b.relid IS NOT NULL AND b.scope IS NULL" \
	"   AND (SELECT i.code FROM backfill.identity_problem(b.name, b.relid," \
	"          b.relation, b.owner, b.owner_name, b.run_as, b.run_as_name) i)" \
	"       IS NULL AND NOT %s"

/* the required backfill B of a waiting pass of A, as drift reads it */
typedef struct Required
{
	char	   *a_name;
	Oid			a_owner;
	char	   *b_name;
	char	   *b_relation;
	char	   *b_predicate;
	Oid			b_run_as;
	char	   *b_checksum;
	Oid			b_owner;
	char	   *b_search_path;
	int64		b_last;			/* B's newest pass */
	Datum		b_environments;
	char	   *b_envlist;
} Required;

/* REQUIRED_SQL's columns, by name, and the fields they fill */
static const CatalogColumn required_columns[] = {
	CATALOG_FIELD(Required, a_name, CATALOG_TEXT),
	CATALOG_FIELD(Required, a_owner, CATALOG_OID),
	CATALOG_FIELD(Required, b_name, CATALOG_TEXT),
	CATALOG_FIELD(Required, b_relation, CATALOG_TEXT),
	CATALOG_FIELD(Required, b_predicate, CATALOG_TEXT),
	CATALOG_FIELD(Required, b_run_as, CATALOG_OID),
	CATALOG_FIELD(Required, b_checksum, CATALOG_TEXT),
	CATALOG_FIELD(Required, b_owner, CATALOG_OID),
	CATALOG_FIELD(Required, b_search_path, CATALOG_TEXT),
	CATALOG_FIELD(Required, b_last, CATALOG_INT64),
	CATALOG_FIELD(Required, b_environments, CATALOG_COPY),
	CATALOG_FIELD(Required, b_envlist, CATALOG_TEXT),
};

/*
 * Read B, the table backfill the waiting pass's declaration requires.
 * False when there is none to check: no such declaration, a pages or
 * scoped one, or one whose oids no longer carry its names.
 */
static bool
read_required(int64 waiting_run_id, Required *r, MemoryContext cxt)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(waiting_run_id)};
	bool		found;

	catalog_enter(&scope);
	/* a retired B is done for good: never reopened */
	found = catalog_exec(psprintf(REQUIRED_SQL, retired_sql("b")), 1, types, values, NULL,
						 SPI_OK_SELECT) == 1;
	if (found)
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);

		catalog_read_row(0, required_columns, lengthof(required_columns), r);
		MemoryContextSwitchTo(old);
	}
	catalog_leave(&scope);
	return found;
}

bool
drift_required_target(int64 waiting_run_id, DriftTarget *target, MemoryContext cxt)
{
	volatile bool found = false;

	worker_begin_xact("pg_backfill scheduler: reading a required backfill");
	PG_TRY();
	{
		Required	r;

		found = read_required(waiting_run_id, &r, cxt);
		if (found)
		{
			target->name = r.b_name;
			target->run_as = r.b_run_as;
		}
	}
	PG_CATCH();
	{
		/* a broken required backfill must not stop the scheduler */
		ErrorData  *edata = worker_abort_xact(cxt);

		ereport(WARNING,
				(errmsg("could not read the backfill that run " INT64_FORMAT " requires: %s",
						waiting_run_id, edata->message),
				 errhint("The waiting pass starts without the drift check.")));
		return false;
	}
	PG_END_TRY();
	worker_commit_xact();
	return found;
}

/* a watched backfill, as one look of the scheduler reads it */
typedef struct Watched
{
	char	   *name;
	char	   *relation;
	char	   *predicate;
	char	   *search_path;
	char	   *checksum;
	Oid			run_as;
	Oid			owner;
	int64		last_id;		/* its newest pass, completed */
	int64		due_in_ms;		/* until its next probe; <= 0: due */
	Datum		environments;
	char	   *envlist;
} Watched;

/*
 * The watched backfills whose newest pass is a completed forward pass with
 * the current checksum (a revert, a failure, a change or a retired
 * backfill is not watched),
 * plain table backfills whose oids carry their names, and how long until
 * each is due: its interval in force (%s: watch_interval_in_force) after
 * its last probe, or after that pass (rounded up to the millisecond: never
 * due early).
 */
#define WATCHED_SQL \
	"SELECT d.name, d.relation, d.predicate, d.search_path, d.checksum, d.run_as, d.owner," \
	"  last.run_id," \
	"  pg_catalog.ceil(pg_catalog.date_part('epoch', GREATEST(w.last_probe_at, last.finished_at)" \
	"     + %s * interval '1 millisecond' - pg_catalog.clock_timestamp())" \
	"   * 1000)::pg_catalog.int8," \
	"  d.environments, pg_catalog.array_to_string(d.environments, ', ')" \
	" FROM backfill.declaration d" \
	" JOIN LATERAL (SELECT l.run_id, l.status, l.direction, l.checksum, l.finished_at" \
	"    FROM backfill.ledger l WHERE l.ledger_name = d.name" \
	"   ORDER BY l.run_id DESC LIMIT 1) last ON true" \
	" LEFT JOIN backfill.watch w ON w.declaration = d.name" \
	" WHERE d.watch_ms IS NOT NULL AND d.relid IS NOT NULL AND d.scope IS NULL" \
	"   AND last.status = 'completed' AND last.direction = 'forward'" \
	"   AND last.checksum = d.checksum" \
	"   AND (SELECT i.code FROM backfill.identity_problem(d.name, d.relid, d.relation," \
	"          d.owner, d.owner_name, d.run_as, d.run_as_name) i) IS NULL" \
	"   AND NOT %s" \
	"   AND ($1::pg_catalog.int8 IS NULL" \
	"        OR pg_catalog.hashtextextended(d.name, 0) = $1::pg_catalog.int8)"

/*
 * The interval a watch probes at, in ms, as SQL over declaration d: the
 * declared one doubled by each catch-up pass in a row that healed no row,
 * up to a day (backfill.watch_interval_ms, pg_backfill--0.5--0.6.sql), so
 * that a predicate that matches only where the scheduler probes makes ever
 * fewer passes, never more than one per interval.
 */
static const char *
watch_interval_in_force(void)
{
	return "backfill.watch_interval_ms(d.name)";
}

/*
 * Read the watched backfills (all, or the one whose name hashes to
 * *name_hash) into cxt, in a transaction of their own.
 */
static List *
read_watched(MemoryContext cxt, const int64 *name_hash)
{
	CatalogScope scope;
	List	   *watched = NIL;
	int			n;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(name_hash ? *name_hash : 0)};
	char		nulls[1] = {name_hash ? ' ' : 'n'};

	worker_begin_xact("pg_backfill: reading the watched backfills");
	catalog_enter(&scope);
	/* a retired backfill is watched no more */
	n = catalog_exec(psprintf(WATCHED_SQL, watch_interval_in_force(), retired_sql("d")), 1, types,
					 values, nulls, SPI_OK_SELECT);
	for (int i = 0; i < n; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);
		Watched    *w = palloc0(sizeof(Watched));

		w->name = catalog_gettext(i, 1);
		w->relation = catalog_gettext(i, 2);
		w->predicate = catalog_gettext(i, 3);
		w->search_path = catalog_gettext(i, 4);
		w->checksum = catalog_gettext(i, 5);
		w->run_as = catalog_getoid(i, 6);
		w->owner = catalog_getoid(i, 7);
		w->last_id = catalog_getint64(i, 8);
		w->due_in_ms = catalog_getint64(i, 9);
		w->environments = catalog_getcopy(i, 10);
		w->envlist = catalog_gettext(i, 11);
		watched = lappend(watched, w);
		MemoryContextSwitchTo(old);
	}
	catalog_leave(&scope);
	worker_commit_xact();
	return watched;
}

/* Count a probe (found: rows it found, -1 when it could not read them). */
static void
watch_count_probe(const char *name, int64 found)
{
	CatalogScope scope;
	Oid			types[2] = {TEXTOID, INT8OID};
	Datum		values[2] = {CStringGetTextDatum(name), Int64GetDatum(found)};
	char		nulls[2] = {' ', found < 0 ? 'n' : ' '};

	catalog_enter(&scope);
	catalog_exec("INSERT INTO backfill.watch AS w"
				 "   (declaration, probes, drifts, last_probe_at, last_found)"
				 " VALUES ($1, 1, (coalesce($2, 0) > 0)::pg_catalog.int4, pg_catalog.clock_timestamp(), $2)"
				 " ON CONFLICT (declaration) DO UPDATE SET probes = w.probes + 1,"
				 "   drifts = w.drifts + EXCLUDED.drifts, last_probe_at = EXCLUDED.last_probe_at,"
				 "   last_found = EXCLUDED.last_found",
				 2, types, values, nulls, SPI_OK_INSERT);
	catalog_leave(&scope);
}

/*
 * Drift found: a catch-up pass, if the backfill may run here as it is
 * (its environment, run_as, a role that can log in) and, with its row
 * locked, its completed pass is still its newest (a backfill_run that came
 * first is not doubled).  Returns its run id, 0 when none was enqueued.
 */
static int64
catch_up(Watched *w)
{
	CatalogScope scope;
	bool		still_newest;

	check_environment(w->name, w->environments, w->envlist);
	tenancy_check_run_as(w->name, w->owner, w->run_as);
	check_role_can_login(w->name, w->run_as);
	catalog_enter(&scope);
	still_newest = catalog_exec_named("SELECT 1 FROM backfill.declaration WHERE name = $1 FOR UPDATE",
									  w->name) == 1 &&
		catalog_exec_named("SELECT pg_catalog.max(run_id) FROM backfill.ledger WHERE ledger_name = $1",
						   w->name) == 1 &&
		catalog_getint64(0, 1) == w->last_id;
	catalog_leave(&scope);
	if (!still_newest)
		return 0;
	return enqueue_pass_as(w->name, w->name, w->checksum, true, w->last_id, w->owner, NULL,
						   "forward", true);
}

static void
watch_heal(Watched *w, int64 found)
{
	int64		run_id = catch_up(w);

	if (run_id == 0)
		return;
	ereport(LOG,
			(errmsg("backfill \"%s\" drifted: %s" INT64_FORMAT " rows match its predicate again; "
					"catch-up pass run " INT64_FORMAT, w->name,
					found >= DRIFT_PROBE_LIMIT ? "at least " : "", found, run_id),
			 errdetail("Its watch probed it after run " INT64_FORMAT " completed.", w->last_id)));
}

int64
drift_catch_up(const char *name, int64 last_id)
{
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	Watched		w;
	bool		found;

	memset(&w, 0, sizeof(w));
	catalog_enter(&scope);
	found = catalog_exec("SELECT d.checksum, d.owner, d.run_as, d.environments,"
						 "  pg_catalog.array_to_string(d.environments, ', ')"
						 " FROM backfill.declaration d WHERE d.name = $1",
						 1, types, values, NULL, SPI_OK_SELECT) == 1;
	if (found)
	{
		w.name = pstrdup(name);
		w.checksum = catalog_gettext(0, 1);
		w.owner = catalog_getoid(0, 2);
		w.run_as = catalog_getoid(0, 3);
		w.environments = catalog_getcopy(0, 4);
		w.envlist = catalog_gettext(0, 5);
		w.last_id = last_id;
	}
	catalog_leave(&scope);
	return found ? catch_up(&w) : 0;
}

List *
drift_watch_due(MemoryContext cxt, long *next_ms)
{
	ListCell   *lc;
	List	   *due = NIL;

	*next_ms = -1;
	foreach(lc, read_watched(cxt, NULL))
	{
		Watched    *w = lfirst(lc);

		if (w->due_in_ms <= 0)
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);
			DriftTarget *t = palloc0(sizeof(DriftTarget));

			t->name = w->name;
			t->run_as = w->run_as;
			due = lappend(due, t);
			MemoryContextSwitchTo(old);
			continue;			/* its next look comes after its probe, or the interval */
		}
		if (*next_ms < 0 || w->due_in_ms < *next_ms)
			*next_ms = (long) w->due_in_ms;
	}
	return due;
}

/* a probe in its worker: what it probes, and what it does with the answer */
typedef struct Probe
{
	DriftKind	kind;
	char	   *name;
	char	   *relation;
	char	   *predicate;
	char	   *search_path;
	Oid			run_as;
	Watched    *watched;		/* kind watch: as the watch reads it */
	Required	required;		/* kind required: A waits for B, the one probed */
} Probe;

/* read_asked's columns, by name, and the fields they fill */
static const CatalogColumn asked_columns[] = {
	CATALOG_FIELD(Probe, name, CATALOG_TEXT),
	CATALOG_FIELD(Probe, relation, CATALOG_TEXT),
	CATALOG_FIELD(Probe, predicate, CATALOG_TEXT),
	CATALOG_FIELD(Probe, search_path, CATALOG_TEXT),
	CATALOG_FIELD(Probe, run_as, CATALOG_OID),
};

static const char *const kind_names[] = {"asked", "watch", "required", "requires", "finalize"};

/*
 * Does the backfill require a migration?  If so, read the migrations table
 * as its owner (requires.c, through asrole.c: bounded) and record in
 * backfill.requirement why it is not applied (NULL: applied), with the
 * time.  The scheduler lets a queued pass start on that record.
 */
static void
probe_requirement(const char *name)
{
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};

	catalog_enter(&scope);
	catalog_exec("INSERT INTO backfill.requirement AS q (declaration, unmet, checked_at)"
				 " SELECT d.name, backfill.migration_unapplied(d.requires,"
				 "          d.owner::pg_catalog.oid), pg_catalog.clock_timestamp()"
				 "   FROM backfill.declaration d WHERE d.name = $1 AND d.requires IS NOT NULL"
				 " ON CONFLICT (declaration) DO UPDATE SET unmet = EXCLUDED.unmet,"
				 "   checked_at = EXCLUDED.checked_at",
				 1, types, values, NULL, SPI_OK_INSERT);
	catalog_leave(&scope);
}

/*
 * Record a probe of a backfill in backfill.probe (found: the rows it
 * found, or -1 with the error that ended it), after the backfill's newest
 * pass: backfill_pending reads it.
 */
static void
record_probe(const char *name, DriftKind kind, int64 found, ErrorData *error)
{
	CatalogScope scope;
	Oid			types[5] = {TEXTOID, TEXTOID, INT8OID, TEXTOID, TEXTOID};
	Datum		values[5] = {CStringGetTextDatum(name), CStringGetTextDatum(kind_names[kind]),
	Int64GetDatum(found), 0, 0};
	char		nulls[5] = {' ', ' ', found < 0 ? 'n' : ' ', 'n', 'n'};

	if (error != NULL)
	{
		values[3] = CStringGetTextDatum(unpack_sql_state(error->sqlerrcode));
		values[4] = CStringGetTextDatum(error->message ? error->message : "?");
		nulls[3] = nulls[4] = ' ';
	}
	catalog_enter(&scope);
	catalog_exec("INSERT INTO backfill.probe AS p"
				 "   (declaration, run_id, kind, taken_at, found, error_code, error_message)"
				 " VALUES ($1, (SELECT pg_catalog.max(l.run_id) FROM backfill.ledger l"
				 "               WHERE l.ledger_name = $1),"
				 "         $2, pg_catalog.clock_timestamp(), $3, $4, $5)"
				 " ON CONFLICT (declaration) DO UPDATE SET run_id = EXCLUDED.run_id,"
				 "   kind = EXCLUDED.kind, taken_at = EXCLUDED.taken_at, found = EXCLUDED.found,"
				 "   error_code = EXCLUDED.error_code, error_message = EXCLUDED.error_message,"
				 "   probes = p.probes + 1",
				 5, types, values, nulls, SPI_OK_INSERT);
	catalog_leave(&scope);
}

/*
 * A backfill by the hash of its name, whose oids carry its names: a plain
 * table backfill (any, when any_source: only its requirement is read).
 */
static bool
read_asked(Probe *p, int64 name_hash, bool any_source, MemoryContext cxt)
{
	CatalogScope scope;
	Oid			types[2] = {INT8OID, BOOLOID};
	Datum		values[2] = {Int64GetDatum(name_hash), BoolGetDatum(any_source)};
	bool		found;

	catalog_enter(&scope);
	found = catalog_exec("SELECT d.name, d.relation, d.predicate, d.search_path, d.run_as"
						 " FROM backfill.declaration d"
						 " WHERE pg_catalog.hashtextextended(d.name, 0) = $1"
						 "   AND ($2 OR (d.relid IS NOT NULL AND d.scope IS NULL))"
						 "   AND (SELECT i.code FROM backfill.identity_problem(d.name, d.relid,"
						 "          d.relation, d.owner, d.owner_name, d.run_as, d.run_as_name) i)"
						 "       IS NULL", 2, types, values, NULL, SPI_OK_SELECT) == 1;
	if (found)
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);

		catalog_read_row(0, asked_columns, lengthof(asked_columns), p);
		MemoryContextSwitchTo(old);
	}
	catalog_leave(&scope);
	return found;
}

/* Load what a probe worker probes, into cxt; false when there is nothing. */
static bool
probe_load(Probe *p, DriftKind kind, int64 name_hash, int64 run_id, MemoryContext cxt)
{
	bool		found = false;

	p->kind = kind;
	if (kind == DRIFT_WATCH)
	{
		List	   *watched = read_watched(cxt, &name_hash);

		if (watched == NIL)
			return false;
		p->watched = linitial(watched);
		p->name = p->watched->name;
		p->relation = p->watched->relation;
		p->predicate = p->watched->predicate;
		p->search_path = p->watched->search_path;
		p->run_as = p->watched->run_as;
		return true;
	}
	worker_begin_xact("pg_backfill probe: reading the backfill");
	if (kind == DRIFT_ASKED || kind == DRIFT_FINALIZE || kind == DRIFT_MIGRATION)
		found = read_asked(p, name_hash, kind == DRIFT_MIGRATION, cxt);
	else if (read_required(run_id, &p->required, cxt))
	{
		found = true;
		p->name = p->required.b_name;
		p->relation = p->required.b_relation;
		p->predicate = p->required.b_predicate;
		p->search_path = p->required.b_search_path;
		p->run_as = p->required.b_run_as;
	}
	worker_commit_xact();
	return found;
}

/* B drifted while A waits: a forced pass of B, A waits for it */
static void
reopen_required(Required *r)
{
	int64		run_id;

	run_id = enqueue_pass(r->b_name, r->b_name, r->b_checksum, true, r->b_last, r->b_owner, NULL);
	ereport(LOG,
			(errmsg("backfill \"%s\" reopened as run " INT64_FORMAT
					": its predicate matches rows again", r->b_name, run_id),
			 errdetail("Backfill \"%s\" requires it and waits for the new pass.", r->a_name)));
}

/* Probe, record, and do what the answer asks (a catch-up pass, a reopen). */
static void
probe_and_act(Probe *p)
{
	int64		found;

	probe_requirement(p->name);
	if (p->kind == DRIFT_MIGRATION)
		return;
	if (p->kind == DRIFT_REQUIRED)
		check_reopen_allowed(p->required.a_name, p->required.a_owner, p->required.b_name,
							 p->required.b_owner, p->required.b_run_as,
							 p->required.b_environments, p->required.b_envlist);
	found = probe_rows(p->name, p->run_as, p->search_path, p->relation, p->predicate);
	record_probe(p->name, p->kind, found, NULL);
	if (p->kind == DRIFT_WATCH)
	{
		watch_count_probe(p->name, found);
		if (found > 0)
			watch_heal(p->watched, found);
	}
	else if (p->kind == DRIFT_REQUIRED && found > 0)
		reopen_required(&p->required);
}

/* the probe this worker is taking, for its exit callback */
static Probe probe_taken;
static Probe *probing = NULL;

/*
 * At the exit of a probe worker that its deadline ended (deadline.c: the
 * declarer's SQL outlived backfill.probe_timeout, catching the cancel): the
 * probe is recorded failed, BF039, in a transaction of its own after the
 * aborted one, as PostgreSQL's own exit callbacks do (temporary relations).
 */
static void
record_terminated(int code, Datum arg)
{
	int			elapsed_ms;
	ErrorData	error;

	if (probing == NULL || !deadline_fired(&elapsed_ms))
		return;
	memset(&error, 0, sizeof(error));
	error.sqlerrcode = ERRCODE_BACKFILL_PROBE_FAILED;
	error.message = psprintf("terminated after %d s: the predicate outlived "
							 "backfill.probe_timeout (%d ms) by %d ms, catching its cancel",
							 (elapsed_ms + 999) / 1000, backfill_probe_timeout,
							 BACKFILL_TERMINATE_GRACE_MS);
	AbortOutOfAnyTransaction();
	PG_TRY();
	{
		worker_begin_xact("pg_backfill probe: recording a terminated probe");
		if (probing->kind != DRIFT_MIGRATION)
			record_probe(probing->name, probing->kind, -1, &error);
		if (probing->kind == DRIFT_WATCH)
			watch_count_probe(probing->name, -1);
		worker_commit_xact();
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		AbortOutOfAnyTransaction();
	}
	PG_END_TRY();
	ereport(LOG,
			(errmsg("pg_backfill probe of backfill \"%s\" %s", probing->name, error.message)));
}

int64
drift_probe_here(const char *name)
{
	Probe		p;
	int64		found;

	memset(&p, 0, sizeof(Probe));
	if (!read_asked(&p, drift_name_hash(name), false, CurrentMemoryContext) ||
		strcmp(p.name, name) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PROBE_FAILED),
				 errmsg("backfill \"%s\" could not be counted", name),
				 errdetail("It is no plain table backfill whose table and roles carry the names "
						   "it was declared with."),
				 errhint("backfill_status('%s') shows what became of its table and roles.",
						 name)));
	found = probe_rows(p.name, p.run_as, p.search_path, p.relation, p.predicate);
	record_probe(p.name, DRIFT_FINALIZE, found, NULL);
	return found;
}

void
drift_probe_worker(DriftKind kind, int64 name_hash, int64 run_id, MemoryContext cxt)
{
	Probe	   *p = &probe_taken;

	memset(p, 0, sizeof(Probe));
	probing = p;
	before_shmem_exit(record_terminated, (Datum) 0);
	if (!probe_load(p, kind, name_hash, run_id, cxt))
	{
		ereport(LOG, (errmsg("pg_backfill probe: nothing to probe (a %s probe)",
							 kind_names[kind])));
		return;
	}
	if (p->run_as != GetUserId())
	{
		ereport(LOG, (errmsg("pg_backfill probe: backfill \"%s\" runs as another role now",
							 p->name)));
		return;
	}

	worker_begin_xact("pg_backfill probe: probing");
	PG_TRY();
	{
		probe_and_act(p);
	}
	PG_CATCH();
	{
		ErrorData  *edata = worker_abort_xact(cxt);

		ereport(WARNING,
				(errmsg("could not probe backfill \"%s\" for drift: %s", p->name, edata->message),
				 errhint("The error is recorded in backfill.probe; backfill_pending shows it.")));
		worker_begin_xact("pg_backfill probe: recording a failed probe");
		if (kind != DRIFT_MIGRATION)
			record_probe(p->name, kind, -1, edata);
		if (kind == DRIFT_WATCH)
			watch_count_probe(p->name, -1);
	}
	PG_END_TRY();
	worker_commit_xact();
}
