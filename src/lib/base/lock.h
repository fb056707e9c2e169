/* SPDX-License-Identifier: MIT */
/* One stasis operation per process at a time: a lock file per PID under the
 * runtime directory, held with flock for as long as the operation runs. */
#ifndef STASIS_LOCK_H
#define STASIS_LOCK_H

#include <sys/types.h>

#include "error.h"

/* The runtime directory: $STASIS_RUN_DIR or /run/stasis, created on demand. */
const char *stasis_run_dir(void);

/* Lock pid for this process's lifetime (or until pid_unlock); returns the fd. */
int pid_lock(pid_t pid, struct stasis_error **err);
/* Unlock and remove pid's lock file. */
void pid_unlock(pid_t pid, int fd);

#endif
