/* SPDX-License-Identifier: MIT */
/* A pod's sandbox process for the CRI tests (the pause image's command):
 * it holds the pod's namespaces and waits, and goes at SIGTERM or SIGINT.
 * Built static, so that its image needs nothing else. */
#include <signal.h>
#include <unistd.h>

static void leave(int sig)
{
	(void)sig;
	_exit(0);
}

int main(void)
{
	signal(SIGTERM, leave);
	signal(SIGINT, leave);
	for (;;)
		pause();
}
