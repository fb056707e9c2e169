/* SPDX-License-Identifier: MIT */
/* stasis as a workload's parent (restore, run): signals meant for it go to
 * the workload, and its exit status is the workload's. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>

#include "cli.h"

static pid_t forward_to;

static void forward_signal(int sig)
{
	if (forward_to > 0)
		kill(forward_to, sig);
}

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

void cli_forwarded_signals(sigset_t *set)
{
	sigemptyset(set);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaddset(set, forwarded[i]);
}

int cli_wait_forwarding(pid_t root)
{
	struct sigaction sa = {.sa_handler = forward_signal};
	sigset_t set;
	int status;

	sigemptyset(&sa.sa_mask);
	forward_to = root;
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaction(forwarded[i], &sa, NULL);
	/* A caller may have held them back until now (stasis run, from
	 * its fork). */
	cli_forwarded_signals(&set);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	while (waitpid(root, &status, 0) < 0)
		if (errno != EINTR)
			return EXIT_FAILED;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}
