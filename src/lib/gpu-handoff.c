/* SPDX-License-Identifier: MIT */
#include "gpu-handoff.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "util.h"

static int add_tid(pid_t pid, pid_t **tids, size_t *n, struct stasis_error **err)
{
	pid_t *bigger;
	int tid = 0;
	cuda_result r = cuda_get_restore_tid(pid, &tid);

	if (r != CUDA_RES_SUCCESS)
		return cuda_error(err, r, "finding the CUDA restore thread", pid);
	bigger = realloc(*tids, (*n + 1) * sizeof(*bigger));
	if (!bigger)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	*tids = bigger;
	(*tids)[(*n)++] = (pid_t)tid;
	return 0;
}

/* ---- the end of a dump ---- */

static bool dump_needs_gpu(const struct gpu_handoff *h, const struct plugin_request *req)
{
	/* A dump that worked ends the tree, unless it is to go on running. */
	return req->criu_result != 0 || h->leave_running;
}

static int dump_threads(struct gpu_handoff *h, const struct plugin_request *req, pid_t **tids,
			size_t *n, struct stasis_error **err)
{
	if (!dump_needs_gpu(h, req))
		return 0;
	for (size_t i = 0; i < h->dumped->n; i++) {
		const struct gpu_process *p = &h->dumped->procs[i];
		enum cuda_process_state state;

		if (!p->touched || cuda_get_state(p->pid, &state) != CUDA_RES_SUCCESS ||
		    state == CUDA_PROCESS_RUNNING)
			continue;
		if (add_tid(p->pid, tids, n, err) < 0)
			return -EIO;
	}
	return 0;
}

static int dump_resume(struct gpu_handoff *h, const struct plugin_request *req,
		       struct stasis_error **err)
{
	int stuck;

	if (req->criu_result == 0) {
		/* --leave-running: gpu_resume rolls back by itself on failure. */
		int r = gpu_resume(h->dumped, err);

		gpu_record(h->dumped, h->m);
		return r;
	}
	stuck = gpu_rollback(h->dumped, NULL);
	if (stuck)
		return stasis_error_set(
		    err, EIO, STASIS_DOMAIN_CUDA, 0,
		    "the GPU rollback inside CRIU left %d process%s not running", stuck,
		    stuck == 1 ? "" : "es");
	return 0;
}

/* ---- the GPU restore ---- */

static pid_t new_pid_of(const struct gpu_handoff *h, const struct manifest_process *p,
			const struct plugin_request *req)
{
	for (size_t k = 0; k < req->npids; k++)
		if (h->by_ns_pid ? proc_ns_pid(req->pids[k]) == p->ns_pid : req->pids[k] == p->pid)
			return req->pids[k];
	return 0;
}

static int restore_threads(struct gpu_handoff *h, const struct plugin_request *req, pid_t **tids,
			   size_t *n, struct stasis_error **err)
{
	uint64_t start = now_usec();
	int r = manifest_cuda_count(h->m) ? cuda_load(err) : 0;

	manifest_add_phase(h->m, "cuda_init_wait", now_usec() - start);
	gpu_batch_free(&h->restored);
	for (size_t i = 0; i < h->m->nprocs && r == 0; i++) {
		struct manifest_process *p = &h->m->procs[i];
		pid_t pid;

		if (!p->cuda)
			continue;
		pid = new_pid_of(h, p, req);
		if (!pid)
			return stasis_error_set(err, ESRCH, STASIS_DOMAIN_CRIU, 0,
						"CUDA process %d is not in the restored tree",
						(int)p->pid);
		p->pid = pid;
		if (gpu_batch_add(&h->restored, pid) < 0)
			return stasis_error_errno(err, ENOMEM, "out of memory");
		h->restored.procs[h->restored.n - 1].state = CUDA_PROCESS_CHECKPOINTED;
		r = add_tid(pid, tids, n, err);
	}
	return r;
}

static int restore_resume(struct gpu_handoff *h, struct stasis_error **err)
{
	int r;

	h->restored.pairs = h->plan->pairs;
	h->restored.npairs = h->plan->npairs;
	/* No rollback: the plugin kills the tree on failure. */
	r = gpu_restore_all(&h->restored, err);
	if (r == 0)
		r = gpu_unlock_all(&h->restored, err);
	gpu_record(&h->restored, h->m);
	return r;
}

/* ---- the channel's two questions ---- */

static int threads(void *ctx, const struct plugin_request *req, pid_t **tids, size_t *n,
		   struct stasis_error **err)
{
	struct gpu_handoff *h = ctx;

	if (req->stage == PLUGIN_STAGE_DUMP)
		return h->dumped ? dump_threads(h, req, tids, n, err) : 0;
	return h->plan ? restore_threads(h, req, tids, n, err) : 0;
}

static int resume(void *ctx, const struct plugin_request *req, struct stasis_error **err)
{
	struct gpu_handoff *h = ctx;

	return req->stage == PLUGIN_STAGE_DUMP ? dump_resume(h, req, err) : restore_resume(h, err);
}

static const struct plugin_channel_ops handoff_ops = {.threads = threads, .resume = resume};

int gpu_handoff_dump_begin(struct gpu_handoff *h, struct gpu_batch *batch, struct manifest *m,
			   bool leave_running, struct stasis_error **err)
{
	memset(h, 0, sizeof(*h));
	h->m = m;
	h->dumped = batch;
	h->leave_running = leave_running;
	return batch->n ? plugin_channel_open(&handoff_ops, h, &h->channel, err) : 0;
}

int gpu_handoff_restore_begin(struct gpu_handoff *h, struct manifest *m,
			      const struct gpu_plan *plan, bool by_ns_pid,
			      struct stasis_error **err)
{
	memset(h, 0, sizeof(*h));
	h->m = m;
	h->plan = plan;
	h->by_ns_pid = by_ns_pid;
	return manifest_cuda_count(m) ? plugin_channel_open(&handoff_ops, h, &h->channel, err) : 0;
}

int gpu_handoff_end(struct gpu_handoff *h, struct stasis_error **err)
{
	int r = plugin_channel_close(h->channel, err);

	h->channel = NULL;
	gpu_batch_free(&h->restored);
	return r > 0 ? 1 : r;
}
