/* SPDX-License-Identifier: MIT */
/* The migration protocol's framing (docs/MIGRATION.md), spoken inside the
 * TLS channel (tls.c). Every message is a 12-byte header, then its
 * payload: magic "STM1", type, flags, two zero bytes, payload length (all
 * little-endian). Internal to the library. */
#ifndef STASIS_WIRE_H
#define STASIS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

#define WIRE_MAGIC 0x314d5453u /* "STM1" */
#define WIRE_HEADER_LEN 12u
/* The largest payload: a frame of pages, its id and its raw length. */
#define WIRE_MAX_RAW (4u << 20)
#define WIRE_MAX_PAYLOAD (WIRE_MAX_RAW + 4096u)
#define WIRE_DATA_HEAD 8u

enum wire_type {
	WIRE_HELLO = 1, /* source: JSON {"manifest", "compress"}: preflight this */
	WIRE_READY,	/* destination: JSON {"gpus"}: send the image */
	WIRE_REFUSE,	/* either: JSON {"message", "hint"}: stop, nothing is kept */
	WIRE_FILE,	/* source: u32 id, then the file's name */
	WIRE_DATA,	/* source: u32 id, u32 raw length, bytes (zstd with WIRE_PACKED) */
	WIRE_MANIFEST,	/* source: the manifest with every file's checksum; CRIU is done */
	WIRE_RESTORED,	/* destination: JSON {"pid"}: restored, unlocked, running */
	WIRE_COMMIT,	/* source: its copy is gone; the destination's is the job */
	WIRE_TYPE_END,
};

#define WIRE_PACKED 0x01u

struct wire_header {
	uint8_t type;
	uint8_t flags;
	uint32_t len;
};

void wire_header_encode(const struct wire_header *h, unsigned char out[WIRE_HEADER_LEN]);
/* -EPROTO for a header that is not ours (wrong magic, unknown type, a
 * payload over WIRE_MAX_PAYLOAD). */
int wire_header_decode(const unsigned char in[WIRE_HEADER_LEN], struct wire_header *h);

void wire_put32(unsigned char *p, uint32_t v);
uint32_t wire_get32(const unsigned char *p);

/* "HOST:PORT" or "[V6]:PORT" into host and port; -EINVAL when it is not. */
int wire_split_addr(const char *text, char *host, size_t hostlen, char *port, size_t portlen);

/* A key file must hold at least WIRE_KEY_MIN bytes of secret and be
 * readable by its owner alone: refuses otherwise, saying which. */
#define WIRE_NAME_MAX 256u
#define WIRE_KEY_MIN 32u
#define WIRE_KEY_MAX 4096u
int wire_key_check(const char *path, mode_t mode, size_t len, struct stasis_error **err);

/* Read and check a key file; *key (freed by the caller) holds len bytes,
 * trailing newlines left out. */
int wire_key_load(const char *path, unsigned char **key, size_t *len, struct stasis_error **err);

/* A file name the destination accepts: one of CRIU's, no folders. */
bool wire_name_ok(const char *name);

#endif
