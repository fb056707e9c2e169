// SPDX-License-Identifier: MIT
// The physical bound for GPU checkpoints: pinned host<->device copies of
// GIB gibibytes, each way, in GB/s.   bw [GIB]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

static double copy_gbs(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
	cudaEvent_t a, b;
	float ms = 0;

	cudaEventCreate(&a);
	cudaEventCreate(&b);
	cudaMemcpy(dst, src, n, kind); /* warm */
	cudaEventRecord(a);
	cudaMemcpy(dst, src, n, kind);
	cudaEventRecord(b);
	cudaEventSynchronize(b);
	cudaEventElapsedTime(&ms, a, b);
	return (double)n / (ms / 1000.0) / 1e9;
}

int main(int argc, char **argv)
{
	size_t n = (size_t)(argc > 1 ? atof(argv[1]) : 4) * (1ull << 30);
	void *host, *dev;

	if (cudaMallocHost(&host, n) != cudaSuccess || cudaMalloc(&dev, n) != cudaSuccess) {
		fprintf(stderr, "bw: cannot allocate %zu bytes\n", n);
		return 1;
	}
	printf("pinned_h2d_GBps %.1f\n", copy_gbs(dev, host, n, cudaMemcpyHostToDevice));
	printf("pinned_d2h_GBps %.1f\n", copy_gbs(host, dev, n, cudaMemcpyDeviceToHost));
	return 0;
}
