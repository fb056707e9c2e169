/* SPDX-License-Identifier: MIT */
/* Checks before a GPU checkpoint changes anything: what the driver cannot
 * checkpoint (MIG, MPS), and whether host memory can take the GPU memory
 * the driver is about to copy into the processes. */
#ifndef STASIS_PREFLIGHT_H
#define STASIS_PREFLIGHT_H

#include <stdint.h>

#include "error.h"
#include "manifest.h"

/* Keep this much host memory free beyond the GPU state, for CRIU and the
 * page cache the image goes through. */
#define PREFLIGHT_HOST_RESERVE (512ull << 20)

/* MIG, MPS and host memory for the CUDA processes of m (NVML filled in). */
int preflight_gpu_checkpoint(const struct manifest *m, struct stasis_error **err);

/* need bytes of GPU state into available bytes of host memory ("where"
 * names the limit: "the machine", "cgroup /x"); refuses with both numbers. */
int preflight_host_memory_fits(uint64_t need, uint64_t available, const char *where,
			       struct stasis_error **err);

/* MemAvailable of /proc/meminfo in bytes; UINT64_MAX when unknown. */
uint64_t preflight_mem_available(void);

#endif
