/* SPDX-License-Identifier: MIT */
/* NCCL ranks held at one collective boundary before the driver's lock,
 * through stasis's NCCL interposer (src/nccl-shim, nccl-shim-wire.h),
 * which `stasis run` preloads: a job not started under it has no block and
 * is not held. */
#ifndef STASIS_NCCL_HOLD_H
#define STASIS_NCCL_HOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

struct nccl_hold_rank;

struct nccl_hold {
	struct nccl_hold_rank *ranks; /* one per interposer block found */
	size_t n;
	bool held;	       /* the ranks were asked to wait */
	unsigned int stall_ms; /* no collective started for this long: refused */
	unsigned int limit_ms; /* and never longer than this in all */
	/* The ranks are told who holds them, and let themselves go if that
	 * stasis dies; not for a hold meant to outlive its command (gpu
	 * suspend, let go by gpu resume). */
	bool outlives_holder;
	bool torn_down;	       /* the ranks took their communicators apart */
	unsigned int quiet_ms; /* their threads out of NCCL within this */
};

/* What a rank's interposer says of its communicators. */
struct nccl_rank_caps {
	bool block;	       /* it runs under stasis's interposer */
	bool rebuild;	       /* which can take them apart and make them again */
	uint32_t unsafe;       /* enum nccl_shim_unsafe: what prevents it */
	uint32_t nccl_version; /* NCCL's version code */
};

/* The interposer's block of each process of pids that has one (a block
 * shared by a forked child counts once). n is 0 where none has. */
int nccl_hold_open(struct nccl_hold *h, const pid_t *pids, size_t n);

/* Every rank held at one boundary: ranks behind run up to their peers'
 * count, ranks there wait before their next collective. Fails, with every
 * rank let go, where no collective starts for stall_ms while the ranks
 * differ: the error names the rank that has not started the collective its
 * peer waits in. */
int nccl_hold_align(struct nccl_hold *h, struct stasis_error **err);

/* Whether every communicator of the ranks is counted (an interposer that
 * ran out of slots cannot hold the collectives of the rest). */
bool nccl_hold_complete(const struct nccl_hold *h);

/* The held ranks take their communicators apart (nccl-shim-wire.h):
 * what NCCL's fast transports map between processes is gone before the
 * lock; each rank makes them again once let go. Where some rank cannot,
 * fails (every rank let go) if needed, else does nothing. */
int nccl_hold_teardown(struct nccl_hold *h, bool needed, struct stasis_error **err);

/* The slowest rank's teardown, in microseconds (0: none was done). */
uint64_t nccl_hold_teardown_us(const struct nccl_hold *h);

/* pid's interposer's word on its communicators; 0 where it has none. */
int nccl_rank_caps(pid_t pid, struct nccl_rank_caps *caps);

/* What the first of the unsafe bits means (NULL for none). */
const char *nccl_unsafe_reason(uint32_t unsafe);

/* The ranks go on (their communicators made again where taken apart). */
void nccl_hold_release(struct nccl_hold *h);

void nccl_hold_close(struct nccl_hold *h);

/* Waits until the ranks among pids made their communicators again (after
 * a teardown, once the tree runs); *us: the slowest rebuild that ended
 * since `since` (now_usec's clock, CLOCK_MONOTONIC, as the interposer's),
 * 0 where none did. Fails where one failed, or did not in a minute. */
int nccl_wait_rebuilt(const pid_t *pids, size_t n, uint64_t since, uint64_t *us,
		      struct stasis_error **err);

/* Whether pid's interposer holds it (its block asks it to wait). */
bool nccl_rank_held(pid_t pid);

/* Lets go the held ranks among pids: a restored rank was saved waiting. */
void nccl_release_pids(const pid_t *pids, size_t n);

#endif
