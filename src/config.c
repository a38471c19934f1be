/*-------------------------------------------------------------------------
 *
 * config.c
 *	  The settings of pg_backfill (backfill.*): their variables, ranges,
 *	  defaults and who may change them.
 *
 * Those a session may use without the library preloaded are defined first
 * (config_define_session_settings), the workers' after the preload check
 * (config_define_worker_settings).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "config.h"

char	   *backfill_database_names = NULL;
char	   *backfill_environment = NULL;
int			backfill_max_workers = 4;
int			backfill_max_workers_per_role = 0;
int			backfill_preempt_after = 10000;
double		backfill_default_rate = 5.0;
int			backfill_naptime = 10;
int			backfill_scheduler_idle_exit = 300;	/* s */
int			backfill_probe_timeout = 60000;	/* ms */
int			backfill_probe_lock_timeout = 1000;	/* ms */
int			backfill_max_probes_per_role = 2;
int			backfill_max_replication_lag = 1024 * 1024;	/* kB */
int			backfill_max_dead_tuples = -1;
int			backfill_throttle_delay = 1000;	/* ms */
int			backfill_windows_clock_offset = 0;	/* s */
int			backfill_max_wal_rate = -1;	/* kB/s */
int			backfill_max_archive_backlog = -1;	/* segments */
int			backfill_max_slot_retained = -1;	/* kB */
int			backfill_batch_history = 100;	/* batches per pass */
bool		backfill_paused_for_all = false;
bool		backfill_foreground_throttle = true;
int			backfill_lane_nice = 0;
bool		backfill_citus_per_shard = true;
static char *backfill_migrations_table = NULL;	/* read with GetConfigOption */
char	   *backfill_input = NULL;
int			backfill_outbox_retention = 7 * 24 * 3600;	/* s */
int			backfill_outbox_dead_retention = 3 * 24 * 3600;	/* s */


/* where a backfill may run, and what it waits for (settings of any session) */
static void
define_declaration_settings(void)
{
	DefineCustomRealVariable("backfill.default_rate",
							 "Batches per second a backfill runs at when it declares no rate.",
							 "Slow on purpose; a declaration raises it with rate => n. "
							 "Fractions are allowed; pacing cannot be switched off.",
							 &backfill_default_rate,
							 5.0, 0.001, 100000.0,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("backfill.environment",
							   "Name of the environment this server is (production, staging...).",
							   "A declaration that lists environments runs only where this "
							   "setting is one of them.",
							   &backfill_environment,
							   "",
							   PGC_SUSET, 0,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("backfill.migrations_table",
							   "Where applied schema migrations are listed, as table(column).",
							   "A declaration's requires => 'id' is applied once the column holds "
							   "that id: schema_migrations(version) for Rails, "
							   "flyway_schema_history(version) for Flyway, "
							   "django_migrations(name) for Django.",
							   &backfill_migrations_table,
							   "schema_migrations(version)",
							   PGC_SUSET, 0,
							   NULL, NULL, NULL);
}

/* when lanes hold back for the server's health */
static void
define_health_settings(void)
{
	DefineCustomIntVariable("backfill.max_replication_lag",
							"Replay lag of any standby above which lanes hold back.",
							"Measured in WAL bytes between this server and the standby's "
							"replay position; -1 switches the check off.",
							&backfill_max_replication_lag,
							1024 * 1024, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.max_dead_tuples",
							"Dead tuples in a backfill's table above which lanes hold back.",
							"Lanes wait for (auto)vacuum to bring the count under it; "
							"-1 switches the check off.",
							&backfill_max_dead_tuples,
							-1, -1, INT_MAX,
							PGC_SUSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.throttle_delay",
							"How long a lane holds back before it looks at the server's health again.",
							NULL,
							&backfill_throttle_delay,
							1000, 10, 600000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.windows_clock_offset",
							"Seconds added to the clock that time windows are judged by (for tests).",
							"Lets a test put the clock of the windows (the scheduler's, the lanes' "
							"and backfill_status's) just before a window ends or starts; 0 in "
							"production.",
							&backfill_windows_clock_offset,
							0, -315360000, 315360000,
							PGC_SUSET, GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("backfill.foreground_throttle",
							 "Whether lanes back off while the application keeps the server's cores busy.",
							 "A lane counts the client sessions running a statement; at half "
							 "the cores or more it halves the share of time it works, and "
							 "wins it back step by step once they are fewer.",
							 &backfill_foreground_throttle,
							 true,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("backfill.citus_per_shard",
							 "Whether a pass of a Citus distributed table runs shard by shard, each "
							 "batch on the node that holds its shard.",
							 "Off: every batch is a distributed transaction from the coordinator. "
							 "Read when a pass is planned.",
							 &backfill_citus_per_shard,
							 true,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
}

/* what every lane of the cluster holds back for, set for all at once (a reload) */
static void
define_cluster_pacing_settings(void)
{
	DefineCustomIntVariable("backfill.max_wal_rate",
							"WAL bytes per second that all lanes of the cluster together may write.",
							"Measured from the WAL each batch wrote; lanes pace so that any "
							"10 s stays within it.  -1 switches it off.",
							&backfill_max_wal_rate,
							-1, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.max_archive_backlog",
							"WAL segments waiting for the archiver above which lanes hold back.",
							"The .ready files in pg_wal/archive_status; -1 switches the check off.",
							&backfill_max_archive_backlog,
							-1, -1, INT_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.max_slot_retained",
							"WAL a replication slot (active or not) may retain before lanes hold back.",
							"Between the slot's restart_lsn and the current WAL position; "
							"-1 switches the check off.",
							&backfill_max_slot_retained,
							-1, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.batch_history",
							"Batches of each pass kept in backfill.batch (0 keeps none).",
							"Each batch's transaction records it with its checkpoint and "
							"prunes the pass's older ones; backfill_batches(name) reads them.",
							&backfill_batch_history,
							100, 0, 100000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("backfill.pause_all",
							 "Holds every lane of the cluster at its batch boundary.",
							 "Nothing is marked paused or failed; off lets the lanes go on.",
							 &backfill_paused_for_all,
							 false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
}

/* how long the outbox keeps messages (a reload changes them) */
static void
define_outbox_settings(void)
{
	DefineCustomIntVariable("backfill.outbox_retention",
							"How long delivered outbox messages are kept before the relay prunes them.",
							NULL,
							&backfill_outbox_retention,
							7 * 24 * 3600, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.outbox_dead_retention",
							"How long dead outbox messages, and those of topics with no sink, are kept.",
							"The relay prunes them after this long, so no role can grow "
							"backfill.outbox without bound.",
							&backfill_outbox_dead_retention,
							3 * 24 * 3600, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
}

/* the timeouts and bounds of a declarer's SQL evaluated outside a batch (probes) */
static void
config_define_probe_settings(void)
{
	DefineCustomIntVariable("backfill.probe_timeout",
							"Statement timeout of a declarer's SQL evaluated outside a batch.",
							"A drift probe (the watch, backfill_probe), the check of a required "
							"backfill and the read of the migrations table end with an error "
							"after this long.",
							&backfill_probe_timeout,
							60000, 100, 3600000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.max_probes_per_role",
							"Most backfill_probe workers the calls of one role may hold at once.",
							"A call beyond it is refused (BF038); a call for a backfill whose "
							"probe runs waits for that one's answer instead of starting another.",
							&backfill_max_probes_per_role,
							2, 1, 64,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.probe_lock_timeout",
							"Lock timeout of a declarer's SQL evaluated outside a batch.",
							"A probe that waits longer than this for a lock (a table a session "
							"holds locked) ends with an error, recorded as the probe's.",
							&backfill_probe_lock_timeout,
							1000, 10, 3600000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* the workers: which databases, how many lanes, how often they look (a restart or a reload) */
void
config_define_worker_settings(void)
{
	DefineCustomStringVariable("backfill.database_names",
							   "Databases whose backfills pg_backfill may run (comma-separated); "
							   "empty: every database.",
							   "The launcher keeps a scheduler running in each of them that has "
							   "the extension; a database without it costs a short check now "
							   "and then.",
							   &backfill_database_names,
							   "",
							   PGC_POSTMASTER, GUC_LIST_INPUT,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.max_workers",
							"Most lanes (background workers) all backfills may use at once.",
							"Lanes also count against max_worker_processes.",
							&backfill_max_workers,
							4, 1, 128,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.max_workers_per_role",
							"Most lanes the backfills of one role may use at once (0: no fixed limit).",
							"Whatever this says, when every lane is taken and another role's pass "
							"waits, a role holding more than its share gives a lane up after its "
							"batch.",
							&backfill_max_workers_per_role,
							0, 0, 128,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.preempt_after",
							"How long a batch of a role holding more than its share of the lanes "
							"may run while another role's pass waits, before it is cancelled "
							"(0: never).",
							"The cancelled batch rolls back with its checkpoint; its partition "
							"is done later, and the cancel is not a failed attempt.",
							&backfill_preempt_after,
							10000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.lane_nice",
							"The CPU priority (nice value, 0 to 19) a lane, a rehearsal or a probe "
							"worker lowers itself to when it starts.",
							"0 (the default) leaves them at the server's own priority.  A higher "
							"value lets other processes of the machine have the cores first; a "
							"lane descheduled while it holds a lock other sessions need makes "
							"them wait, so it can slow the application down (issue 29's bench).",
							&backfill_lane_nice,
							0, 0, 19,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.naptime",
							"Seconds the launcher and the schedulers sleep when nothing wakes them.",
							"A committed backfill_run wakes its scheduler at once; the "
							"naptime bounds how late a crashed lane is noticed.",
							&backfill_naptime,
							10, 1, 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("backfill.scheduler_idle_exit",
							"Seconds a scheduler with nothing to do stays before it exits "
							"(0: it never does).",
							"Nothing to do: no running or paused pass, no watched backfill, no "
							"outbox message pending or dead.  A backfill_run, backfill_resume, "
							"backfill_retry or backfill_outbox_emit in its database starts it "
							"again at once.",
							&backfill_scheduler_idle_exit,
							300, 0, 86400,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	config_define_probe_settings();
}

/* the settings a session reads: declarations, health, the outbox, a pass's input */
void
config_define_session_settings(void)
{
	define_declaration_settings();
	define_health_settings();
	define_cluster_pacing_settings();
	define_outbox_settings();
	/* set by a lane to the input of a scoped pass; read with backfill_input() */
	DefineCustomStringVariable("backfill.input",
							   "The input of the scoped pass this lane runs.",
							   NULL,
							   &backfill_input,
							   "",
							   PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);
}
