/* SPDX-License-Identifier: MIT */
/* Checks before a GPU checkpoint changes anything: what the driver cannot
 * checkpoint (MIG, MPS), and whether host memory can take the GPU memory
 * the driver is about to copy into the processes. */
#ifndef STASIS_PREFLIGHT_H
#define STASIS_PREFLIGHT_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "manifest.h"

/* Keep this much host memory free beyond the GPU state, for CRIU and the
 * page cache the image goes through. */
#define PREFLIGHT_HOST_RESERVE (512ull << 20)

/* What the driver cannot checkpoint (MIG, MPS) for the CUDA processes of m
 * (NVML filled in). */
int preflight_gpu_mode(const struct manifest *m, struct stasis_error **err);

/* Whether host memory (the machine's, the cgroups') can take the GPU
 * memory of m's CUDA processes. */
int preflight_host_memory(const struct manifest *m, struct stasis_error **err);

/* need bytes of GPU state into available bytes of host memory ("where"
 * names the limit: "the machine", "cgroup /x"); refuses with both numbers. */
int preflight_host_memory_fits(uint64_t need, uint64_t available, const char *where,
			       struct stasis_error **err);

/* MemAvailable of /proc/meminfo in bytes; UINT64_MAX when unknown. */
uint64_t preflight_mem_available(void);

/* What an image of m is expected to take: the GPU state of its CUDA
 * processes, their private memory and the largest shared memory, plus a
 * 5% margin and PREFLIGHT_IMAGE_SLACK for CRIU's other images. */
struct image_estimate {
	uint64_t gpu, host, total;
	uint64_t largest; /* the biggest process's host and GPU memory */
};
#define PREFLIGHT_IMAGE_SLACK (64ull << 20)

void preflight_image_estimate(const struct manifest *m, struct image_estimate *e);

/* Refuse before anything changes when dir's file system cannot take the
 * image (not checked with compress, whose size is not known yet), or, for
 * tmpfs, when host memory cannot hold the image beside the GPU state. */
int preflight_image_room(const struct manifest *m, const char *dir, bool compress,
			 struct stasis_error **err);

/* The most dirty page cache the kernel lets writers make before it holds
 * them to the disk's pace: vm.dirty_bytes, else vm.dirty_ratio percent of
 * dirtyable memory (approximated by available memory). */
uint64_t preflight_dirty_limit(uint64_t dirty_bytes, unsigned int dirty_ratio, uint64_t dirtyable);

/* What decides whether a --leave-running image is staged in memory. */
struct stage_facts {
	uint64_t available;	  /* MemAvailable */
	uint64_t own_room;	  /* under stasis's cgroup's memory limits, or UINT64_MAX */
	uint64_t dirty_bytes;	  /* vm.dirty_bytes */
	unsigned int dirty_ratio; /* vm.dirty_ratio */
	uint64_t stage_room;	  /* free in the staging folder */
	uint64_t part_bytes;	  /* criu_page_part_bytes() */
};

/* NULL where an image of e is staged, else why not. Unless forced, an
 * image the page cache takes below the dirty limit is not staged: CRIU
 * writes it as fast as into tmpfs, and the disk starts on it at once;
 * unless a process is big enough for its pages to go in parts, which
 * only a staged dump writes (part_bytes, 0 for never). */
const char *preflight_stage_decide(const struct image_estimate *e, const struct stage_facts *f,
				   bool forced);

/* The same for a --leave-running checkpoint of m into dir, staged under
 * stage_root (image-stage.h), with the facts read from the machine. */
const char *preflight_stage(const struct manifest *m, const char *dir, const char *stage_root,
			    bool forced);

#endif
