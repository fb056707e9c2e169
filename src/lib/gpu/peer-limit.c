/* SPDX-License-Identifier: MIT */
#include "peer-limit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cuda-api.h"
#include "nvml.h"
#include "proc.h"
#include "util.h"

/* What a workload can take off a bare context's memory: the printf FIFO,
 * the device heap and some of the stack reservation, by cudaDeviceSetLimit. */
#define CONTEXT_MARGIN (64ull << 20)

/* The least use of a GPU that may hold such an allocation. */
static uint64_t use_limit(uint64_t context)
{
	return (context > CONTEXT_MARGIN ? context - CONTEXT_MARGIN : 0) + PEER_LIMIT_ALLOCATION;
}

bool peer_limit_may_hold(uint64_t used, uint64_t context)
{
	return used >= use_limit(context);
}

static int cuda_ordinal_of(const char *uuid)
{
	for (int i = 0, n = cuda_device_count(); i < n; i++) {
		struct cuda_uuid u;
		char text[41];

		if (cuda_device_uuid(i, &u) != CUDA_RES_SUCCESS)
			continue;
		cuda_uuid_format(&u, text);
		if (strcasecmp(text, uuid) == 0)
			return i;
	}
	return -1;
}

/* What a bare context takes on GPU g: stasis makes one of its own, reads
 * its own use from NVML and drops it. 0 when it cannot tell, which
 * refuses more, never less. */
static uint64_t bare_context_bytes(const struct nvml_gpu *gpus, size_t ngpus, size_t g)
{
	_cleanup_free_ struct nvml_process *procs = NULL;
	int ordinal = cuda_ordinal_of(gpus[g].uuid);
	uint64_t bytes = 0;
	size_t n = 0;

	if (ordinal < 0 || cuda_context_hold(ordinal) != CUDA_RES_SUCCESS)
		return 0;
	if (nvml_processes(gpus, ngpus, &procs, &n, NULL) == 0)
		for (size_t i = 0; i < n; i++)
			if (procs[i].pid == getpid() && procs[i].gpu == (int)g &&
			    procs[i].used_known)
				bytes = procs[i].used_bytes;
	cuda_context_drop(ordinal);
	return bytes;
}

struct gpu_use {
	size_t count;			/* GPUs */
	const struct nvml_process *big; /* the first that may hold one */
};

/* Whether an entry before i lists pid on the same GPU (NVML was seen to
 * list a process more than once). */
static bool listed_before(const struct nvml_process *procs, size_t i)
{
	for (size_t j = 0; j < i; j++)
		if (procs[j].pid == procs[i].pid && procs[j].gpu == procs[i].gpu)
			return true;
	return false;
}

static void use_of(pid_t pid, const struct nvml_process *procs, size_t n, const uint64_t *context,
		   struct gpu_use *use)
{
	memset(use, 0, sizeof(*use));
	for (size_t i = 0; i < n; i++) {
		if (procs[i].pid != pid)
			continue;
		use->count += !listed_before(procs, i);
		if (!use->big && (!procs[i].used_known ||
				  peer_limit_may_hold(procs[i].used_bytes, context[procs[i].gpu])))
			use->big = &procs[i];
	}
}

static int refuse(pid_t pid, const struct nvml_gpu *gpu, const struct nvml_process *p,
		  uint64_t context, size_t count, struct stasis_error **err)
{
	char comm[32], used[32], limit[32];

	format_bytes(p->used_bytes, used, sizeof(used));
	format_bytes(use_limit(context), limit, sizeof(limit));
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
			 "PID %d (%s) uses %zu GPUs and %s of GPU %d, room for a single "
			 "allocation of 512 MiB or more; the driver cannot restore such a process "
			 "once its GPUs have peer access (its checkpoint would end it)",
			 (int)pid, proc_comm(pid, comm, sizeof(comm)), count,
			 p->used_known ? used : "an unknown amount", gpu->index);
	return stasis_error_hint(err,
				 "nothing was changed; run one process per GPU (DDP), or keep "
				 "this process under %s on each GPU",
				 limit);
}

int peer_limit_check(const struct gpu_batch *batch, struct stasis_error **err)
{
	_cleanup_free_ struct nvml_gpu *gpus = NULL;
	_cleanup_free_ struct nvml_process *procs = NULL;
	_cleanup_free_ uint64_t *context = NULL;
	_cleanup_free_ bool *measured = NULL;
	size_t ngpus = 0, n = 0;

	if (!batch->n || nvml_gpus(&gpus, &ngpus, NULL) < 0 || ngpus < 2 ||
	    nvml_processes(gpus, ngpus, &procs, &n, NULL) < 0)
		return 0;
	context = calloc(ngpus, sizeof(*context));
	measured = calloc(ngpus, sizeof(*measured));
	if (!context || !measured)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < batch->n; i++) {
		pid_t pid = batch->procs[i].pid;
		struct gpu_use use;

		use_of(pid, procs, n, context, &use);
		if (use.count < 2 || !use.big)
			continue;
		/* Against a bare context on each GPU it uses, measured once. */
		for (size_t j = 0; j < n; j++)
			if (procs[j].pid == pid && !measured[procs[j].gpu]) {
				context[procs[j].gpu] =
				    bare_context_bytes(gpus, ngpus, procs[j].gpu);
				measured[procs[j].gpu] = true;
			}
		use_of(pid, procs, n, context, &use);
		if (use.big)
			return refuse(pid, &gpus[use.big->gpu], use.big, context[use.big->gpu],
				      use.count, err);
	}
	return 0;
}
