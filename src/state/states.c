/*-------------------------------------------------------------------------
 *
 * states.c
 *	  The states of a pass and of its partitions: their SQL text, and the
 *	  table of the transitions between them.
 *
 * The text is what the catalogs' CHECK constraints allow; the C passes it
 * to SQL as a parameter, never as a literal inside a statement.  The
 * transition tables below are the edges doc/internals.md "## States"
 * draws, one {from, event, to} per line; test/t/098_structure.pl reads
 * both and fails when they differ.  A pass's node is its run's phase
 * while its ledger row is running (queued, running, counting; paused is
 * run.paused), then its ledger status.  "new" is no row yet.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"

#include "state.h"

static const char *const ledger_status_names[] = {
	[LEDGER_RUNNING] = "running",
	[LEDGER_COMPLETED] = "completed",
	[LEDGER_COMPLETED_WITH_FAILURES] = "completed_with_failures",
	[LEDGER_FAILED] = "failed",
	[LEDGER_CANCELLED] = "cancelled",
};

static const char *const run_phase_names[] = {
	[PHASE_QUEUED] = "queued",
	[PHASE_RUNNING] = "running",
	[PHASE_COUNTING] = "counting",
	[PHASE_DONE] = "done",
};

static const char *const part_state_names[] = {
	[PART_PENDING] = "pending",
	[PART_RUNNING] = "running",
	[PART_DONE] = "done",
	[PART_FAILED] = "failed",
	[PART_CANCELLED] = "cancelled",
};

typedef struct StateEdge
{
	const char *from;
	const char *event;
	const char *to;
} StateEdge;

/* a pass: its ledger row, and its run row while that is running */
static const StateEdge pass_edges[] = {
	{"new", "enqueued", "queued"},
	{"queued", "planned", "running"},
	{"queued", "retried", "running"},
	{"running", "counting", "counting"},
	{"counting", "leaves attached", "running"},
	{"counting", "swept", "running"},
	{"counting", "completed", "completed"},
	{"counting", "completed with failures", "completed_with_failures"},
	{"counting", "failed", "failed"},
	{"queued", "failed", "failed"},
	{"running", "failed", "failed"},
	{"queued", "cancelled", "cancelled"},
	{"running", "cancelled", "cancelled"},
	{"counting", "cancelled", "cancelled"},
	{"running", "paused", "paused"},
	{"paused", "resumed", "running"},
	{"paused", "failed", "failed"},
	{"paused", "cancelled", "cancelled"},
};

/* a partition of a pass */
static const StateEdge partition_edges[] = {
	{"new", "planned", "pending"},
	{"new", "retried", "pending"},
	{"pending", "claimed", "running"},
	{"running", "claimed", "running"},
	{"running", "checkpointed", "running"},
	{"running", "released", "pending"},
	{"running", "done", "done"},
	{"running", "failed", "failed"},
	{"pending", "cancelled", "cancelled"},
	{"running", "cancelled", "cancelled"},
	{"failed", "retried", "pending"},
	{"done", "swept", "pending"},
};

/* what each event is called in the tables above and in the log */
static const char *const event_names[] = {
	[EV_ENQUEUED] = "enqueued",
	[EV_PLANNED] = "planned",
	[EV_RETRIED] = "retried",
	[EV_COUNTING] = "counting",
	[EV_LEAVES_ATTACHED] = "leaves attached",
	[EV_SWEPT] = "swept",
	[EV_COMPLETED] = "completed",
	[EV_COMPLETED_WITH_FAILURES] = "completed with failures",
	[EV_FAILED] = "failed",
	[EV_CANCELLED] = "cancelled",
	[EV_PAUSED] = "paused",
	[EV_RESUMED] = "resumed",
	[EV_CLAIMED] = "claimed",
	[EV_RELEASED] = "released",
	[EV_PART_FAILED] = "failed",
	[EV_PART_DONE] = "done",
	[EV_CHECKPOINTED] = "checkpointed",
};

const char *
ledger_status_text(LedgerStatus s)
{
	Assert(s >= 0 && s < lengthof(ledger_status_names));
	return ledger_status_names[s];
}

const char *
run_phase_text(RunPhase p)
{
	Assert(p >= 0 && p < lengthof(run_phase_names));
	return run_phase_names[p];
}

const char *
part_state_text(PartState s)
{
	Assert(s >= 0 && s < lengthof(part_state_names));
	return part_state_names[s];
}

Datum
ledger_status_datum(LedgerStatus s)
{
	return CStringGetTextDatum(ledger_status_text(s));
}

Datum
run_phase_datum(RunPhase p)
{
	return CStringGetTextDatum(run_phase_text(p));
}

Datum
part_state_datum(PartState s)
{
	return CStringGetTextDatum(part_state_text(s));
}

/* is there an edge of this event in the table (of a pass or a partition)? */
static bool
state_event_known(const StateEdge *edges, int n, const char *event)
{
	for (int i = 0; i < n; i++)
		if (strcmp(edges[i].event, event) == 0)
			return true;
	return false;
}

/*
 * A transition found no row in the state it leaves (nrows == 0): someone
 * moved it first (a cancel, a lane that ended the pass, a lost lease),
 * which every caller expects and handles; it is said at DEBUG1, with the
 * event, so that a missed transition can be traced.  Returns whether the
 * row moved.
 */
bool
state_missed(StateEvent event, const char *what, int64 run_id, int nrows)
{
	const char *name = event_names[event];

	if (!state_event_known(pass_edges, lengthof(pass_edges), name) &&
		!state_event_known(partition_edges, lengthof(partition_edges), name))
		elog(ERROR, "pg_backfill: \"%s\" is no event of the transition table", name);
	if (nrows == 0)
		elog(DEBUG1, "pg_backfill: run " INT64_FORMAT ": %s \"%s\" found no %s in the state it "
			 "leaves", run_id, what, name, what);
	return nrows > 0;
}
