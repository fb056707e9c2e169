/* SPDX-License-Identifier: MIT */
/* A limit of the driver's checkpoint with several GPUs in one process,
 * refused before anything changes. */
#ifndef STASIS_PEER_LIMIT_H
#define STASIS_PEER_LIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "gpu.h"
#include "manifest.h"

/* The smallest single allocation that driver 580 cannot restore in a
 * process whose GPUs have peer access (measured on two H200s: 510 MiB
 * restores, 512 MiB does not). */
#define PEER_LIMIT_ALLOCATION (512ull << 20)

/* Whether a process that uses `used` bytes of a GPU, where a bare context
 * takes `context` bytes (0 when unknown), may hold such an allocation. */
bool peer_limit_may_hold(uint64_t used, uint64_t context);

/* Refuse a process of the batch that has memory on two or more GPUs and,
 * on one of them, room for such an allocation: its checkpoint would
 * succeed and end it, and no restore could bring it back. */
int peer_limit_check(const struct gpu_batch *batch, struct stasis_error **err);

#endif
