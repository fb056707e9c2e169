/* SPDX-License-Identifier: MIT */
#include "gpu-handoff.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devfiles.h"
#include "interrupt.h"
#include "nccl.h"
#include "proc.h"
#include "util.h"

static int push_tid(pid_t tid, pid_t **tids, size_t *n)
{
	pid_t *bigger = realloc(*tids, (*n + 1) * sizeof(*bigger));

	if (!bigger)
		return -ENOMEM;
	*tids = bigger;
	(*tids)[(*n)++] = tid;
	return 0;
}

static int add_tid(pid_t pid, pid_t **tids, size_t *n, struct stasis_error **err)
{
	int tid = 0;
	cuda_result r = cuda_get_restore_tid(pid, &tid);

	if (r != CUDA_RES_SUCCESS)
		return cuda_error(err, r, "finding the CUDA restore thread", pid);
	if (push_tid((pid_t)tid, tids, n) < 0)
		return stasis_error_errno(err, ENOMEM, "out of memory");
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

int gpu_batch_of_restored(struct gpu_batch *batch, const struct manifest *m,
			  const struct gpu_plan *plan, struct stasis_error **err)
{
	gpu_batch_free(batch);
	batch->pairs = plan->pairs;
	batch->npairs = plan->npairs;
	for (size_t i = 0; i < m->nprocs; i++) {
		if (!m->procs[i].cuda)
			continue;
		if (gpu_batch_add(batch, m->procs[i].pid) < 0)
			return stasis_error_errno(err, ENOMEM, "out of memory");
		batch->procs[batch->n - 1].state = CUDA_PROCESS_CHECKPOINTED;
		batch->procs[batch->n - 1].gpu_bytes = m->procs[i].gpu_bytes;
	}
	return 0;
}

int gpu_restore_unlock(struct gpu_batch *batch, struct manifest *m, struct stasis_error **err)
{
	int r = gpu_restore_all(batch, err);

	if (r == 0)
		r = gpu_unlock_all(batch, err);
	gpu_record(batch, m);
	return r;
}

/* m's CUDA processes get their PIDs in the restored tree. */
static int adopt_restored(struct gpu_handoff *h, const struct plugin_request *req,
			  struct stasis_error **err)
{
	for (size_t i = 0; i < h->m->nprocs; i++) {
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
	}
	return 0;
}

static int restore_threads(struct gpu_handoff *h, const struct plugin_request *req, pid_t **tids,
			   size_t *n, struct stasis_error **err)
{
	uint64_t start = now_usec();
	int r = manifest_cuda_count(h->m) ? cuda_load(err) : 0;

	manifest_add_phase(h->m, "cuda_init_wait", now_usec() - start);
	if (r == 0)
		r = adopt_restored(h, req, err);
	if (r == 0)
		r = gpu_batch_of_restored(&h->restored, h->m, h->plan, err);
	for (size_t i = 0; r == 0 && i < h->restored.n; i++)
		r = add_tid(h->restored.procs[i].pid, tids, n, err);
	return r;
}

/* ---- the GPU checkpoint, inside CRIU's freeze ---- */

static int refuse_out_of_order(enum plugin_step step, struct stasis_error **err)
{
	return stasis_error_set(err, EPROTO, STASIS_DOMAIN_CRIU, 0,
				"stasis's CRIU plugin asked for the GPU %s out of order",
				plugin_step_name(step));
}

/* The helper of a CRIU that stasis did not start finds the tree's CUDA
 * processes itself, as a checkpoint's preflight does: every one must be
 * running (the driver's state), none is left out. */
static int standalone_find(struct gpu_handoff *h, pid_t root, struct stasis_error **err)
{
	_cleanup_free_ pid_t *pids = NULL;
	struct gpu_batch *batch = &h->own_batch;
	int r = proc_tree_describe(root, &h->own_m, err);

	if (r < 0 || cuda_load(NULL) < 0)
		return r; /* no driver here: no CUDA process either */
	pids = calloc(h->own_m.nprocs ? h->own_m.nprocs : 1, sizeof(*pids));
	if (!pids)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < h->own_m.nprocs; i++)
		pids[i] = h->own_m.procs[i].pid;
	r = gpu_find_cuda(pids, h->own_m.nprocs, batch, err);
	if (r == 0)
		r = gpu_preflight_running(batch, err);
	for (size_t i = 0; r == 0 && h->refuse && i < batch->n; i++) {
		char comm[32];

		r = h->refuse(batch->procs[i].pid,
			      proc_comm(batch->procs[i].pid, comm, sizeof(comm)), err);
	}
	if (r == 0)
		gpu_mark_cuda(batch, &h->own_m);
	batch->lock_timeout_ms = GPU_DEFAULT_LOCK_TIMEOUT_MS;
	batch->lock_rounds = nccl_lock_rounds(batch);
	return r;
}

/* Before CRIU seizes the tree: the lock, with its tries for NCCL ranks. */
static int dump_lock(struct gpu_handoff *h, const struct plugin_request *req,
		     struct stasis_error **err)
{
	int r;

	if (h->standalone && !h->dump && req->npids) {
		h->m = &h->own_m;
		h->dump = &h->own_batch;
		r = standalone_find(h, req->pids[0], err);
		if (r < 0)
			return r;
	}
	if (!h->dump || h->locked)
		return refuse_out_of_order(PLUGIN_STEP_PAUSE, err);
	r = gpu_lock_all(h->dump, err);
	h->locked = r == 0;
	if (r == 0)
		r = stasis_check_interrupted("sigterm-before-gpu-checkpoint", "the GPU checkpoint",
					     err);
	return r;
}

static int dump_threads(struct gpu_handoff *h, pid_t **tids, size_t *n, struct stasis_error **err)
{
	int r = 0;

	if (!h->dump || !h->locked || h->checkpointed)
		return refuse_out_of_order(PLUGIN_STEP_CHECKPOINT, err);
	for (size_t i = 0; r == 0 && i < h->dump->n; i++)
		r = add_tid(h->dump->procs[i].pid, tids, n, err);
	return r;
}

/* The tree frozen but for the restore threads: the checkpoint, then what
 * the driver left behind must be something CRIU can save. */
static int dump_checkpoint(struct gpu_handoff *h, struct stasis_error **err)
{
	int r = gpu_checkpoint_all(h->dump, err);

	if (h->dump_plan.copied)
		h->dump_plan.copied(h->dump_plan.ctx);
	if (r == 0)
		r = nvidia_refs_check(h->m, true, err);
	gpu_record(h->dump, h->m);
	h->checkpointed = r == 0;
	if (r == 0)
		r = stasis_check_interrupted("sigterm-before-dump", "the dump", err);
	return r;
}

/* Before CRIU lets the tree go: a tree that runs on (CRIU failed, or
 * --leave-running) gets its GPU state back while its threads are still
 * stopped. Which threads: those of every process stasis touched. */
static int dump_finish_threads(struct gpu_handoff *h, const struct plugin_request *req,
			       pid_t **tids, size_t *n, struct stasis_error **err)
{
	int r = 0;

	if (!h->dump)
		return refuse_out_of_order(PLUGIN_STEP_FINISH, err);
	h->finished = true;
	h->dump_failed = req->npids && req->pids[0] != 0;
	/* The helper learns --leave-running from CRIU (-1: a CRIU that cannot
	 * say; the GPU state comes back then, rather than a tree that runs
	 * on left locked). */
	if (h->standalone)
		h->dump_plan.leave_running = req->npids < 2 || req->pids[1] != 0;
	if (!h->dump_failed && !h->dump_plan.leave_running)
		return 0; /* the tree ends: its GPU state stays in the image */
	for (size_t i = 0; r == 0 && i < h->dump->n; i++)
		if (h->dump->procs[i].touched)
			r = add_tid(h->dump->procs[i].pid, tids, n, err);
	return r;
}

/* The failure's rollback, or --leave-running's restore and unlock, which
 * rolls back by itself where it fails. */
static int dump_finish(struct gpu_handoff *h, struct stasis_error **err)
{
	struct stasis_error *ignored = NULL;
	int r;

	if (h->dump_failed) {
		/* Whatever this leaves, the caller's rollback after CRIU
		 * tries again and names; CRIU's failure stays the cause. */
		gpu_rollback(h->dump, &ignored);
		stasis_error_free(ignored);
		return 0;
	}
	r = gpu_resume(h->dump, err);
	gpu_record(h->dump, h->m);
	return r;
}

/* The helper's restore: the processes of the restored tree that the driver
 * holds checkpointed, back on the GPUs they left (no GPU map). Every
 * thread of the tree is in CRIU's ptrace-stop here, and the driver answers
 * a process's state only through the process itself (a get-state of a
 * held process never returns on driver 580): a process is the driver's
 * when it has a restore thread, which the driver answers alone, as CRIU's
 * own cuda plugin asks. */
static int standalone_restore_threads(struct gpu_handoff *h, const struct plugin_request *req,
				      pid_t **tids, size_t *n, struct stasis_error **err)
{
	h->m = &h->own_m;
	if (cuda_load(NULL) < 0)
		return 0;
	for (size_t i = 0; i < req->npids; i++) {
		int tid = 0;

		if (cuda_get_restore_tid(req->pids[i], &tid) != CUDA_RES_SUCCESS || tid <= 0)
			continue;
		if (gpu_batch_add(&h->restored, req->pids[i]) < 0)
			return stasis_error_errno(err, ENOMEM, "out of memory");
		h->restored.procs[h->restored.n - 1].state = CUDA_PROCESS_CHECKPOINTED;
		if (push_tid((pid_t)tid, tids, n) < 0)
			return stasis_error_errno(err, ENOMEM, "out of memory");
	}
	return 0;
}

/* ---- the channel's two questions ---- */

static int threads(void *ctx, const struct plugin_request *req, pid_t **tids, size_t *n,
		   struct stasis_error **err)
{
	struct gpu_handoff *h = ctx;

	switch (req->step) {
	case PLUGIN_STEP_PAUSE:
		return dump_lock(h, req, err);
	case PLUGIN_STEP_CHECKPOINT:
		return dump_threads(h, tids, n, err);
	case PLUGIN_STEP_FINISH:
		return dump_finish_threads(h, req, tids, n, err);
	case PLUGIN_STEP_RESTORE:
		break;
	}
	if (h->dump)
		return refuse_out_of_order(req->step, err);
	if (h->standalone)
		return standalone_restore_threads(h, req, tids, n, err);
	return restore_threads(h, req, tids, n, err);
}

static int resume(void *ctx, const struct plugin_request *req, struct stasis_error **err)
{
	struct gpu_handoff *h = ctx;

	if (req->step == PLUGIN_STEP_CHECKPOINT)
		return dump_checkpoint(h, err);
	if (req->step == PLUGIN_STEP_FINISH)
		return dump_finish(h, err);
	/* No rollback: the plugin kills the tree on failure. */
	return gpu_restore_unlock(&h->restored, h->m, err);
}

static const struct plugin_channel_ops handoff_ops = {.threads = threads, .resume = resume};

const char *gpu_handoff_socket(const struct gpu_handoff *h)
{
	return h->channel ? plugin_channel_socket(h->channel) : NULL;
}

int gpu_handoff_dump_begin(struct gpu_handoff *h, const struct gpu_dump_plan *plan,
			   struct stasis_error **err)
{
	memset(h, 0, sizeof(*h));
	h->dump_plan = *plan;
	h->m = plan->m;
	h->dump = plan->batch;
	if (!h->dump->n)
		return 0;
	return plugin_channel_open(&handoff_ops, h, &h->channel, err);
}

int gpu_handoff_dump_end(struct gpu_handoff *h, int dumped, struct stasis_error **err)
{
	struct stasis_error *e = NULL;
	int r;

	if (!h->channel)
		return dumped;
	r = plugin_channel_close(h->channel, &e);
	h->channel = NULL;
	/* The GPU step's own failure is the cause of CRIU's. */
	if (r < 0) {
		stasis_error_free(*err);
		*err = e;
		return r;
	}
	if (dumped < 0 || h->checkpointed)
		return dumped;
	/* A CRIU without stasis's plugin would save a process whose GPU
	 * state was never copied: an image that cannot restore. */
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CRIU, 0,
			 "CRIU's dump ended without the GPU checkpoint: stasis's CRIU plugin did "
			 "not run in it");
	return stasis_error_hint(err, "the image is not kept; install stasis whole (its CRIU "
				      "and lib/stasis/criu), or run 'stasis check'");
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

int gpu_handoff_serve_helper(int fd, gpu_process_refuse_fn refuse, struct stasis_error **err)
{
	struct gpu_handoff h = {.standalone = true, .refuse = refuse};
	int r;

	manifest_init(&h.own_m);
	/* cuInit while CRIU works: the first GPU step needs it. */
	cuda_load_begin();
	r = plugin_channel_serve_fd(&handoff_ops, &h, fd, err);
	/* A tree left locked by a CRIU that died before its end: back to
	 * running. (After its end a dumped tree stays checkpointed: CRIU
	 * kills it.) */
	if (h.dump && !h.finished && !gpu_batch_running(h.dump)) {
		struct stasis_error *ignored = NULL;

		gpu_rollback(h.dump, &ignored);
		stasis_error_free(ignored);
	}
	gpu_batch_free(&h.own_batch);
	gpu_batch_free(&h.restored);
	manifest_free(&h.own_m);
	return r < 0 ? r : 0;
}

int gpu_handoff_end(struct gpu_handoff *h, struct stasis_error **err)
{
	int r = plugin_channel_close(h->channel, err);

	h->channel = NULL;
	gpu_batch_free(&h->restored);
	return r > 0 ? 1 : r;
}
