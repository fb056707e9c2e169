/* SPDX-License-Identifier: MIT */
/* Which GPU each checkpointed GPU is restored onto, and the driver's
 * gpuPairs that say so. The driver accepts only a permutation of every GPU
 * the process could see, so the plan is always one. */
#ifndef STASIS_GPUMAP_H
#define STASIS_GPUMAP_H

#include <stdbool.h>

#include "cuda-api.h"
#include "error.h"
#include "manifest.h"
#include "nvml.h"

struct gpu_plan {
	size_t n;	/* = manifest's GPUs */
	int target[64]; /* index into the machine's GPUs, per manifest GPU */
	struct cuda_gpu_pair pairs[64];
	unsigned int npairs; /* 0 when every GPU maps onto itself */
	char notes[512];     /* "GPU-a -> GPU-b (same chip)" for the user */
	char dev_map[512];   /* "OLD:NEW,..." /dev/nvidiaN minors that move */
};

/* A --gpu-map as written, each side a GPU index or UUID. */
#define GPU_MAP_MAX 64
struct gpu_map {
	size_t n;
	struct {
		char from[48], to[48];
	} entries[GPU_MAP_MAX];
};

/* Parse "OLD=NEW,..." alone: an empty part, a side that is neither an
 * index nor a GPU UUID, or a GPU named twice on one side is a usage
 * error naming it. */
int gpu_map_parse(const char *text, struct gpu_map *map, struct stasis_error **err);

/* The same, and every OLD one of the image's GPUs, each once: before
 * anything runs. An image without GPU state has nothing to map. */
int gpu_map_check_image(const char *text, const struct manifest *m, struct stasis_error **err);

/* Parse "OLD=NEW,..." (UUIDs or indexes) against the image's GPUs and the
 * machine's, fill in the rest by default rules, and check that the result
 * can be honoured. */
int gpu_plan_make(const struct manifest *m, const struct nvml_gpu *gpus, size_t ngpus,
		  const char *map, struct gpu_plan *plan, struct stasis_error **err);

#endif
