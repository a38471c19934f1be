/*-------------------------------------------------------------------------
 *
 * relay.c
 *	  The outbox relay: a background worker that delivers backfill.outbox
 *	  messages to their topic's sink.
 *
 * A database's scheduler starts its relay while messages wait for a sink
 * that exists, or old messages wait to be pruned (relay_has_work); the
 * relay exits when nothing is left.  Each round it takes the oldest
 * pending message of each topic and key (a key's later messages wait
 * behind it: delivery is in order per topic and key; a message emitted
 * while a transaction that may hold an earlier one is still in flight
 * waits for it) that is due, and delivers each.  Messages of a topic with
 * no sink are not tried at all: they wait for one.
 *
 * Delivering.  A NOTIFY or function sink is delivered in a transaction
 * that also marks the message delivered: a crash before that commit
 * delivers it again, and rolls back what the function wrote.  A webhook is
 * called with no transaction open and no row lock held: a first
 * transaction counts the attempt and leases the message (its
 * next_attempt_at moves past the call's timeout, so it stays its key's
 * head and no round takes it meanwhile), the call runs, and a second
 * transaction records the answer if the lease is still this attempt's.  A
 * crash during the call lets the lease run out, and the message is sent
 * again: at least once, and in order, since no later message of its key
 * goes while it is pending.
 *
 * Trust.  Before delivering, the relay checks the message's emitting role
 * against the topic's owner (the role that set the sink) and grants again
 * (outbox.c): a message emitted before the sink was set, or by a role that
 * lost its grant, dies unsent.  A function sink runs as the role that set
 * it, restricted, with that role's search_path (pg_temp last), and every setting it
 * changes is rolled back, so that the relay's own SQL, which runs as
 * superuser, never sees them.  It is the function the sink was set to, by
 * oid: another of the same name, made after that one was dropped, never
 * runs.
 *
 * Failures and bounds.  A failed delivery is retried after a capped,
 * doubling delay; a message that fails max_attempts times is dead until
 * backfill_outbox_requeue() brings it back.  At most RELAY_LOG_BURST
 * failures a topic are logged every RELAY_LOG_INTERVAL_MS, the rest are
 * counted in one line.  Delivered messages older than
 * backfill.outbox_retention, and dead messages and those of topics with no
 * sink older than backfill.outbox_dead_retention, are pruned.
 *
 * Memory.  The loop has a context for the round, reset each time round,
 * and one for a message, reset after each; an aborted transaction leaves
 * TopMemoryContext current, so the error path goes back to the message's.
 *
 * Sinks: NOTIFY on a channel (sent when the marking transaction commits),
 * a SQL function (topic, key, payload [, emitted_by regrole]), and an HTTP
 * webhook (libcurl) with an HMAC-SHA256 signature of the body in
 * X-Backfill-Signature.
 *
 *-------------------------------------------------------------------------
 */
#include "names.h"
#include "postgres.h"

#include <curl/curl.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type_d.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "config.h"
#include "catalog.h"
#include "errors.h"
#include "outbox.h"
#include "relay.h"
#include "searchpath.h"
#include "worker.h"
#include "xact.h"

#define RELAY_ROUND		100		/* messages per round at most */
#define RELAY_SETTLE_MS	100		/* how soon a head held back is looked at again */
#define RELAY_PRUNE_BATCH	10000	/* messages pruned per statement */
#define RELAY_LEASE_MARGIN_MS	2000	/* a webhook's lease: its timeout and this */
#define RELAY_LOG_BURST	5		/* failures logged per topic per interval */
#define RELAY_LOG_INTERVAL_MS	60000
#define RELAY_ERROR_MAXLEN	1000	/* bytes of a sink's error kept and logged */
#define RELAY_TOPIC_KEYLEN	128	/* topics are told apart by this many bytes */

/* one message and its sink, as a delivery sees them */
typedef struct Delivery
{
	MemoryContext cxt;			/* the message's: what outlives a transaction */
	int64		id;
	char	   *topic;
	char	   *key;
	Datum		payload;		/* valid in the first transaction only */
	char	   *body;			/* {id, topic, key, payload} as JSON */
	Oid			emitted_by;		/* InvalidOid: emitted before 0.3 */
	int			attempt;		/* a leased webhook call's attempt, else 0 */
	char	   *kind;
	char	   *target;
	Oid			target_fn;
	char	   *secret;
	char	   *signature;		/* webhook: of the body, under the secret */
	int			timeout_ms;
	Oid			run_as;			/* the role that set the sink */
	char	   *search_path;
	/* the sink's trust, as read in the first transaction */
	Datum		grantees;		/* oid[] of the topic's grantees, valid with payload */
	bool		grantees_null;
	bool		run_as_named;	/* run_as still carries the name it was set with */
	char	   *run_as_name;
} Delivery;

typedef enum DeliveryStep
{
	DELIVERY_SKIPPED,			/* no longer pending or due, taken, or no sink */
	DELIVERY_DONE,				/* delivered and marked, or refused */
	DELIVERY_CALL				/* leased: call the webhook, then record */
} DeliveryStep;

/* how much a topic's failures were logged lately */
typedef struct TopicLog
{
	char		topic[RELAY_TOPIC_KEYLEN];	/* hash key */
	TimestampTz window_start;
	int			logged;
	int64		suppressed;
} TopicLog;

static HTAB *topic_logs = NULL;

/* a webhook call gives up when the relay is told to stop */
static int
webhook_progress(void *clientp, curl_off_t dltotal, curl_off_t dlnow,
				 curl_off_t ultotal, curl_off_t ulnow)
{
	return (ProcDiePending || QueryCancelPending) ? 1 : 0;
}

static size_t
discard_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	return size * nmemb;
}

/*
 * The body's HMAC-SHA256 under the secret, as "sha256=<hex>".  In a
 * transaction: the digest's resources belong to its resource owner.
 */
static char *
webhook_signature(const char *body, const char *secret)
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
	return psprintf("sha256=%s", hex);
}

/*
 * POST the body, with no transaction open; an error unless the receiver
 * answers 2xx in time.
 */
static void
webhook_post(const char *url, const char *body, const char *signature, int timeout_ms,
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
	if (signature != NULL)
		headers = curl_slist_append(headers, psprintf("X-Backfill-Signature: %s", signature));
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
	curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, webhook_progress);
	curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
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

/* Say how many failures of a topic were not logged, if any. */
static void
topic_log_summary(TopicLog *entry)
{
	if (entry->suppressed > 0)
		ereport(LOG,
				(errmsg("%lld more failed deliveries of outbox topic \"%s\" were not logged",
						(long long) entry->suppressed, entry->topic),
				 errdetail("At most %d failures of a topic are logged every %d seconds.",
						   RELAY_LOG_BURST, RELAY_LOG_INTERVAL_MS / 1000)));
	entry->suppressed = 0;
}

/* May a failure of this topic be logged now?  If not, it is counted. */
static bool
topic_log_allowed(const char *topic)
{
	TopicLog   *entry;
	bool		found;
	TimestampTz now = GetCurrentTimestamp();

	if (topic_logs == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = RELAY_TOPIC_KEYLEN;
		ctl.entrysize = sizeof(TopicLog);
		ctl.hcxt = TopMemoryContext;
		topic_logs = hash_create("pg_backfill relay topic logs", 64, &ctl,
								 HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	entry = hash_search(topic_logs, topic, HASH_ENTER, &found);
	if (!found)
	{
		entry->window_start = now;
		entry->logged = 0;
		entry->suppressed = 0;
	}
	else if (TimestampDifferenceExceeds(entry->window_start, now, RELAY_LOG_INTERVAL_MS))
	{
		topic_log_summary(entry);
		entry->window_start = now;
		entry->logged = 0;
	}
	if (entry->logged < RELAY_LOG_BURST)
	{
		entry->logged++;
		return true;
	}
	entry->suppressed++;
	return false;
}

/* at exit: the counts not said yet */
static void
topic_logs_flush(void)
{
	HASH_SEQ_STATUS status;
	TopicLog   *entry;

	if (topic_logs == NULL)
		return;
	hash_seq_init(&status, topic_logs);
	while ((entry = hash_seq_search(&status)) != NULL)
		topic_log_summary(entry);
}

/* a sink's error as kept and logged: at most RELAY_ERROR_MAXLEN bytes */
static char *
clip_error(const char *message)
{
	int			len = strlen(message);

	if (len <= RELAY_ERROR_MAXLEN)
		return pstrdup(message);
	return psprintf("%s...", pnstrdup(message, pg_mbcliplen(message, len, RELAY_ERROR_MAXLEN)));
}

/*
 * Record a failed delivery: retry later after a doubling delay, or dead.
 * attempt is the attempt a leased webhook call counted already (it is
 * recorded only if the lease is still that attempt's), or 0.
 */
static void
delivery_failed(int64 id, const char *message, int attempt)
{
	Oid			types[3] = {INT8OID, TEXTOID, INT4OID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', attempt > 0 ? ' ' : 'n'};
	char	   *error = clip_error(message);

	values[0] = Int64GetDatum(id);
	values[1] = CStringGetTextDatum(error);
	values[2] = Int32GetDatum(attempt);
	worker_begin_xact("pg_backfill relay: recording a failed delivery");
	if (catalog_exec("UPDATE backfill.outbox o SET attempts = o.attempts + k.step, last_error = $2,"
					 "  state = CASE WHEN o.attempts + k.step >= coalesce(s.max_attempts, 10)"
					 "               THEN 'dead' ELSE 'pending' END,"
					 "  dead_at = CASE WHEN o.attempts + k.step >= coalesce(s.max_attempts, 10)"
					 "                 THEN pg_catalog.now() END,"
					 "  next_attempt_at = pg_catalog.now() + pg_catalog.make_interval(secs =>"
					 "    least(coalesce(s.backoff_cap_ms, 300000),"
					 "          coalesce(s.backoff_base_ms, 1000)"
					 "          * 2 ^ least(o.attempts + k.step - 1, 30))"
					 "    * (0.5 + pg_catalog.random() / 2) / 1000.0)"
					 " FROM (SELECT CASE WHEN $3::integer IS NULL THEN 1 ELSE 0 END AS step) k"
					 " LEFT JOIN backfill.outbox_sink s"
					 "   ON s.topic = (SELECT topic FROM backfill.outbox WHERE id = $1)"
					 " WHERE o.id = $1 AND o.state = 'pending'"
					 "   AND ($3::integer IS NULL OR o.attempts = $3)"
					 " RETURNING o.state, o.attempts, o.topic",
					 3, types, values, nulls, SPI_OK_UPDATE_RETURNING) == 1)
	{
		bool		dead = strcmp(catalog_gettext(0, 1), "dead") == 0;
		char	   *topic = catalog_gettext(0, 3);

		if (topic_log_allowed(topic))
			ereport(dead ? WARNING : LOG,
					(errmsg("outbox message " INT64_FORMAT " %s after attempt %s: %s", id,
							dead ? "is dead" : "will be retried", catalog_gettext(0, 2), error),
					 errdetail("The message is of topic \"%s\".", topic),
					 dead ?
					 errhint("SELECT backfill_outbox_requeue(" INT64_FORMAT "); retries it.", id) : 0));
	}
	worker_commit_xact();
}

/*
 * The message's emitter may not emit into its topic (it was emitted before
 * the sink was set, or its grant was revoked): dead at once, unsent.
 */
static void
refuse_delivery(Delivery *d)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2];
	char	   *why = psprintf("role \"%s\" may not emit into topic \"%s\"",
							   role_name(d->emitted_by), d->topic);

	values[0] = Int64GetDatum(d->id);
	values[1] = CStringGetTextDatum(why);
	catalog_exec("UPDATE backfill.outbox SET state = 'dead', dead_at = pg_catalog.now(),"
				 " attempts = attempts + 1, last_error = $2 WHERE id = $1",
				 2, types, values, NULL, SPI_OK_UPDATE);
	if (topic_log_allowed(d->topic))
		ereport(WARNING,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("outbox message " INT64_FORMAT " is dead: %s", d->id, why),
				 errdetail("The topic belongs to role \"%s\", which set its sink; the role that "
						   "emitted the message is not a member of it and has no grant on the topic.",
						   role_name(d->run_as)),
				 errhint("To deliver it, SELECT backfill_outbox_grant(%s, %s); then "
						 "SELECT backfill_outbox_requeue(" INT64_FORMAT ");",
						 quote_literal_cstr(d->topic),
						 quote_literal_cstr(quote_identifier(role_name(d->emitted_by))), d->id)));
}

/*
 * Run a function sink, as the role that set it, restricted, with that
 * role's search_path; whatever settings it changes are rolled back.  It
 * must still be the function the sink was set to, owned by a role with
 * the sink role's privileges.
 */
static void
call_function_sink(Delivery *d)
{
	Oid			types[4] = {TEXTOID, TEXTOID, JSONBOID, REGROLEOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	Oid		   *argtypes = NULL;
	int			nargs = 0;
	Oid			save_user;
	int			save_sec;
	int			nest;

	if (!OidIsValid(d->target_fn) || get_func_name(d->target_fn) == NULL ||
		strcmp(function_name(d->target_fn), d->target) != 0 ||
		(get_func_signature(d->target_fn, &argtypes, &nargs),
		 nargs < 3 || nargs > 4 ||
		 memcmp(argtypes, types, nargs * sizeof(Oid)) != 0))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("outbox sink function %s of topic \"%s\" is not the one the sink was set to",
						d->target, d->topic),
				 errdetail("It was dropped, renamed or created again since the sink was set."),
				 errhint("Set the sink again to run the function now of that name: "
						 "SELECT backfill_outbox_sink(%s, 'function', %s);",
						 quote_literal_cstr(d->topic), quote_literal_cstr(d->target))));

	/* checked when the sink was set; the function may have changed hands since */
	if (!has_privs_of_role(function_owner(d->target_fn), d->run_as))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_PRIVILEGE),
				 errmsg("outbox sink function %s of topic \"%s\" belongs to another role",
						d->target, d->topic),
				 errdetail("Its owner lacks the privileges of the sink's role, and could "
						   "change what runs with them."),
				 errhint("Set the sink to a function of the sink's role.")));

	values[0] = CStringGetTextDatum(d->topic);
	values[1] = CStringGetTextDatum(d->key);
	values[2] = d->payload;
	values[3] = ObjectIdGetDatum(d->emitted_by);
	if (!OidIsValid(d->emitted_by))
		nulls[3] = 'n';

	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(d->run_as, save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	nest = NewGUCNestLevel();
	searchpath_apply(d->search_path, GUC_ACTION_SAVE);
	if (SPI_execute_with_args(psprintf(nargs == 4 ? "SELECT %s($1, $2, $3, $4)" :
									   "SELECT %s($1, $2, $3)", function_name(d->target_fn)),
							  nargs, types, values, nulls, false, 1) < 0)
		elog(ERROR, "outbox sink function %s failed", d->target);
	/* even a setting the sink made for the session ends with it */
	AtEOXact_GUC(false, nest);
	SetUserIdAndSecContext(save_user, save_sec);
}

/* a text column of the current SPI row, copied out of SPI's memory */
static char *
kept_text(Delivery *d, int col)
{
	char	   *value = catalog_gettext(0, col);

	return value ? MemoryContextStrdup(d->cxt, value) : NULL;
}

/*
 * Read the message, if it is still pending, due and not taken, and its
 * sink, into d.  In the delivery's first transaction.
 */
static bool
read_delivery(Delivery *d)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(d->id)};
	bool		isnull;

	if (catalog_exec("SELECT o.topic, o.key, o.payload,"
					 "  pg_catalog.jsonb_build_object('id', o.id, 'topic', o.topic, 'key', o.key,"
					 "                                'payload', o.payload)::text,"
					 "  o.emitted_by::oid, s.kind, s.target, s.target_fn, s.secret, s.timeout_ms,"
					 "  s.run_as, s.search_path,"
					 "  (SELECT pg_catalog.array_agg(g.grantee::oid) FROM backfill.outbox_grant g"
					 "    WHERE g.topic = o.topic),"
					 "  EXISTS (SELECT 1 FROM pg_catalog.pg_roles r"
					 "           WHERE r.oid = s.run_as AND r.rolname = s.run_as_name),"
					 "  s.run_as_name"
					 " FROM backfill.outbox o JOIN backfill.outbox_sink s ON s.topic = o.topic"
					 " WHERE o.id = $1 AND o.state = 'pending'"
					 "   AND o.next_attempt_at <= pg_catalog.now()"
					 " FOR UPDATE OF o SKIP LOCKED",
					 1, types, values, NULL, SPI_OK_SELECT) == 0)
		return false;
	d->topic = kept_text(d, 1);
	d->key = kept_text(d, 2);
	d->payload = PointerGetDatum(PG_DETOAST_DATUM_COPY(catalog_getdatum(0, 3, &isnull)));
	d->body = kept_text(d, 4);
	d->emitted_by = catalog_getoid(0, 5);	/* InvalidOid: emitted before 0.3 */
	d->kind = kept_text(d, 6);
	d->target = kept_text(d, 7);
	d->target_fn = catalog_getoid(0, 8);
	d->secret = kept_text(d, 9);
	d->timeout_ms = DatumGetInt32(catalog_getdatum(0, 10, &isnull));
	d->run_as = DatumGetObjectId(catalog_getdatum(0, 11, &isnull));
	d->search_path = kept_text(d, 12);
	d->grantees = catalog_getdatum(0, 13, &d->grantees_null);
	d->run_as_named = DatumGetBool(catalog_getdatum(0, 14, &isnull));
	d->run_as_name = kept_text(d, 15);
	return true;
}

/* A function sink runs as the role that set it, not an oid left by a restore. */
static void
check_sink_role(Delivery *d)
{
	if (strcmp(d->kind, "function") != 0 || d->run_as_named)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_PRIVILEGE),
			 errmsg("outbox sink of topic \"%s\" was set by role \"%s\", which it no longer "
					"names", d->topic, d->run_as_name),
			 errdetail("Its role oid %u is %s now.", d->run_as,
					   GetUserNameFromId(d->run_as, true) ?
					   GetUserNameFromId(d->run_as, true) : "no role"),
			 errhint("Set the sink again: SELECT backfill_outbox_sink(%s, ...);",
					 quote_literal_cstr(d->topic))));
}

/*
 * A webhook: count the attempt and hold the message past the call's
 * timeout (its lease), and sign the body; the call comes after the commit.
 * Returns the attempt, which is the delivery's once the lease commits.
 */
static int
lease_webhook(Delivery *d)
{
	Oid			types[2] = {INT8OID, FLOAT8OID};
	Datum		values[2];
	bool		isnull;
	int			attempt;

	values[0] = Int64GetDatum(d->id);
	values[1] = Float8GetDatum((d->timeout_ms + RELAY_LEASE_MARGIN_MS) / 1000.0);
	catalog_exec("UPDATE backfill.outbox SET attempts = attempts + 1,"
				 "  next_attempt_at = pg_catalog.clock_timestamp()"
				 "                    + pg_catalog.make_interval(secs => $2)"
				 " WHERE id = $1 RETURNING attempts",
				 2, types, values, NULL, SPI_OK_UPDATE_RETURNING);
	attempt = DatumGetInt32(catalog_getdatum(0, 1, &isnull));
	if (d->secret != NULL)
		d->signature = MemoryContextStrdup(d->cxt,
										   webhook_signature(d->body, d->secret));
	return attempt;
}

/*
 * A NOTIFY or function sink: deliver and mark the message delivered, in
 * one transaction.
 */
static void
deliver_in_xact(Delivery *d)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(d->id)};

	if (strcmp(d->kind, "notify") == 0)
	{
		Oid			ntypes[2] = {TEXTOID, TEXTOID};
		Datum		nvalues[2] = {CStringGetTextDatum(d->target), CStringGetTextDatum(d->body)};

		/* NOTIFY is sent when this transaction, which marks it delivered, commits */
		catalog_exec("SELECT pg_catalog.pg_notify($1, $2)", 2, ntypes, nvalues, NULL,
					 SPI_OK_SELECT);
	}
	else
		call_function_sink(d);

	catalog_exec("UPDATE backfill.outbox SET state = 'delivered', delivered_at = pg_catalog.now(),"
				 " attempts = attempts + 1, last_error = NULL WHERE id = $1",
				 1, types, values, NULL, SPI_OK_UPDATE);
}

/*
 * The first (for NOTIFY and function sinks, the only) transaction of a
 * delivery: read the message and its sink, check its emitter, and either
 * deliver it and mark it delivered, or lease it for a webhook call.
 */
static DeliveryStep
open_delivery(Delivery *d)
{
	DeliveryStep step = DELIVERY_DONE;
	int			attempt = 0;

	worker_begin_xact("pg_backfill relay: delivering");
	if (!read_delivery(d))
		step = DELIVERY_SKIPPED;
	else if (OidIsValid(d->emitted_by) &&
			 !outbox_role_allowed(d->emitted_by, d->run_as, d->grantees, d->grantees_null))
		refuse_delivery(d);
	else
	{
		check_sink_role(d);
		if (strcmp(d->kind, "webhook") == 0)
		{
			attempt = lease_webhook(d);
			step = DELIVERY_CALL;
		}
		else
			deliver_in_xact(d);
	}
	worker_commit_xact();
	/* only a lease that committed is this delivery's attempt */
	d->attempt = attempt;
	return step;
}

/* The webhook answered 2xx: mark the message delivered, if still ours. */
static void
close_delivery(Delivery *d)
{
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2] = {Int64GetDatum(d->id), Int32GetDatum(d->attempt)};

	worker_begin_xact("pg_backfill relay: recording a delivery");
	catalog_exec("UPDATE backfill.outbox SET state = 'delivered', delivered_at = pg_catalog.now(),"
				 " last_error = NULL"
				 " WHERE id = $1 AND state = 'pending' AND attempts = $2",
				 2, types, values, NULL, SPI_OK_UPDATE);
	worker_commit_xact();
}

/* Deliver one message; a failure is recorded, never thrown. */
static void
deliver_message(int64 id, MemoryContext msgcxt)
{
	MemoryContext outer = MemoryContextSwitchTo(msgcxt);
	Delivery   *d = palloc0(sizeof(Delivery));
	volatile DeliveryStep step = DELIVERY_SKIPPED;
	char	   *volatile error = NULL;

	d->cxt = msgcxt;
	d->id = id;
	PG_TRY();
	{
		step = open_delivery(d);
		if (step == DELIVERY_CALL)
			webhook_post(d->target, d->body, d->signature, d->timeout_ms, d->id);
	}
	PG_CATCH();
	{
		error = worker_abort_xact(msgcxt)->message;
	}
	PG_END_TRY();

	if (error != NULL)
		delivery_failed(id, error, d->attempt);
	else if (step == DELIVERY_CALL)
		close_delivery(d);
	Assert(CurrentMemoryContext == msgcxt);
	MemoryContextSwitchTo(outer);
	MemoryContextReset(msgcxt);
}

/*
 * Prune what has been kept long enough: delivered messages after
 * backfill.outbox_retention; dead ones, and those of topics with no sink,
 * after backfill.outbox_dead_retention.  Runs in the round's transaction.
 * Returns true if a statement found more than it may prune at once.
 */
static bool
relay_prune(void)
{
	Oid			types[1] = {INT4OID};
	Datum		keep[1] = {Int32GetDatum(backfill_outbox_retention)};
	Datum		keep_dead[1] = {Int32GetDatum(backfill_outbox_dead_retention)};
	int			delivered;
	int			dead;
	int			unroutable;

	delivered = catalog_exec("DELETE FROM backfill.outbox WHERE id IN ("
							 "  SELECT id FROM backfill.outbox WHERE state = 'delivered'"
							 "     AND delivered_at < pg_catalog.now() - pg_catalog.make_interval(secs => $1)"
							 "   LIMIT " CppAsString2(RELAY_PRUNE_BATCH) ")",
							 1, types, keep, NULL, SPI_OK_DELETE);
	dead = catalog_exec("DELETE FROM backfill.outbox WHERE id IN ("
						"  SELECT id FROM backfill.outbox WHERE state = 'dead'"
						"     AND dead_at < pg_catalog.now() - pg_catalog.make_interval(secs => $1)"
						"   LIMIT " CppAsString2(RELAY_PRUNE_BATCH) ")",
						1, types, keep_dead, NULL, SPI_OK_DELETE);
	unroutable = catalog_exec("DELETE FROM backfill.outbox WHERE id IN ("
							  "  SELECT o.id FROM backfill.outbox o WHERE o.state = 'pending'"
							  "     AND o.created_at < pg_catalog.now() - pg_catalog.make_interval(secs => $1)"
							  "     AND NOT EXISTS (SELECT 1 FROM backfill.outbox_sink s"
							  "                      WHERE s.topic = o.topic)"
							  "   LIMIT " CppAsString2(RELAY_PRUNE_BATCH) ")",
							  1, types, keep_dead, NULL, SPI_OK_DELETE);
	if (dead > 0 || unroutable > 0)
		ereport(LOG,
				(errmsg("pruned %d dead outbox messages and %d of topics with no sink",
						dead, unroutable),
				 errdetail("They were older than backfill.outbox_dead_retention.")));
	return delivered == RELAY_PRUNE_BATCH || dead == RELAY_PRUNE_BATCH ||
		unroutable == RELAY_PRUNE_BATCH;
}

/*
 * One round: the due head of each topic and key.  Returns how many were
 * found; *wait_ms is how long until the next one is due (-1: none
 * pending); *more_to_prune is set when pruning stopped at its limit.
 */
static int
relay_round(MemoryContext msgcxt, long *wait_ms, bool *more_to_prune)
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
	 * held back that way is looked at again in RELAY_SETTLE_MS.  Topics
	 * with no sink are left alone.
	 */
	if (catalog_exec("SELECT h.id, h.next_attempt_at <= pg_catalog.now() AND h.settled,"
					 "  CASE WHEN h.settled"
					 "       THEN pg_catalog.ceil(extract(epoch FROM h.next_attempt_at - pg_catalog.now()) * 1000)"
					 "       ELSE " CppAsString2(RELAY_SETTLE_MS) " END::bigint"
					 " FROM (SELECT DISTINCT ON (o.topic, o.key) o.id, o.next_attempt_at,"
					 "         NOT EXISTS ("
					 "           SELECT 1 FROM ("
					 "               SELECT x FROM pg_catalog.pg_snapshot_xip(o.emit_snapshot) x"
					 "             UNION ALL"
					 "               SELECT g::text::xid8 FROM pg_catalog.generate_series("
					 "                 pg_catalog.pg_snapshot_xmax(o.emit_snapshot)::text::bigint,"
					 "                 o.emit_next_xid::text::bigint - 1) g) f (x)"
					 "            WHERE NOT pg_catalog.pg_visible_in_snapshot(f.x, pg_catalog.pg_current_snapshot())"
					 "              AND pg_catalog.pg_xact_status(f.x) IS DISTINCT FROM 'aborted')"
					 "           AS settled"
					 "         FROM backfill.outbox o WHERE o.state = 'pending'"
					 "          AND EXISTS (SELECT 1 FROM backfill.outbox_sink s WHERE s.topic = o.topic)"
					 "        ORDER BY o.topic, o.key, o.id) h"
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
	*more_to_prune = (n == 0) ? relay_prune() : false;
	worker_commit_xact();

	for (int i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		deliver_message(ids[i], msgcxt);
	}
	return n;
}

/*
 * Is there work for the relay: a due message of a topic with a sink, or a
 * dead or unroutable one to prune?  (Delivered messages are pruned when
 * the relay runs anyway: only a delivery makes one.)  Asked by the
 * scheduler, in its transaction.
 */
bool
relay_has_work(void)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(backfill_outbox_dead_retention)};

	return catalog_ask("look for outbox work",
					   "SELECT EXISTS (SELECT 1 FROM backfill.outbox o"
					   "   WHERE o.state = 'pending' AND o.next_attempt_at <= pg_catalog.now()"
					   "     AND EXISTS (SELECT 1 FROM backfill.outbox_sink s"
					   "                  WHERE s.topic = o.topic))"
					   " OR EXISTS (SELECT 1 FROM backfill.outbox WHERE state = 'dead'"
					   "   AND dead_at < pg_catalog.now() - pg_catalog.make_interval(secs => $1))"
					   " OR EXISTS (SELECT 1 FROM backfill.outbox o WHERE o.state = 'pending'"
					   "   AND o.created_at < pg_catalog.now() - pg_catalog.make_interval(secs => $1)"
					   "   AND NOT EXISTS (SELECT 1 FROM backfill.outbox_sink s"
					   "                    WHERE s.topic = o.topic))",
					   1, types, values);
}

void
backfill_relay_main(Datum main_arg)
{
	LaneArgs	args;
	MemoryContext round_cxt;
	MemoryContext msg_cxt;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(LaneArgs));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* the relay runs no user SQL but sink functions, which it runs as their owner */
	BackgroundWorkerInitializeConnectionByOid(args.dboid, InvalidOid, 0);
	worker_own_identity(PGC_S_OVERRIDE);
	SetConfigOption("application_name", "pg_backfill relay", PGC_USERSET, PGC_S_OVERRIDE);
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	worker_own_settings();
	pgstat_report_appname("pg_backfill relay");
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		elog(ERROR, "could not initialize libcurl");

	round_cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill relay round",
									  ALLOCSET_DEFAULT_SIZES);
	msg_cxt = AllocSetContextCreate(TopMemoryContext, "pg_backfill relay message",
									ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(round_cxt);

	for (;;)
	{
		long		wait_ms;
		bool		more_to_prune;

		/* every step of a round, its error paths too, comes back here */
		Assert(CurrentMemoryContext == round_cxt);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MemoryContextReset(round_cxt);
		if (relay_round(msg_cxt, &wait_ms, &more_to_prune) > 0 || more_to_prune)
			continue;
		if (wait_ms < 0)
			break;				/* nothing pending: the scheduler starts us again */
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(1L, Min(wait_ms, backfill_naptime * 1000L)), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	topic_logs_flush();
	curl_global_cleanup();
	proc_exit(0);
}
