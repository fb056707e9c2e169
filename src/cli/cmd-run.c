/* SPDX-License-Identifier: MIT */
/* stasis run [--] COMMAND...: start a job ready to be checkpointed, in a
 * session of its own, with the settings its NCCL ranks need. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "nccl.h"

/* Each setting into the environment, said once on stderr. */
static int apply_settings(void)
{
	size_t n;
	const struct nccl_setting *s = nccl_settings(&n);

	for (size_t i = 0; i < n; i++) {
		const char *old = getenv(s[i].name);

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

static int exec_job(char **argv)
{
	execvp(argv[0], argv);
	fprintf(stderr, "stasis run: error: cannot run %s: %s\n", argv[0], strerror(errno));
	return 127;
}

int cmd_run(int argc, char **argv)
{
	static const struct option options[] = {{NULL, 0, NULL, 0}};
	pid_t child;

	opterr = 0;
	/* "+": the job's own options are its own. */
	if (getopt_long(argc, argv, "+", options, NULL) != -1)
		return cli_usage_error("run", "unknown option %s", argv[optind - 1]);
	if (optind >= argc)
		return cli_usage_error("run", "which command? (stasis run [--] COMMAND...)");
	if (apply_settings() < 0) {
		fprintf(stderr, "stasis run: error: setting the environment: %s\n",
			strerror(errno));
		return EXIT_FAILED;
	}
	/* Not a process group's leader (a shell script's job, a service):
	 * the job becomes a session's leader in place and keeps this PID. */
	if (setsid() >= 0) {
		fprintf(stderr, "stasis run: PID %d, a session of its own\n", (int)getpid());
		return exec_job(argv + optind);
	}
	/* A group's leader (a terminal's job) cannot: its child leads one, and
	 * this stays its parent. */
	child = fork();
	if (child < 0) {
		fprintf(stderr, "stasis run: error: fork: %s\n", strerror(errno));
		return EXIT_FAILED;
	}
	if (child == 0) {
		if (setsid() < 0)
			_exit(EXIT_FAILED);
		_exit(exec_job(argv + optind));
	}
	fprintf(stderr, "stasis run: PID %d, a session of its own\n", (int)child);
	return cli_wait_forwarding(child);
}
