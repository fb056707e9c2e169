/* SPDX-License-Identifier: MIT */
/* Transparent huge pages set to "always" for the length of one operation:
 * with --thp, and for every checkpoint's GPU step where the machine leaves
 * them to madvise(). The host memory that the driver fills at checkpoint and
 * that CRIU fills at restore is then faulted in 2 MiB at a time, which is
 * where those steps spend their time. A machine-wide setting, so it is put
 * back afterwards: overlapping stasis runs register under the runtime
 * directory, the first one saves the mode and the last one out restores it.
 * A guard process ends a run's registration when the run dies (SIGKILL),
 * and the next run repairs what a guard could not. */
#ifndef STASIS_THP_H
#define STASIS_THP_H

#include <stddef.h>

#include "error.h"

/* The setting: $STASIS_THP_FILE or the kernel's sysfs file. */
const char *thp_setting_path(void);

/* The machine's own mode ("always", "madvise" or "never") into mode: the
 * one a stasis run saved while it holds "always", else the setting's. */
int thp_machine_mode(char *mode, size_t len);

int thp_always_begin(struct stasis_error **err);
void thp_always_end(void);

/* For a run that does not set them: put back the mode a dead run left
 * changed (its guard killed too), unless a live one still holds "always",
 * so that it outlives them only until the next stasis run. */
void thp_repair(void);

#endif
