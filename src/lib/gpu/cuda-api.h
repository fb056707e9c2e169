/* SPDX-License-Identifier: MIT */
/* The CUDA driver's checkpoint API, loaded with dlopen("libcuda.so.1") into
 * one struct of function pointers. The only file that knows about libcuda;
 * tests load a fake library through the same path. */
#ifndef STASIS_CUDA_H
#define STASIS_CUDA_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* The driver API's values, so that callers need not include cuda.h; cuda.c
 * checks them against the real header at compile time. */
typedef int cuda_result;

enum cuda_process_state {
	CUDA_PROCESS_RUNNING = 0,
	CUDA_PROCESS_LOCKED = 1,
	CUDA_PROCESS_CHECKPOINTED = 2,
	CUDA_PROCESS_FAILED = 3,
};

#define CUDA_RES_SUCCESS 0
#define CUDA_RES_INVALID_VALUE 1
#define CUDA_RES_NOT_INITIALIZED 3
#define CUDA_RES_NO_DEVICE 100
#define CUDA_RES_NOT_FOUND 500
#define CUDA_RES_NOT_READY 600
#define CUDA_RES_ILLEGAL_STATE 401
#define CUDA_RES_NOT_SUPPORTED 801
#define CUDA_RES_TIMEOUT 909

struct cuda_uuid {
	unsigned char bytes[16];
};

struct cuda_gpu_pair {
	struct cuda_uuid old_uuid;
	struct cuda_uuid new_uuid;
};

/* Load libcuda.so.1 ($STASIS_LIBCUDA overrides the name) and cuInit it,
 * once per run. Without a driver: ENODEV "no NVIDIA driver found". */
int cuda_load(struct stasis_error **err);

/* Only load it: its version is known, the driver calls need cuda_load(). */
int cuda_open(struct stasis_error **err);

/* cuda_load() in a thread of its own, its result kept: a later
 * cuda_load() waits for it and reports it. */
void cuda_load_begin(void);

/* CUDA version of the driver: 13000 for CUDA 13.0 (driver 580). */
int cuda_driver_version(void);

/* GPU remapping at restore (gpuPairs) needs driver 580, CUDA 13.0. */
#define CUDA_VERSION_GPU_REMAP 13000

/* The driver calls; cuda_load() must have succeeded. */
cuda_result cuda_get_state(pid_t pid, enum cuda_process_state *state);
cuda_result cuda_get_restore_tid(pid_t pid, int *tid);
cuda_result cuda_lock(pid_t pid, unsigned int timeout_ms);
cuda_result cuda_checkpoint(pid_t pid);
cuda_result cuda_restore(pid_t pid, const struct cuda_gpu_pair *pairs, unsigned int npairs);
cuda_result cuda_unlock(pid_t pid);
int cuda_device_count(void);
cuda_result cuda_device_uuid(int ordinal, struct cuda_uuid *uuid);
/* This process's own context on GPU ordinal, made and dropped again: what
 * a bare context takes there (CUDA_ERROR_NOT_SUPPORTED without the calls). */
cuda_result cuda_context_hold(int ordinal);
void cuda_context_drop(int ordinal);

/* Whether a driver library can be loaded at all (no error kept). */
bool cuda_available(void);

/* "CUDA_ERROR_NOT_SUPPORTED" for 801, from the driver when it can say. */
const char *cuda_result_name(cuda_result r);

const char *cuda_state_name(enum cuda_process_state state);

/* Fill *err with a CUDA failure: "<what> of PID N: CUDA_ERROR_X (code)". */
int cuda_error(struct stasis_error **err, cuda_result r, const char *what, pid_t pid);

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" form, and back. */
void cuda_uuid_format(const struct cuda_uuid *uuid, char out[41]);
int cuda_uuid_parse(const char *text, struct cuda_uuid *uuid);

#endif
