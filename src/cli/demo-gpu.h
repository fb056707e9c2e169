/* SPDX-License-Identifier: MIT */
/* The GPU half of the demo workload: the counter also lives in device
 * memory next to a checksummed pattern, so that a checkpoint that lost or
 * garbled GPU memory shows in the workload's own checks. It uses the CUDA
 * driver API through dlopen, as stasis does, so no toolkit is needed. */
#ifndef STASIS_DEMO_GPU_H
#define STASIS_DEMO_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DEMO_GPU_PATTERN_BYTES (256u << 20)

/* Initialise CUDA on GPU 0 and fill the pattern; false with why filled in. */
bool demo_gpu_start(char *why, size_t len);

/* Store the counter on the GPU and read it back; false if it differs. */
bool demo_gpu_tick(uint64_t value, char *why, size_t len);

/* Read the whole pattern back; false if one word differs. */
bool demo_gpu_verify(char *why, size_t len);

#endif
