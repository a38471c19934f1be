/*-------------------------------------------------------------------------
 *
 * drift.c
 *	  Reopening a required backfill whose predicate matches rows again.
 *
 * A pass of A that requires backfill B starts only after B's newest pass
 * completed.  Rows written since (by an application still on the old
 * code, say) can make B's predicate match again: B has drifted.  Just
 * before A's pass would start, the scheduler asks B's predicate, as B's
 * role and with B's search_path, whether any row still needs B.  If so it
 * enqueues a new pass of B (forced: its last one completed) and A waits
 * for it.
 *
 * The scheduler is a superuser session that goes on to run its own SQL,
 * so B's predicate is evaluated through asrole.c (restricted, settings
 * rolled back), and only when the reopen is something B's owner could do
 * and A's owner may ask for (a member of B's owner): a role never
 * force-runs another role's backfill.
 *
 * The same probe, bounded (LIMIT 1,000: never a full count), answers
 * backfill_pending's "drifted" (backfill.drift_probe), and drives the
 * watch: a completed table backfill declared with watch => interval is
 * probed by the scheduler at that interval, and on drift a catch-up pass
 * (forced, ledger column watch) is enqueued over the rows that match
 * again; backfill.watch counts the probes, and what the last one found is
 * what backfill_pending shows a member of pg_monitor (who never probes).
 * A catch-up pass that healed no row doubles the interval the watch probes
 * at, up to a day, until one heals rows or the backfill is declared again
 * (watch_interval_in_force).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "utils/acl.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "asrole.h"
#include "catalog.h"
#include "drift.h"
#include "requires.h"
#include "enqueue.h"
#include "errors.h"
#include "tenancy.h"
#include "xact.h"

PG_FUNCTION_INFO_V1(backfill_drift_probe);

/* a drift probe reads at most this many rows */
#define DRIFT_PROBE_LIMIT	1000

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
 * Does B's predicate match a row?  B's SQL, so it runs as B's role with
 * B's search_path, restricted, and whatever it changes (a setting made
 * with set_config(..., false), say) is rolled back with it: nothing of it
 * reaches the scheduler's own session.
 */
static bool
predicate_matches(const char *name, Oid run_as, const char *search_path, const char *relation,
				  const char *predicate)
{
	char	   *answer;

	answer = asrole_query(name, run_as, search_path,
						  psprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE (\n%s\n))",
								   relation, predicate),
						  0, NULL, NULL, NULL, NULL);
	return answer != NULL && strcmp(answer, "t") == 0;
}

/*
 * How many rows (at most DRIFT_PROBE_LIMIT) match a predicate now, as
 * run_as with its search_path (asrole.c).  -1 when it cannot be read as
 * that role (then *error, when given, says why; else the error is raised).
 * The caller is connected to SPI.
 */
static int64
probe_rows(const char *name, Oid run_as, const char *search_path, const char *relation,
		   const char *predicate, ErrorData **error)
{
	char	   *answer;

	answer = asrole_query(name, run_as, search_path,
						  psprintf("SELECT pg_catalog.count(*) FROM (SELECT 1 FROM %s WHERE (\n%s\n)"
								   " LIMIT %d) probe", relation, predicate, DRIFT_PROBE_LIMIT),
						  0, NULL, NULL, NULL, error);
	return answer != NULL ? strtoll(answer, NULL, 10) : -1;
}

/*
 * What the watch's last probe of a backfill found, when it probed after the
 * backfill's newest completed forward pass ended; -1 when none did.  The
 * caller is connected to SPI.
 */
static int64
recorded_probe(Datum name)
{
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {name};
	int64		rows = -1;
	bool		isnull;
	Datum		d;

	catalog_enter(&scope);
	if (catalog_exec("SELECT w.last_found FROM backfill.watch w"
					 " WHERE w.declaration = $1 AND w.last_probe_at >="
					 "  (SELECT pg_catalog.max(l.finished_at) FROM backfill.ledger l"
					 "    WHERE l.ledger_name = $1 AND l.status = 'completed'"
					 "      AND l.direction = 'forward')",
					 1, types, values, NULL, SPI_OK_SELECT) == 1)
	{
		d = catalog_getdatum(0, 1, &isnull);
		if (!isnull)
			rows = DatumGetInt64(d);
	}
	catalog_leave(&scope);
	return rows;
}

/*
 * backfill.drift_probe(name): the rows (at most 1,000) that a plain table
 * backfill's predicate matches now, read as its run_as role; NULL for a
 * pages or scoped backfill, one whose oids no longer carry its names, a
 * caller who is not a member of its owner, or a predicate that role cannot
 * read (backfill_pending then shows no drift rather than an error).  A
 * member of pg_monitor who is not a member of the owner gets what the
 * watch's last probe recorded after the pass (NULL without one): a report
 * never evaluates a declarer's SQL for a monitoring role.
 */
Datum
backfill_drift_probe(PG_FUNCTION_ARGS)
{
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {PointerGetDatum(PG_GETARG_TEXT_PP(0))};
	bool		found;
	char	   *relation = NULL;
	char	   *predicate = NULL;
	char	   *search_path = NULL;
	Oid			run_as = InvalidOid;
	Oid			owner = InvalidOid;
	ErrorData  *error = NULL;
	int64		rows = -1;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	catalog_enter(&scope);
	found = catalog_exec("SELECT d.relation, d.predicate, d.run_as, d.owner, d.search_path"
						 " FROM backfill.declaration d"
						 " WHERE d.name = $1 AND d.relid IS NOT NULL AND d.scope IS NULL"
						 "   AND (SELECT i.code FROM backfill.identity_problem(d.name, d.relid,"
						 "          d.relation, d.owner, d.owner_name, d.run_as, d.run_as_name) i)"
						 "       IS NULL", 1, types, values, NULL, SPI_OK_SELECT) == 1;
	if (found)
	{
		relation = catalog_gettext(0, 1);
		predicate = catalog_gettext(0, 2);
		run_as = catalog_getoid(0, 3);
		owner = catalog_getoid(0, 4);
		search_path = catalog_gettext(0, 5);
	}
	catalog_leave(&scope);
	if (found && has_privs_of_role(GetUserId(), owner))
		rows = probe_rows(text_to_cstring(PG_GETARG_TEXT_PP(0)), run_as, search_path, relation,
						  predicate, &error);
	else if (found && has_privs_of_role(GetUserId(), ROLE_PG_MONITOR))
		rows = recorded_probe(values[0]);
	SPI_finish();
	if (rows < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(rows);
}

/*
 * B, the table backfill that the declaration of the waiting pass ($1)
 * requires; never one whose oids no longer carry the roles it names.
 */
#define REQUIRED_SQL \
	"SELECT b.name, b.relation, b.predicate, b.run_as, b.checksum, b.owner," \
	"  b.search_path, a.name," \
	"  (SELECT pg_catalog.max(l.run_id) FROM backfill.ledger l" \
	"    WHERE l.ledger_name = b.name)," \
	"  a.owner, b.environments, pg_catalog.array_to_string(b.environments, ', ')" \
	" FROM backfill.ledger la" \
	" JOIN backfill.declaration a ON a.name = la.declaration" \
	" JOIN backfill.declaration b ON b.name = a.requires_backfill" \
	" WHERE la.run_id = $1 AND b.relid IS NOT NULL AND b.scope IS NULL" \
	"   AND (SELECT i.code FROM backfill.identity_problem(b.name, b.relid," \
	"          b.relation, b.owner, b.owner_name, b.run_as, b.run_as_name) i)" \
	"       IS NULL"

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

/*
 * Read B, the table backfill the waiting pass's declaration requires.
 * False when there is none to check: no such declaration, a pages or
 * scoped one, or one whose oids no longer carry its names.
 */
static bool
read_required(int64 waiting_run_id, Required *r)
{
	CatalogScope scope;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(waiting_run_id)};
	bool		found;

	catalog_enter(&scope);
	found = catalog_exec(REQUIRED_SQL, 1, types, values, NULL, SPI_OK_SELECT) == 1;
	if (found)
	{
		r->b_name = catalog_gettext(0, 1);
		r->b_relation = catalog_gettext(0, 2);
		r->b_predicate = catalog_gettext(0, 3);
		r->b_run_as = catalog_getoid(0, 4);
		r->b_checksum = catalog_gettext(0, 5);
		r->b_owner = catalog_getoid(0, 6);
		r->b_search_path = catalog_gettext(0, 7);
		r->a_name = catalog_gettext(0, 8);
		r->b_last = catalog_getint64(0, 9);
		r->a_owner = catalog_getoid(0, 10);
		r->b_environments = catalog_getcopy(0, 11);
		r->b_envlist = catalog_gettext(0, 12);
	}
	catalog_leave(&scope);
	return found;
}

/*
 * If B may be reopened on A's behalf and its predicate matches a row,
 * enqueue a forced pass of B.  Returns true when it did.
 */
static bool
reopen_if_drifted(Required *r)
{
	int64		run_id;

	check_reopen_allowed(r->a_name, r->a_owner, r->b_name, r->b_owner, r->b_run_as,
						 r->b_environments, r->b_envlist);
	if (!predicate_matches(r->b_name, r->b_run_as, r->b_search_path, r->b_relation,
						   r->b_predicate))
		return false;
	run_id = enqueue_pass(r->b_name, r->b_name, r->b_checksum, true, r->b_last, r->b_owner, NULL);
	ereport(LOG,
			(errmsg("backfill \"%s\" reopened as run " INT64_FORMAT
					": its predicate matches rows again", r->b_name, run_id),
			 errdetail("Backfill \"%s\" requires it and waits for the new pass.", r->a_name)));
	return true;
}

/*
 * Returns true when the backfill that waiting_run_id requires was reopened,
 * so the waiting pass must not start yet.  Runs its own transaction.
 */
bool
drift_reopen_required(int64 waiting_run_id)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool reopened = false;

	worker_begin_xact("pg_backfill scheduler: checking a required backfill");

	PG_TRY();
	{
		Required	r;

		if (read_required(waiting_run_id, &r))
			reopened = reopen_if_drifted(&r);
	}
	PG_CATCH();
	{
		/* a broken required backfill must not stop the scheduler */
		ErrorData  *edata = worker_abort_xact(cxt);

		ereport(WARNING,
				(errmsg("could not check the backfill that run " INT64_FORMAT " requires: %s",
						waiting_run_id, edata->message),
				 errhint("The waiting pass starts without the drift check.")));
		return false;
	}
	PG_END_TRY();

	worker_commit_xact();
	return reopened;
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
 * the current checksum (a revert, a failure or a change is not watched),
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
	"          d.owner, d.owner_name, d.run_as, d.run_as_name) i) IS NULL"

/*
 * The interval a watch probes at, in ms, as SQL over declaration d: the
 * declared one doubled by each catch-up pass in a row that healed no row,
 * up to a day (backfill.watch_interval_ms, pg_backfill--0.5--0.6.sql), so
 * that a predicate that matches only where the scheduler probes makes ever
 * fewer passes, never more than one per interval.  A catalog older than
 * 0.6 has only the declared one.
 */
static const char *
watch_interval_in_force(void)
{
	Oid			argtypes[1] = {TEXTOID};
	List	   *fn = list_make2(makeString("backfill"), makeString("watch_interval_ms"));

	if (OidIsValid(LookupFuncName(fn, 1, argtypes, true)))
		return "backfill.watch_interval_ms(d.name)";
	return "d.watch_ms";
}

/* Read the watched backfills into cxt, in a transaction of their own. */
static List *
read_watched(MemoryContext cxt)
{
	CatalogScope scope;
	List	   *watched = NIL;
	int			n;

	worker_begin_xact("pg_backfill scheduler: reading the watched backfills");
	/* a catalog older than 0.5 (or none) has nothing to watch */
	if (!catalog_has_column("declaration", "watch_ms") || !catalog_has_column("watch", "probes"))
	{
		worker_commit_xact();
		return NIL;
	}
	catalog_enter(&scope);
	n = catalog_exec(psprintf(WATCHED_SQL, watch_interval_in_force()), 0, NULL, NULL, NULL,
					 SPI_OK_SELECT);
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
 * first is not doubled).
 */
static void
watch_heal(Watched *w, int64 found)
{
	CatalogScope scope;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(w->name)};
	bool		still_newest;
	int64		run_id;

	check_environment(w->name, w->environments, w->envlist);
	tenancy_check_run_as(w->name, w->owner, w->run_as);
	check_role_can_login(w->name, w->run_as);
	catalog_enter(&scope);
	still_newest = catalog_exec("SELECT 1 FROM backfill.declaration WHERE name = $1 FOR UPDATE",
								1, types, values, NULL, SPI_OK_SELECT) == 1 &&
		catalog_exec("SELECT pg_catalog.max(run_id) FROM backfill.ledger WHERE ledger_name = $1",
					 1, types, values, NULL, SPI_OK_SELECT) == 1 &&
		catalog_getint64(0, 1) == w->last_id;
	catalog_leave(&scope);
	if (!still_newest)
		return;
	run_id = enqueue_pass_as(w->name, w->name, w->checksum, true, w->last_id, w->owner, NULL,
							 "forward", true);
	ereport(LOG,
			(errmsg("backfill \"%s\" drifted: %s" INT64_FORMAT " rows match its predicate again; "
					"catch-up pass run " INT64_FORMAT, w->name,
					found >= DRIFT_PROBE_LIMIT ? "at least " : "", found, run_id),
			 errdetail("Its watch probed it after run " INT64_FORMAT " completed.", w->last_id)));
}

/*
 * Probe one watched backfill and heal what drifted, in a transaction of
 * its own.  A failure is a WARNING and still counts as a probe, so that it
 * is tried again after the interval, not at every look.
 */
static void
watch_one(Watched *w, MemoryContext cxt)
{
	worker_begin_xact("pg_backfill scheduler: probing a watched backfill");
	PG_TRY();
	{
		int64		found = probe_rows(w->name, w->run_as, w->search_path, w->relation,
									   w->predicate, NULL);

		watch_count_probe(w->name, found);
		if (found > 0)
			watch_heal(w, found);
	}
	PG_CATCH();
	{
		ErrorData  *edata = worker_abort_xact(cxt);

		ereport(WARNING,
				(errmsg("could not watch backfill \"%s\" for drift: %s", w->name, edata->message),
				 errhint("Its watch tries again after its interval.")));
		worker_begin_xact("pg_backfill scheduler: counting a failed probe");
		watch_count_probe(w->name, -1);
	}
	PG_END_TRY();
	worker_commit_xact();
}

long
drift_watch(MemoryContext cxt)
{
	ListCell   *lc;
	long		next_ms = -1;

	foreach(lc, read_watched(cxt))
	{
		Watched    *w = lfirst(lc);

		if (w->due_in_ms <= 0)
		{
			watch_one(w, cxt);
			continue;			/* its next look comes after the pass, or the interval */
		}
		if (next_ms < 0 || w->due_in_ms < next_ms)
			next_ms = (long) w->due_in_ms;
	}
	return next_ms;
}
