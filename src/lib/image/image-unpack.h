/* SPDX-License-Identifier: MIT */
/* Decompressing the pages images of a compressed image into memory.
 * Internal to the library. */
#ifndef STASIS_IMAGE_UNPACK_H
#define STASIS_IMAGE_UNPACK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "manifest.h"

/* Where the pages go: maps[i] holds the unpacked_size bytes of the
 * manifest's file i; ready, if set, hears each time more of file i is
 * whole from its start (bytes); while pause, if set, says so for file i,
 * no more of its frames are handed out. read_usec adds up the time spent
 * waiting for the compressed files to be read, queue_usec the time the
 * readers waited for the decompressing threads to take frames, pause_usec
 * the pauses, each summed over the files read at once. threads: how many
 * decompress; 0 for pack_threads(). */
struct unpack_sink {
	unsigned char *const *maps;
	unsigned int threads;
	void (*ready)(void *ctx, size_t i, uint64_t bytes);
	bool (*pause)(void *ctx, size_t i);
	void *ctx;
	uint64_t read_usec, queue_usec, pause_usec;
};

/* Decompress every compressed pages image of m (names relative to dirfd)
 * into sink, filling their checksum and size, as read, into actual. Stops
 * with -ECANCELED once *cancel is set; on failure *failed is the index of
 * the file. */
int image_unpack(int dirfd, const struct manifest *m, struct manifest_file *actual,
		 struct unpack_sink *sink, const atomic_bool *cancel, size_t *failed);

#endif
