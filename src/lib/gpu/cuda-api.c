/* SPDX-License-Identifier: MIT */
#include "cuda-api.h"

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

_Static_assert((int)CUDA_PROCESS_CHECKPOINTED == (int)CU_PROCESS_STATE_CHECKPOINTED,
	       "state values");
_Static_assert((int)CUDA_PROCESS_FAILED == (int)CU_PROCESS_STATE_FAILED, "state values");
_Static_assert(sizeof(struct cuda_gpu_pair) == sizeof(CUcheckpointGpuPair), "gpu pair layout");
_Static_assert(CUDA_RES_ILLEGAL_STATE == (int)CUDA_ERROR_ILLEGAL_STATE, "result values");
_Static_assert(CUDA_RES_NOT_SUPPORTED == (int)CUDA_ERROR_NOT_SUPPORTED, "result values");
_Static_assert(CUDA_RES_TIMEOUT == (int)CUDA_ERROR_TIMEOUT, "result values");
_Static_assert(CUDA_RES_NOT_FOUND == (int)CUDA_ERROR_NOT_FOUND, "result values");
_Static_assert(CUDA_RES_INVALID_VALUE == (int)CUDA_ERROR_INVALID_VALUE, "result values");

struct cuda_ops {
	void *handle;
	int driver_version;
	CUresult (*init)(unsigned int flags);
	CUresult (*driver_get_version)(int *version);
	CUresult (*device_get_count)(int *count);
	CUresult (*device_get)(CUdevice *dev, int ordinal);
	CUresult (*device_get_uuid)(CUuuid *uuid, CUdevice dev);
	CUresult (*get_error_name)(CUresult r, const char **name);
	CUresult (*get_state)(int pid, CUprocessState *state);
	CUresult (*get_restore_tid)(int pid, int *tid);
	CUresult (*lock)(int pid, CUcheckpointLockArgs *args);
	CUresult (*checkpoint)(int pid, CUcheckpointCheckpointArgs *args);
	CUresult (*restore)(int pid, CUcheckpointRestoreArgs *args);
	CUresult (*unlock)(int pid, CUcheckpointUnlockArgs *args);
	CUresult (*primary_ctx_retain)(CUcontext *ctx, CUdevice dev);
	CUresult (*primary_ctx_release)(CUdevice dev);
};

static struct cuda_ops ops;
static pthread_once_t load_once = PTHREAD_ONCE_INIT, init_once = PTHREAD_ONCE_INIT;
/* Loading covers the library, its symbols and version; cuInit, which takes
 * a fifth of a second, comes apart so that it can run beside other work. */
static struct stasis_error *load_error, *init_error;

struct symbol {
	const char *name;
	void **slot;
	bool required;
};

static const char *library_name(void)
{
	const char *name = getenv("STASIS_LIBCUDA");

	return name && *name ? name : "libcuda.so.1";
}

static void load(void)
{
	const struct symbol symbols[] = {
	    {"cuInit", (void **)&ops.init, true},
	    {"cuDriverGetVersion", (void **)&ops.driver_get_version, true},
	    {"cuDeviceGetCount", (void **)&ops.device_get_count, true},
	    {"cuDeviceGet", (void **)&ops.device_get, true},
	    {"cuDeviceGetUuid_v2", (void **)&ops.device_get_uuid, false},
	    {"cuGetErrorName", (void **)&ops.get_error_name, false},
	    {"cuCheckpointProcessGetState", (void **)&ops.get_state, true},
	    {"cuCheckpointProcessGetRestoreThreadId", (void **)&ops.get_restore_tid, true},
	    {"cuCheckpointProcessLock", (void **)&ops.lock, true},
	    {"cuCheckpointProcessCheckpoint", (void **)&ops.checkpoint, true},
	    {"cuCheckpointProcessRestore", (void **)&ops.restore, true},
	    {"cuCheckpointProcessUnlock", (void **)&ops.unlock, true},
	    {"cuDevicePrimaryCtxRetain", (void **)&ops.primary_ctx_retain, false},
	    {"cuDevicePrimaryCtxRelease_v2", (void **)&ops.primary_ctx_release, false},
	};

	ops.handle = dlopen(library_name(), RTLD_NOW | RTLD_LOCAL);
	if (!ops.handle) {
		stasis_error_set(&load_error, ENODEV, STASIS_DOMAIN_CUDA, 0,
				 "no NVIDIA driver found (%s cannot be loaded)", library_name());
		stasis_error_hint(&load_error, "install the NVIDIA driver 570 or newer");
		return;
	}
	ops.driver_get_version = dlsym(ops.handle, "cuDriverGetVersion");
	if (ops.driver_get_version)
		ops.driver_get_version(&ops.driver_version);
	if (!dlsym(ops.handle, "cuDeviceGetUuid_v2"))
		ops.device_get_uuid = dlsym(ops.handle, "cuDeviceGetUuid");
	for (size_t i = 0; i < ARRAY_SIZE(symbols); i++) {
		void *sym = dlsym(ops.handle, symbols[i].name);

		if (sym)
			*symbols[i].slot = sym;
		if (sym || !symbols[i].required || *symbols[i].slot)
			continue;
		stasis_error_set(&load_error, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
				 "NVIDIA driver (CUDA %d.%d) does not support %s",
				 ops.driver_version / 1000, ops.driver_version % 1000 / 10,
				 symbols[i].name);
		stasis_error_hint(&load_error, "stasis needs driver 570 or newer");
		return;
	}
}

static void init(void)
{
	CUresult r = ops.init(0);

	if (r == CUDA_SUCCESS)
		return;
	cuda_error(&init_error, r, "cuInit", 0);
	if (r == CUDA_ERROR_NO_DEVICE)
		stasis_error_hint(&init_error, "no GPU is visible to stasis");
}

static int report(const struct stasis_error *kept, struct stasis_error **err)
{
	if (!kept)
		return 0;
	stasis_error_set(err, kept->status, kept->domain, kept->code, "%s", kept->message);
	if (kept->hint)
		stasis_error_hint(err, "%s", kept->hint);
	return -kept->status;
}

int cuda_open(struct stasis_error **err)
{
	pthread_once(&load_once, load);
	return report(load_error, err);
}

int cuda_load(struct stasis_error **err)
{
	int r = cuda_open(err);

	if (r < 0)
		return r;
	pthread_once(&init_once, init);
	return report(init_error, err);
}

static void *load_beside(void *unused)
{
	cuda_load(NULL);
	return NULL;
}

void cuda_load_begin(void)
{
	pthread_t thread;

	if (pthread_create(&thread, NULL, load_beside, NULL) == 0)
		pthread_detach(thread);
}

bool cuda_available(void)
{
	return cuda_load(NULL) == 0;
}

int cuda_driver_version(void)
{
	return ops.driver_version;
}

const char *cuda_result_name(cuda_result r)
{
	const char *name = NULL;

	if (ops.get_error_name && ops.get_error_name((CUresult)r, &name) == CUDA_SUCCESS && name)
		return name;
	switch (r) {
	case CUDA_SUCCESS:
		return "CUDA_SUCCESS";
	case CUDA_ERROR_INVALID_VALUE:
		return "CUDA_ERROR_INVALID_VALUE";
	case CUDA_ERROR_NOT_INITIALIZED:
		return "CUDA_ERROR_NOT_INITIALIZED";
	case CUDA_ERROR_NO_DEVICE:
		return "CUDA_ERROR_NO_DEVICE";
	case CUDA_ERROR_ILLEGAL_STATE:
		return "CUDA_ERROR_ILLEGAL_STATE";
	case CUDA_ERROR_NOT_FOUND:
		return "CUDA_ERROR_NOT_FOUND";
	case CUDA_ERROR_NOT_READY:
		return "CUDA_ERROR_NOT_READY";
	case CUDA_ERROR_NOT_SUPPORTED:
		return "CUDA_ERROR_NOT_SUPPORTED";
	case CUDA_ERROR_TIMEOUT:
		return "CUDA_ERROR_TIMEOUT";
	case CUDA_ERROR_OPERATING_SYSTEM:
		return "CUDA_ERROR_OPERATING_SYSTEM";
	}
	return "CUDA_ERROR_UNKNOWN";
}

const char *cuda_state_name(enum cuda_process_state state)
{
	switch (state) {
	case CUDA_PROCESS_RUNNING:
		return "running";
	case CUDA_PROCESS_LOCKED:
		return "locked";
	case CUDA_PROCESS_CHECKPOINTED:
		return "checkpointed";
	case CUDA_PROCESS_FAILED:
		return "failed";
	}
	return "unknown";
}

int cuda_error(struct stasis_error **err, cuda_result r, const char *what, pid_t pid)
{
	int status = r == CUDA_ERROR_TIMEOUT	     ? ETIMEDOUT
		     : r == CUDA_ERROR_NOT_SUPPORTED ? ENOTSUP
						     : EIO;

	if (pid > 0)
		return stasis_error_set(err, status, STASIS_DOMAIN_CUDA, r, "%s of PID %d: %s (%d)",
					what, (int)pid, cuda_result_name(r), r);
	return stasis_error_set(err, status, STASIS_DOMAIN_CUDA, r, "%s: %s (%d)", what,
				cuda_result_name(r), r);
}

cuda_result cuda_get_state(pid_t pid, enum cuda_process_state *state)
{
	CUprocessState s = CU_PROCESS_STATE_RUNNING;
	CUresult r = ops.get_state(pid, &s);

	*state = (enum cuda_process_state)s;
	return r;
}

cuda_result cuda_get_restore_tid(pid_t pid, int *tid)
{
	return ops.get_restore_tid(pid, tid);
}

cuda_result cuda_lock(pid_t pid, unsigned int timeout_ms)
{
	CUcheckpointLockArgs args = {.timeoutMs = timeout_ms};

	return ops.lock(pid, &args);
}

cuda_result cuda_checkpoint(pid_t pid)
{
	CUcheckpointCheckpointArgs args = {0};

	return ops.checkpoint(pid, &args);
}

cuda_result cuda_restore(pid_t pid, const struct cuda_gpu_pair *pairs, unsigned int npairs)
{
	CUcheckpointRestoreArgs args;

	memset(&args, 0, sizeof(args));
	if (npairs) {
		args.gpuPairs = (CUcheckpointGpuPair *)pairs;
		args.gpuPairsCount = npairs;
	}
	return ops.restore(pid, npairs ? &args : NULL);
}

cuda_result cuda_unlock(pid_t pid)
{
	CUcheckpointUnlockArgs args = {0};

	return ops.unlock(pid, &args);
}

int cuda_device_count(void)
{
	int n = 0;

	if (ops.device_get_count(&n) != CUDA_SUCCESS)
		return 0;
	return n;
}

cuda_result cuda_device_uuid(int ordinal, struct cuda_uuid *uuid)
{
	CUdevice dev;
	CUresult r = ops.device_get(&dev, ordinal);

	if (r != CUDA_SUCCESS)
		return r;
	if (!ops.device_get_uuid)
		return CUDA_ERROR_NOT_SUPPORTED;
	return ops.device_get_uuid((CUuuid *)uuid, dev);
}

void cuda_uuid_format(const struct cuda_uuid *uuid, char out[41])
{
	const unsigned char *b = uuid->bytes;

	snprintf(out, 41,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
		 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
		 b[14], b[15]);
}

int cuda_uuid_parse(const char *text, struct cuda_uuid *uuid)
{
	size_t n = 0;

	if (strncmp(text, "GPU-", 4) == 0)
		text += 4;
	for (const char *p = text; *p; p++) {
		unsigned int byte;

		if (*p == '-')
			continue;
		if (n == 16 || sscanf(p, "%2x", &byte) != 1 || !p[1] || p[1] == '-')
			return -EINVAL;
		uuid->bytes[n++] = (unsigned char)byte;
		p++;
	}
	return n == 16 ? 0 : -EINVAL;
}

cuda_result cuda_context_hold(int ordinal)
{
	CUcontext ctx;
	CUdevice dev;
	CUresult r;

	if (!ops.primary_ctx_retain || !ops.primary_ctx_release)
		return CUDA_ERROR_NOT_SUPPORTED;
	r = ops.device_get(&dev, ordinal);
	return r == CUDA_SUCCESS ? ops.primary_ctx_retain(&ctx, dev) : r;
}

void cuda_context_drop(int ordinal)
{
	CUdevice dev;

	if (ops.primary_ctx_release && ops.device_get(&dev, ordinal) == CUDA_SUCCESS)
		ops.primary_ctx_release(dev);
}
