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
#include <dirent.h>
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

/* The longest stasis may take for one GPU step: the driver's own calls
 * have no deadline, and the checkpoint of a GPU's whole memory took 136 s
 * (113 GB, one H200); a step that never ends must not hold CRIU, and the
 * frozen tree, for ever. */
#define STEP_DEADLINE_S 900

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

/* How long a woken thread may take to stop again once the GPU step is
 * done: a restore thread that does not (one kept in an uninterruptible
 * wait by its own process) would hold CRIU, and the frozen tree, for ever. */
#define PARK_DEADLINE_MS 30000

struct parked {
	pid_t tid;
	uint64_t mask; /* the thread's signal mask before it was woken */
	bool woken;
	pid_t *tasks; /* its process's threads and children, when woken */
	size_t ntasks;
};

int plugin_woken_last;

/* Every answer of stasis's within STEP_DEADLINE_S. */
static int with_deadline(int fd)
{
	struct timeval tv = {.tv_sec = STEP_DEADLINE_S};

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

int plugin_connect_stasis(void)
{
	const char *path = plugin_setting("STASIS_PLUGIN_SOCKET");
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd;

	/* A helper of the plugin's own: one conversation after another (a
	 * socket's receive timeout is the socket's, shared by its dups). */
	if (plugin_helper_fd() >= 0) {
		fd = fcntl(plugin_helper_fd(), F_DUPFD_CLOEXEC, 0);
		return fd < 0 ? -errno : with_deadline(fd);
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
	return with_deadline(fd);
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
	int status, waited_ms = 0;

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
			if (++waited_ms > PARK_DEADLINE_MS * 2) {
				plugin_log(PLUGIN_LOG_ERROR,
					   "thread %d did not stop again after the GPU step: its "
					   "process is killed",
					   (int)t->tid);
				kill(t->tid, SIGKILL);
				return -ETIMEDOUT;
			}
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

bool pid_list_push(struct pid_list *l, pid_t pid)
{
	if (l->n == l->cap) {
		size_t cap = l->cap * 2 + 64;
		pid_t *grown = realloc(l->pids, cap * sizeof(*grown));

		if (!grown)
			return false;
		l->pids = grown;
		l->cap = cap;
	}
	l->pids[l->n++] = pid;
	return true;
}

static int compare_pids(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

	return (x > y) - (x < y);
}

/* The threads and children of tid's process, sorted: what a woken restore
 * thread could add behind CRIU's back (CRIU listed them once, when it
 * froze the tree, and dumps only those). NULL with *n 0 when unreadable. */
static pid_t *process_tasks(pid_t tid, size_t *n)
{
	char path[64], line[256];
	struct pid_list tasks = {0};
	long tgid = 0, child;
	struct dirent *de;
	FILE *f;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "Tgid: %ld", &tgid);
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "/proc/%ld/task", tgid);
	d = tgid > 0 ? opendir(path) : NULL;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (!pid_list_push(&tasks, (pid_t)atol(de->d_name)))
			break;
		snprintf(path, sizeof(path), "/proc/%ld/task/%s/children", tgid, de->d_name);
		f = fopen(path, "re");
		while (f && fscanf(f, "%ld", &child) == 1 && pid_list_push(&tasks, (pid_t)child))
			;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	if (tasks.pids)
		qsort(tasks.pids, tasks.n, sizeof(*tasks.pids), compare_pids);
	*n = tasks.n;
	return tasks.pids;
}

/* Whether every task of now was there before (both sorted). */
static bool no_new_task(const pid_t *before, size_t nb, const pid_t *now, size_t nn)
{
	for (size_t i = 0; i < nn; i++)
		if (!bsearch(&now[i], before, nb, sizeof(*before), compare_pids))
			return false;
	return true;
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

int plugin_exchange(int fd, const char *opening, char *answer, size_t len, bool frozen_shape)
{
	static struct parked threads[MAX_WOKEN];
	size_t n;
	int r, stuck = 0;

	plugin_woken_last = 0;
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
	for (size_t i = 0; i < n && r == 0; i++) {
		if (frozen_shape)
			threads[i].tasks = process_tasks(threads[i].tid, &threads[i].ntasks);
		r = wake(&threads[i]);
	}
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
	/* A thread or process made while its restore thread ran would be
	 * left out of the dump, and would run through it unseen. */
	for (size_t i = 0; frozen_shape && i < n; i++) {
		size_t nnow;
		pid_t *now = process_tasks(threads[i].tid, &nnow);

		if (!stuck && !no_new_task(threads[i].tasks, threads[i].ntasks, now, nnow)) {
			plugin_log(PLUGIN_LOG_ERROR,
				   "the process of thread %d made a thread or a process during the "
				   "GPU step",
				   (int)threads[i].tid);
			stuck = -EPERM;
		}
		free(now);
		free(threads[i].tasks);
		threads[i].tasks = NULL;
	}
	if (r == 0 && !stuck)
		plugin_woken_last = (int)n;
	return r ? r : stuck;
}
