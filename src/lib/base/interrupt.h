/* SPDX-License-Identifier: MIT */
/* SIGINT and SIGTERM as a request to stop: a flag that every layer's long
 * wait looks at (CRIU's answer, the network, the GPU steps), so that the
 * operation rolls back instead of dying half done. */
#ifndef STASIS_INTERRUPT_H
#define STASIS_INTERRUPT_H

#include <stdbool.h>

#include "error.h"

void stasis_install_interrupt_handlers(void);
bool stasis_interrupted(void);

/* EINTR naming step when SIGINT or SIGTERM arrived; fault names the test
 * switch (STASIS_FAULT) that simulates one here. */
int stasis_check_interrupted(const char *fault, const char *step, struct stasis_error **err);

#endif
