/* SPDX-License-Identifier: MIT */
/* An image as one archive file, in the layout checkpointctl, podman and
 * containerd's CRI read: CRIU's files under checkpoint/, the container's
 * root file system diff as rootfs-diff.tar, CRIU's statistics as
 * stats-dump, a container's OCI spec as spec.dump and a config.dump naming
 * it; stasis's sealed manifest beside them (manifest.json, manifest.seal),
 * so that a restore from the archive verifies the image as from a folder.
 * A tar, zstd-compressed where its name ends in .zst or .zstd. */
#ifndef STASIS_IMAGE_ARCHIVE_H
#define STASIS_IMAGE_ARCHIVE_H

#include <stddef.h>

#include "error.h"
#include "manifest.h"

/* The archive's file at path, made before the checkpoint so that a name
 * that cannot be written is refused while the workload runs: new (an
 * existing file is refused, a link is not followed), 0600. Returns its
 * descriptor. */
int image_archive_create(const char *path, struct stasis_error **err);

/* Writes the image in dir (whose manifest is m) into fd, the file made at
 * path; the caller removes it on failure. */
int image_archive_write(const char *dir, const struct manifest *m, int fd, const char *path,
			struct stasis_error **err);

/* Extracts the archive at path into the empty folder dir, as an image
 * folder: only plain files and folders under names stasis writes, none
 * through a link, root's and 0600/0700. */
int image_archive_read(const char *path, const char *dir, struct stasis_error **err);

#endif
