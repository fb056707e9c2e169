/* SPDX-License-Identifier: MIT */
/* Mappings CRIU cannot save, found before anything changes. CRIU opens
 * every file mapping of a pseudo file system again through
 * /proc/PID/map_files; one whose file has no open (an io_uring ring, a
 * DMA-BUF, the buffers NCCL shares between ranks) makes its dump fail
 * after the GPU state was already checkpointed. */
#ifndef STASIS_MAPPINGS_H
#define STASIS_MAPPINGS_H

#include "error.h"
#include "manifest.h"

/* NVIDIA's OpenCL driver, as its file name begins. */
#define OPENCL_DRIVER "libnvidia-opencl.so"

/* Refuse, naming the process and the mapping, when a process of m has
 * one, or when a CUDA process of m has an OpenCL context too. */
int mappings_check(const struct manifest *m, struct stasis_error **err);

#endif
