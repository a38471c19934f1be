/*-------------------------------------------------------------------------
 *
 * outbox.c
 *	  backfill_outbox_emit(): queue a message in the caller's transaction.
 *
 * The message is a row of backfill.outbox, written as the extension's
 * owner in the caller's transaction: a batch action that emits the rows it
 * changed commits them with the batch and its checkpoint, or loses all
 * three.  The scheduler is woken at commit and starts the relay
 * (relay.c), which delivers the message to its topic's sink.
 *
 * The row also keeps which transactions were in flight when it was emitted
 * (the snapshot, and the next xid then): the relay holds a message back
 * while one of those is still in flight, since it may have emitted an
 * earlier message on the same key that is not visible yet (relay.c).  No
 * lock is taken, so emitters never wait for each other or deadlock.
 *
 * A topic whose sink is set belongs to the role that set it: only members
 * of that role, and roles it granted the topic to (backfill_outbox_grant),
 * may emit into it, since its messages reach that role's function sink or
 * leave signed with its secret.  The row records the emitting role; the
 * relay checks it again before delivering.  Anyone may emit into a topic
 * with no sink: its messages wait for one, and are pruned after
 * backfill.outbox_dead_retention.
 *
 *-------------------------------------------------------------------------
 */
#include "names.h"
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/xid8.h"

#include "catalog.h"
#include "errors.h"
#include "outbox.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(backfill_outbox_emit);

bool
outbox_role_allowed(Oid role, Oid owner, Datum grantees, bool grantees_null)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (has_privs_of_role(role, owner))
		return true;
	if (grantees_null)
		return false;
	deconstruct_array(DatumGetArrayTypeP(grantees), OIDOID, sizeof(Oid), true,
					  TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		if (!nulls[i] && has_privs_of_role(role, DatumGetObjectId(elems[i])))
			return true;
	}
	return false;
}

/*
 * The owner of a topic (the role that set its sink) and the roles it was
 * granted to (an oid[] datum, or NULL); false when it has no sink.  Runs
 * in a catalog scope.
 */
bool
outbox_topic_owner(Datum topic, Oid *owner, Datum *grantees, bool *grantees_null)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {topic};

	if (catalog_exec("SELECT s.run_as, pg_catalog.array_agg(g.grantee::oid)"
					 "  FILTER (WHERE g.grantee IS NOT NULL)"
					 " FROM backfill.outbox_sink s"
					 " LEFT JOIN backfill.outbox_grant g ON g.topic = s.topic"
					 " WHERE s.topic = $1 GROUP BY s.run_as",
					 1, types, values, NULL, SPI_OK_SELECT) == 0)
		return false;
	*owner = catalog_getoid(0, 1);
	*grantees = catalog_getdatum(0, 2, grantees_null);
	return true;
}

/*
 * Refuse to emit into a topic whose sink belongs to a role the caller may
 * not act for, unless it was granted the topic.  Runs in a catalog scope.
 */
static void
check_topic_emitter(Datum topic, Oid emitter)
{
	Oid			owner;
	Datum		grantees;
	bool		grantees_null;

	if (!outbox_topic_owner(topic, &owner, &grantees, &grantees_null))
		return;					/* no sink: the message waits for one */
	if (outbox_role_allowed(emitter, owner, grantees, grantees_null))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_PRIVILEGE),
			 errmsg("permission denied for outbox topic \"%s\"", TextDatumGetCString(topic)),
			 errdetail("The topic's sink was set by role \"%s\"; role \"%s\" is not a member "
					   "of it and was not granted the topic.",
					   role_name(owner), GetUserNameFromId(emitter, false)),
			 errhint("Ask a member of role \"%s\" to run SELECT backfill_outbox_grant('%s', '%s');",
					 role_name(owner), TextDatumGetCString(topic), GetUserNameFromId(emitter, false))));
}

/* Refuse a message that lacks what (a key, a payload). */
static void
refuse_missing(const char *topic, const char *what, const char *detail, const char *hint)
{
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
			 errmsg("outbox message of topic \"%s\" needs %s", topic, what),
			 detail ? errdetail("%s", detail) : 0,
			 errhint("%s", hint)));
}

/* A message has a topic, a key and a payload. */
static void
check_emit_arguments(FunctionCallInfo fcinfo)
{
	char	   *topic;

	if (PG_ARGISNULL(0) || VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(0)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("outbox message needs a topic"),
				 errhint("Name the topic whose sink delivers it, e.g. 'orders.changed'.")));
	topic = text_to_cstring(PG_GETARG_TEXT_PP(0));
	outbox_check_topic_length(topic);
	if (PG_ARGISNULL(1))
		refuse_missing(topic, "a key",
					   "Messages of one key are delivered in the order they were emitted.",
					   "Use the changed row's key, e.g. its id as text.");
	if (PG_ARGISNULL(2))
		refuse_missing(topic, "a payload", NULL, "Pass a jsonb payload, e.g. to_jsonb(the_row).");
}

/*
 * A topic is at most OUTBOX_TOPIC_MAX bytes (a sink's, an emit's, a
 * declaration's events): with a key it must fit the outbox's index.
 */
void
outbox_check_topic_length(const char *topic)
{
	if (strlen(topic) > OUTBOX_TOPIC_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("outbox topic is %zu bytes long, more than %d", strlen(topic),
						OUTBOX_TOPIC_MAX),
				 errhint("Name the topic in at most %d bytes, e.g. 'orders.backfills'.",
						 OUTBOX_TOPIC_MAX)));
}

/*
 * Insert a message of emitter, in the caller's transaction, as the
 * extension's owner; its id.  The caller is connected to SPI and checked
 * the emitter (backfill_outbox_emit) or leaves that to the relay alone
 * (a lifecycle event, events.c).
 */
int64
outbox_insert(Datum topic, Datum key, Datum payload, Oid emitter, bool check_emitter)
{
	CatalogScope scope;
	Oid			types[5] = {TEXTOID, TEXTOID, JSONBOID, XID8OID, OIDOID};
	Datum		values[5];
	bool		isnull;
	int64		id;

	/*
	 * The relay must never deliver a message a crash can still take back:
	 * whatever the session says, this transaction's commit waits for disk
	 * (a lane's batches are asynchronous otherwise).
	 */
	ForceSyncCommit();
	values[0] = topic;
	values[1] = key;
	values[2] = payload;

	catalog_enter(&scope);
	if (check_emitter)
		check_topic_emitter(values[0], emitter);
	/* our xid first, so that the next xid read after it is past it */
	(void) GetTopTransactionId();
	values[3] = FullTransactionIdGetDatum(ReadNextFullTransactionId());
	values[4] = ObjectIdGetDatum(emitter);
	catalog_exec("INSERT INTO backfill.outbox"
				 " (topic, key, payload, emit_snapshot, emit_next_xid, emitted_by)"
				 " VALUES ($1, $2, $3, pg_catalog.pg_current_snapshot(), $4, $5) RETURNING id",
				 5, types, values, NULL, SPI_OK_INSERT_RETURNING);
	id = DatumGetInt64(catalog_getdatum(0, 1, &isnull));
	catalog_leave(&scope);

	backfill_wake_scheduler_at_commit();
	return id;
}

Datum
backfill_outbox_emit(PG_FUNCTION_ARGS)
{
	int64		id;

	check_emit_arguments(fcinfo);
	check_catalog_current("emit to outbox topic", text_to_cstring(PG_GETARG_TEXT_PP(0)));
	check_not_standby("emit to outbox topic", text_to_cstring(PG_GETARG_TEXT_PP(0)));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	id = outbox_insert(PG_GETARG_DATUM(0), PG_GETARG_DATUM(1), PG_GETARG_DATUM(2),
					   GetUserId(), true);
	SPI_finish();
	PG_RETURN_INT64(id);
}
