/*-------------------------------------------------------------------------
 *
 * relay.c
 *	  The outbox relay: a background worker that delivers backfill.outbox
 *	  messages to their topic's sink.
 *
 * A database's scheduler starts its relay while messages are pending;
 * the relay exits when none is left.  Each round it takes the oldest
 * pending message of each key (a key's later messages wait behind it:
 * delivery is in order per key; a message emitted while a transaction
 * that may hold an earlier one is still in flight waits for it) that is
 * due, and delivers each in a
 * transaction of its own that also marks it delivered.  A crash between
 * the sink's answer and that commit delivers the message again: at least
 * once.  A failed delivery is retried after a capped, doubling delay; a
 * message that fails max_attempts times is dead until
 * backfill_outbox_requeue() brings it back.  Delivered messages older
 * than backfill.outbox_retention are pruned.
 *
 * Sinks: NOTIFY on a channel (sent when the marking transaction commits),
 * a SQL function (topic, key, payload), run as the role that configured
 * the sink, and an HTTP webhook (libcurl) with an HMAC-SHA256 signature of
 * the body in X-Backfill-Signature.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>

#include "access/xact.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "pg_backfill.h"
#include "catalog.h"
#include "errors.h"
#include "scheduler.h"
#include "relay.h"
#include "xact.h"

#define RELAY_ROUND		100		/* messages per round at most */
#define RELAY_SETTLE_MS	100		/* how soon a head held back is looked at again */

/* one message, as a round sees it */
typedef struct Message
{
	int64		id;
} Message;

static size_t
discard_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	return size * nmemb;
}

/* POST the body; an error unless the receiver answers 2xx in time */
static void
webhook_post(const char *url, const char *body, const char *secret, int timeout_ms,
			 int64 id)
{
	CURL	   *curl = curl_easy_init();
	struct curl_slist *headers = NULL;
	CURLcode	rc;
	long		status = 0;
	char		errbuf[CURL_ERROR_SIZE] = "";

	if (curl == NULL)
		elog(ERROR, "could not initialize libcurl");
	headers = curl_slist_append(headers, "Content-Type: application/json");
	headers = curl_slist_append(headers, psprintf("X-Backfill-Id: " INT64_FORMAT, id));
	if (secret != NULL)
	{
		pg_hmac_ctx *hmac = pg_hmac_create(PG_SHA256);
		uint8		digest[PG_SHA256_DIGEST_LENGTH];
		char		hex[PG_SHA256_DIGEST_LENGTH * 2 + 1];

		if (hmac == NULL ||
			pg_hmac_init(hmac, (const uint8 *) secret, strlen(secret)) < 0 ||
			pg_hmac_update(hmac, (const uint8 *) body, strlen(body)) < 0 ||
			pg_hmac_final(hmac, digest, sizeof(digest)) < 0)
			elog(ERROR, "could not sign an outbox message");
		pg_hmac_free(hmac);
		for (int i = 0; i < PG_SHA256_DIGEST_LENGTH; i++)
			sprintf(hex + 2 * i, "%02x", digest[i]);
		headers = curl_slist_append(headers, psprintf("X-Backfill-Signature: sha256=%s", hex));
	}
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long) strlen(body));
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long) timeout_ms);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long) timeout_ms);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard_body);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
	rc = curl_easy_perform(curl);
	if (rc == CURLE_OK)
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(headers);
	curl_easy_cleanup(curl);
	if (rc != CURLE_OK)
		ereport(ERROR,
				(errmsg("webhook %s failed: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(rc))));
	if (status < 200 || status >= 300)
		ereport(ERROR, (errmsg("webhook %s answered HTTP %ld", url, status)));
}

/*
 * Deliver one message and mark it delivered, in one transaction.  Returns
 * false if another relay has it, or it is no longer pending.
 */
static bool
deliver(int64 id, MemoryContext cxt)
{
	Oid			types[3] = {INT8OID, TEXTOID, JSONBOID};
	Datum		values[3];
	char	   *topic;
	char	   *key;
	Datum		payload;
	char	   *body;
	char	   *kind;
	char	   *target;
	char	   *secret;
	int			timeout_ms;
	Oid			run_as;
	char	   *search_path;
	bool		isnull;

	worker_begin_xact("pg_backfill relay: delivering");
	values[0] = Int64GetDatum(id);
	if (catalog_exec("SELECT o.topic, o.key, o.payload,"
					 "  jsonb_build_object('id', o.id, 'topic', o.topic, 'key', o.key,"
					 "                     'payload', o.payload)::text"
					 " FROM backfill.outbox o WHERE o.id = $1 AND o.state = 'pending'"
					 " FOR UPDATE SKIP LOCKED",
					 1, types, values, NULL, SPI_OK_SELECT) == 0)
	{
		worker_commit_xact();
		return false;
	}
	topic = catalog_gettext(0, 1);
	key = catalog_gettext(0, 2);
	payload = catalog_getdatum(0, 3, &isnull);
	payload = PointerGetDatum(PG_DETOAST_DATUM_COPY(payload));
	body = catalog_gettext(0, 4);

	values[1] = CStringGetTextDatum(topic);
	if (catalog_exec("SELECT kind, target, secret, timeout_ms, run_as, search_path,"
					 "  EXISTS (SELECT 1 FROM pg_catalog.pg_roles r"
					 "           WHERE r.oid = run_as AND r.rolname = run_as_name), run_as_name"
					 " FROM backfill.outbox_sink WHERE topic = $2",
					 2, types, values, NULL, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errmsg("no outbox sink for topic \"%s\"", topic),
				 errhint("SELECT backfill_outbox_sink('%s', 'notify', 'channel');", topic)));
	kind = catalog_gettext(0, 1);
	target = catalog_gettext(0, 2);
	secret = catalog_gettext(0, 3);
	timeout_ms = DatumGetInt32(catalog_getdatum(0, 4, &isnull));
	run_as = DatumGetObjectId(catalog_getdatum(0, 5, &isnull));
	search_path = catalog_gettext(0, 6);
	/* a function sink runs as the role that set it, not an oid left by a restore */
	if (strcmp(kind, "function") == 0 && !DatumGetBool(catalog_getdatum(0, 7, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("outbox sink of topic \"%s\" was set by role \"%s\", which it no longer "
						"names", topic, catalog_gettext(0, 8)),
				 errdetail("Its role oid %u is %s now.", run_as,
						   GetUserNameFromId(run_as, true) ? GetUserNameFromId(run_as, true) :
						   "no role"),
				 errhint("Set the sink again: SELECT backfill_outbox_sink('%s', ...);", topic)));

	if (strcmp(kind, "notify") == 0)
	{
		Oid			ntypes[2] = {TEXTOID, TEXTOID};
		Datum		nvalues[2] = {CStringGetTextDatum(target), CStringGetTextDatum(body)};

		/* NOTIFY is sent when this transaction, which marks it delivered, commits */
		catalog_exec("SELECT pg_notify($1, $2)", 2, ntypes, nvalues, NULL, SPI_OK_SELECT);
	}
	else if (strcmp(kind, "function") == 0)
	{
		Oid			save_user;
		int			save_sec;
		int			nest;
		Datum		fvalues[3] = {CStringGetTextDatum(topic), CStringGetTextDatum(key), payload};
		Oid			ftypes[3] = {TEXTOID, TEXTOID, JSONBOID};
		Datum		fn;
		Oid			rtypes[1] = {TEXTOID};
		Datum		rvalues[1] = {CStringGetTextDatum(psprintf("%s(text,text,jsonb)", target))};

		if (catalog_exec("SELECT to_regprocedure($1)::oid", 1, rtypes, rvalues, NULL,
						 SPI_OK_SELECT) != 1)
			elog(ERROR, "could not look up outbox sink function %s", target);
		fn = catalog_getdatum(0, 1, &isnull);
		if (isnull)
			ereport(ERROR,
					(errmsg("outbox sink function %s(text, text, jsonb) does not exist", target),
					 errhint("Create it, or point the sink of topic \"%s\" elsewhere.", topic)));

		/* the sink's SQL runs as the role that configured it, restricted */
		GetUserIdAndSecContext(&save_user, &save_sec);
		SetUserIdAndSecContext(run_as, save_sec | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		nest = NewGUCNestLevel();
		if (search_path != NULL && search_path[0] != '\0')
			(void) set_config_option("search_path", search_path, PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_SAVE, true, 0, false);
		if (SPI_execute_with_args(psprintf("SELECT %s($1, $2, $3)",
										   function_name(DatumGetObjectId(fn))),
								  3, ftypes, fvalues, NULL, false, 1) < 0)
			elog(ERROR, "outbox sink function %s failed", target);
		AtEOXact_GUC(true, nest);
		SetUserIdAndSecContext(save_user, save_sec);
	}
	else
		webhook_post(target, body, secret, timeout_ms, id);

	catalog_exec("UPDATE backfill.outbox SET state = 'delivered', delivered_at = now(),"
				 " attempts = attempts + 1, last_error = NULL WHERE id = $1",
				 1, types, values, NULL, SPI_OK_UPDATE);
	worker_commit_xact();
	return true;
}

/* Record a failed delivery: retry later after a doubling delay, or dead. */
static void
delivery_failed(int64 id, const char *message, MemoryContext cxt)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2] = {Int64GetDatum(id), CStringGetTextDatum(message)};

	worker_begin_xact("pg_backfill relay: recording a failed delivery");
	if (catalog_exec("UPDATE backfill.outbox o SET attempts = o.attempts + 1, last_error = $2,"
					 "  state = CASE WHEN o.attempts + 1 >= coalesce(s.max_attempts, 10)"
					 "               THEN 'dead' ELSE 'pending' END,"
					 "  next_attempt_at = now() + make_interval(secs =>"
					 "    least(coalesce(s.backoff_cap_ms, 300000),"
					 "          coalesce(s.backoff_base_ms, 1000) * 2 ^ least(o.attempts, 30))"
					 "    * (0.5 + random() / 2) / 1000.0)"
					 " FROM (SELECT 1) one LEFT JOIN backfill.outbox_sink s"
					 "   ON s.topic = (SELECT topic FROM backfill.outbox WHERE id = $1)"
					 " WHERE o.id = $1 RETURNING o.state, o.attempts",
					 2, types, values, NULL, SPI_OK_UPDATE_RETURNING) == 1)
	{
		char	   *state = catalog_gettext(0, 1);

		ereport(strcmp(state, "dead") == 0 ? WARNING : LOG,
				(errmsg("outbox message " INT64_FORMAT " %s after attempt %s: %s", id,
						strcmp(state, "dead") == 0 ? "is dead" : "will be retried",
						catalog_gettext(0, 2), message),
				 strcmp(state, "dead") == 0 ?
				 errhint("SELECT backfill_outbox_requeue(" INT64_FORMAT "); retries it.", id) : 0));
	}
	worker_commit_xact();
}

/*
 * One round: the due head of each key's queue.  Returns how many were
 * found; *wait_ms is how long until the next one is due (-1: none pending).
 */
static int
relay_round(MemoryContext cxt, long *wait_ms)
{
	int64		ids[RELAY_ROUND];
	int			n = 0;
	bool		isnull;

	worker_begin_xact("pg_backfill relay: looking for messages");
	/*
	 * The head of each key is due when its time has come and every
	 * transaction that was in flight when it was emitted has either
	 * aborted or committed within this statement's snapshot: otherwise it
	 * may hold an earlier message of the key that this snapshot cannot
	 * see, which must go first.  (Asking whether it is still in progress
	 * is not enough: it may commit after the snapshot was taken.)  A head
	 * held back that way is looked at again in RELAY_SETTLE_MS.
	 */
	if (catalog_exec("SELECT h.id, h.next_attempt_at <= now() AND h.settled,"
					 "  CASE WHEN h.settled"
					 "       THEN ceil(extract(epoch FROM h.next_attempt_at - now()) * 1000)"
					 "       ELSE " CppAsString2(RELAY_SETTLE_MS) " END::bigint"
					 " FROM (SELECT DISTINCT ON (o.key) o.id, o.next_attempt_at,"
					 "         NOT EXISTS ("
					 "           SELECT 1 FROM ("
					 "               SELECT x FROM pg_snapshot_xip(o.emit_snapshot) x"
					 "             UNION ALL"
					 "               SELECT g::text::xid8 FROM generate_series("
					 "                 pg_snapshot_xmax(o.emit_snapshot)::text::bigint,"
					 "                 o.emit_next_xid::text::bigint - 1) g) f (x)"
					 "            WHERE NOT pg_visible_in_snapshot(f.x, pg_current_snapshot())"
					 "              AND pg_xact_status(f.x) IS DISTINCT FROM 'aborted')"
					 "           AS settled"
					 "         FROM backfill.outbox o WHERE o.state = 'pending'"
					 "        ORDER BY o.key, o.id) h"
					 " ORDER BY h.next_attempt_at, h.id",
					 0, NULL, NULL, NULL, SPI_OK_SELECT) == 0)
		*wait_ms = -1;
	else
	{
		*wait_ms = backfill_naptime * 1000L;
		for (uint64 i = 0; i < SPI_processed && n < RELAY_ROUND; i++)
		{
			if (DatumGetBool(catalog_getdatum(i, 2, &isnull)))
				ids[n++] = DatumGetInt64(catalog_getdatum(i, 1, &isnull));
			else
				*wait_ms = Min(*wait_ms,
							   Max(1L, (long) DatumGetInt64(catalog_getdatum(i, 3, &isnull))));
		}
	}

	/* prune what was delivered long enough ago */
	if (n == 0)
	{
		Oid			types[1] = {INT4OID};
		Datum		values[1] = {Int32GetDatum(backfill_outbox_retention)};

		catalog_exec("DELETE FROM backfill.outbox WHERE id IN ("
					 "  SELECT id FROM backfill.outbox WHERE state = 'delivered'"
					 "     AND delivered_at < now() - make_interval(secs => $1) LIMIT 10000)",
					 1, types, values, NULL, SPI_OK_DELETE);
	}
	worker_commit_xact();

	for (int i = 0; i < n; i++)
	{
		volatile bool failed = false;
		ErrorData  *edata = NULL;

		CHECK_FOR_INTERRUPTS();
		PG_TRY();
		{
			(void) deliver(ids[i], cxt);
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			FlushErrorState();
			AbortCurrentTransaction();
			failed = true;
		}
		PG_END_TRY();
		if (failed)
			delivery_failed(ids[i], edata->message, cxt);
	}
	return n;
}

void
backfill_relay_main(Datum main_arg)
{
	LaneArgs	args;
	MemoryContext cxt;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(LaneArgs));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* the relay runs no user SQL but sink functions, which it runs as their owner */
	BackgroundWorkerInitializeConnectionByOid(args.dboid, InvalidOid, 0);
	SetConfigOption("application_name", "pg_backfill relay", PGC_USERSET, PGC_S_OVERRIDE);
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname("pg_backfill relay");
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		elog(ERROR, "could not initialize libcurl");

	cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill relay", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);

	for (;;)
	{
		long		wait_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MemoryContextReset(cxt);
		if (relay_round(cxt, &wait_ms) > 0)
			continue;
		if (wait_ms < 0)
			break;				/* nothing pending: the scheduler starts us again */
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(1L, Min(wait_ms, backfill_naptime * 1000L)), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	curl_global_cleanup();
	proc_exit(0);
}
