/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  Describing and starting pg_backfill's background workers.
 *
 * Every worker of pg_backfill (the launcher, a database's scheduler, its
 * lanes and relay) is a process of this library with shared memory and a
 * database connection, started once recovery is over.  The launcher is
 * registered at server start and restarted by the postmaster; every other
 * worker is a dynamic child that is never restarted by the postmaster: its
 * parent learns that it stopped (bgw_notify_pid) and decides.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/resource.h>

#include "access/xact.h"

#include "miscadmin.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"

#include "config.h"
#include "worker.h"

void
worker_describe(BackgroundWorker *worker, const char *function, const char *name,
				const char *type)
{
	memset(worker, 0, sizeof(BackgroundWorker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	snprintf(worker->bgw_library_name, BGW_MAXLEN, "pg_backfill");
	snprintf(worker->bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker->bgw_name, BGW_MAXLEN, "%s", name);
	snprintf(worker->bgw_type, BGW_MAXLEN, "%s", type);
}

BackgroundWorkerHandle *
worker_start(const char *function, const char *name, const char *type, Datum main_arg,
			 const void *extra, Size extra_len, MemoryContext cxt)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	MemoryContext old;
	bool		started;

	Assert(extra_len <= BGW_EXTRALEN);
	worker_describe(&worker, function, name, type);
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	worker.bgw_main_arg = main_arg;
	memcpy(worker.bgw_extra, extra, extra_len);
	worker.bgw_notify_pid = MyProcPid;

	old = MemoryContextSwitchTo(cxt);
	started = RegisterDynamicBackgroundWorker(&worker, &handle);
	MemoryContextSwitchTo(old);
	return started ? handle : NULL;
}

/*
 * A database owner may ALTER DATABASE ... SET default_transaction_read_only
 * = on, a statement_timeout of 1 ms or SERIALIZABLE: the scheduler and the
 * relay would then fail every look at the catalogs, over and over, while
 * the passes they serve hang with no error.  Their own sessions do not take
 * those settings (lanes keep them: they run the declarer's SQL, and fail
 * where the declarer would).
 */
void
worker_own_settings(void)
{
	static const char *const settings[][2] = {
		{"default_transaction_read_only", "off"},
		{"default_transaction_isolation", "read committed"},
		{"statement_timeout", "0"},
		{"idle_in_transaction_session_timeout", "0"},
		{"lock_timeout", "0"},
	};

	for (int i = 0; i < lengthof(settings); i++)
		SetConfigOption(settings[i][0], settings[i][1], PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * ALTER DATABASE (or ALTER ROLE) ... SET role or SET session_authorization
 * would make every session of the database another role, a worker's too:
 * a scheduler would read the catalogs as that role and fail every look,
 * a lane would run a superuser's backfill as the database's owner.  A
 * worker is the role it logged in as, whatever those settings say.  source
 * is PGC_S_OVERRIDE for workers that run only the extension's SQL, and
 * PGC_S_SESSION for a lane, whose declarer's SQL may still SET ROLE.  Its
 * own transaction: the check of session_authorization reads pg_authid.
 */
void
worker_own_identity(GucSource source)
{
	StartTransactionCommand();
	SetConfigOption("session_authorization",
					GetUserNameFromId(GetAuthenticatedUserId(), false), PGC_SUSET, source);
	SetConfigOption("role", "none", PGC_SUSET, source);
	CommitTransactionCommand();
}

/*
 * A cursor is stored as its key's text and read back by another lane, a
 * retry or a finalizing session: a date written under DateStyle 'SQL, DMY'
 * ("08/01/2026") and read under 'ISO, MDY' is the 1st of August, and the
 * batches in between are skipped.  So every process that writes or reads
 * key text does it under one fixed style.
 */
void
worker_key_text_settings(GucAction action)
{
	static const char *const settings[][2] = {
		{"DateStyle", "ISO, MDY"},
		{"IntervalStyle", "postgres"},
		{"extra_float_digits", "3"},
	};

	for (int i = 0; i < lengthof(settings); i++)
		(void) set_config_option(settings[i][0], settings[i][1], PGC_USERSET, PGC_S_SESSION,
								 action, true, 0, false);
}

/*
 * A key value as text, and back, under the key-text settings whatever the
 * session's are now: the declarer's action may have set DateStyle for its
 * session (set_config(..., false)) or its transaction, and the cursor is
 * written after it.  The settings hold for the one call only (a GUC nest
 * level of its own, as a function's SET clause), so the action keeps
 * whatever it set.
 */
static int
key_text_enter(void)
{
	int			level = NewGUCNestLevel();

	worker_key_text_settings(GUC_ACTION_SAVE);
	/* money's text follows lc_monetary: fixed here, not for the whole lane */
	(void) set_config_option("lc_monetary", "C", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return level;
}

/*
 * The built-in key types whose text no setting changes (integers, text,
 * uuid, numeric): written without the settings, which cost more than a
 * small batch's other steps (lc_monetary's check sets the locale twice);
 * a lane writes one or two keys a batch.
 */
static bool
key_text_fixed(Oid output)
{
	switch (output)
	{
		case F_INT2OUT:
		case F_INT4OUT:
		case F_INT8OUT:
		case F_OIDOUT:
		case F_TEXTOUT:
		case F_VARCHAROUT:
		case F_BPCHAROUT:
		case F_UUID_OUT:
		case F_NUMERIC_OUT:
			return true;
		default:
			return false;
	}
}

char *
worker_key_output(Oid output, Datum value)
{
	int			level;
	char	   *text;

	if (key_text_fixed(output))
		return OidOutputFunctionCall(output, value);
	level = key_text_enter();
	text = OidOutputFunctionCall(output, value);
	AtEOXact_GUC(true, level);
	return text;
}

Datum
worker_key_input(Oid input, const char *text, Oid ioparam)
{
	int			level = key_text_enter();
	Datum		value;

	value = OidInputFunctionCall(input, (char *) text, ioparam, -1);
	AtEOXact_GUC(true, level);
	return value;
}

void *
worker_attach_caller(Datum main_arg, dsm_segment **seg)
{
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	*seg = dsm_attach(DatumGetUInt32(main_arg));
	if (*seg == NULL)
		proc_exit(0);
	return dsm_segment_address(*seg);
}

/*
 * Lower this worker's CPU priority to backfill.lane_nice (0, the default,
 * changes nothing): a lane, a rehearsal or a probe runs the declarer's SQL
 * as background work, which a machine shared with other programs may want
 * to run behind them.  Only ever lowered: a process may not raise its own
 * priority again, and a server started with nice keeps its.  Not the
 * default: on issue 29's half-loaded box a niced lane made pgbench's p99
 * worse, not better (a lane descheduled while it holds a lock or an
 * LWLock others need makes them wait).
 */
void
worker_lower_priority(void)
{
	int			now;

	errno = 0;
	now = getpriority(PRIO_PROCESS, 0);
	if ((now == -1 && errno != 0) || now >= backfill_lane_nice)
		return;
	if (setpriority(PRIO_PROCESS, 0, backfill_lane_nice) != 0)
		ereport(LOG,
				(errmsg("%s could not lower its CPU priority to %d: %m",
						MyBgworkerEntry ? MyBgworkerEntry->bgw_type : "pg_backfill",
						backfill_lane_nice)));
}
