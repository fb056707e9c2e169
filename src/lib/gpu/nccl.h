/* SPDX-License-Identifier: MIT */
/* NCCL ranks: the settings under which driver 580 can checkpoint and
 * restore them, set by `stasis run` and checked before anything changes. */
#ifndef STASIS_NCCL_H
#define STASIS_NCCL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"
#include "gpu.h"
#include "manifest.h"

struct nccl_setting {
	const char *name;
	const char *value;
	const char *why; /* what goes wrong without it */
	bool required;	 /* a rank without it is refused */
	/* not needed where stasis's interposer takes the communicators apart */
	bool taken_apart;
};

/* The settings `stasis run` gives a job, the required ones first. */
const struct nccl_setting *nccl_settings(size_t *n);

/* Whether pid is a rank of a PyTorch NCCL process group (its watchdog
 * thread runs). */
bool nccl_is_rank(pid_t pid);

/* What keeps pid, an NCCL rank, from a checkpoint, in a few words for
 * `stasis ps` (false: nothing does, or it is no rank). */
bool nccl_rank_blocker(pid_t pid, char *buf, size_t size);

/* Refuse pid if it is an NCCL rank started without a required setting,
 * naming the setting and `stasis run`. */
int nccl_rank_check(pid_t pid, const char *comm, struct stasis_error **err);

/* The same for every CUDA process of m. */
int nccl_ranks_check(const struct manifest *m, struct stasis_error **err);

/* Whether some NCCL rank of pids may use NCCL's fast transports (it
 * started without the settings that turn them off): its communicators
 * must then be taken apart before the lock. */
bool nccl_fast_transports(const pid_t *pids, size_t n);

/* How many times to try the lock of batch (gpu_batch.lock_rounds): more
 * than once where two or more of its processes are NCCL ranks. */
unsigned int nccl_lock_rounds(const struct gpu_batch *batch);

/* Whether NAME=VALUE is in the environment block env (len bytes, entries
 * separated by NUL, as /proc/PID/environ has it). */
bool nccl_env_has(const char *env, size_t len, const char *name, const char *value);

#endif
