/* SPDX-License-Identifier: MIT */
/* NVML (libnvidia-ml.so.1), loaded with dlopen: the GPUs of the machine and
 * the compute processes on them. The only file that knows about NVML. */
#ifndef STASIS_NVML_H
#define STASIS_NVML_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "manifest.h"

struct nvml_gpu {
	int index;
	char uuid[96];
	char name[96];
	char arch[24];
	int cc_major, cc_minor;
	char pci_bus_id[32];
	uint64_t memory_total, memory_used;
	int persistence;  /* 1 enabled, 0 disabled, -1 unknown */
	int mig;	  /* current MIG mode, -1 when not supported */
	int minor;	  /* N of /dev/nvidiaN, -1 when unknown */
	int compute_mode; /* 0 default, 2 prohibited, 3 exclusive process */
};

struct nvml_process {
	pid_t pid;
	int gpu; /* index into the nvml_gpu array */
	uint64_t used_bytes;
	bool used_known; /* NVML can say "not available": used_bytes is 0 then */
};

/* Load and initialise once; ENODEV "no NVIDIA driver found" without one. */
int nvml_load(struct stasis_error **err);

/* "580.159.04" into buf. */
int nvml_driver_version(char *buf, size_t len, struct stasis_error **err);

int nvml_gpus(struct nvml_gpu **gpus_out, size_t *n_out, struct stasis_error **err);

/* Compute processes on every GPU (nvidia-smi --query-compute-apps). */
int nvml_processes(const struct nvml_gpu *gpus, size_t ngpus, struct nvml_process **out,
		   size_t *n_out, struct stasis_error **err);

/* Record in m the GPUs used by m's CUDA processes and their memory. Without
 * NVML it leaves m as it was. */
void nvml_describe_processes(struct manifest *m);

#endif
