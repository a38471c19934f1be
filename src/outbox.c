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
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/xid8.h"

#include "catalog.h"
#include "errors.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(backfill_outbox_emit);

Datum
backfill_outbox_emit(PG_FUNCTION_ARGS)
{
	CatalogScope scope;
	Oid			types[4] = {TEXTOID, TEXTOID, JSONBOID, XID8OID};
	Datum		values[4];
	bool		isnull;
	int64		id;

	if (PG_ARGISNULL(0) || VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(0)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("outbox message needs a topic"),
				 errhint("Name the topic whose sink delivers it, e.g. 'orders.changed'.")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("outbox message of topic \"%s\" needs a key",
						text_to_cstring(PG_GETARG_TEXT_PP(0))),
				 errdetail("Messages of one key are delivered in the order they were emitted."),
				 errhint("Use the changed row's key, e.g. its id as text.")));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 errmsg("outbox message of topic \"%s\" needs a payload",
						text_to_cstring(PG_GETARG_TEXT_PP(0))),
				 errhint("Pass a jsonb payload, e.g. to_jsonb(the_row).")));

	check_not_standby("emit to outbox topic", text_to_cstring(PG_GETARG_TEXT_PP(0)));
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	catalog_enter(&scope);
	/* our xid first, so that the next xid read after it is past it */
	(void) GetTopTransactionId();
	values[3] = FullTransactionIdGetDatum(ReadNextFullTransactionId());
	catalog_exec("INSERT INTO backfill.outbox (topic, key, payload, emit_snapshot, emit_next_xid)"
				 " VALUES ($1, $2, $3, pg_current_snapshot(), $4) RETURNING id",
				 4, types, values, NULL, SPI_OK_INSERT_RETURNING);
	id = DatumGetInt64(catalog_getdatum(0, 1, &isnull));
	catalog_leave(&scope);
	SPI_finish();

	backfill_wake_scheduler_at_commit();
	PG_RETURN_INT64(id);
}
