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

/* Hashes the pages images while CRIU writes them, and starts their
 * writeback early, so that the checksum after the dump reads only what
 * CRIU wrote last. Only an optimisation: whatever it could not follow is
 * hashed whole by image_checksum. */
struct image_follower;
int image_follow_start(const char *dir, struct image_follower **out, struct stasis_error **err);
/* Stops following and finishes the hashes of the files it followed among
 * files (their xxh128 and size); on failure none are set. */
int image_follow_finish(struct image_follower *f, struct manifest_file *files, size_t nfiles);
void image_follow_free(struct image_follower *f);

/* Checksum every file under DIR/criu into m->files and add up image_bytes,
 * using what follower (may be NULL) has hashed already. */
int image_checksum(const char *dir, struct manifest *m, struct image_follower *follower,
		   struct stasis_error **err);

/* Read the manifest, verify every file but the pages images, and start
 * verifying those in the background: a restore runs CRIU meanwhile and
 * waits for the answer before the tree runs. */
struct image_verifier;
int image_open_begin(const char *dir, struct manifest *m, struct image_verifier **out,
		     struct stasis_error **err);
int image_verify_wait(struct image_verifier *v, struct stasis_error **err);
/* Cancels a verification still running. */
void image_verifier_free(struct image_verifier *v);

/* Read the manifest and verify every file it lists. */
int image_open(const char *dir, struct manifest *m, struct stasis_error **err);

/* Flush the image's file system to disk (syncfs); records the "sync" phase. */
int image_sync(const char *dir, struct manifest *m, struct stasis_error **err);

#endif
