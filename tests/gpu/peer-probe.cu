// SPDX-License-Identifier: MIT
// A process on two GPUs, for the driver's limits on them: it allocates on
// GPU 0 and GPU 1 as told, fills every buffer with a checksummed pattern,
// enables peer access between the GPUs (unless --no-peer) and copies 1 MiB
// from GPU 0 to GPU 1 every 20 ms, checking each copy. On SIGTERM it
// verifies every buffer and prints "verdict: ok" or "verdict: BAD ...".
//   peer-probe READY_FILE [--no-peer] [--async] SPEC0 SPEC1
// SPECn: MIBxCOUNT allocations on GPU n ("1024x1", "256x4"), or "0".
// --async: allocate from the stream-ordered pool (cudaMallocAsync).
#include <cuda_runtime.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pattern.cuh"

static volatile sig_atomic_t stop;
static void on_term(int) { stop = 1; }

#define MAX_BUFS 64
struct buffer {
	int dev;
	uint64_t *ptr;
	size_t words;
	uint64_t seed;
};
static struct buffer bufs[MAX_BUFS];
static int nbufs;

#define CHECK(call)                                                                       \
	do {                                                                              \
		cudaError_t e_ = (call);                                                  \
		if (e_ != cudaSuccess) {                                                  \
			printf("verdict: BAD %s: %s\n", #call, cudaGetErrorString(e_));   \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

static void allocate(int dev, const char *spec, bool async)
{
	unsigned long mib = 0, count = 1;

	if (sscanf(spec, "%lux%lu", &mib, &count) < 1 || mib == 0)
		return;
	CHECK(cudaSetDevice(dev));
	for (unsigned long i = 0; i < count && nbufs < MAX_BUFS; i++) {
		struct buffer *b = &bufs[nbufs];

		b->dev = dev;
		b->words = (size_t)mib << 17;
		b->seed = 0x5eed0000ull + (uint64_t)nbufs;
		if (async)
			CHECK(cudaMallocAsync((void **)&b->ptr, b->words * 8, 0));
		else
			CHECK(cudaMalloc((void **)&b->ptr, b->words * 8));
		fill<<<1024, 256>>>(b->ptr, b->words, b->seed);
		nbufs++;
	}
	CHECK(cudaDeviceSynchronize());
}

static unsigned long long verify_all(void)
{
	unsigned long long total = 0, *bad;

	for (int i = 0; i < nbufs; i++) {
		CHECK(cudaSetDevice(bufs[i].dev));
		CHECK(cudaMallocManaged((void **)&bad, sizeof(*bad)));
		*bad = 0;
		verify<<<1024, 256>>>(bufs[i].ptr, bufs[i].words, bufs[i].seed, bad);
		CHECK(cudaDeviceSynchronize());
		total += *bad;
		CHECK(cudaFree(bad));
	}
	return total;
}

int main(int argc, char **argv)
{
	bool peer = true, async = false;
	const char *ready, *spec[2];
	int a = 2, copies = 0;
	uint64_t *src, *dst, *host;
	size_t words = 1 << 17;

	if (argc < 4)
		return 2;
	ready = argv[1];
	for (; a < argc && argv[a][0] == '-'; a++) {
		peer = peer && strcmp(argv[a], "--no-peer") != 0;
		async = async || strcmp(argv[a], "--async") == 0;
	}
	if (argc - a != 2)
		return 2;
	spec[0] = argv[a];
	spec[1] = argv[a + 1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGTERM, on_term);
	for (int d = 0; d < 2 && peer; d++) {
		CHECK(cudaSetDevice(d));
		CHECK(cudaDeviceEnablePeerAccess(1 - d, 0));
	}
	allocate(0, spec[0], async);
	allocate(1, spec[1], async);
	CHECK(cudaSetDevice(0));
	CHECK(cudaMalloc((void **)&src, words * 8));
	fill<<<256, 256>>>(src, words, 42);
	CHECK(cudaSetDevice(1));
	CHECK(cudaMalloc((void **)&dst, words * 8));
	CHECK(cudaMallocHost((void **)&host, words * 8));
	fclose(fopen(ready, "w"));
	printf("ready: peer %s, GPU 0 %s, GPU 1 %s, %d buffers\n", peer ? "on" : "off", spec[0],
	       spec[1], nbufs);
	while (!stop) {
		struct timespec pause = {0, 20 * 1000 * 1000};

		CHECK(cudaMemcpyPeer(dst, 1, src, 0, words * 8));
		CHECK(cudaMemcpy(host, dst, words * 8, cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < words; i += 4099)
			if (host[i] != ((i * 0x9E3779B97F4A7C15ull) ^ 42)) {
				printf("verdict: BAD copy %d word %zu\n", copies, i);
				return 1;
			}
		copies++;
		nanosleep(&pause, NULL);
	}
	unsigned long long bad = verify_all();
	if (bad)
		printf("verdict: BAD %llu words differ after %d copies\n", bad, copies);
	else
		printf("verdict: ok (%d buffers, %d copies)\n", nbufs, copies);
	return bad != 0;
}
