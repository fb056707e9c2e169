/* SPDX-License-Identifier: MIT */
/* What cuInit and nvmlInit cost in a fresh process, with the GPU idle and
 * while another process holds it open; and what opening /dev/nvidia* costs.
 * A one-off probe behind docs/BENCHMARKS.md ("Where the restore's time goes"):
 *   gcc -O2 -o gpuopen gpuopen.c -ldl && ./gpuopen */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static void opens(const char *what)
{
	double t = now();
	int a = open("/dev/nvidiactl", O_RDWR), b = open("/dev/nvidia0", O_RDWR);
	printf("%-34s %7.1f ms (%d %d)\n", what, now() - t, a, b);
	close(b);
	close(a);
	fflush(stdout);
}
static void child(const char *what, const char *lib, const char *sym)
{
	if (fork() == 0) {
		double t = now();
		void *h = dlopen(lib, RTLD_NOW);
		int (*f)(unsigned) = h ? dlsym(h, sym) : NULL;
		int r = f ? f(0) : -1;
		printf("%-34s %7.1f ms (r=%d)\n", what, now() - t, r);
		fflush(stdout);
		_exit(0);
	}
	wait(NULL);
}
int main(void)
{
	opens("open ctl+0, idle GPU");
	opens("again at once");
	sleep(2);
	opens("again after 2 s");
	child("cuInit, idle", "libcuda.so.1", "cuInit");
	child("nvmlInit, idle", "libnvidia-ml.so.1", "nvmlInit_v2");
	int held = open("/dev/nvidia0", O_RDWR), hc = open("/dev/nvidiactl", O_RDWR);
	printf("holding /dev/nvidia0: %d %d\n", held, hc);
	child("cuInit, held", "libcuda.so.1", "cuInit");
	child("nvmlInit, held", "libnvidia-ml.so.1", "nvmlInit_v2");
	opens("open ctl+0, held");
	close(held);
	close(hc);
	child("cuInit, after release", "libcuda.so.1", "cuInit");
	return 0;
}
