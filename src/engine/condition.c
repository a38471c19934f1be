/*-------------------------------------------------------------------------
 *
 * condition.c
 *	  The user's own throttle condition (throttle_when), evaluated by the
 *	  lanes of the pass.
 *
 * A declaration's throttle_when is one SQL boolean expression
 * (backfill_declare parses and analyzes it as the declarer, never runs
 * it).  Only a lane of the pass evaluates it, in its own process, never
 * the scheduler's loop, a report or another role's session: as the
 * lanes' role (run_as), under SECURITY_RESTRICTED_OPERATION, with the
 * declaration's search_path with pg_temp last, backfill.probe_timeout as
 * its statement timeout and backfill.probe_lock_timeout as its lock
 * timeout, in a subtransaction always rolled back (asrole.c): nothing it
 * does outlives it.
 *
 * At most once a second per pass: the lanes share the answer through the
 * pass's pacer (shmem.c); the first lane that finds the last evaluation a
 * second old evaluates it again, the others take the last answer.  True
 * holds the lanes back at their batch boundaries (pacing.c); so does an
 * error or a timeout, which the reason shows; false or NULL lets them go
 * on.  The condition is not part of the checksum nor of the action: it
 * never runs inside a batch's transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "asrole.h"
#include "condition.h"
#include "shmem.h"
#include "xact.h"

/* how much of the condition a reason quotes */
#define CONDITION_QUOTED	80

/* the condition as a reason quotes it: one line, shortened */
static char *
condition_quoted(const char *condition)
{
	char	   *text = pnstrdup(condition, CONDITION_QUOTED);

	for (char *p = text; *p; p++)
		if (*p == '\n' || *p == '\r' || *p == '\t')
			*p = ' ';
	if (strlen(condition) > CONDITION_QUOTED)
		return psprintf("%s...", text);
	return text;
}

/* Evaluate it once, as run_as: the reason to hold back, or NULL. */
static char *
condition_evaluate(Pass *pass)
{
	MemoryContext cxt = CurrentMemoryContext;
	char	   *sql = psprintf(CONDITION_SQL, pass->throttle_when);
	char	   *volatile answer = NULL;
	ErrorData  *volatile error = NULL;

	worker_begin_xact("pg_backfill lane: evaluating throttle_when");
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		ErrorData  *caught = NULL;

		answer = asrole_query(pass->name, pass->run_as, pass->search_path, sql, 0, NULL,
							  NULL, NULL, &caught);
		error = caught;
	}
	PG_CATCH();
	{
		/* a timeout (a cancel): asrole.c rolled its subtransaction back and threw it again */
		MemoryContextSwitchTo(cxt);
		error = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
	worker_commit_xact();
	MemoryContextSwitchTo(cxt);

	if (error != NULL)
		return psprintf("condition: throttle_when failed: %s (SQLSTATE %s): held back",
						error->message, unpack_sql_state(error->sqlerrcode));
	if (answer != NULL && strcmp(answer, "t") == 0)
		return psprintf("condition: throttle_when is true (%s)",
						condition_quoted(pass->throttle_when));
	return NULL;
}

char *
condition_reason(Pass *pass)
{
	char		last[BACKFILL_CONDITION_LEN];
	TimestampTz now;
	char	   *reason;

	if (pass->throttle_when == NULL)
		return NULL;
	if (!backfill_condition_claim(pass->run_id, last, sizeof(last)))
		return last[0] ? pstrdup(last) : NULL;

	/* due by the pacer, but no pacer shared it lately: this lane's own, once a second */
	now = GetCurrentTimestamp();
	if (pass->condition_at != 0 && now < pass->condition_at + USECS_PER_SEC)
		reason = pass->condition_said ? pstrdup(pass->condition_said) : NULL;
	else
	{
		reason = condition_evaluate(pass);
		pass->condition_at = now;
		if (pass->condition_said)
			pfree(pass->condition_said);
		pass->condition_said = reason ? MemoryContextStrdup(pass->cxt, reason) : NULL;
	}
	backfill_condition_record(pass->run_id, reason);
	return reason;
}
