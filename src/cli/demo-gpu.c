/* SPDX-License-Identifier: MIT */
#include "demo-gpu.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define PATTERN_WORD 0x5eed5eedu

static struct {
	CUresult (*init)(unsigned int);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
	CUresult (*ctx_set_current)(CUcontext);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*memset_d32)(CUdeviceptr, unsigned int, size_t);
	CUresult (*htod)(CUdeviceptr, const void *, size_t);
	CUresult (*dtoh)(void *, CUdeviceptr, size_t);
	CUdeviceptr pattern, counter;
} gpu;

static bool load(char *why, size_t len)
{
	const char *name = getenv("STASIS_LIBCUDA");
	void *h = dlopen(name && *name ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		snprintf(why, len, "libcuda.so.1 cannot be loaded");
		return false;
	}
	gpu.init = dlsym(h, "cuInit");
	gpu.device_get = dlsym(h, "cuDeviceGet");
	gpu.primary_ctx_retain = dlsym(h, "cuDevicePrimaryCtxRetain");
	gpu.ctx_set_current = dlsym(h, "cuCtxSetCurrent");
	gpu.mem_alloc = dlsym(h, "cuMemAlloc_v2");
	gpu.memset_d32 = dlsym(h, "cuMemsetD32_v2");
	gpu.htod = dlsym(h, "cuMemcpyHtoD_v2");
	gpu.dtoh = dlsym(h, "cuMemcpyDtoH_v2");
	if (gpu.init && gpu.device_get && gpu.primary_ctx_retain && gpu.ctx_set_current &&
	    gpu.mem_alloc && gpu.memset_d32 && gpu.htod && gpu.dtoh)
		return true;
	snprintf(why, len, "the driver lacks a memory call the demo needs");
	return false;
}

static bool ok(CUresult r, const char *what, char *why, size_t len)
{
	if (r == CUDA_SUCCESS)
		return true;
	snprintf(why, len, "%s failed with CUDA error %d", what, (int)r);
	return false;
}

bool demo_gpu_start(char *why, size_t len)
{
	CUdevice dev;
	CUcontext ctx;

	return load(why, len) && ok(gpu.init(0), "cuInit", why, len) &&
	       ok(gpu.device_get(&dev, 0), "cuDeviceGet", why, len) &&
	       ok(gpu.primary_ctx_retain(&ctx, dev), "cuDevicePrimaryCtxRetain", why, len) &&
	       ok(gpu.ctx_set_current(ctx), "cuCtxSetCurrent", why, len) &&
	       ok(gpu.mem_alloc(&gpu.pattern, DEMO_GPU_PATTERN_BYTES), "cuMemAlloc", why, len) &&
	       ok(gpu.mem_alloc(&gpu.counter, sizeof(uint64_t)), "cuMemAlloc", why, len) &&
	       ok(gpu.memset_d32(gpu.pattern, PATTERN_WORD, DEMO_GPU_PATTERN_BYTES / 4),
		  "cuMemsetD32", why, len);
}

bool demo_gpu_tick(uint64_t value, char *why, size_t len)
{
	uint64_t back = 0, before = 0;

	/* The GPU holds the last value: after a restore it must still be there. */
	if (!ok(gpu.dtoh(&before, gpu.counter, sizeof(before)), "reading the counter", why, len))
		return false;
	if (value > 1 && before != value - 1) {
		snprintf(why, len, "the GPU held counter %llu, expected %llu",
			 (unsigned long long)before, (unsigned long long)value - 1);
		return false;
	}
	if (!ok(gpu.htod(gpu.counter, &value, sizeof(value)), "writing the counter", why, len) ||
	    !ok(gpu.dtoh(&back, gpu.counter, sizeof(back)), "reading the counter", why, len))
		return false;
	return back == value;
}

bool demo_gpu_verify(char *why, size_t len)
{
	uint32_t *host = malloc(DEMO_GPU_PATTERN_BYTES);
	bool good;

	if (!host) {
		snprintf(why, len, "out of host memory");
		return false;
	}
	good = ok(gpu.dtoh(host, gpu.pattern, DEMO_GPU_PATTERN_BYTES), "reading the pattern", why,
		  len);
	for (size_t i = 0; good && i < DEMO_GPU_PATTERN_BYTES / 4; i++) {
		if (host[i] == PATTERN_WORD)
			continue;
		snprintf(why, len, "GPU pattern word %zu is %#x", i, host[i]);
		good = false;
	}
	free(host);
	return good;
}
