/* SPDX-License-Identifier: MIT */
/* What criu-images.c (the views, the statistics) and criu-tree.c (the
 * tree a restore checks) share: CRIU's magic numbers, the decoder's
 * allocations within a budget, a file read whole within a bound and split
 * into its unpacked entries, and the wire checks protobuf-c does not make. */
#ifndef STASIS_CRIU_IMAGES_INTERNAL_H
#define STASIS_CRIU_IMAGES_INTERNAL_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* CRIU's magic numbers (criu/include/magic.h): most images have the
 * common one first, its service files (the statistics) the service one. */
#define IMG_COMMON_MAGIC 0x54564319u
#define IMG_SERVICE_MAGIC 0x55105940u
#define STATS_MAGIC 0x57093306u
#define PSTREE_MAGIC 0x50273030u
#define CORE_MAGIC 0x55053847u
#define IDS_MAGIC 0x54432030u
#define FDINFO_MAGIC 0x56213732u
#define FS_MAGIC 0x51403912u
#define FILES_MAGIC 0x56303138u

/* The decoder's allocations within a budget: what a hostile entry makes
 * protobuf-c allocate is bounded by its size, and all of them together by
 * CRIU_IMAGES_BUDGET. */
struct budget {
	ProtobufCAllocator a;
	size_t left;
	bool spent; /* an allocation was refused */
};

void criu_budget_init(struct budget *b);

int criu_malformed(struct stasis_error **err, const char *file, const char *what);

/* A file's entries, unpacked: its messages in order. */
struct entries {
	ProtobufCMessage **msg;
	size_t n;
};

void criu_entries_free(struct entries *e, struct budget *b);

/* What a field of a message must be on the wire, beyond what protobuf-c
 * checks: protobuf-c keeps the last of a field given twice (or merges two
 * messages) and the low 32 bits of a bigger uint32. */
enum wire_kind {
	WIRE_ONE_U32,	  /* once, a varint within 32 bits */
	WIRE_EACH_U32,	  /* repeated, each a varint within 32 bits, packed or not */
	WIRE_ONE_BYTES,	  /* once, length-delimited (a string) */
	WIRE_ONE_MESSAGE, /* once, a message whose fields follow inner */
};

struct wire_rules;

struct wire_field {
	uint32_t number;
	enum wire_kind kind;
	const struct wire_rules *inner;
};

struct wire_rules {
	const struct wire_field *fields;
	size_t n; /* 32 at most */
};

/* Whether the message in p[0..len) is well formed (no group, no field 0,
 * nothing cut) and its fields named in rules are as they say. */
bool criu_wire_check(const uint8_t *p, size_t len, const struct wire_rules *rules);

/* Splits buf into its entries of type desc after the magic numbers, each
 * first checked against rules where there are some; at most max entries
 * (1 for a file of one). */
int criu_parse_entries(const uint8_t *buf, size_t len, const char *name, uint32_t first,
		       uint32_t magic, const ProtobufCMessageDescriptor *desc,
		       const struct wire_rules *rules, size_t max, struct budget *b,
		       struct entries *out, struct stasis_error **err);

/* The whole of dirfd's file name, a regular file of max bytes at most:
 * 1 and *out, 0 when there is none, or an error. */
int criu_read_image(int dirfd, const char *name, size_t max, uint8_t **out, size_t *len,
		    struct stasis_error **err);

#endif
