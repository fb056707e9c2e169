/* SPDX-License-Identifier: MIT */
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

static char *read_all(int fd)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	ssize_t n;

	while (buf) {
		if (len + 1 >= cap) {
			char *bigger = realloc(buf, cap * 2);

			if (!bigger)
				break;
			buf = bigger;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	if (buf)
		buf[len] = '\0';
	return buf;
}

/* argv with stdout into out_fd (-1: with stderr into *out, or /dev/null),
 * stderr into *out when out is given, env added to its environment. */
static int run(const char *const argv[], char *const env[], int out_fd, char **out)
{
	int fds[2] = {-1, -1}, status;
	pid_t pid;

	if (out && pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int e = errno;

		closep(&fds[0]);
		closep(&fds[1]);
		return -e;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(null, STDIN_FILENO);
		dup2(out_fd >= 0 ? out_fd : out ? fds[1] : null, STDOUT_FILENO);
		dup2(out ? fds[1] : null, STDERR_FILENO);
		for (; env && *env; env++)
			putenv(*env);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	if (out) {
		close(fds[1]);
		*out = read_all(fds[0]);
		close(fds[0]);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

int exec_run(const char *const argv[], char **out)
{
	return run(argv, NULL, -1, out);
}

int exec_run_env(const char *const argv[], char *const env[], char **out)
{
	return run(argv, env, -1, out);
}

int exec_run_to(const char *const argv[], int out_fd, char **err_text)
{
	return run(argv, NULL, out_fd, err_text);
}

const char *last_line(char *text)
{
	char *nl;

	if (!text)
		return "";
	strip_trailing(text);
	nl = strrchr(text, '\n');
	return nl ? nl + 1 : text;
}
