/* SPDX-License-Identifier: MIT */
/* A pod's sandbox process for the CRI tests (the pause image's command):
 * it holds the pod's namespaces, waits, and goes at SIGTERM or SIGINT. As
 * Kubernetes' pause does, it reaps the orphans a pod that shares its PID
 * namespace hands it: a zombie keeps its session's and process group's
 * numbers taken, and a restore into that namespace needs them (CRIU gives
 * each task its old PID: "Can't fork for N: File exists"). Built static,
 * so that its image needs nothing else. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void leave(int sig)
{
	(void)sig;
	_exit(0);
}

static void reap(int sig)
{
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(void)
{
	struct sigaction sa = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, NULL);
	signal(SIGTERM, leave);
	signal(SIGINT, leave);
	for (;;)
		pause();
}
