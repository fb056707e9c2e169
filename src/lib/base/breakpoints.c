/* SPDX-License-Identifier: MIT */
#include "breakpoints.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lock.h"
#include "util.h"

#define PROBE_TIMEOUT_MS 2000

/* The child executes this; the parent puts an execute breakpoint on it. */
__attribute__((noinline)) static void breakpoint_target(void)
{
	__asm__ volatile("" ::: "memory");
}

static int wait_with_timeout(pid_t pid, int *status, int timeout_ms)
{
	for (int waited = 0; waited < timeout_ms; waited += 5) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid)
			return 0;
		if (r < 0)
			return -errno;
		usleep(5000);
	}
	return -ETIMEDOUT;
}

static enum hw_breakpoints run_probe(void)
{
#if defined(__x86_64__)
	enum hw_breakpoints result = HW_BREAKPOINTS_UNKNOWN;
	size_t dr0 = offsetof(struct user, u_debugreg[0]);
	size_t dr7 = offsetof(struct user, u_debugreg[7]);
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return HW_BREAKPOINTS_UNKNOWN;
	if (pid == 0) {
		if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0)
			_exit(2);
		raise(SIGSTOP);
		breakpoint_target();
		_exit(0);
	}
	if (wait_with_timeout(pid, &status, PROBE_TIMEOUT_MS) < 0 || !WIFSTOPPED(status))
		goto out;
	/* DR0 = address, DR7 bit 0 = local enable, type execute, length 1. */
	if (ptrace(PTRACE_POKEUSER, pid, (void *)dr0, (void *)breakpoint_target) < 0 ||
	    ptrace(PTRACE_POKEUSER, pid, (void *)dr7, (void *)1UL) < 0)
		goto out;
	if (ptrace(PTRACE_CONT, pid, NULL, NULL) < 0)
		goto out;
	if (wait_with_timeout(pid, &status, PROBE_TIMEOUT_MS) < 0) {
		result = HW_BREAKPOINTS_BROKEN;
		goto out;
	}
	if (WIFSTOPPED(status) && WSTOPSIG(status) == SIGTRAP)
		result = HW_BREAKPOINTS_WORK;
	else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		result = HW_BREAKPOINTS_BROKEN; /* ran straight through it */
out:
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return result;
#else
	return HW_BREAKPOINTS_UNKNOWN;
#endif
}

static void cache_path(char *buf, size_t len)
{
	snprintf(buf, len, "%s/hw-breakpoints", stasis_run_dir());
}

/* The cache is valid for one boot: it stores the boot id with the answer. */
static char *boot_id(void)
{
	char *id = read_file_str("/proc/sys/kernel/random/boot_id", NULL);

	return id ? strip_trailing(id) : strdup("unknown");
}

enum hw_breakpoints hw_breakpoints_probe(bool use_cache)
{
	char path[4096], line[128];
	_cleanup_free_ char *boot = boot_id();
	_cleanup_free_ char *cached = NULL;
	enum hw_breakpoints result;
	FILE *f;

	cache_path(path, sizeof(path));
	if (use_cache && (cached = read_file_str(path, NULL))) {
		int value;

		if (sscanf(cached, "%127s %d", line, &value) == 2 && strcmp(line, boot) == 0 &&
		    value >= HW_BREAKPOINTS_WORK && value <= HW_BREAKPOINTS_BROKEN)
			return (enum hw_breakpoints)value;
	}
	result = run_probe();
	if (result != HW_BREAKPOINTS_UNKNOWN && (f = fopen(path, "we"))) {
		fprintf(f, "%s %d\n", boot, (int)result);
		fclose(f);
	}
	return result;
}
