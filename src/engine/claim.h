/*-------------------------------------------------------------------------
 *
 * claim.h
 *	  A partition's lease, taken and given back (claim.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_CLAIM_H
#define BACKFILL_CLAIM_H

#include "pass.h"

extern bool pass_claim(Pass *pass, Claim *claim);
extern void pass_claim_read_keys(Pass *pass, Claim *claim);
extern void pass_release(Pass *pass, Claim *claim);
extern void pass_release_held(int64 run_id);
extern void pass_fail_partition(Pass *pass, Claim *claim, const char *message);

#endif							/* BACKFILL_CLAIM_H */
