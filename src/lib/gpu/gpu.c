/* SPDX-License-Identifier: MIT */
#include "gpu.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "nccl-hold.h"
#include "nccl.h"
#include "note.h"
#include "proc.h"
#include "progress.h"
#include "util.h"

/* Right after a process initialises CUDA the driver may answer a lock with
 * an illegal-state error for a moment; such a lock is retried. */
#define LOCK_RETRY_DELAY_US 20000
#define LOCK_RETRIES 50

/* Between rounds of a lock that timed out (gpu_batch.lock_rounds). */
#define LOCK_ROUND_PAUSE_US 200000
/* The first of several tries' timeout, doubled each try before the last:
 * a rank whose kernels are not held by a locked peer locks in
 * milliseconds; one whose are never locks, whatever the wait. */
#define LOCK_FIRST_TRY_MS 2000u
#define LOCK_RANKS_LAST_TRY_MS 8000u

int gpu_batch_add(struct gpu_batch *batch, pid_t pid)
{
	struct gpu_process *bigger = realloc(batch->procs, (batch->n + 1) * sizeof(*bigger));

	if (!bigger)
		return -ENOMEM;
	batch->procs = bigger;
	memset(&bigger[batch->n], 0, sizeof(*bigger));
	bigger[batch->n].pid = pid;
	bigger[batch->n].state = CUDA_PROCESS_RUNNING;
	batch->n++;
	return 0;
}

/* The batch's NCCL ranks go on (a restored batch's too: their image
 * was saved with them waiting in the interposer). */
static void release_nccl(struct gpu_batch *batch)
{
	if (batch->nccl) {
		nccl_hold_release(batch->nccl);
		return;
	}
	for (size_t i = 0; i < batch->n; i++)
		nccl_release_pids(&batch->procs[i].pid, 1);
}

void gpu_batch_free(struct gpu_batch *batch)
{
	if (batch->nccl) {
		nccl_hold_close(batch->nccl);
		free(batch->nccl);
		batch->nccl = NULL;
	}
	free(batch->procs);
	batch->procs = NULL;
	batch->n = 0;
}

int gpu_find_cuda(const pid_t *pids, size_t n, struct gpu_batch *batch, struct stasis_error **err)
{
	int r = cuda_load(err);

	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		enum cuda_process_state state;
		size_t before = batch->n;

		/* The driver knows only processes with a CUDA context. */
		if (cuda_get_state(pids[i], &state) != CUDA_RES_SUCCESS)
			continue;
		if (gpu_batch_add(batch, pids[i]) < 0)
			return stasis_error_errno(err, ENOMEM, "out of memory");
		batch->procs[before].state = state;
	}
	return 0;
}

int gpu_preflight_running(const struct gpu_batch *batch, struct stasis_error **err)
{
	for (size_t i = 0; i < batch->n; i++) {
		const struct gpu_process *p = &batch->procs[i];

		if (p->state == CUDA_PROCESS_RUNNING)
			continue;
		stasis_error_set(err, EBUSY, STASIS_DOMAIN_CUDA, 0,
				 "PID %d is already %s by someone else", (int)p->pid,
				 cuda_state_name(p->state));
		return stasis_error_hint(err, "resume it first (stasis gpu resume %d)",
					 (int)p->pid);
	}
	return 0;
}

/* ---- one step, one thread per process ---- */

static const char *const step_names[] = {
    [GPU_STEP_LOCK] = "lock",
    [GPU_STEP_CHECKPOINT] = "checkpoint",
    [GPU_STEP_RESTORE] = "restore",
    [GPU_STEP_UNLOCK] = "unlock",
};

struct step_arg {
	struct gpu_batch *batch;
	struct gpu_process *proc;
	enum gpu_step step;
};

static cuda_result do_lock(const struct gpu_batch *batch, pid_t pid)
{
	cuda_result r = CUDA_RES_SUCCESS;

	for (int attempt = 0; attempt <= LOCK_RETRIES; attempt++) {
		r = cuda_lock(pid, batch->lock_try_timeout_ms ? batch->lock_try_timeout_ms
							      : batch->lock_timeout_ms);
		if (r != CUDA_RES_ILLEGAL_STATE && r != CUDA_RES_NOT_INITIALIZED)
			return r;
		usleep(LOCK_RETRY_DELAY_US);
	}
	return r;
}

static cuda_result run_step(struct gpu_batch *batch, struct gpu_process *p, enum gpu_step step,
			    uint64_t **timing)
{
	if (fault_at(step_names[step], p->pid))
		return CUDA_RES_NOT_READY; /* an injected, recognisable failure */
	switch (step) {
	case GPU_STEP_LOCK:
		*timing = &p->lock_us;
		return do_lock(batch, p->pid);
	case GPU_STEP_CHECKPOINT:
		*timing = &p->checkpoint_us;
		return cuda_checkpoint(p->pid);
	case GPU_STEP_RESTORE:
		*timing = &p->restore_us;
		return cuda_restore(p->pid, batch->pairs, batch->npairs);
	case GPU_STEP_UNLOCK:
		*timing = &p->unlock_us;
		return cuda_unlock(p->pid);
	case GPU_STEPS:
		break;
	}
	return CUDA_RES_INVALID_VALUE;
}

static const enum cuda_process_state state_after[] = {
    [GPU_STEP_LOCK] = CUDA_PROCESS_LOCKED,
    [GPU_STEP_CHECKPOINT] = CUDA_PROCESS_CHECKPOINTED,
    [GPU_STEP_RESTORE] = CUDA_PROCESS_LOCKED,
    [GPU_STEP_UNLOCK] = CUDA_PROCESS_RUNNING,
};

static void *step_thread(void *opaque)
{
	struct step_arg *arg = opaque;
	struct gpu_process *p = arg->proc;
	uint64_t start = now_usec(), *timing = NULL;
	cuda_result r = run_step(arg->batch, p, arg->step, &timing);

	if (timing)
		*timing = now_usec() - start;
	p->touched = true;
	if (r == CUDA_RES_SUCCESS) {
		atomic_store(&p->step_done, true);
		p->state = state_after[arg->step];
	} else {
		p->result = r;
		p->failed_step = step_names[arg->step];
	}
	return NULL;
}

/* Run fn for every process (every touched one with only_touched), one
 * thread each; inline when there is one process or no thread to be had. */
static int for_each_parallel(struct gpu_batch *batch, enum gpu_step step, void *(*fn)(void *),
			     bool only_touched)
{
	_cleanup_free_ pthread_t *threads = calloc(batch->n ? batch->n : 1, sizeof(*threads));
	_cleanup_free_ struct step_arg *args = calloc(batch->n ? batch->n : 1, sizeof(*args));
	_cleanup_free_ bool *started = calloc(batch->n ? batch->n : 1, sizeof(*started));

	if (!threads || !args || !started)
		return -ENOMEM;
	for (size_t i = 0; i < batch->n; i++) {
		if (only_touched && !batch->procs[i].touched)
			continue;
		args[i] = (struct step_arg){.batch = batch, .proc = &batch->procs[i], .step = step};
		if (batch->n > 1 && pthread_create(&threads[i], NULL, fn, &args[i]) == 0)
			started[i] = true;
		else
			fn(&args[i]);
	}
	for (size_t i = 0; i < batch->n; i++)
		if (started[i])
			pthread_join(threads[i], NULL);
	return 0;
}

/* The GPU memory copied so far, for the progress line: all of each process
 * done, and of one still copying to host memory what its private memory
 * grew by since (the driver's copy lands there). */
static uint64_t gpu_copied(void *opaque)
{
	const struct gpu_batch *batch = opaque;
	uint64_t done = 0;

	for (size_t i = 0; i < batch->n; i++) {
		const struct gpu_process *p = &batch->procs[i];
		uint64_t now;

		if (atomic_load(&p->step_done)) {
			done += p->gpu_bytes;
			continue;
		}
		if (!p->rss_before)
			continue;
		now = proc_rss_anon(p->pid);
		if (now > p->rss_before)
			done +=
			    now - p->rss_before < p->gpu_bytes ? now - p->rss_before : p->gpu_bytes;
	}
	return done;
}

/* The copies' progress in bytes, where their sizes are known. */
static void progress_copies(struct gpu_batch *batch, enum gpu_step step)
{
	uint64_t total = 0;

	for (size_t i = 0; i < batch->n; i++) {
		batch->procs[i].rss_before = 0;
		atomic_store(&batch->procs[i].step_done, false);
		total += batch->procs[i].gpu_bytes;
	}
	if (!total || (step != GPU_STEP_CHECKPOINT && step != GPU_STEP_RESTORE))
		return;
	for (size_t i = 0; step == GPU_STEP_CHECKPOINT && i < batch->n; i++)
		batch->procs[i].rss_before = proc_rss_anon(batch->procs[i].pid);
	progress_set_total(total);
	progress_poll_bytes(gpu_copied, batch);
}

static int run_parallel(struct gpu_batch *batch, enum gpu_step step, struct stasis_error **err)
{
	static const char *const names[GPU_STEPS] = {"GPU lock", "GPU checkpoint", "GPU restore",
						     "GPU unlock"};
	uint64_t start = now_usec();
	int r;

	for (size_t i = 0; i < batch->n; i++)
		batch->procs[i].failed_step = NULL;
	progress_begin("%s of %zu CUDA process%s", names[step], batch->n,
		       batch->n == 1 ? "" : "es");
	progress_copies(batch, step);
	r = for_each_parallel(batch, step, step_thread, false);
	progress_end();
	if (r < 0)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	batch->step_ran[step] = batch->n > 0;
	batch->step_us[step] = now_usec() - start;
	for (size_t i = 0; i < batch->n; i++) {
		struct gpu_process *p = &batch->procs[i];

		if (!p->failed_step)
			continue;
		cuda_error(err, p->result, p->failed_step, p->pid);
		if (p->result == CUDA_RES_NOT_SUPPORTED && step == GPU_STEP_CHECKPOINT)
			stasis_error_hint(err,
					  "the driver cannot checkpoint this process; "
					  "managed (cudaMallocManaged) memory is not supported");
		else if ((p->result == CUDA_RES_TIMEOUT || p->result == CUDA_RES_NOT_READY) &&
			 step == GPU_STEP_LOCK && batch->lock_rounds > 1)
			stasis_error_hint(
			    err,
			    "an NCCL rank's queued collective "
			    "waits for a peer already locked (%u tries); start the job "
			    "with `stasis run`, whose interposer holds every rank at one "
			    "collective before the lock",
			    batch->lock_tries);
		else if (p->result == CUDA_RES_TIMEOUT && step == GPU_STEP_LOCK)
			stasis_error_hint(err,
					  "a CUDA call did not return within %u ms; raise "
					  "--timeout",
					  batch->lock_timeout_ms);
		return -EIO;
	}
	return 0;
}

/* Whether the lock failed only by timing out (the driver says "not ready"
 * when its own wait ends): a process that failed for another reason would
 * fail the next try too. */
static bool lock_timed_out(const struct gpu_batch *batch)
{
	bool timed_out = false;

	for (size_t i = 0; i < batch->n; i++) {
		const struct gpu_process *p = &batch->procs[i];

		if (!p->failed_step)
			continue;
		if (p->result != CUDA_RES_TIMEOUT && p->result != CUDA_RES_NOT_READY)
			return false;
		timed_out = true;
	}
	return timed_out;
}

unsigned int gpu_lock_try_timeout(const struct gpu_batch *batch, unsigned int round)
{
	unsigned int shift = round > 1 ? round - 1 : 0;
	unsigned int early = shift < 16 ? LOCK_FIRST_TRY_MS << shift : UINT_MAX;

	/* Ranks not held by the interposer: a lock that did not land in
	 * twice the longest early try is held by a peer, not by a long
	 * kernel, and waiting on would only delay the refusal. */
	unsigned int last =
	    batch->lock_rounds > 1 && batch->lock_timeout_ms > LOCK_RANKS_LAST_TRY_MS
		? LOCK_RANKS_LAST_TRY_MS
		: batch->lock_timeout_ms;

	if (round >= batch->lock_rounds || early >= last)
		return last;
	return early;
}

static int rollback_steps(struct gpu_batch *batch, struct stasis_error **err);

/* The ranks under stasis's NCCL interposer, brought to one collective
 * boundary and held there: then nothing queued waits for a locked peer,
 * and one try of the lock is enough. Held, they take their communicators
 * apart, so that what NCCL's fast transports map between them is gone
 * before the driver's checkpoint. Ranks without it keep the tries of
 * nccl_lock_rounds, each no longer than a rank can take to drain. */
static int hold_nccl(struct gpu_batch *batch, struct stasis_error **err)
{
	_cleanup_free_ pid_t *pids = calloc(batch->n ? batch->n : 1, sizeof(*pids));
	uint64_t start = now_usec();
	int r;

	if (!pids)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < batch->n; i++)
		pids[i] = batch->procs[i].pid;
	if (!batch->nccl)
		batch->nccl = calloc(1, sizeof(*batch->nccl));
	r = batch->nccl ? nccl_hold_open(batch->nccl, pids, batch->n) : -ENOMEM;
	if (r < 0)
		return stasis_error_errno(err, -r, "out of memory");
	batch->nccl->outlives_holder = batch->nccl_hold_outlives;
	if (!batch->nccl->n)
		return 0;
	r = nccl_hold_align(batch->nccl, err);
	if (r == 0)
		r = nccl_hold_teardown(batch->nccl, nccl_fast_transports(pids, batch->n), err);
	batch->nccl_hold_us = now_usec() - start;
	batch->nccl_teardown_us = nccl_hold_teardown_us(batch->nccl);
	/* Tests: stasis killed while it holds the ranks, communicators apart. */
	if (r == 0 && fault_at("hold-slow", 0))
		sleep(3);
	/* Some communicator not counted: its collectives may still wait for
	 * a peer, and the lock keeps its tries. */
	if (r == 0 && nccl_hold_complete(batch->nccl))
		batch->lock_rounds = 1;
	return r;
}

static int lock_tries(struct gpu_batch *batch, struct stasis_error **err)
{
	for (unsigned int round = 1;; round++) {
		int r;

		batch->lock_try_timeout_ms = gpu_lock_try_timeout(batch, round);
		batch->lock_tries = round;
		r = run_parallel(batch, GPU_STEP_LOCK, err);

		if (r == 0 || round >= batch->lock_rounds || !lock_timed_out(batch))
			return r;
		/* Every lock taken is given back before the next round; one
		 * that cannot be (or a rollback that could not run) ends the
		 * tries. */
		if (rollback_steps(batch, err) != 0)
			return r;
		stasis_error_free(*err);
		*err = NULL;
		usleep(LOCK_ROUND_PAUSE_US * round);
	}
}

void gpu_mark_cuda(const struct gpu_batch *batch, struct manifest *m)
{
	for (size_t i = 0; i < batch->n; i++)
		for (size_t j = 0; j < m->nprocs; j++)
			if (m->procs[j].pid == batch->procs[i].pid)
				m->procs[j].cuda = true;
}

bool gpu_batch_running(const struct gpu_batch *batch)
{
	for (size_t i = 0; i < batch->n; i++)
		if (batch->procs[i].state != CUDA_PROCESS_RUNNING)
			return false;
	return true;
}

int gpu_lock_all(struct gpu_batch *batch, struct stasis_error **err)
{
	uint64_t start = now_usec();
	int r = hold_nccl(batch, err);

	if (r == 0) {
		r = lock_tries(batch, err);
		if (r < 0)
			release_nccl(batch);
	}

	/* The job's time under the lock tries, not the last try's alone. */
	batch->step_us[GPU_STEP_LOCK] = now_usec() - start;
	return r;
}

int gpu_checkpoint_all(struct gpu_batch *batch, struct stasis_error **err)
{
	return run_parallel(batch, GPU_STEP_CHECKPOINT, err);
}

int gpu_restore_all(struct gpu_batch *batch, struct stasis_error **err)
{
	return run_parallel(batch, GPU_STEP_RESTORE, err);
}

int gpu_unlock_all(struct gpu_batch *batch, struct stasis_error **err)
{
	int r = run_parallel(batch, GPU_STEP_UNLOCK, err);

	release_nccl(batch);
	return r;
}

/* Ask the driver where each touched process really is, then walk it back:
 * checkpointed -> restore -> locked -> unlock -> running. */
static void *rollback_thread(void *opaque)
{
	struct gpu_process *p = ((struct step_arg *)opaque)->proc;
	enum cuda_process_state state = p->state;

	if (cuda_get_state(p->pid, &state) != CUDA_RES_SUCCESS)
		state = p->state;
	if (state == CUDA_PROCESS_CHECKPOINTED && cuda_restore(p->pid, NULL, 0) == CUDA_RES_SUCCESS)
		state = CUDA_PROCESS_LOCKED;
	if (state == CUDA_PROCESS_LOCKED && cuda_unlock(p->pid) == CUDA_RES_SUCCESS)
		state = CUDA_PROCESS_RUNNING;
	p->state = state;
	return NULL;
}

/* Append ", PID" (with its state when state) to a list being built. */
static void list_pid(char *list, size_t size, size_t *len, pid_t pid, const char *state)
{
	if (*len >= size)
		return;
	*len += (size_t)snprintf(list + *len, size - *len, "%s%d", *len ? ", " : "", (int)pid);
	if (state && *len < size)
		*len += (size_t)snprintf(list + *len, size - *len, " (%s)", state);
}

static int rollback_steps(struct gpu_batch *batch, struct stasis_error **err)
{
	char stuck[512] = "", gone[256] = "";
	size_t stuck_len = 0, gone_len = 0;
	int nstuck = 0;

	if (for_each_parallel(batch, GPU_STEP_RESTORE, rollback_thread, true) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < batch->n; i++) {
		struct gpu_process *p = &batch->procs[i];

		if (!p->touched)
			continue;
		/* A process that ended in the middle of the step (a job at its
		 * last step) makes the driver fail with it; it is not left
		 * frozen, and saying so would send its owner looking for it. */
		if ((p->failed_step || p->state != CUDA_PROCESS_RUNNING) && proc_exiting(p->pid)) {
			list_pid(gone, sizeof(gone), &gone_len, p->pid, NULL);
			continue;
		}
		if (p->state == CUDA_PROCESS_RUNNING)
			continue;
		nstuck++;
		list_pid(stuck, sizeof(stuck), &stuck_len, p->pid, cuda_state_name(p->state));
	}
	if (gone_len && nstuck)
		stasis_error_hint(err,
				  "PID %s exited during the GPU step; rollback could not return "
				  "PID %s to running",
				  gone, stuck);
	else if (gone_len)
		stasis_error_hint(err, "PID %s exited during the GPU step", gone);
	else if (nstuck)
		stasis_error_hint(err, "rollback could not return PID %s to running", stuck);
	return nstuck;
}

int gpu_rollback(struct gpu_batch *batch, struct stasis_error **err)
{
	int r = rollback_steps(batch, err);

	release_nccl(batch);
	return r;
}

int gpu_suspend(struct gpu_batch *batch, struct stasis_error **err)
{
	int r;

	batch->nccl_hold_outlives = true;
	r = gpu_lock_all(batch, err);

	if (r == 0)
		r = gpu_checkpoint_all(batch, err);
	if (r < 0)
		gpu_rollback(batch, err);
	return r;
}

size_t gpu_let_go_held(struct gpu_batch *batch)
{
	size_t kept = 0, let_go = 0;

	for (size_t i = 0; i < batch->n; i++) {
		struct gpu_process *p = &batch->procs[i];

		if (p->state == CUDA_PROCESS_RUNNING && nccl_rank_held(p->pid)) {
			nccl_release_pids(&p->pid, 1);
			let_go++;
			continue;
		}
		batch->procs[kept++] = *p;
	}
	batch->n = kept;
	return let_go;
}

int gpu_resume(struct gpu_batch *batch, struct stasis_error **err)
{
	int r = gpu_restore_all(batch, err);

	if (r == 0)
		r = gpu_unlock_all(batch, err);
	/* A failed restore onto other GPUs leaves the process checkpointed:
	 * bring it back where it was rather than leave it parked. */
	if (r < 0)
		gpu_rollback(batch, err);
	return r;
}

void gpu_record(const struct gpu_batch *batch, struct manifest *m)
{
	for (int step = 0; step < GPU_STEPS; step++) {
		char name[32];

		if (!batch->step_ran[step])
			continue;
		snprintf(name, sizeof(name), "cuda_%s", step_names[step]);
		manifest_add_phase(m, name, batch->step_us[step]);
	}
	if (batch->step_ran[GPU_STEP_LOCK] && batch->lock_tries > 1)
		m->lock_tries = batch->lock_tries;
	/* Part of cuda_lock: the NCCL ranks brought to one boundary. */
	if (batch->nccl && batch->nccl->n)
		manifest_add_phase(m, "nccl_hold", batch->nccl_hold_us);
	/* Part of nccl_hold: the slowest rank's communicators taken apart. */
	if (batch->nccl_teardown_us)
		manifest_add_phase(m, "nccl_teardown", batch->nccl_teardown_us);
	for (size_t i = 0; i < batch->n; i++) {
		const struct gpu_process *g = &batch->procs[i];

		for (size_t j = 0; j < m->nprocs; j++) {
			struct manifest_process *p = &m->procs[j];

			if (p->pid != g->pid)
				continue;
			if (batch->step_ran[GPU_STEP_LOCK]) {
				p->lock_us = g->lock_us;
				p->checkpoint_us = g->checkpoint_us;
			}
			if (batch->step_ran[GPU_STEP_RESTORE]) {
				p->restore_us = g->restore_us;
				p->unlock_us = g->unlock_us;
			}
		}
	}
}

void gpu_nccl_rebuilt(struct manifest *m, uint64_t since)
{
	_cleanup_free_ pid_t *pids = calloc(m->nprocs ? m->nprocs : 1, sizeof(*pids));
	struct stasis_error *err = NULL;
	size_t n = 0;
	uint64_t us = 0;

	if (!pids)
		return;
	for (size_t i = 0; i < m->nprocs; i++)
		if (m->procs[i].cuda)
			pids[n++] = m->procs[i].pid;
	if (nccl_wait_rebuilt(pids, n, since, &us, &err) < 0) {
		/* The image is whole and the tree runs: said, not failed. */
		stasis_note("%s (%s)", err->message, err->hint ? err->hint : "the job runs");
		stasis_error_free(err);
		return;
	}
	if (us)
		manifest_add_phase(m, "nccl_rebuild", us);
}
