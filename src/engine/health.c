/*-------------------------------------------------------------------------
 *
 * health.c
 *	  The one reading of the server's health that paces a lane, and what
 *	  it says: hold back, or go on.
 *
 * One statement reads how many sessions wait on a lock this process holds
 * (pg_blocking_pids), how far the furthest standby's replay is behind the
 * current WAL position, the table's dead tuples, and whether the pass's
 * role (its owner or run_as) is paused for all (backfill.paused_role,
 * backfill_pause_all).  Two more signals are read from the server's own
 * state, without SQL and only while their setting is on: the WAL segments
 * waiting for the archiver (the .ready files of pg_wal/archive_status,
 * backfill.max_archive_backlog) and the WAL the most retaining replication
 * slot holds, active or not (its restart_lsn behind the current WAL
 * position, backfill.max_slot_retained).  backfill.pause_all is a setting:
 * it needs no reading at all.  A batch reads it
 * inside its own transaction, before the commit, so that the locks it
 * counts are the batch's own (batch.c); a lane holding back reads it again
 * between sleeps (pacing.c).  Reading it costs more than a small batch, so
 * a batch reads it at most once per backfill.throttle_delay.
 *
 * The foreground is sampled apart, more often and more cheaply: how many
 * client sessions (not this one, not other workers) are running a
 * statement on a core or waiting for one of the resources a lane competes
 * for (an LWLock such as WAL insertion, a buffer pin, I/O).  A session
 * sleeping, waiting for its client, for an extension or for a heavyweight
 * lock does not count: sessions queued on an advisory lock that another
 * one holds use nothing a lane needs, and any role could park them there
 * to hold every role's lanes back (a lane's own lock conflicts are the
 * health throttle's).  Samples are smoothed (EWMA) so that one busy instant is not a
 * busy foreground.  They are read as the extension's owner: a superuser,
 * or a member of pg_read_all_stats, sees every session's state.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/pg_type_d.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "storage/fd.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "config.h"
#include "catalog.h"
#include "health.h"

static SPIPlanPtr health_plan = NULL;
static TimestampTz health_due = 0;
static SPIPlanPtr foreground_plan = NULL;
static TimestampTz foreground_due = 0;

/* weight of a new sample of the foreground */
#define FOREGROUND_EWMA 0.3

/* WAL segments waiting for the archiver: the .ready files of pg_wal/archive_status */
static int
archive_ready_count(void)
{
	const char *path = XLOGDIR "/archive_status";
	DIR		   *dir = AllocateDir(path);
	struct dirent *de;
	int			n = 0;

	if (dir == NULL)
		return 0;
	while ((de = ReadDirExtended(dir, path, LOG)) != NULL)
	{
		size_t		len = strlen(de->d_name);

		if (len > 6 && strcmp(de->d_name + len - 6, ".ready") == 0)
			n++;
	}
	FreeDir(dir);
	return n;
}

/* the WAL the most retaining replication slot holds (active or not), and its name */
static int64
slot_most_retained(char *name)
{
	XLogRecPtr	now = GetXLogWriteRecPtr();
	int64		most = 0;

	name[0] = '\0';
	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	for (int i = 0; i < max_replication_slots; i++)
	{
		ReplicationSlot *slot = &ReplicationSlotCtl->replication_slots[i];
		XLogRecPtr	restart;
		NameData	slot_name;

		if (!slot->in_use)
			continue;
		SpinLockAcquire(&slot->mutex);
		restart = slot->data.restart_lsn;
		slot_name = slot->data.name;
		SpinLockRelease(&slot->mutex);
		if (XLogRecPtrIsInvalid(restart) || restart >= now || (int64) (now - restart) <= most)
			continue;
		most = (int64) (now - restart);
		strlcpy(name, NameStr(slot_name), NAMEDATALEN);
	}
	LWLockRelease(ReplicationSlotControlLock);
	return most;
}

void
health_read(Health *health, Oid relid, const char *name)
{
	Oid			types[3] = {INT4OID, OIDOID, TEXTOID};
	Datum		values[3];
	bool		isnull;
	char	   *role;

	values[0] = Int32GetDatum(MyProcPid);
	values[1] = ObjectIdGetDatum(relid);
	values[2] = CStringGetTextDatum(name);
	catalog_exec_cached(&health_plan,
						"SELECT (SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity a"
						"         WHERE a.wait_event_type = 'Lock'"
						"           AND $1 = ANY (pg_catalog.pg_blocking_pids(a.pid)))::pg_catalog.int4,"
						"  coalesce((SELECT pg_catalog.max(pg_catalog.pg_wal_lsn_diff("
						"                     pg_catalog.pg_current_wal_lsn(), s.replay_lsn))"
						"              FROM pg_catalog.pg_stat_replication s), 0)::pg_catalog.int8,"
						"  coalesce(pg_catalog.pg_stat_get_dead_tuples($2), 0),"
						"  (SELECT p.role::pg_catalog.text FROM backfill.paused_role p"
						"     JOIN backfill.declaration d ON p.role IN (d.owner, d.run_as)"
						"    WHERE d.name = $3 ORDER BY p.role LIMIT 1)",
						3, types, values, NULL, SPI_OK_SELECT);
	health->blocking = DatumGetInt32(catalog_getdatum(0, 1, &isnull));
	health->lag_bytes = DatumGetInt64(catalog_getdatum(0, 2, &isnull));
	health->dead_tuples = DatumGetInt64(catalog_getdatum(0, 3, &isnull));
	role = catalog_gettext(0, 4);
	strlcpy(health->role_paused, role ? role : "", NAMEDATALEN);
	health->archive_ready = backfill_max_archive_backlog >= 0 ? archive_ready_count() : 0;
	health->slot_retained = backfill_max_slot_retained >= 0 ?
		slot_most_retained(health->slot_name) : 0;
}

void
health_read_if_due(Health *health, Oid relid, const char *name)
{
	TimestampTz now = GetCurrentTimestamp();

	health->blocking = 0;
	if (now < health_due)
		return;
	health_due = TimestampTzPlusMilliseconds(now, backfill_throttle_delay);
	health_read(health, relid, name);
}

void
health_sample_foreground(Health *health)
{
	TimestampTz now = GetCurrentTimestamp();
	Oid			types[1] = {INT4OID};
	Datum		values[1];
	bool		isnull;
	int			at_work;

	health->foreground_fresh = false;
	if (now < foreground_due)
		return;
	foreground_due = TimestampTzPlusMilliseconds(now, FOREGROUND_SAMPLE_MS);
	values[0] = Int32GetDatum(MyProcPid);
	catalog_exec_cached(&foreground_plan,
						"SELECT pg_catalog.count(*)::pg_catalog.int4 FROM pg_catalog.pg_stat_activity a"
						" WHERE a.backend_type = 'client backend' AND a.state = 'active'"
						"   AND a.pid <> $1"
						"   AND (a.wait_event_type IS NULL"
						"        OR a.wait_event_type IN ('LWLock', 'BufferPin', 'IO'))",
						1, types, values, NULL, SPI_OK_SELECT);
	at_work = DatumGetInt32(catalog_getdatum(0, 1, &isnull));
	health->foreground = FOREGROUND_EWMA * at_work + (1.0 - FOREGROUND_EWMA) * health->foreground;
	health->foreground_fresh = true;
}

char *
health_size_text(double bytes)
{
	static const char *const units[] = {"B", "kB", "MB", "GB", "TB"};
	int			u = 0;

	while (bytes >= 1024 && u < lengthof(units) - 1)
	{
		bytes /= 1024;
		u++;
	}
	if (bytes == (double) (int64) bytes || u == 0)
		return psprintf("%.0f %s", bytes, units[u]);
	return psprintf("%.1f %s", bytes, units[u]);
}

char *
health_reason(const Health *health, const char *relation)
{
	if (backfill_paused_for_all)
		return pstrdup("paused for all (backfill.pause_all is on)");
	if (health->role_paused[0] != '\0')
		return psprintf("paused for all of role %s (backfill_pause_all)", health->role_paused);
	if (backfill_max_archive_backlog >= 0 && health->archive_ready > backfill_max_archive_backlog)
		return psprintf("archive: %d segments waiting, limit %d (backfill.max_archive_backlog)",
						health->archive_ready, backfill_max_archive_backlog);
	if (backfill_max_slot_retained >= 0 &&
		health->slot_retained > (int64) backfill_max_slot_retained * 1024)
		return psprintf("slot %s retains %s, limit %s (backfill.max_slot_retained)",
						health->slot_name, health_size_text((double) health->slot_retained),
						health_size_text((double) backfill_max_slot_retained * 1024));
	if (backfill_max_replication_lag >= 0 &&
		health->lag_bytes > (int64) backfill_max_replication_lag * 1024)
		return psprintf("replication: a standby's replay is " INT64_FORMAT " kB behind "
						"(backfill.max_replication_lag is %d kB)",
						health->lag_bytes / 1024, backfill_max_replication_lag);
	if (backfill_max_dead_tuples >= 0 && health->dead_tuples > backfill_max_dead_tuples)
		return psprintf("vacuum: %s has " INT64_FORMAT " dead tuples "
						"(backfill.max_dead_tuples is %d)",
						relation, health->dead_tuples, backfill_max_dead_tuples);
	return NULL;
}
