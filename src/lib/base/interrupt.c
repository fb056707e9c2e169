/* SPDX-License-Identifier: MIT */
#include "interrupt.h"

#include <errno.h>
#include <signal.h>

#include "fault.h"

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

int stasis_check_interrupted(const char *fault, const char *step, struct stasis_error **err)
{
	if (fault_at(fault, 0))
		raise(SIGTERM);
	if (!stasis_interrupted())
		return 0;
	return stasis_error_set(err, EINTR, STASIS_DOMAIN_SYSTEM, EINTR,
				"interrupted by a signal before %s", step);
}
