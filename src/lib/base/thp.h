/* SPDX-License-Identifier: MIT */
/* Opt-in (--thp): transparent huge pages set to "always" for the length of
 * one operation. The host memory that the driver fills at checkpoint and
 * that CRIU fills at restore is then faulted in 2 MiB at a time, which is
 * where those steps spend their time. A machine-wide setting, so it is put
 * back afterwards: overlapping stasis runs register under the runtime
 * directory, the first one saves the mode and the last one out restores it
 * (also the mode a crashed run left changed). */
#ifndef STASIS_THP_H
#define STASIS_THP_H

#include "error.h"

/* The setting: $STASIS_THP_FILE or the kernel's sysfs file. */
const char *thp_setting_path(void);

int thp_always_begin(struct stasis_error **err);
void thp_always_end(void);

#endif
