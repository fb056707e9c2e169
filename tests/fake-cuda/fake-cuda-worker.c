/* SPDX-License-Identifier: MIT */
/* A "CUDA" process for the fake driver: it registers itself as running and
 * counts only while its state says running, the way a real process blocks
 * in its CUDA calls while locked. With N children, each does the same.
 *   fake-cuda-worker DIR [CHILDREN]
 * DIR/count-PID holds each process's counter; DIR/log its events.
 * Leftover device references, as a real CUDA process's forked child has:
 *   FAKE_WORKER_DEVFILE=PATH[:PATH...]   open each before forking and keep it open
 *   FAKE_WORKER_DEVMAP=PATH    map PATH shared as well
 *   FAKE_WORKER_IDLE_CHILD=1   fork a child that never "uses CUDA"
 * A thread of a given name beside the counting one (a framework's helper):
 *   FAKE_WORKER_THREAD=NAME
 *   FAKE_WORKER_THREAD_ALL=1   the children start that thread too (ranks)
 * A process that escapes CRIU's freeze (a hostile job):
 *   FAKE_WORKER_ESCAPE=1       the main thread (the fake driver's restore
 *                              thread) starts a thread while it is traced
 *                              and locked: woken for the GPU checkpoint
 * Memory for CRIU to dump, checked while it counts:
 *   FAKE_WORKER_HEAP_MB=N      each CUDA process fills N MiB with a pattern
 *                              and checks a page of it each tick; a page
 *                              found changed is written to DIR/bad-PID */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake-state.h"

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

/* A second thread, as every real CUDA process has (JAX has ~95): it only
 * sleeps, so that the tests can see where it stands during a restore. */
static void *idle_thread(void *arg)
{
	(void)arg;
	while (!stop)
		usleep(10000);
	return NULL;
}

static unsigned char heap_byte(size_t i)
{
	return (unsigned char)((i * 2654435761u) >> 11);
}

static unsigned char *heap_fill(size_t *len)
{
	const char *mb = getenv("FAKE_WORKER_HEAP_MB");
	unsigned char *heap;

	*len = mb ? (size_t)atoi(mb) << 20 : 0;
	if (!*len || !(heap = malloc(*len)))
		return NULL;
	for (size_t i = 0; i < *len; i++)
		heap[i] = heap_byte(i);
	return heap;
}

/* Checks the tick's page of the heap; false, and a note in DIR, if changed. */
static bool heap_intact(const char *dir, const unsigned char *heap, size_t len,
			unsigned long long tick)
{
	size_t page = (size_t)(tick % (len / 4096)) * 4096;
	char path[4096];
	FILE *f;

	for (size_t i = page; i < page + 4096; i++) {
		if (heap[i] == heap_byte(i))
			continue;
		snprintf(path, sizeof(path), "%s/bad-%d", dir, (int)getpid());
		f = fopen(path, "w");
		if (f) {
			fprintf(f, "heap byte %zu is %u, not %u\n", i, heap[i], heap_byte(i));
			fclose(f);
		}
		return false;
	}
	return true;
}

static bool traced(void)
{
	char line[256];
	int tracer = 0;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "TracerPid: %d", &tracer);
	if (f)
		fclose(f);
	return tracer != 0;
}

/* FAKE_WORKER_ESCAPE: a thread started behind the tracer's back. */
static void escape_once(void)
{
	static bool done;
	pthread_t t;

	if (done || !getenv("FAKE_WORKER_ESCAPE") || fake_state_read(getpid()) != 1 || !traced())
		return;
	done = true;
	if (pthread_create(&t, NULL, idle_thread, NULL) == 0)
		pthread_detach(t);
}

static int run(const char *dir)
{
	size_t heap_len;
	unsigned char *heap = heap_fill(&heap_len);
	unsigned long long tick = 0;
	pthread_t idle;
	char path[4096], buf[32];
	unsigned long long counter = 0;
	int fd;

	fake_state_write(getpid(), 0); /* register as a running CUDA process */
	if (pthread_create(&idle, NULL, idle_thread, NULL) != 0)
		return 1;
	snprintf(path, sizeof(path), "%s/count-%d", dir, (int)getpid());
	fd = open(path, O_RDWR | O_CREAT, 0644);
	if (fd < 0)
		return 1;
	while (!stop) {
		if (heap && !heap_intact(dir, heap, heap_len, tick++))
			return 1;
		escape_once();
		if (fake_state_read(getpid()) == 0) {
			counter++;
			snprintf(buf, sizeof(buf), "%020llu\n", counter);
			if (pwrite(fd, buf, strlen(buf), 0) < 0)
				return 1;
		}
		usleep(10000);
	}
	return 0;
}

static void hold_device_refs(void)
{
	const char *file = getenv("FAKE_WORKER_DEVFILE"), *map = getenv("FAKE_WORKER_DEVMAP");

	char paths[4096], *save = NULL;

	snprintf(paths, sizeof(paths), "%s", file ? file : "");
	for (char *p = strtok_r(paths, ":", &save); p; p = strtok_r(NULL, ":", &save))
		if (open(p, O_RDWR) < 0)
			exit(3);
	if (map && *map) {
		int fd = open(map, O_RDWR);

		if (fd < 0 ||
		    mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED)
			exit(3);
		close(fd);
	}
}

static void *named_thread(void *name)
{
	prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
	while (!stop)
		usleep(10000);
	return NULL;
}

/* Started before the fork: the children have no such thread. */
static void start_named_thread(void)
{
	const char *name = getenv("FAKE_WORKER_THREAD");
	pthread_t thread;

	if (name && *name && pthread_create(&thread, NULL, named_thread, (void *)name) != 0)
		exit(3);
}

int main(int argc, char **argv)
{
	int children = argc > 2 ? atoi(argv[2]) : 0;
	struct sigaction sa = {.sa_handler = on_term};
	int null = open("/dev/null", O_RDWR);

	if (argc < 2)
		return 2;
	setsid();
	dup2(null, 0);
	dup2(null, 1);
	dup2(null, 2);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	hold_device_refs();
	start_named_thread();
	if (getenv("FAKE_WORKER_IDLE_CHILD") && *getenv("FAKE_WORKER_IDLE_CHILD") && fork() == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		while (!stop)
			usleep(10000);
		return 0;
	}
	for (int i = 0; i < children; i++) {
		if (fork() == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getenv("FAKE_WORKER_THREAD_ALL"))
				start_named_thread();
			return run(argv[1]);
		}
	}
	run(argv[1]);
	kill(0, SIGTERM);
	while (wait(NULL) > 0)
		;
	return 0;
}
