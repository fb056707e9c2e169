// SPDX-License-Identifier: MIT
// The checksummed pattern the GPU probes fill their memory with and check
// after a restore: word i of a buffer is (i * golden ratio) ^ seed.
#pragma once
#include <stdint.h>

__global__ void fill(uint64_t *buf, size_t n, uint64_t seed)
{
	for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		buf[i] = (i * 0x9E3779B97F4A7C15ull) ^ seed;
}

__global__ void verify(const uint64_t *buf, size_t n, uint64_t seed, unsigned long long *bad)
{
	for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		if (buf[i] != ((i * 0x9E3779B97F4A7C15ull) ^ seed))
			atomicAdd(bad, 1ull);
}
