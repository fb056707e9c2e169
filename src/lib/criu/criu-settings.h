/* SPDX-License-Identifier: MIT */
/* What stasis tells one CRIU run beyond its options: the settings of
 * stasis's CRIU and of its plugin (CRIU's --setting NAME=VALUE, patch
 * 0012) and its plugin folder, as lines of a CRIU configuration file.
 * Nothing goes through stasis's environment, which every thread of the
 * process shares: two operations of one process each give their CRIU
 * their own. A variable the user set stays the user's choice (read, never
 * written): stasis then says nothing of it, and CRIU takes it from the
 * environment, unless a configuration file of the machine's
 * (/etc/criu/default.conf) names it. */
#ifndef STASIS_CRIU_SETTINGS_H
#define STASIS_CRIU_SETTINGS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"

/* One operation's. Zeroed: a run with no GPU work for the plugin. */
struct criu_settings {
	const char *plugin_socket;  /* the GPU handoff's socket (plugin-channel.h) */
	const char *dev_map;	    /* a restore's /dev/nvidiaN map (gpu_plan) */
	const char *link_remap_dir; /* the link-remap folder's name (shm-remap.h) */
	size_t fill_nprocs;	    /* a restore's processes: its fill threads */
	bool page_parts;	    /* a staged dump: big tasks' pages in parts */
};

/* Whether the CRIU stasis runs takes settings (stasis's own does; asked
 * of the binary once a process). Without, only its plugin folder is
 * given, and its plugin gets nothing: GPU work needs stasis's CRIU. */
bool criu_takes_settings(void);

/* The configuration text for s into out (NUL-terminated); -ENAMETOOLONG
 * where it does not fit, -EINVAL for a value a configuration line cannot
 * hold. */
int criu_settings_text(const struct criu_settings *s, char *out, size_t len);

/* The text in a new memfd of the caller's: CRIU, root's, reads it at path
 * (/proc/PID/fd/N) while fd stays open. */
int criu_settings_file(const struct criu_settings *s, int *fd, char *path, size_t len,
		       struct stasis_error **err);

/* before (lines, or NULL), the text, then extra (more lines, or NULL), in
 * a new file at path, of root's alone (a file there before is removed; no
 * link is followed): for runc's CRIU, which reads CRIU_CONFIG_FILE. What
 * comes later wins where both set a value. */
int criu_settings_conf(const struct criu_settings *s, const char *path, const char *before,
		       const char *extra, struct stasis_error **err);

/* How many processes write a dump's pages (CRIU_PAGE_WRITERS: the user's,
 * else one a CPU, at most 8); 1 when each task's are written while it is
 * dumped. */
int criu_page_writers(void);
/* Whether a task too big for its pipes is handed to the writers in chunks
 * (CRIU_PAGE_WRITER_CHUNKS=1, unless the user said otherwise, with
 * writers). */
bool criu_page_writer_chunks(void);
/* With stasis's CRIU and chunks, a dump staged in memory writes a big
 * task's pages from several writers at once, each chunk after a task's
 * first into a file of its own (CRIU_PAGE_WRITER_PARTS=1 for that dump
 * alone, page_parts above), which the staging's commit appends to its
 * pages image (image-stage.h): one file takes one writer's copy at a time.
 * Whether a dump may have them: the user's CRIU_PAGE_WRITER_PARTS=0 keeps
 * them off. */
bool criu_page_parts_possible(void);
/* The size from which a process's pages go in parts once staged: its
 * share of the writers is a chunk of its own from 64 MiB on. 0 where
 * parts cannot be had. On the GPU machine an 8.8 GB PyTorch job, which
 * the page cache took below the dirty limit, was frozen 1.19 s staged in 8
 * parts against 3.39 s written to disk through one file (its pause 5.1 s
 * against 7.4 s). */
uint64_t criu_page_part_bytes(void);
#endif
