/* SPDX-License-Identifier: MIT */
/* CRIU's image files on the wire: the source sends each as a WIRE_FILE
 * naming it and WIRE_DATA messages of its bytes in order, zstd-compressed
 * where that pays, hashing what it sends; the destination writes them into
 * its staging folder (memory), hashing what it wrote, and checks the
 * hashes against the source's manifest before CRIU reads a byte. Internal
 * to the library. */
#ifndef STASIS_STREAM_H
#define STASIS_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "manifest.h"
#include "migrate.h"
#include "tls.h"
#include "wire.h"

struct stream_out;

int stream_out_new(struct tls_channel *ch, enum stasis_compress mode, struct stream_out **out);
/* The next len bytes of file id (named name): sent, compressed where that
 * pays; < 0 once the channel failed (every later call fails the same). */
int stream_out_data(struct stream_out *s, uint32_t id, const char *name, const unsigned char *buf,
		    size_t len);
/* The first error sending met, or 0. */
int stream_out_error(const struct stream_out *s);
/* A whole file of the folder dirfd, under a new id. */
int stream_out_file(struct stream_out *s, int dirfd, const char *name);
/* Whether name was sent already. */
bool stream_out_sent(const struct stream_out *s, const char *name);
/* Every file sent into m->files ("criu/NAME", size, xxh128) and
 * m->image_bytes. */
int stream_out_describe(struct stream_out *s, struct manifest *m);
/* Bytes read from CRIU and bytes sent (after compression, with headers). */
void stream_out_counts(const struct stream_out *s, uint64_t *raw, uint64_t *wire);
void stream_out_free(struct stream_out *s);

/* Whether a frame is worth compressing under mode, given the compressed
 * size of a sample of sample_len of its bytes, what compressing the sample
 * cost (ns a byte) and what sending costs (ns a byte on the wire; 0 when
 * not known yet). auto: the sample shrinks by a tenth at least, and
 * compressing costs less than sending what it saves would: on a link that
 * is faster than zstd, only what compresses fast and well (zero pages). */
bool stream_sample_pays(enum stasis_compress mode, size_t sample_len, size_t sample_packed,
			double pack_ns, double send_ns);

struct stream_in;

/* Files go into the folder dirfd; with memory_cap, the pages images into
 * anonymous memory instead (memory_cap bytes of address space each, the
 * most one may hold), for stream_in_stage_pages. */
int stream_in_new(int dirfd, uint64_t memory_cap, struct stream_in **out);
/* A WIRE_FILE or WIRE_DATA message. */
int stream_in_take(struct stream_in *s, const struct wire_header *h, const unsigned char *payload,
		   struct stasis_error **err);
/* Every file of m came whole and matches its checksum, and nothing else
 * came. */
int stream_in_verify(struct stream_in *s, const struct manifest *m, struct stasis_error **err);
/* The folder below the staging folder that serves the pages images. */
#define STREAM_SERVED_DIR ".served"
/* The pages images kept in memory, made readable by CRIU in the staging
 * folder stage (dirfd's path): served from memory by a FUSE folder inside
 * it, each byte given back once CRIU has read it (*served), so that the
 * image and the restored memory are not both whole at once; where none can
 * be mounted, written there as files, which CRIU's restore then doubles. */
int stream_in_stage_pages(struct stream_in *s, const char *stage, bool *served,
			  struct stasis_error **err);
/* CRIU is done with them: stops serving and frees the pages images kept
 * in memory. NULL is allowed. */
void stream_in_release_pages(struct stream_in *s);
uint64_t stream_in_bytes(const struct stream_in *s);
void stream_in_free(struct stream_in *s);

#endif
