/* SPDX-License-Identifier: MIT */
/* stasis run [--] COMMAND...: start a job ready to be checkpointed, in a
 * session of its own, with the settings its NCCL ranks need. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "nccl.h"
#include "util.h"

/* Each setting into the environment, said once on stderr; under the
 * interposer, which takes the communicators apart, NCCL keeps its fast
 * transports. */
static int apply_settings(bool interposer)
{
	size_t n;
	const struct nccl_setting *s = nccl_settings(&n);

	for (size_t i = 0; i < n; i++) {
		const char *old = getenv(s[i].name);

		if (interposer && s[i].taken_apart)
			continue;
		if (old && strcmp(old, s[i].value) != 0)
			fprintf(stderr, "stasis run: %s=%s (it was %s): %s\n", s[i].name,
				s[i].value, old, s[i].why);
		else
			fprintf(stderr, "stasis run: %s=%s: %s\n", s[i].name, s[i].value, s[i].why);
		if (setenv(s[i].name, s[i].value, 1) < 0)
			return -errno;
	}
	return 0;
}

/* Whether st is root's and no one else can replace what is in it: not
 * writable by others, or a sticky folder (/tmp), where others cannot
 * rename or remove an entry of root's. */
static bool roots_own(const struct stat *st)
{
	return st->st_uid == 0 && (!(st->st_mode & (S_IWGRP | S_IWOTH)) ||
				   (S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX)));
}

/* Whether path and every folder above it are root's alone (roots_own):
 * nobody but root can put another library there. */
static bool roots_alone(const char *path)
{
	char walk[PATH_MAX];
	struct stat st;

	if (snprintf(walk, sizeof(walk), "%s", path) >= (int)sizeof(walk))
		return false;
	for (;;) {
		char *slash;

		if (lstat(walk, &st) < 0 || !roots_own(&st))
			return false;
		slash = strrchr(walk, '/');
		if (!slash || slash == walk)
			break;
		*slash = '\0';
	}
	return lstat("/", &st) == 0 && roots_own(&st);
}

/* stasis's NCCL interposer (PREFIX/lib/stasis beside PREFIX/bin/stasis),
 * first in LD_PRELOAD: a checkpoint then holds the job's NCCL ranks at one
 * collective boundary before the lock and takes their communicators apart
 * (nccl-hold.h). Only a file of root's in folders of root's that no one
 * else can change is preloaded, and only a path the loader reads as one
 * (it splits LD_PRELOAD at spaces and colons); otherwise the job runs as
 * before, its ranks locked by the tries alone, its fast transports off.
 * Returns whether it is preloaded. */
static bool preload_interposer(void)
{
	char dir[PATH_MAX], shim[PATH_MAX + 64], real[PATH_MAX], *both;
	const char *old = getenv("LD_PRELOAD");
	struct stat st;

	if (self_dir(dir, sizeof(dir)) < 0)
		return false;
	snprintf(shim, sizeof(shim), "%s/../lib/stasis/libstasis-nccl.so", dir);
	if (!realpath(shim, real) || stat(real, &st) < 0 || !S_ISREG(st.st_mode) ||
	    strpbrk(real, " :\t\n") || !roots_alone(real)) {
		fprintf(
		    stderr,
		    "stasis run: no NCCL interposer at %s (missing, or in reach of another user "
		    "than root): NCCL ranks are not held at a collective boundary for a "
		    "checkpoint\n",
		    shim);
		return false;
	}
	if (old && *old && asprintf(&both, "%s %s", real, old) >= 0) {
		setenv("LD_PRELOAD", both, 1);
		free(both);
	} else
		setenv("LD_PRELOAD", real, 1);
	fprintf(stderr,
		"stasis run: LD_PRELOAD=%s: NCCL ranks held at one collective for a "
		"checkpoint, their communicators taken apart and made again, NCCL's fast "
		"transports on\n",
		real);
	return true;
}

/* The job gets the caller's umask and signal mask back; 127 when its
 * command is not found, 126 when it cannot be run, as shells say. */
static int exec_job(char **argv, const sigset_t *mask)
{
	umask(cli_caller_umask);
	sigprocmask(SIG_SETMASK, mask, NULL);
	execvp(argv[0], argv);
	fprintf(stderr, "stasis run: error: cannot run %s: %s\n", argv[0], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}

/* Whether stasis has a controlling terminal: a session of the job's own
 * would lose it, and with it the terminal's Ctrl-C and hangup. */
static bool has_terminal(void)
{
	int fd = open("/dev/tty", O_RDONLY | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

int cmd_run(int argc, char **argv)
{
	static const struct option options[] = {{NULL, 0, NULL, 0}};
	sigset_t forwarded, old;
	pid_t child;
	int c;

	opterr = 0;
	/* "+": the job's own options are its own. */
	c = getopt_long(argc, argv, "+:", options, NULL);
	if (c != -1)
		return cli_option_error("run", c, argv, "+:");
	if (optind >= argc)
		return cli_usage_error("run", "which command? (stasis run [--] COMMAND...)");
	if (apply_settings(preload_interposer()) < 0) {
		fprintf(stderr, "stasis run: error: setting the environment: %s\n",
			strerror(errno));
		return EXIT_FAILED;
	}
	sigprocmask(SIG_SETMASK, NULL, &old);
	/* Without a terminal and not a process group's leader (a service, a
	 * script's background job): the job becomes a session's leader in
	 * place and keeps this PID. */
	if (!has_terminal() && setsid() >= 0) {
		fprintf(stderr, "stasis run: PID %d, a session of its own\n", (int)getpid());
		return exec_job(argv + optind, &old);
	}
	/* Otherwise its child leads one, and this stays its parent in the
	 * terminal's foreground, forwarding what the terminal sends. The
	 * signals wait from the fork until they can be forwarded. */
	cli_forwarded_signals(&forwarded);
	sigprocmask(SIG_BLOCK, &forwarded, NULL);
	child = fork();
	if (child < 0) {
		fprintf(stderr, "stasis run: error: fork: %s\n", strerror(errno));
		return EXIT_FAILED;
	}
	if (child == 0) {
		if (setsid() < 0)
			_exit(EXIT_FAILED);
		_exit(exec_job(argv + optind, &old));
	}
	fprintf(stderr, "stasis run: PID %d, a session of its own\n", (int)child);
	return cli_wait_forwarding(child);
}
