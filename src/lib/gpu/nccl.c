/* SPDX-License-Identifier: MIT */
#include "nccl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl-hold.h"
#include "nccl-shim-wire.h"
#include "proc.h"
#include "util.h"

/* Measured with driver 580.159 and NCCL 2.28.9 on two H200s with NVLink
 * (docs/MULTI-GPU.md). NCCL 2.28 has no suspend API of its own. The
 * settings marked taken_apart are not needed by a rank whose communicators
 * stasis's interposer takes apart before the checkpoint: what they turn
 * off is then gone by the lock, and NCCL keeps its fast transports. */
static const struct nccl_setting settings[] = {
    {"NCCL_P2P_DISABLE", "1",
     "NCCL's P2P transport maps each rank's GPU memory into the other ranks (CUDA IPC): "
     "the driver checkpoints such ranks but cannot restore them, and they stay frozen",
     true, true},
    {"NCCL_NVLS_ENABLE", "0",
     "NVLink SHARP's multicast memory (machines with NVSwitch) is reported not to "
     "checkpoint",
     true, false},
    {"NCCL_CUMEM_HOST_ENABLE", "0",
     "without it NCCL's shared host buffers come from the driver (cuMem), not /dev/shm: "
     "reported to hang restores, and not the configuration measured to restore",
     true, true},
    {"USE_LIBUV", "0", "PyTorch's TCPStore on libuv maps an io_uring ring, which CRIU cannot save",
     false, false},
};

const struct nccl_setting *nccl_settings(size_t *n)
{
	*n = sizeof(settings) / sizeof(settings[0]);
	return settings;
}

/* PyTorch's name for the watchdog thread of its NCCL process groups. */
#define NCCL_WATCHDOG "pt_nccl_watchdg"

static int is_watchdog(char *comm, void *ctx)
{
	(void)ctx;
	return strcmp(strip_trailing(comm), NCCL_WATCHDOG) == 0;
}

bool nccl_is_rank(pid_t pid)
{
	return proc_each_thread_file(pid, "comm", is_watchdog, NULL) > 0;
}

bool nccl_env_has(const char *env, size_t len, const char *name, const char *value)
{
	size_t name_len = strlen(name);
	bool found = false;

	/* A name defined twice counts only if both say the same: which one
	 * getenv() finds is the C library's choice. */
	for (size_t at = 0; at < len;) {
		const char *entry = env + at;
		size_t entry_len = strnlen(entry, len - at);

		if (entry_len > name_len && strncmp(entry, name, name_len) == 0 &&
		    entry[name_len] == '=') {
			if (strlen(value) != entry_len - name_len - 1 ||
			    strncmp(entry + name_len + 1, value, entry_len - name_len - 1) != 0)
				return false;
			found = true;
		}
		at += entry_len + 1;
	}
	return found;
}

/* The first required setting missing from pid's environment, leaving
 * out those that its communicators taken apart make needless. */
static const struct nccl_setting *env_missing(pid_t pid, bool taken_apart)
{
	_cleanup_free_ char *env = NULL;
	char path[64];
	size_t len = 0;

	/* The environment the rank started with: NCCL reads its settings
	 * once, at its first communicator, from there unless the program
	 * changed it in between. */
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	env = read_file_str_max(path, PROC_STRINGS_MAX, &len);
	for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
		const struct nccl_setting *s = &settings[i];

		if (s->required && !(taken_apart && s->taken_apart) &&
		    !(env && nccl_env_has(env, len, s->name, s->value)))
			return s;
	}
	return NULL;
}

/* Whether pid's interposer takes its communicators apart: it can, and
 * nothing of the job's keeps it from doing so. */
static bool taken_apart(pid_t pid, uint32_t *unsafe)
{
	struct nccl_rank_caps caps;

	*unsafe = 0;
	if (nccl_rank_caps(pid, &caps) <= 0)
		return false;
	*unsafe = caps.rebuild ? caps.unsafe : NCCL_UNSAFE_VERSION;
	return caps.rebuild && !caps.unsafe;
}

/* The first required setting pid, an NCCL rank, started without, leaving
 * out those its communicators taken apart make needless (*unsafe: what
 * keeps them from being taken apart); NULL when it has them all or is no
 * rank. */
static const struct nccl_setting *rank_missing(pid_t pid, uint32_t *unsafe)
{
	*unsafe = 0;
	if (!nccl_is_rank(pid))
		return NULL;
	return env_missing(pid, taken_apart(pid, unsafe));
}

bool nccl_rank_blocker(pid_t pid, char *buf, size_t size)
{
	uint32_t unsafe;
	const struct nccl_setting *s = rank_missing(pid, &unsafe);

	if (!s)
		return false;
	if (unsafe && s->taken_apart)
		snprintf(buf, size,
			 "an NCCL rank whose communicators cannot be taken apart (%s), started "
			 "without %s=%s",
			 nccl_unsafe_reason(unsafe), s->name, s->value);
	else
		snprintf(buf, size, "an NCCL rank started without %s=%s (start it with stasis run)",
			 s->name, s->value);
	return true;
}

bool nccl_fast_transports(const pid_t *pids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (nccl_is_rank(pids[i]) && env_missing(pids[i], false))
			return true;
	return false;
}

int nccl_rank_check(pid_t pid, const char *comm, struct stasis_error **err)
{
	uint32_t unsafe;
	const struct nccl_setting *s = rank_missing(pid, &unsafe);

	if (!s)
		return 0;
	if (unsafe && s->taken_apart) {
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
				 "PID %d (%s) is an NCCL rank whose communicators stasis's "
				 "interposer cannot take apart (%s), started without %s=%s: %s",
				 (int)pid, comm, nccl_unsafe_reason(unsafe), s->name, s->value,
				 s->why);
		return stasis_error_hint(err,
					 "nothing was changed; start the job with %s=%s "
					 "(docs/MULTI-GPU.md)",
					 s->name, s->value);
	}
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
			 "PID %d (%s) is an NCCL rank started without %s=%s: %s", (int)pid, comm,
			 s->name, s->value, s->why);
	return stasis_error_hint(err, "nothing was changed; start the job with `stasis run` "
				      "(or set its settings yourself: docs/MULTI-GPU.md)");
}

/* Measured on two H200s: one lock in ten of DDP ranks timed out, and one
 * checkpoint in three of a tensor-parallel server's ranks (whose second
 * try locked them); three tries. */
#define NCCL_LOCK_ROUNDS 3

unsigned int nccl_lock_rounds(const struct gpu_batch *batch)
{
	size_t ranks = 0;

	for (size_t i = 0; i < batch->n; i++)
		ranks += nccl_is_rank(batch->procs[i].pid);
	return ranks >= 2 ? NCCL_LOCK_ROUNDS : 1;
}

int nccl_ranks_check(const struct manifest *m, struct stasis_error **err)
{
	for (size_t i = 0; i < m->nprocs; i++) {
		const struct manifest_process *p = &m->procs[i];

		if (p->cuda && nccl_rank_check(p->pid, p->comm, err) < 0)
			return -ENOTSUP;
	}
	return 0;
}
