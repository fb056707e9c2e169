/* SPDX-License-Identifier: MIT */
/* The image directory: layout, checksums of the files CRIU wrote, and the
 * checks made before a restore touches anything. */
#ifndef STASIS_IMAGE_H
#define STASIS_IMAGE_H

#include "error.h"
#include "manifest.h"

#define IMAGE_CRIU_SUBDIR "criu"

/* DIR must not exist or be empty; creates DIR and DIR/criu. */
int image_prepare(const char *dir, struct stasis_error **err);

/* Checksum every file under DIR/criu into m->files and add up image_bytes. */
int image_checksum(const char *dir, struct manifest *m, struct stasis_error **err);

/* Read the manifest and verify every file it lists. */
int image_open(const char *dir, struct manifest *m, struct stasis_error **err);

/* xxh128 of one file as 32 hex characters. */
int image_hash_file(int dirfd, const char *name, char hex[33], uint64_t *size);

/* Flush the image's file system to disk (syncfs); records the "sync" phase. */
int image_sync(const char *dir, struct manifest *m, struct stasis_error **err);

#endif
