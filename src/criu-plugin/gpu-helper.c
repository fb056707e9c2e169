/* SPDX-License-Identifier: MIT */
/* stasis's GPU helper for a CRIU that stasis did not start: runc, podman
 * or containerd run `criu swrk` themselves, and an operator may run criu
 * dump and criu restore by hand. Without stasis's socket in the
 * environment, the plugin starts `stasis criu-helper` (the stasis binary
 * of the same installation: PREFIX/bin/stasis beside this plugin's
 * PREFIX/lib/stasis/criu) and talks to it over a socket pair as it would
 * to stasis: the helper finds the tree's CUDA processes and does the GPU
 * steps, with the driver loaded in it and never in CRIU, which forks the
 * restored tree. The helper is no child of CRIU's (CRIU reaps and counts
 * its children at restore): it is started through a child that exits at
 * once, and it ends when CRIU closes the socket. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plugin.h"

#define HELPER_FD 3

static int helper_fd = -1;

/* The stasis binary of this plugin's installation, into path: root's,
 * and changeable by no one else (CRIU runs it as root). */
static int helper_binary(char *path, size_t len)
{
	char plugin[PATH_MAX], *dir;
	struct stat st;
	Dl_info info;

	if (!dladdr((void *)helper_binary, &info) || !info.dli_fname ||
	    !realpath(info.dli_fname, plugin))
		return -ENOENT;
	/* PREFIX/lib/stasis/criu/stasis_nvidia.so -> PREFIX */
	dir = dirname(dirname(dirname(dirname(plugin))));
	if ((size_t)snprintf(path, len, "%s/bin/stasis", dir) >= len)
		return -ENAMETOOLONG;
	if (stat(path, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return -EPERM;
	return 0;
}

/* Every descriptor from first on closed, where close_range is missing too. */
static void close_from(int first)
{
	if (syscall(SYS_close_range, first, ~0U, 0) == 0)
		return;
	for (int fd = first; fd < 65536; fd++)
		close(fd);
}

/* In the child of a child: the helper, its end of the socket as fd 3,
 * /dev/null as its standard streams (a runtime's container output is no
 * place for it, and a pipe there would keep the runtime waiting) and none
 * of CRIU's other descriptors. */
static void exec_helper(const char *path, int end)
{
	char *argv[] = {(char *)"stasis", (char *)"criu-helper", (char *)"3", NULL};
	int high = fcntl(end, F_DUPFD, 64), null = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (high < 0 || null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 ||
	    dup2(high, HELPER_FD) < 0)
		_exit(127);
	close_from(HELPER_FD + 1);
	execv(path, argv);
	_exit(127);
}

int plugin_helper_start(void)
{
	char path[PATH_MAX];
	int sv[2], r = helper_binary(path, sizeof(path)), status;
	pid_t child;

	if (r < 0) {
		plugin_log(PLUGIN_LOG_WARN, "no GPU helper (%s/bin/stasis: %s): GPU steps off",
			   "PREFIX", strerror(-r));
		return r;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	child = fork();
	if (child < 0) {
		r = -errno;
		close(sv[0]);
		close(sv[1]);
		return r;
	}
	if (child == 0) {
		/* A session of its own: a Ctrl-C meant for CRIU's process group
		 * must not kill the helper in the middle of a GPU step. */
		close(sv[0]);
		setsid();
		if (fork() == 0)
			exec_helper(path, sv[1]);
		_exit(0);
	}
	close(sv[1]);
	waitpid(child, &status, 0);
	helper_fd = sv[0];
	plugin_log(PLUGIN_LOG_INFO, "GPU helper %s started", path);
	return 0;
}

int plugin_helper_fd(void)
{
	return helper_fd;
}

void plugin_helper_stop(void)
{
	if (helper_fd < 0)
		return;
	close(helper_fd);
	helper_fd = -1;
}
