/* SPDX-License-Identifier: MIT */
/* The folder of root's alone in /dev/shm where CRIU's link-remap puts its
 * links (stasis's CRIU patch 0006, CRIU_LINK_REMAP_DIR): made for a dump
 * that needs it, checked at its restore, removed once it is empty. Another
 * user can neither take a link's name nor swap a link there. */
#ifndef STASIS_SHM_REMAP_H
#define STASIS_SHM_REMAP_H

#include <stddef.h>

#include "error.h"

/* The folder of POSIX shared memory: root's, sticky, a tmpfs. */
#define SHM_DIR "/dev/shm/"

/* "stasis-remap-XXXXXX": the folder's name under SHM_DIR. */
#define SHM_REMAP_PREFIX "stasis-remap-"
#define SHM_REMAP_NAME_MAX 32

/* Make a new folder; its name into name. */
int shm_remap_make(char name[SHM_REMAP_NAME_MAX], struct stasis_error **err);

/* Refuse a name not of the form stasis makes, or a folder that is gone,
 * no folder, a link, or not root's alone. */
int shm_remap_check(const char *name, struct stasis_error **err);

/* Remove the folder if it is empty (CRIU removed its links). */
void shm_remap_remove(const char *name);

#endif
