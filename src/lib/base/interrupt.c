/* SPDX-License-Identifier: MIT */
#include "interrupt.h"

#include <signal.h>

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
	(void)sig;
	interrupted = 1;
}

void stasis_install_interrupt_handlers(void)
{
	struct sigaction sa = {.sa_handler = on_interrupt};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

bool stasis_interrupted(void)
{
	return interrupted;
}
