/* SPDX-License-Identifier: MIT */
/* The built-in demo workload, a victim in CRIU's zdtm sense: a child counts
 * and sends each value through a pipe; the parent checks that every value
 * is the one after the last, keeps the latest in a state file (an open file
 * at a fixed offset) and appends it to a log. After a restore it goes on
 * checking, so a lost, repeated or corrupted tick fails it. With --cuda the
 * parent also keeps the counter and a checksummed pattern in GPU memory
 * (demo-gpu.c) and checks them as it goes. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "demo-gpu.h"

static volatile sig_atomic_t stop_requested;

static void on_term(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static int open_in(const char *dir, const char *name, int flags)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return open(path, flags | O_CREAT, 0644);
}

static void detach_stdio(void)
{
	int null = open("/dev/null", O_RDWR);

	/* CRIU cannot dump a pipe or terminal whose other end is outside the
	 * tree, so the workload keeps nothing of its starter's. */
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		if (null > 2)
			close(null);
	}
}

static void count(int out, unsigned int tick_ms)
{
	uint64_t counter = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (;;) {
		counter++;
		if (write(out, &counter, sizeof(counter)) != sizeof(counter))
			_exit(0);
		usleep(tick_ms * 1000);
	}
}

#define GPU_VERIFY_EVERY 100

/* The GPU checks for one tick; false after logging why. */
static bool gpu_checks(int log_fd, uint64_t value, bool full)
{
	char why[160];

	if (demo_gpu_tick(value, why, sizeof(why)) &&
	    (!full || demo_gpu_verify(why, sizeof(why)))) {
		if (full)
			dprintf(log_fd, "gpu verified at tick %llu\n", (unsigned long long)value);
		return true;
	}
	dprintf(log_fd, "FAIL: GPU at tick %llu: %s\n", (unsigned long long)value, why);
	return false;
}

int demo_workload_main(int argc, char **argv)
{
	unsigned int tick_ms = argc > 2 ? (unsigned int)atoi(argv[2]) : 20;
	bool cuda = argc > 3 && strcmp(argv[3], "--cuda") == 0;
	struct sigaction sa = {.sa_handler = on_term};
	uint64_t last = 0, value;
	int log_fd, state_fd, fds[2];
	pid_t child;

	if (argc < 2) {
		fprintf(stderr, "usage: stasis __demo-workload DIR [TICK_MS [--cuda]]\n");
		return EXIT_USAGE;
	}
	setsid();
	detach_stdio();
	/* O_APPEND|O_WRONLY: CRIU does not pin the size of such a log file. */
	log_fd = open_in(argv[1], "log", O_WRONLY | O_APPEND);
	state_fd = open_in(argv[1], "state", O_RDWR);
	if (log_fd < 0 || state_fd < 0 || pipe(fds) < 0)
		return EXIT_FAILED;
	child = fork();
	if (child < 0)
		return EXIT_FAILED;
	if (child == 0) {
		close(fds[0]);
		count(fds[1], tick_ms ? tick_ms : 20);
	}
	close(fds[1]);
	if (cuda) {
		char why[160];

		/* After the fork: a child forked from a CUDA process would keep its
		 * parent's /dev/nvidia* references. */
		if (!demo_gpu_start(why, sizeof(why))) {
			dprintf(log_fd, "FAIL: CUDA: %s\n", why);
			kill(child, SIGKILL);
			return EXIT_FAILED;
		}
		dprintf(log_fd, "gpu ready: %u MiB pattern\n", DEMO_GPU_PATTERN_BYTES >> 20);
	}
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	dprintf(log_fd, "start pid %d child %d\n", (int)getpid(), (int)child);
	while (!stop_requested) {
		char state[32];
		ssize_t n = read(fds[0], &value, sizeof(value));

		if (n < 0 && errno == EINTR)
			continue;
		if (n != sizeof(value)) {
			dprintf(log_fd, "FAIL: the counter pipe broke (%zd)\n", n);
			return EXIT_FAILED;
		}
		if (value != last + 1) {
			dprintf(log_fd, "FAIL: expected tick %llu, got %llu\n",
				(unsigned long long)last + 1, (unsigned long long)value);
			kill(child, SIGKILL);
			return EXIT_FAILED;
		}
		if (cuda && !gpu_checks(log_fd, value, value % GPU_VERIFY_EVERY == 0)) {
			kill(child, SIGKILL);
			return EXIT_FAILED;
		}
		last = value;
		snprintf(state, sizeof(state), "%020llu\n", (unsigned long long)value);
		if (pwrite(state_fd, state, strlen(state), 0) < 0)
			return EXIT_FAILED;
		dprintf(log_fd, "tick %llu\n", (unsigned long long)value);
	}
	if (cuda && !gpu_checks(log_fd, last + 1, true)) {
		kill(child, SIGKILL);
		return EXIT_FAILED;
	}
	dprintf(log_fd, "stopped at %llu\n", (unsigned long long)last);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return EXIT_OK;
}
