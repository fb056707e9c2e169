/* SPDX-License-Identifier: MIT */
/* The compressed pages image, shared by its writer (image-pack.c) and its
 * reader (image-unpack.c). Internal to the library.
 *
 * NAME.img.zst is a sequence of zstd frames of at most PACK_FRAME bytes of
 * NAME.img each, in order, every one with its content size. A frame whose
 * bytes were regrouped by their place in a 4-byte word before compression
 * (which shrinks tables of floats) follows a 12-byte zstd skippable frame
 * that says so. Without those marks it is what `zstd -d` reads. */
#ifndef STASIS_IMAGE_PACK_H
#define STASIS_IMAGE_PACK_H

#include <stddef.h>
#include <stdint.h>

#define PACK_FRAME (4u << 20)
#define PACK_MAX_THREADS 16
#define PACK_LEVEL 1
#define PACK_SKIPPABLE_MAGIC 0x184D2A5Eu
#define PACK_MARK_LEN 12u
#define PACK_SHUFFLE_WIDTH 4u

/* Regroup the bytes of in by their place in a PACK_SHUFFLE_WIDTH-byte word
 * (a tail shorter than a word stays as it is), and back. */
void pack_shuffle(const unsigned char *in, unsigned char *out, size_t len);
void pack_unshuffle(const unsigned char *in, unsigned char *out, size_t len);

/* How many threads compress or decompress. */
unsigned int pack_threads(void);

/* Where staging folders go: $STASIS_STAGE_DIR, else /dev/shm (memory). */
const char *image_stage_root(void);

static inline uint32_t pack_le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#endif
