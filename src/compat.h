/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  What differs between the PostgreSQL versions pg_backfill builds
 *	  against (15 to 18), each difference behind PG_VERSION_NUM here, so
 *	  that the rest of the code is written once.
 *
 * The list (each entry says in which version the server changed):
 *	 16  pg_proc_aclcheck and pg_database_aclcheck became object_aclcheck
 *	 16  stringToQualifiedNameList and parseTypeString report soft errors
 *	     through an escontext node instead of a flag
 *	 16  the server's CFLAGS carry -Wshadow=compatible-local: a PG_TRY
 *	     inside another's PG_CATCH in one function shadows its variables
 *	     and fails the -Werror build, so the inner one is a function of
 *	     its own (finalize.c's abandon_session_work); nothing here for it
 *	 17  a backend's local transaction id moved into PGPROC's vxid
 *	 17  LockHeldByMe took an orstronger flag (17.0; 17beta2 had two
 *	     arguments still: the betas are not supported)
 * Differences only the tests meet, nothing here for them:
 *	 16  pg_regress and pg_isolation_regress print TAP ("ok 1 - name")
 *	     instead of "name ... ok" (scripts/test.sh counts both)
 *	 17  pg_init_privs holds the roles of an extension's initial GRANTs:
 *	     DROP ROLE needs DROP OWNED first (sql/upgrade.sql)
 *	 18  initdb turns data checksums on: a pg_upgrade from a cluster
 *	     without them initializes the new one --no-data-checksums (TAP 140)
 * Run whole against the releases 15.20 (Debian 12), 16.2, 17.10 and 18.4.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_COMPAT_H
#define BACKFILL_COMPAT_H

#include "postgres.h"

#include "catalog/pg_database.h"
#include "catalog/pg_proc.h"
#include "parser/parse_type.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/regproc.h"
#if PG_VERSION_NUM >= 160000
#include "nodes/miscnodes.h"
#endif

/* the local transaction id of this backend's current transaction */
#if PG_VERSION_NUM >= 170000
#define compat_my_lxid()	(MyProc->vxid.lxid)
#else
#define compat_my_lxid()	(MyProc->lxid)
#endif

/* does this backend hold the lock in exactly this mode? */
#if PG_VERSION_NUM >= 170000
#define compat_lock_held_by_me(tag, mode) LockHeldByMe((tag), (mode), false)
#else
#define compat_lock_held_by_me(tag, mode) LockHeldByMe((tag), (mode))
#endif

/* may role use the function / connect to the database? */
#if PG_VERSION_NUM >= 160000
#define compat_proc_aclcheck(fn, role, mode) \
	object_aclcheck(ProcedureRelationId, (fn), (role), (mode))
#define compat_database_aclcheck(db, role, mode) \
	object_aclcheck(DatabaseRelationId, (db), (role), (mode))
#else
#define compat_proc_aclcheck(fn, role, mode) pg_proc_aclcheck((fn), (role), (mode))
#define compat_database_aclcheck(db, role, mode) pg_database_aclcheck((db), (role), (mode))
#endif

/* "schema.name" as a list of names; a malformed string is an ERROR */
#if PG_VERSION_NUM >= 160000
#define compat_qualified_name_list(str) stringToQualifiedNameList((str), NULL)
#else
#define compat_qualified_name_list(str) stringToQualifiedNameList(str)
#endif

/*
 * The type a type name denotes, or InvalidOid in *typid when no such type
 * exists (a name that does not parse may still raise an ERROR).
 */
static inline void
compat_parse_type_missing_ok(const char *str, Oid *typid, int32 *typmod)
{
#if PG_VERSION_NUM >= 160000
	ErrorSaveContext escontext = {T_ErrorSaveContext};

	if (!parseTypeString(str, typid, typmod, (Node *) &escontext))
		*typid = InvalidOid;
#else
	parseTypeString(str, typid, typmod, true);
#endif
}

#endif							/* BACKFILL_COMPAT_H */
