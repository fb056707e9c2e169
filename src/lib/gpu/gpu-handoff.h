/* SPDX-License-Identifier: MIT */
/* The GPU steps where they belong, inside CRIU: at a dump, the lock before
 * CRIU seizes the tree and the checkpoint once it is frozen; at a restore,
 * the restore and unlock after CRIU's restore but before it lets the tree
 * run. stasis's CRIU plugin asks for them through the plugin channel with
 * every thread of the tree stopped but the CUDA restore threads; they run
 * for every process at once, as the GPU steps always do. The same serves a
 * tree, a migration and a container (runc runs the same CRIU with the same
 * plugin). One handoff serves one operation. */
#ifndef STASIS_GPU_HANDOFF_H
#define STASIS_GPU_HANDOFF_H

#include <stdbool.h>

#include "gpu.h"
#include "gpumap.h"
#include "manifest.h"
#include "plugin-channel.h"

struct gpu_dump_plan {
	struct gpu_batch *batch;
	struct manifest *m;
	bool leave_running;
	/* Called once the driver's checkpoint is done, CRIU still dumping
	 * (the machine's huge-page mode goes back then); may be NULL. */
	void (*copied)(void *ctx);
	void *ctx;
};

/* A check of a running CUDA process before any GPU step: 0, or a
 * refusal in err (the preflight's, which sits above this layer). */
typedef int (*gpu_process_refuse_fn)(pid_t pid, const char *comm, struct stasis_error **err);

struct gpu_handoff {
	struct plugin_channel *channel;
	struct manifest *m;
	/* the image's CUDA processes, by their new PIDs */
	const struct gpu_plan *plan;
	bool by_ns_pid; /* a container: matched by their PIDs inside it */
	struct gpu_batch restored;
	/* A dump: the tree's CUDA processes, found by the preflight, and
	 * the steps CRIU has had done. */
	struct gpu_batch *dump;
	struct gpu_dump_plan dump_plan;
	bool locked, checkpointed;
	bool finished;	  /* CRIU came to its end (the plugin's fini) */
	bool dump_failed; /* CRIU said so at its end */
	/* The helper of a CRIU that stasis did not start: it finds the
	 * tree's CUDA processes itself, into these. */
	bool standalone;
	gpu_process_refuse_fn refuse;
	struct gpu_batch own_batch;
	struct manifest own_m;
};

/* m's CUDA processes, by their PIDs in m, into batch as the driver left
 * them (checkpointed), with plan's GPU pairs. */
int gpu_batch_of_restored(struct gpu_batch *batch, const struct manifest *m,
			  const struct gpu_plan *plan, struct stasis_error **err);

/* Restore and unlock every process of batch at once, recording the
 * timings in m. No rollback: the caller kills what it restored. */
int gpu_restore_unlock(struct gpu_batch *batch, struct manifest *m, struct stasis_error **err);

/* Serve the GPU restore (before CRIU or runc starts restoring). */
int gpu_handoff_restore_begin(struct gpu_handoff *h, struct manifest *m,
			      const struct gpu_plan *plan, bool by_ns_pid,
			      struct stasis_error **err);

/* The socket CRIU's plugin reaches this handoff at (its setting
 * STASIS_PLUGIN_SOCKET), NULL without GPU work; valid until its end. */
const char *gpu_handoff_socket(const struct gpu_handoff *h);

/* Serve the GPU lock and checkpoint of the plan's processes (before CRIU
 * or runc starts dumping; nothing to serve when there are none), and,
 * before CRIU lets the tree go after a failure or with leave_running,
 * their GPU state back. The caller still rolls back whatever is not running after a
 * failed dump (gpu_rollback: a CRIU that died never got to its end). */

int gpu_handoff_dump_begin(struct gpu_handoff *h, const struct gpu_dump_plan *plan,
			   struct stasis_error **err);

/* Stop serving a dump whose result was dumped: the result, the GPU step's
 * failure in place of CRIU's where one failed, or a refusal where CRIU
 * dumped without asking for the GPU checkpoint. */
int gpu_handoff_dump_end(struct gpu_handoff *h, int dumped, struct stasis_error **err);

/* The helper that stasis's CRIU plugin starts where no stasis started
 * CRIU (a runtime's criu swrk, criu by hand): serves the plugin's
 * conversations on fd until CRIU closes it, finding the CUDA processes
 * itself (every one of the tree at a dump, the checkpointed ones of the
 * restored tree at a restore). A tree still locked when CRIU went away is
 * brought back to running. refuse (the preflight's checks of a running
 * process, NULL: none) is asked of each CUDA process before any lock. */
int gpu_handoff_serve_helper(int fd, gpu_process_refuse_fn refuse, struct stasis_error **err);

/* Stop serving a restore: 1 when the GPU work ran inside CRIU, 0 when CRIU never
 * asked for it, or the -status of its failure with *err set. */
int gpu_handoff_end(struct gpu_handoff *h, struct stasis_error **err);

#endif
