/* SPDX-License-Identifier: MIT */
/* GPU steps for many processes at once: one thread per process, a lock
 * timeout, the driver's post-init race retried, and rollback so that a
 * failure never leaves a process locked or with its GPU state in host RAM. */
#ifndef STASIS_GPU_H
#define STASIS_GPU_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cuda-api.h"
#include "error.h"
#include "manifest.h"

#define GPU_DEFAULT_LOCK_TIMEOUT_MS 10000

struct gpu_process {
	pid_t pid;
	enum cuda_process_state state; /* as far as stasis knows */
	bool touched;		       /* stasis changed its state */
	uint64_t lock_us, checkpoint_us, restore_us, unlock_us;
	cuda_result result; /* of the last failed call */
	const char *failed_step;
	/* Its GPU memory where known (NVML), for the progress of the copies:
	 * its private memory when the checkpoint began, which the driver's
	 * copy grows, and whether the step running now is done for it. */
	uint64_t gpu_bytes;
	uint64_t rss_before;
	atomic_bool step_done;
};

enum gpu_step { GPU_STEP_LOCK, GPU_STEP_CHECKPOINT, GPU_STEP_RESTORE, GPU_STEP_UNLOCK, GPU_STEPS };

struct gpu_batch {
	struct gpu_process *procs;
	size_t n;
	unsigned int lock_timeout_ms;
	/* How many times the lock is tried while one times out (0: once),
	 * every process unlocked between tries. For NCCL ranks: one rank
	 * locked while another's kernel already waits in a collective for it
	 * times that other lock out (the driver waits for the kernel, the
	 * kernel for the locked rank); unlocked, the ranks run on, and a
	 * later try most often finds them between collectives. */
	unsigned int lock_rounds;
	/* The timeout of the try under way (gpu_lock_all sets it): where there
	 * are several, the tries before the last are short (lock_try_timeout),
	 * so that a refusal does not take lock_rounds times lock_timeout_ms. */
	unsigned int lock_try_timeout_ms;
	/* How many tries the last gpu_lock_all took; its cuda_lock time spans
	 * them all, with the rollbacks and pauses between. */
	unsigned int lock_tries;
	/* restore onto other GPUs: pairs for every process (may be empty) */
	const struct cuda_gpu_pair *pairs;
	unsigned int npairs;
	/* wall time of each step across all processes, for the steps that ran */
	bool step_ran[GPU_STEPS];
	uint64_t step_us[GPU_STEPS];
	/* NCCL ranks under stasis's interposer, held at one collective
	 * boundary from before the lock until they run again (nccl-hold.h). */
	struct nccl_hold *nccl;
	bool nccl_hold_outlives;   /* gpu suspend: the hold stays after stasis */
	uint64_t nccl_hold_us;	   /* how long bringing them there took */
	uint64_t nccl_teardown_us; /* of which their communicators taken apart */
};

/* The processes among pids that hold CUDA state the driver can checkpoint. */
int gpu_find_cuda(const pid_t *pids, size_t n, struct gpu_batch *batch, struct stasis_error **err);

/* Add one PID the caller knows uses CUDA. */
int gpu_batch_add(struct gpu_batch *batch, pid_t pid);
void gpu_batch_free(struct gpu_batch *batch);

/* Marks m's processes that are in batch as CUDA processes. */
void gpu_mark_cuda(const struct gpu_batch *batch, struct manifest *m);

/* Whether every process of batch runs, as far as stasis knows. */
bool gpu_batch_running(const struct gpu_batch *batch);

/* Refuse before anything changes: every process must be RUNNING. */
int gpu_preflight_running(const struct gpu_batch *batch, struct stasis_error **err);

/* lock all, then checkpoint all, each step in parallel. On failure every
 * process touched is brought back to running and err names the first. */
int gpu_suspend(struct gpu_batch *batch, struct stasis_error **err);

/* restore all (with the batch's GPU pairs), then unlock all, in parallel. */
int gpu_resume(struct gpu_batch *batch, struct stasis_error **err);

/* The running processes of batch that stasis's NCCL interposer still
 * holds (a gpu suspend killed before its lock, whose hold outlives it):
 * let go, taken out of batch; how many. */
size_t gpu_let_go_held(struct gpu_batch *batch);

/* The timeout of try round (from 1) of batch's lock: the whole
 * lock_timeout_ms for the last (or only) try, 2 s doubled each try before
 * it where that is shorter (three tries of NCCL ranks at the default 10 s:
 * 2, 4 and 10 s, where they took 30 s). */
unsigned int gpu_lock_try_timeout(const struct gpu_batch *batch, unsigned int round);

/* Lock only, or checkpoint only (for callers that step through). */
int gpu_lock_all(struct gpu_batch *batch, struct stasis_error **err);
int gpu_checkpoint_all(struct gpu_batch *batch, struct stasis_error **err);
int gpu_restore_all(struct gpu_batch *batch, struct stasis_error **err);
int gpu_unlock_all(struct gpu_batch *batch, struct stasis_error **err);

/* Bring every touched process back to running; returns how many could not
 * be (their PIDs are named in err). */
int gpu_rollback(struct gpu_batch *batch, struct stasis_error **err);

/* Add the steps that ran to m's phases ("cuda_lock", ...), and each
 * process's step times to its entry in m. */
void gpu_record(const struct gpu_batch *batch, struct manifest *m);

/* Once the tree runs again (--leave-running, a restore): waits until the
 * NCCL ranks among m's CUDA processes made again the communicators they
 * took apart, recording the slowest rank's time as nccl_rebuild (of the
 * rebuilds that ended since `since`, now_usec's clock). A rank
 * that failed, or took over a minute, is said in a note: the image is
 * whole and the tree runs either way. */
void gpu_nccl_rebuilt(struct manifest *m, uint64_t since);

#endif
