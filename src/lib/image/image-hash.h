/* SPDX-License-Identifier: MIT */
/* Hashing image files (xxh128): whole files by a few threads at once, and
 * the files that CRIU is still writing. Internal to the library. */
#ifndef STASIS_IMAGE_HASH_H
#define STASIS_IMAGE_HASH_H

#include <dirent.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <xxhash.h>

#include "manifest.h"

/* CRIU writes one pages image per process; it holds nearly all the bytes
 * (the GPU state included) and CRIU only ever appends to it. Compressed or
 * not. */
bool image_is_pages_file(const char *name);
/* A pages image compressed by image-pack.c (NAME.img.zst). */
bool image_is_packed_file(const char *name);
/* CRIU's log (NAME.log): kept beside the image, not part of it. */
bool image_is_log_file(const char *name);
/* Open an image file named in a manifest for reading, relative to the
 * image folder: a link is not followed, and anything but a regular file (a
 * FIFO, a device) is refused with -EINVAL, without blocking on it. */
int image_open_file(int dirfd, const char *name);

/* Pass each pages image in d to add(ctx, name), which skips those it has
 * already; a file gone meanwhile (-ENOENT) is no error. For following a
 * folder CRIU is writing into. */
int image_scan_pages(DIR *d, int (*add)(void *ctx, const char *name), void *ctx);

/* The writeback of a growing image file is started early, a step at a
 * time, by a thread that looks every IMAGE_FLUSH_IDLE_US; the final syncfs
 * then waits for little. Starts that of [from, to) of fd once it is a
 * whole step, and returns where the next starts: from, or to. */
#define IMAGE_FLUSH_IDLE_US 20000
uint64_t image_flush_step(int fd, uint64_t from, uint64_t to);

/* The size of the buffer hash_tail reads into. */
#define HASH_CHUNK (4u << 20)
/* The window asked of the disk ahead of the reads (POSIX_FADV_WILLNEED):
 * a cold image keeps more than one request in flight. */
#define HASH_READ_AHEAD (64u << 20)

/* Hash what is left of fd from its offset to end of file into state,
 * reading through buf (HASH_CHUNK bytes); *offset moves along. Stops early
 * with -ECANCELED once *cancel is set. */
int hash_tail(int fd, XXH3_state_t *state, char *buf, uint64_t *offset, const atomic_bool *cancel);

/* hash_tail from the start of a file of HASH_AHEAD_MIN bytes or more, with
 * a few threads reading ahead of the one that hashes (image-hash-ahead.c);
 * a smaller file, or one left without memory or threads, is read by this
 * thread alone. */
#define HASH_AHEAD_MIN (4 * HASH_CHUNK)
int hash_file_ahead(int fd, XXH3_state_t *state, char *buf, uint64_t *offset,
		    const atomic_bool *cancel);

/* The hex digest of state into hex. */
void hash_hex(XXH3_state_t *state, char hex[33]);

/* Which files hash_files leaves alone. */
typedef bool (*hash_skip_fn)(const struct manifest_file *f);
bool hash_skip_hashed(const struct manifest_file *f);
bool hash_skip_pages(const struct manifest_file *f);
bool hash_skip_all_but_pages(const struct manifest_file *f);

/* Hash files (names relative to dirfd) into their xxh128 and size, a few
 * at a time, all but those skip names. On failure *failed is the index of
 * the file that failed. */
int hash_files(int dirfd, struct manifest_file *files, size_t nfiles, hash_skip_fn skip,
	       const atomic_bool *cancel, size_t *failed);

#endif
