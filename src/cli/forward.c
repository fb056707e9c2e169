/* SPDX-License-Identifier: MIT */
/* stasis as a workload's parent (restore, run): signals meant for it go to
 * the workload, and its exit status is the workload's. */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

#include "cli.h"

static pid_t forward_to;

static void forward_signal(int sig)
{
	if (forward_to > 0)
		kill(forward_to, sig);
}

int cli_wait_forwarding(pid_t root)
{
	struct sigaction sa = {.sa_handler = forward_signal};
	int status;

	sigemptyset(&sa.sa_mask);
	forward_to = root;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	while (waitpid(root, &status, 0) < 0)
		if (errno != EINTR)
			return EXIT_FAILED;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}
