/* SPDX-License-Identifier: MIT */
/* The GPU restore and unlock, where they belong: after CRIU's restore but
 * before it lets the tree run. stasis's CRIU plugin asks for them through
 * the plugin channel with every thread of the tree stopped but the CUDA
 * restore threads; they run for every process at once, as the GPU steps
 * always do. The same serves a tree and a container (runc runs the same
 * CRIU with the same plugin). */
#ifndef STASIS_GPU_HANDOFF_H
#define STASIS_GPU_HANDOFF_H

#include <stdbool.h>

#include "gpu.h"
#include "gpumap.h"
#include "manifest.h"
#include "plugin-channel.h"

struct gpu_handoff {
	struct plugin_channel *channel;
	struct manifest *m;
	/* the image's CUDA processes, by their new PIDs */
	const struct gpu_plan *plan;
	bool by_ns_pid; /* a container: matched by their PIDs inside it */
	struct gpu_batch restored;
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

/* Stop serving: 1 when the GPU work ran inside CRIU, 0 when CRIU never
 * asked for it, or the -status of its failure with *err set. */
int gpu_handoff_end(struct gpu_handoff *h, struct stasis_error **err);

#endif
