/* SPDX-License-Identifier: MIT */
/* The work folder of one checkpoint or restore, root's (0700) in the run
 * folder: CRIU's log and statistics and a runtime's work go there, never
 * into the image folder, so that a failed run leaves the image folder as
 * it found it and each run keeps its own logs. */
#ifndef STASIS_RUN_WORK_H
#define STASIS_RUN_WORK_H

#include <stddef.h>

#include "error.h"

/* Makes $STASIS_RUN_DIR/KIND-TIME-PID into out. */
int run_work_make(const char *kind, char *out, size_t len, struct stasis_error **err);

/* After a failed run: the folder goes where nothing was written to it;
 * else it is kept, and err's hint names it (unless it does already). */
void run_work_failed(const char *work, struct stasis_error **err);

#endif
