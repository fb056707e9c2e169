/* SPDX-License-Identifier: MIT */
/* Host-to-host migration (docs/MIGRATION.md): `stasis migrate` streams a
 * tree's image to `stasis receive`, which restores it as it arrives; the
 * source keeps its tree frozen until the destination's copy runs, and
 * resumes it on any failure before that. */
#ifndef STASIS_MIGRATE_H
#define STASIS_MIGRATE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "manifest.h"

enum stasis_compress {
	STASIS_COMPRESS_AUTO, /* each frame whose sample shrinks by a tenth */
	STASIS_COMPRESS_ON,
	STASIS_COMPRESS_OFF,
};

/* "auto", "on" or "off"; -EINVAL otherwise. */
int stasis_compress_parse(const char *text, enum stasis_compress *out);

struct stasis_migrate_options {
	pid_t pid;
	const char *runtime;   /* "runc" for a container, NULL for a tree */
	const char *container; /* its id, with runtime */
	const char *to;	       /* "HOST:PORT" */
	const char *key_file;  /* at least 32 bytes, mode 0600 or stricter */
	enum stasis_compress compress;
	unsigned int lock_timeout_ms;
};

/* What one migration did, on either side. */
struct stasis_migrate_stats {
	uint64_t raw_bytes;  /* image bytes */
	uint64_t wire_bytes; /* bytes of messages (inside TLS) */
	uint64_t pause_us;   /* source: from the GPU lock until the destination ran */
	pid_t restored_pid;  /* the destination's root (its PID there) */
	char container[256]; /* the container's id there; empty for a tree */
	char peer[128];
	char gpus[512]; /* the destination's GPU placement, in words */
	/* The destination's: how CRIU read the pages images, "served" (from
	 * memory, given back as read) or "staged" (tmpfs files). */
	char pages[8];
};

/* How long the source waits for the destination's restore of an image of
 * image_bytes before it runs the workload again itself. */
int restored_timeout_ms(uint64_t image_bytes);

/* Migrate the tree rooted at pid, or the container, to a `stasis
 * receive` at to; m receives the manifest with the timings of every
 * phase. On failure the workload runs here again and the error says so. */
int stasis_migrate(const struct stasis_migrate_options *o, struct manifest *m,
		   struct stasis_migrate_stats *st, struct stasis_error **err);

struct stasis_receive_options {
	const char *listen;   /* "ADDR:PORT" */
	const char *key_file; /* the source's */
	const char *gpu_map;  /* "OLD=NEW,...", or NULL / "auto" */
	const char *name;     /* a container's new id there; NULL: its own */
	bool once;	      /* return after the first migration */
};

/* Called after each migration: err NULL when it succeeded (m, st filled). */
typedef void (*stasis_receive_report_fn)(void *ctx, const struct manifest *m,
					 const struct stasis_migrate_stats *st,
					 const struct stasis_error *err);

/* Serve migrations one at a time until SIGINT/SIGTERM (or after the first
 * with once, whose result is returned). */
int stasis_receive(const struct stasis_receive_options *o, stasis_receive_report_fn report,
		   void *ctx, struct stasis_error **err);

/* The stats of a migration as JSON: phases in microseconds, bytes, pause. */
char *stasis_migrate_json(const struct manifest *m, const struct stasis_migrate_stats *st);

#endif
