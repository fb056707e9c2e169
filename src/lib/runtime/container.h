/* SPDX-License-Identifier: MIT */
/* Containers: the runtime (runc) saves and restores the container through
 * CRIU; stasis does the GPU steps from the host, by host PIDs, around it. */
#ifndef STASIS_CONTAINER_H
#define STASIS_CONTAINER_H

#include "gpu.h"
#include "stasis.h"

int container_checkpoint(const struct stasis_checkpoint_options *o, struct manifest *m,
			 struct gpu_batch *batch, struct stasis_error **err);

int container_restore(const struct stasis_restore_options *o, struct manifest *m, pid_t *root_out,
		      struct stasis_error **err);

#endif
