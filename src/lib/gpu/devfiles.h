/* SPDX-License-Identifier: MIT */
/* The /dev/nvidia* references of a process. Descriptors CRIU saves through
 * stasis's own CRIU plugin; device mappings it cannot save at all. */
#ifndef STASIS_DEVFILES_H
#define STASIS_DEVFILES_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"
#include "manifest.h"

struct nvidia_refs {
	unsigned int fds;
	unsigned int maps;
	char mapped_path[128]; /* one of the mapped files, for the message */
};

/* "/dev/nvidia"; $STASIS_NVIDIA_DEV_PREFIX for tests. */
const char *nvidia_dev_prefix(void);

/* Count pid's descriptors of nvidia device files only (cheap: no maps). */
unsigned int nvidia_fds_of(pid_t pid);

/* Count pid's descriptors and mappings of nvidia device files. */
int nvidia_refs_of(pid_t pid, struct nvidia_refs *refs);

/* Refuse processes of m that map nvidia device files; with cuda_only the
 * CUDA processes (after the driver's checkpoint, which should have dropped
 * them), else the others (before anything changes). Records descriptor
 * counts in m for the processes checked. */
int nvidia_refs_check(struct manifest *m, bool cuda_only, struct stasis_error **err);

/* The folder holding stasis's CRIU plugin, next to the stasis binary
 * (../lib/stasis/criu); NULL when it is not installed. */
const char *stasis_criu_plugin_dir(void);

#endif
