/*-------------------------------------------------------------------------
 *
 * events.c
 *	  Lifecycle events (events => topic): who may name a topic, and the
 *	  message the catalogs' triggers queue for each change of a pass.
 *
 * A declaration that names a topic emits one outbox message in the same
 * transaction as each change of its passes' state.  The changes are found
 * by AFTER triggers on the catalogs that record them (ledger, run,
 * partition, watch, retired: pg_backfill--0.5--0.6.sql, issue 28), which
 * build the payload and call backfill.event_emit here, so that whichever
 * module writes those rows, the event commits or rolls back with it.
 *
 * The message is emitted by the declaration's owner (emitted_by), never
 * by the session that happened to make the change (a lane, the scheduler,
 * an operator's backfill_pause): the relay checks that role against the
 * topic's owner and grants before it delivers, as for any message, so a
 * grant taken back stops the events without failing a pass.  The same
 * check is made once at declaration, where a refusal can be fixed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "errors.h"
#include "events.h"
#include "names.h"
#include "outbox.h"

PG_FUNCTION_INFO_V1(backfill_event_emit);

/*
 * Refuse events => topic unless the topic's sink is set and the declarer
 * may emit into it (a member of its owner, or granted it).  Runs in a
 * catalog scope, connected to SPI.
 */
void
events_check_topic(const char *name, const char *topic, Oid declarer)
{
	Datum		values[1] = {CStringGetTextDatum(topic)};
	Oid			owner;
	Datum		grantees;
	bool		grantees_null;

	outbox_check_topic_length(topic);
	if (topic[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("events of backfill \"%s\" names an empty topic", name),
				 errhint("Name the outbox topic whose sink receives the events, or leave events out.")));
	if (!outbox_topic_owner(values[0], &owner, &grantees, &grantees_null))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_EVENTS_NO_SINK),
				 errmsg("events topic \"%s\" of backfill \"%s\" has no sink", topic, name),
				 errdetail("A topic belongs to the role that set its sink; the events of a "
						   "backfill go to a topic its declarer owns or was granted."),
				 errhint("An operator sets the sink first, e.g. SELECT backfill_outbox_sink(%s, "
						 "'function', 'ops.on_event'); and grants the topic with "
						 "backfill_outbox_grant.",
						 quote_literal_cstr(topic))));
	if (outbox_role_allowed(declarer, owner, grantees, grantees_null))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_EVENTS_DENIED),
			 errmsg("backfill \"%s\" may not send its events to outbox topic \"%s\"", name, topic),
			 errdetail("The topic's sink was set by role \"%s\"; role \"%s\" is not a member "
					   "of it and was not granted the topic.",
					   role_name(owner), GetUserNameFromId(declarer, false)),
			 errhint("Ask a member of role \"%s\" to run SELECT backfill_outbox_grant(%s, %s);",
					 role_name(owner), quote_literal_cstr(topic),
					 quote_literal_cstr(quote_identifier(GetUserNameFromId(declarer, false))))));
}

/*
 * backfill.event_emit(topic, key, payload, emitter): queue a lifecycle
 * event in the caller's transaction, emitted by the declaration's owner.
 * Called by the catalogs' triggers only (revoked from PUBLIC).
 */
Datum
backfill_event_emit(PG_FUNCTION_ARGS)
{
	int64		id;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(3))
		elog(ERROR, "backfill.event_emit needs a topic, a key, a payload and an emitter");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	id = outbox_insert(PG_GETARG_DATUM(0), PG_GETARG_DATUM(1), PG_GETARG_DATUM(2),
					   PG_GETARG_OID(3), false);
	SPI_finish();
	PG_RETURN_INT64(id);
}
