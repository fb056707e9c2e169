/* SPDX-License-Identifier: MIT */
/* A --leave-running checkpoint staged in memory: CRIU dumps into a folder in
 * tmpfs, the workload runs again as soon as CRIU and the GPU are done, and
 * only then is the image written to its folder. The manifest comes last,
 * after the pages are on disk, so an image cut short by a crash or a
 * SIGKILL never looks complete. Internal to the library. */
#ifndef STASIS_IMAGE_STAGE_H
#define STASIS_IMAGE_STAGE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "manifest.h"

/* Make the staging folder STAGE_ROOT/stasis-stage-PID-XXXXXX, CRIU's image
 * folder while it dumps, into out. */
int image_stage_make(char out[PATH_MAX], struct stasis_error **err);

/* Remove the staging folders of stasis runs that are gone (killed before
 * they could clean up); they hold whole images in memory. Only folders
 * that stasis made are taken (root's, 0700); each removal is a note. */
void image_stage_sweep(void);

/* Writes a staged image to its folder once the workload runs again. */
struct image_stager;

/* Open stage and DIR/criu for the commit; nothing is copied yet. */
int image_stage_start(const char *stage, const char *dir, struct image_stager **out,
		      struct stasis_error **err);

/* Once CRIU is done: copy every staged file to DIR/criu, several at once,
 * checksumming on the way into m's file list and freeing the staged bytes
 * as they are written; then flush DIR to disk. A file CRIU wrote in parts
 * (NAME, then NAME.part-1, NAME.part-2, ...: criu-settings.h, page_parts) is
 * written as one, its parts appended in order; a part without its file, or
 * a gap, fails it. SIGINT/SIGTERM stop it with EINTR. */
int image_stage_commit(struct image_stager *s, struct manifest *m, struct stasis_error **err);

/* Whether name is part k of the file named by its first base_len bytes
 * (NAME.part-K, K from 1). */
bool image_stage_part(const char *name, size_t *base_len, unsigned *k);

/* Free s; NULL is fine. */
void image_stage_free(struct image_stager *s);

/* Remove the staging folder; "" is left alone. */
void image_stage_remove(char stage[PATH_MAX]);

#endif
