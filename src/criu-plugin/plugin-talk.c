/* SPDX-License-Identifier: MIT */
/* The plugin's side of the plugin channel (src/lib/gpu/plugin-channel.c
 * has stasis's): one conversation per GPU step, in which stasis names the
 * CUDA restore threads to wake, the plugin wakes only those (CRIU is the
 * tracer of every thread, so only CRIU's process can), stasis does the GPU
 * work, and the plugin stops them again. The talk, one message each way:
 *   plugin: the request ("pause ROOT", "checkpoint ROOT",
 *           "resume restore PID...")
 *   stasis: "wake TID..."            (none: nothing more to do)
 *   plugin: "go"                     (or "abort ERRNO" when a wake failed)
 *   stasis: "ok" | "fail MESSAGE" */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plugin-wire.h"
#include "plugin.h"

/* More restore threads than a tree of processes CRIU can hold. */
#define MAX_WOKEN 8192

/* CRIU's logger, where the CRIU that loaded the plugin exports it. */
extern void print_on_level(unsigned int loglevel, const char *format, ...) __attribute__((weak));

void plugin_log(unsigned int level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (!print_on_level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	print_on_level(level, "stasis: %s\n", line);
}

struct parked {
	pid_t tid;
	uint64_t mask; /* the thread's signal mask before it was woken */
	bool woken;
};

int plugin_connect_stasis(void)
{
	const char *path = getenv("STASIS_PLUGIN_SOCKET");
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd;

	/* A helper of the plugin's own: one conversation after another. */
	if (plugin_helper_fd() >= 0) {
		fd = fcntl(plugin_helper_fd(), F_DUPFD_CLOEXEC, 0);
		return fd < 0 ? -errno : fd;
	}
	if (!path || !*path || strlen(path) >= sizeof(addr.sun_path))
		return -ENOENT;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	strcpy(addr.sun_path, path);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

/* Let only this thread run: every signal but SIGTRAP blocked, no syscall
 * stops (CRIU's cuda plugin does the same). */
static int wake(struct parked *t)
{
	uint64_t block = ~(1ULL << (SIGTRAP - 1));

	if (ptrace(PTRACE_GETSIGMASK, t->tid, sizeof(t->mask), &t->mask) < 0 ||
	    ptrace(PTRACE_SETSIGMASK, t->tid, sizeof(block), &block) < 0 ||
	    ptrace(PTRACE_SETOPTIONS, t->tid, NULL, 0) < 0 ||
	    ptrace(PTRACE_CONT, t->tid, NULL, 0) < 0)
		return -errno;
	t->woken = true;
	return 0;
}

/* Back into a ptrace-stop, as CRIU left it. A signal that arrives first
 * is delivered on the way. */
/* Whether tid is gone or dying: a process killed while its restore thread
 * ran (a job at its end) takes its other threads along, and its leader's
 * death is not reported to the tracer until CRIU reaps them all. */
static bool thread_ended(pid_t tid)
{
	char path[64], line[512], *paren;
	FILE *f;
	bool ended = true;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)tid);
	f = fopen(path, "re");
	if (f && fgets(line, sizeof(line), f) && (paren = strrchr(line, ')')))
		ended = paren[2] == 'Z' || paren[2] == 'X';
	if (f)
		fclose(f);
	return ended;
}

static int park(struct parked *t)
{
	int status;

	if (!t->woken)
		return 0;
	if (ptrace(PTRACE_INTERRUPT, t->tid, NULL, 0) < 0)
		return -errno;
	for (;;) {
		pid_t got = waitpid(t->tid, &status, __WALL | WNOHANG);

		if (got < 0)
			return -errno;
		if (got == 0) {
			if (thread_ended(t->tid))
				return -ESRCH;
			usleep(500);
			continue;
		}
		if (!WIFSTOPPED(status))
			return -ESRCH;
		if (status >> 16 == PTRACE_EVENT_STOP)
			break;
		if (ptrace(PTRACE_CONT, t->tid, NULL, (void *)(long)WSTOPSIG(status)) < 0)
			return -errno;
	}
	t->woken = false;
	if (ptrace(PTRACE_SETOPTIONS, t->tid, NULL,
		   PTRACE_O_TRACESYSGOOD | PTRACE_O_SUSPEND_SECCOMP) < 0 &&
	    ptrace(PTRACE_SETOPTIONS, t->tid, NULL, PTRACE_O_TRACESYSGOOD) < 0)
		return -errno;
	return ptrace(PTRACE_SETSIGMASK, t->tid, sizeof(t->mask), &t->mask) < 0 ? -errno : 0;
}

static size_t parse_tids(const char *msg, struct parked *out, size_t max)
{
	size_t n = 0;
	char *end;

	for (const char *p = msg + strlen("wake"); n < max; p = end) {
		long tid = strtol(p, &end, 10);

		if (end == p)
			break;
		out[n++] = (struct parked){.tid = (pid_t)tid};
	}
	return n;
}

int plugin_exchange(int fd, const char *opening, char *answer, size_t len)
{
	static struct parked threads[MAX_WOKEN];
	size_t n;
	int r, stuck = 0;

	r = wire_say(fd, opening);
	if (r == 0)
		r = wire_hear(fd, answer, len);
	if (r < 0)
		return r;
	if (strncmp(answer, "wake", 4) != 0)
		return 1; /* stasis could not even say which threads */
	n = parse_tids(answer, threads, MAX_WOKEN);
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n && r == 0; i++)
		r = wake(&threads[i]);
	if (r < 0) {
		char abort_msg[32];

		snprintf(abort_msg, sizeof(abort_msg), "abort %d", -r);
		wire_say(fd, abort_msg);
	} else {
		r = wire_say(fd, "go");
		if (r == 0)
			r = wire_hear(fd, answer, len);
		if (r == 0 && strncmp(answer, "ok", 2) != 0)
			r = 1;
	}
	for (size_t i = 0; i < n; i++)
		if (park(&threads[i]) < 0)
			stuck = -EIO;
	return r ? r : stuck;
}
