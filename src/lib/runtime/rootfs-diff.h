/* SPDX-License-Identifier: MIT */
/* A container's writable layer as an OCI layer tar (rootfs-diff.tar, as
 * Kubernetes' checkpoint archives carry it): the files added or changed
 * since its image, and its deletions as whiteouts (".wh.NAME"; a folder
 * emptied of the image's files: ".wh..wh..opq"). */
#ifndef STASIS_ROOTFS_DIFF_H
#define STASIS_ROOTFS_DIFF_H

#include "error.h"

#define ROOTFS_DIFF_NAME "rootfs-diff.tar"

/* Applies the layer in tar onto the root folder rootfs (a fresh snapshot
 * of the same image): every deletion first, then every other entry with its
 * owner, mode, times and extended attributes, through libarchive's disk
 * writer. A member named with ".." inside its name, or one that leads
 * through a symbolic link, is refused (a leading "/" or "../" is dropped),
 * and so is a device node; all of it runs in a child chrooted into rootfs,
 * so that nothing reaches outside it. */
int rootfs_diff_apply(const char *tar, const char *rootfs, struct stasis_error **err);

#endif
