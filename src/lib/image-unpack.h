/* SPDX-License-Identifier: MIT */
/* Decompressing the pages images of a compressed image into a staging
 * folder. Internal to the library. */
#ifndef STASIS_IMAGE_UNPACK_H
#define STASIS_IMAGE_UNPACK_H

#include <stdatomic.h>
#include <stddef.h>

#include "manifest.h"

/* Decompress every compressed pages image of m (names relative to dirfd)
 * into the folder stagefd, filling their checksum and size, as read, into
 * actual. Stops with -ECANCELED once *cancel is set; on failure *failed is
 * the index of the file. */
int image_unpack(int dirfd, const struct manifest *m, struct manifest_file *actual, int stagefd,
		 const atomic_bool *cancel, size_t *failed);

#endif
