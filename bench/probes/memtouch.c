/* SPDX-License-Identifier: MIT */
/* How fast fresh anonymous memory is first touched: one thread against
 * sixteen, 4 KiB pages against MADV_HUGEPAGE, fresh against freed pages.
 * A one-off probe behind docs/BENCHMARKS.md ("Where the restore's time goes"):
 *   gcc -O2 -pthread -o memtouch memtouch.c && ./memtouch   (needs 32 GiB) */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#define GB (1ull << 30)
static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}
struct part {
	char *p;
	size_t n;
};
static void *touch(void *a)
{
	struct part *x = a;
	for (size_t i = 0; i < x->n; i += 4096)
		x->p[i] = 1;
	return NULL;
}
static double run(const char *what, size_t bytes, int threads, int huge, int keep, char **out)
{
	char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (huge)
		madvise(p, bytes, MADV_HUGEPAGE);
	pthread_t t[64];
	struct part x[64];
	double s = now();
	for (int i = 0; i < threads; i++) {
		x[i] = (struct part){p + bytes / threads * i, bytes / threads};
		pthread_create(&t[i], NULL, touch, &x[i]);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	double e = now() - s;
	printf("%-40s %5.2f GB/s (%.2f s)\n", what, bytes / e / 1e9, e);
	fflush(stdout);
	if (keep)
		*out = p;
	else
		munmap(p, bytes);
	return e;
}
int main(void)
{
	char *k;
	run("fresh 8G 1 thread", 8 * GB, 1, 0, 0, NULL);
	run("again 8G 1 thread (freed pages)", 8 * GB, 1, 0, 0, NULL);
	run("fresh 16G 16 threads", 16 * GB, 16, 0, 1, &k);
	run("fresh 8G 1 thread (others held)", 8 * GB, 1, 0, 0, NULL);
	munmap(k, 16 * GB);
	run("8G 1 thread after 16G freed", 8 * GB, 1, 0, 0, NULL);
	run("fresh 24G 16 threads", 24 * GB, 16, 0, 1, &k);
	run("fresh 8G 1 thread MADV_HUGEPAGE", 8 * GB, 1, 1, 0, NULL);
	munmap(k, 24 * GB);
	run("8G 1 thread MADV_HUGEPAGE after free", 8 * GB, 1, 1, 0, NULL);
	run("8G 1 thread after 24G freed", 8 * GB, 1, 0, 0, NULL);
	return 0;
}
