/*-------------------------------------------------------------------------
 *
 * config.h
 *	  Settings (GUCs) and limits shared by every module of pg_backfill.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_CONFIG_H
#define BACKFILL_CONFIG_H

#include "postgres.h"

#define BACKFILL_EXTENSION_NAME	"pg_backfill"
#define BACKFILL_SCHEMA			"backfill"

/*
 * The version of the catalogs this library starts passes on: the control
 * file's default_version (test/t/099_release.pl checks they agree).
 */
#define BACKFILL_CATALOG_VERSION "0.6"

/* the longest backfill name; ':' is kept for scoped ledger names */
#define BACKFILL_NAME_MAXLEN	200

/* the most databases one cluster's launcher serves */
#define BACKFILL_MAX_DATABASES	16

/* GUCs (config.c) */
extern char *backfill_database_names;
extern char *backfill_environment;
extern int	backfill_max_workers;
extern int	backfill_max_workers_per_role;
extern int	backfill_preempt_after;
extern double backfill_default_rate;
extern int	backfill_naptime;
extern int	backfill_scheduler_idle_exit;
extern int	backfill_probe_timeout;

/*
 * A worker running a declarer's SQL that outlives its bound (a probe's or a
 * scope's timeout, a batch's batch_timeout, a cancel, a preemption) by more
 * than this is terminated: SQL that catches query_canceled ignores a cancel.
 */
#define BACKFILL_TERMINATE_GRACE_MS	2000
extern int	backfill_probe_lock_timeout;
extern int	backfill_max_probes_per_role;
extern int	backfill_max_replication_lag;
extern int	backfill_max_dead_tuples;
extern int	backfill_throttle_delay;
extern int	backfill_windows_clock_offset;
extern int	backfill_max_wal_rate;
extern int	backfill_max_archive_backlog;
extern int	backfill_max_slot_retained;
extern int	backfill_batch_history;
extern bool backfill_paused_for_all;
extern bool backfill_foreground_throttle;
extern int	backfill_lane_nice;
extern bool backfill_citus_per_shard;
extern char *backfill_input;
extern int	backfill_outbox_retention;
extern int	backfill_outbox_dead_retention;

/* config.c: defined by _PG_init, in this order */
extern void config_define_session_settings(void);
extern void config_define_worker_settings(void);

#endif							/* BACKFILL_CONFIG_H */
