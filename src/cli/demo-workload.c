/* SPDX-License-Identifier: MIT */
/* The built-in demo workload, a victim in CRIU's zdtm sense: a child counts
 * and sends each value through a pipe; the parent checks that every value
 * is the one after the last, keeps the latest in a state file (an open file
 * at a fixed offset) and appends it to a log. After a restore it goes on
 * checking, so a lost, repeated or corrupted tick fails it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

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

int demo_workload_main(int argc, char **argv)
{
	unsigned int tick_ms = argc > 2 ? (unsigned int)atoi(argv[2]) : 20;
	struct sigaction sa = {.sa_handler = on_term};
	uint64_t last = 0, value;
	int log_fd, state_fd, fds[2];
	pid_t child;

	if (argc < 2) {
		fprintf(stderr, "usage: stasis __demo-workload DIR [TICK_MS]\n");
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
		last = value;
		snprintf(state, sizeof(state), "%020llu\n", (unsigned long long)value);
		if (pwrite(state_fd, state, strlen(state), 0) < 0)
			return EXIT_FAILED;
		dprintf(log_fd, "tick %llu\n", (unsigned long long)value);
	}
	dprintf(log_fd, "stopped at %llu\n", (unsigned long long)last);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return EXIT_OK;
}
