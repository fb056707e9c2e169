// SPDX-License-Identifier: MIT
// GPU victim: holds a checksummed pattern in N GiB of device memory and a
// device counter that a kernel ticks every few milliseconds. It checks
// itself: every tick must be the one after the last, and on SIGTERM the
// whole buffer is verified against the pattern. Its verdict goes to its log.
//   probe DIR GIB [--children N] [--managed] [--nvml] [--streams] [--fork-idle] [--spread]
// --spread: child i runs on GPU i (modulo the GPUs there are).
// Every pause of its loop longer than 50 ms (a checkpoint's lock) is
// appended to DIR/gaps-PID in microseconds: how long its CUDA calls waited.
// --fork-idle: once CUDA is up, fork a child that never uses CUDA and only
// counts into DIR/idle-PID; it keeps its parent's /dev/nvidia* references.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pattern.cuh"

static volatile sig_atomic_t stop;
static void on_term(int) { stop = 1; }

__global__ void tick(unsigned long long *counter) { (*counter)++; }

static FILE *logfile;

// The wall clock: a container restored through runc comes back in a time
// namespace of CRIU's making, whose monotonic clock leaves out the time
// between dump and restore (seen on the device), so a gap measured on
// CLOCK_MONOTONIC would hide the time the image lay on disk.
static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

// Record a gap of the loop over 50 ms; a restore from an image shows as
// one too (the wall clock ran on meanwhile).
static void note_gap(const char *dir, uint64_t gap)
{
	char path[4096];
	if (gap < 50000)
		return;
	snprintf(path, sizeof(path), "%s/gaps-%d", dir, (int)getpid());
	FILE *f = fopen(path, "a");
	if (f) {
		fprintf(f, "%llu\n", (unsigned long long)gap);
		fclose(f);
	}
}
#define CHECK(x)                                                                       \
	do {                                                                           \
		cudaError_t e_ = (x);                                                  \
		if (e_ != cudaSuccess) {                                               \
			fprintf(logfile, "FAIL: %s: %s\n", #x, cudaGetErrorString(e_));   \
			fflush(logfile);                                                  \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

// Streams, events, pinned host memory and a CUDA graph, each run on a tick.
struct extras {
	cudaStream_t streams[4];
	cudaEvent_t done;
	unsigned long long *pinned;
	cudaGraphExec_t graph;
	unsigned long long *graph_counter;
	unsigned long long graph_expected;
};

static void extras_init(struct extras *x)
{
	cudaGraph_t g;
	for (int i = 0; i < 4; i++)
		CHECK(cudaStreamCreate(&x->streams[i]));
	CHECK(cudaEventCreate(&x->done));
	CHECK(cudaMallocHost(&x->pinned, sizeof(unsigned long long)));
	CHECK(cudaMalloc(&x->graph_counter, sizeof(unsigned long long)));
	CHECK(cudaMemset(x->graph_counter, 0, sizeof(unsigned long long)));
	CHECK(cudaStreamBeginCapture(x->streams[0], cudaStreamCaptureModeGlobal));
	tick<<<1, 1, 0, x->streams[0]>>>(x->graph_counter);
	tick<<<1, 1, 0, x->streams[0]>>>(x->graph_counter);
	CHECK(cudaStreamEndCapture(x->streams[0], &g));
	CHECK(cudaGraphInstantiate(&x->graph, g, 0));
	x->graph_expected = 0;
}

static void extras_step(struct extras *x)
{
	CHECK(cudaGraphLaunch(x->graph, x->streams[1]));
	x->graph_expected += 2;
	CHECK(cudaMemcpyAsync(x->pinned, x->graph_counter, sizeof(*x->pinned), cudaMemcpyDeviceToHost,
			      x->streams[1]));
	CHECK(cudaEventRecord(x->done, x->streams[1]));
	CHECK(cudaEventSynchronize(x->done));
	if (*x->pinned != x->graph_expected) {
		fprintf(logfile, "FAIL: graph counter %llu, expected %llu\n", *x->pinned, x->graph_expected);
		fflush(logfile);
		exit(1);
	}
}

static void idle_child(const char *dir)
{
	char path[4096], line[32];
	snprintf(path, sizeof(path), "%s/idle-%d", dir, (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT, 0644);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (unsigned long long n = 1; !stop; n++) {
		snprintf(line, sizeof(line), "%020llu\n", n);
		if (pwrite(fd, line, strlen(line), 0) < 0)
			_exit(1);
		usleep(10000);
	}
	_exit(0);
}

static int run(const char *dir, double gib, bool managed, bool nvml, bool streams, bool fork_idle)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/log-%d", dir, (int)getpid());
	logfile = fopen(path, "a");
	setvbuf(logfile, NULL, _IOLBF, 0);
	snprintf(path, sizeof(path), "%s/count-%d", dir, (int)getpid());
	int state = open(path, O_RDWR | O_CREAT, 0644);

	if (nvml) {
		// Initialise NVML beside CUDA, as monitoring code does.
		void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
		int (*init)(void) = h ? (int (*)(void))dlsym(h, "nvmlInit_v2") : NULL;
		if (!init || init() != 0) {
			fprintf(logfile, "FAIL: NVML init\n");
			return 1;
		}
	}
	size_t n = (size_t)(gib * (1ull << 30)) / sizeof(uint64_t);
	uint64_t seed = 0x5eed0000ull + (uint64_t)getpid();
	uint64_t *buf;
	unsigned long long *counter, *bad, host = 0, expected = 0;
	if (managed)
		CHECK(cudaMallocManaged(&buf, n * sizeof(uint64_t)));
	else
		CHECK(cudaMalloc(&buf, n * sizeof(uint64_t)));
	CHECK(cudaMalloc(&counter, sizeof(*counter)));
	CHECK(cudaMalloc(&bad, sizeof(*bad)));
	CHECK(cudaMemset(counter, 0, sizeof(*counter)));
	fill<<<1024, 256>>>(buf, n, seed);
	CHECK(cudaDeviceSynchronize());
	struct extras x;
	if (streams)
		extras_init(&x);
	if (fork_idle && fork() == 0)
		idle_child(dir);
	fprintf(logfile, "ready pid %d %.2f GiB\n", (int)getpid(), gib);
	uint64_t last = now_us();
	while (!stop) {
		tick<<<1, 1>>>(counter);
		CHECK(cudaMemcpy(&host, counter, sizeof(host), cudaMemcpyDeviceToHost));
		if (host != ++expected) {
			fprintf(logfile, "FAIL: device counter %llu, expected %llu\n", host, expected);
			return 1;
		}
		if (streams)
			extras_step(&x);
		char line[32];
		snprintf(line, sizeof(line), "%020llu\n", host);
		if (pwrite(state, line, strlen(line), 0) < 0)
			return 1;
		// Since the last iteration ended, less the 5 ms sleep between.
		uint64_t t = now_us();
		note_gap(dir, t > last + 5000 ? t - last - 5000 : 0);
		last = t;
		usleep(5000);
	}
	CHECK(cudaMemset(bad, 0, sizeof(*bad)));
	verify<<<1024, 256>>>(buf, n, seed, bad);
	unsigned long long nbad = 0;
	CHECK(cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost));
	if (nbad) {
		fprintf(logfile, "FAIL: %llu words of the pattern changed\n", nbad);
		return 1;
	}
	fprintf(logfile, "PASS: %llu ticks, %.2f GiB pattern intact\n", host, gib);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: probe DIR GIB [--children N] [--managed] [--nvml] [--streams] [--fork-idle]\n");
		return 2;
	}
	int children = 0;
	bool managed = false, nvml = false, streams = false, fork_idle = false, spread = false;
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--children") && i + 1 < argc)
			children = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--managed"))
			managed = true;
		else if (!strcmp(argv[i], "--nvml"))
			nvml = true;
		else if (!strcmp(argv[i], "--streams"))
			streams = true;
		else if (!strcmp(argv[i], "--fork-idle"))
			fork_idle = true;
		else if (!strcmp(argv[i], "--spread"))
			spread = true;
	}
	setsid();
	int null = open("/dev/null", O_RDWR);
	dup2(null, 0), dup2(null, 1), dup2(null, 2);
	struct sigaction sa = {};
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	double gib = atof(argv[2]);
	if (children == 0)
		return run(argv[1], gib, managed, nvml, streams, fork_idle);
	// A parent that forks CUDA children (it never touches CUDA itself).
	pid_t kids[64];
	for (int i = 0; i < children && i < 64; i++) {
		kids[i] = fork();
		if (kids[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			int ngpus = 1;
			if (spread && cudaGetDeviceCount(&ngpus) == cudaSuccess && ngpus > 0)
				cudaSetDevice(i % ngpus);
			return run(argv[1], gib, managed, nvml, streams, fork_idle);
		}
	}
	while (!stop)
		pause();
	int failed = 0;
	for (int i = 0; i < children && i < 64; i++) {
		int status;
		kill(kids[i], SIGTERM);
		waitpid(kids[i], &status, 0);
		failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	return failed ? 1 : 0;
}
