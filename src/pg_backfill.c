/*-------------------------------------------------------------------------
 *
 * pg_backfill.c
 *	  The module's entry point: _PG_init defines the settings (config.c),
 *	  checks the preload, and sets up shared memory, the launcher and its
 *	  DROP DATABASE hook (launcher.c), and the log hook that keeps counting
 *	  a session's advisory locks quiet (advisory.c), and the executor hook
 *	  that makes a Citus shard move or split wait for the batches in
 *	  flight instead of failing (moves.c).
 *
 * pg_backfill must be in shared_preload_libraries: its launcher is a static
 * background worker and its wake-up latches live in shared memory.
 * Loading it any other way is an error with a hint.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "advisory.h"
#include "config.h"
#include "launcher.h"
#include "moves.h"
#include "shmem.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Settings first (those a session may use without the library preloaded),
 * then the preload check, then the settings of the workers, shared memory
 * and the launcher.
 */
void
_PG_init(void)
{
	if (IsBinaryUpgrade)
		return;

	config_define_session_settings();

	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pg_backfill must be loaded via shared_preload_libraries"),
				 errdetail("Its launcher is a background worker started with the server."),
				 errhint("Add pg_backfill to shared_preload_libraries in postgresql.conf "
						 "and restart the server.")));

	config_define_worker_settings();
	MarkGUCPrefixReserved("backfill");

	backfill_shmem_init();
	backfill_register_launcher();
	advisory_init();
	moves_init();
}
