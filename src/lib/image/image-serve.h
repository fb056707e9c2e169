/* SPDX-License-Identifier: MIT */
/* Serving files that are still being written: a read-only FUSE folder
 * whose reads wait until the bytes they ask for are there. A compressed
 * image's pages images are restored through it while they are being
 * decompressed. Each byte may be read once: what was read is given back to
 * the system, and reading it again fails with EIO. Internal to the
 * library. */
#ifndef STASIS_IMAGE_SERVE_H
#define STASIS_IMAGE_SERVE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct serve_block;

struct serve_file {
	char name[NAME_MAX + 1];
	unsigned char *data; /* size bytes, filled from the start on */
	uint64_t size;
	uint64_t ready;		    /* how many of them are there: see image_serve_ready */
	uint64_t sent;		    /* how many were read: the server's */
	struct serve_block *blocks; /* what was read of each SERVE_BLOCK: the server's */
};

/* What is read is given back to the system by blocks of this size. */
#define SERVE_BLOCK (2u << 20)

struct image_server;

/* Mounts the folder mnt (which must exist and be empty) serving files,
 * none of it ready yet. Needs CAP_SYS_ADMIN and /dev/fuse; -errno when
 * either is missing, and nothing is left mounted. files must outlive the
 * server. */
int image_serve_start(const char *mnt, struct serve_file *files, size_t nfiles,
		      struct image_server **out);
/* The first ready bytes of file i are there; reads up to them go on. */
void image_serve_ready(struct image_server *s, size_t i, uint64_t ready);
/* Whether the bytes of file i ready but not yet read are more than limit
 * while the reader keeps reading: its writer may wait, as the memory they
 * hold is given back only once read. Never while a read waits for its
 * bytes, nor when the reader stopped reading (it may read elsewhere
 * first), so that a writer that waits can never hold the reader up. Each
 * file has its own lead: the processes of a tree read theirs side by side,
 * and one's lead must not hold back another's pages. */
bool image_serve_ahead(struct image_server *s, size_t i, uint64_t limit);
/* When, after the start, the first and the last read were answered
 * (microseconds; 0 for none). */
void image_serve_times(struct image_server *s, uint64_t *first, uint64_t *last);
/* No more bytes will come: reads still waiting, and later ones, fail with
 * EIO. */
void image_serve_fail(struct image_server *s);
/* Fails what waits, unmounts and frees; NULL is allowed. */
void image_serve_stop(struct image_server *s);

#endif
