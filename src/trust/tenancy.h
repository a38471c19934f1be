/*-------------------------------------------------------------------------
 *
 * tenancy.h
 *	  Who a backfill runs as, and which tenant's rows it may see.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_TENANCY_H
#define BACKFILL_TENANCY_H

#include "postgres.h"

#include "utils/jsonb.h"

/* the role lanes log in as: the declarer, or a role it is a member of */
extern Oid	tenancy_run_as(const char *name, const char *run_as);

/* why a lane could not log in as roleid to this database, or NULL */
extern char *tenancy_login_problem(Oid roleid);

/*
 * At every run, retry and lane start: the owner must still be a member of
 * run_as.  _refused answers why not (NULL: it is); _check raises BF016.
 */
extern char *tenancy_run_as_refused(Oid owner, Oid run_as);
extern void tenancy_check_run_as(const char *name, Oid owner, Oid run_as);

/* settings must be custom (dotted) names; tenant NULL or 'none' */
extern void tenancy_check_settings(const char *name, Jsonb *settings, const char *tenant,
								   Jsonb *input_shape);

/* a table under row-level security needs a tenant setting or tenant => 'none' */
extern void tenancy_check_rls(const char *name, Oid relid, const char *relation, Oid run_as,
							  Jsonb *settings, const char *tenant);

/* in a lane: apply the settings for the rest of the session (BF011 if one is refused) */
extern void tenancy_apply_settings(const char *name, Jsonb *settings, Jsonb *input);

/* the role must be able to connect: lanes log in as it */
extern void check_role_can_login(const char *name, Oid roleid);

#endif							/* BACKFILL_TENANCY_H */
