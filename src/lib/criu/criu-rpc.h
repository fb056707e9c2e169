/* SPDX-License-Identifier: MIT */
/* CRIU, driven through its RPC interface (libcriu starts `criu swrk`). The
 * only file that knows about libcriu. */
#ifndef STASIS_CRIU_H
#define STASIS_CRIU_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

#define CRIU_MIN_VERSION 40000

/* Called for CRIU's notifications ("post-dump", "post-restore", ...);
 * non-zero fails the operation: CRIU resumes a dumped tree, kills a
 * restored one. */
typedef int (*criu_notify_fn)(const char *action);

struct stasis_criu_log;

struct criu_dump_request {
	pid_t pid;
	const char *images_dir;
	const char *work_dir;		   /* where the log goes; NULL: images_dir */
	const char *log_file;		   /* unless log names one */
	const struct stasis_criu_log *log; /* the user's -v and -o; NULL: level 4 */
	bool leave_running;
	bool shell_job;
	bool tcp_established;
	bool ext_unix_sk;
	bool link_remap;	      /* CRIU's --link-remap (mappings_check decides) */
	const char *link_remap_dir;   /* its folder (shm-remap.h) */
	const char *const *externals; /* CRIU --external keys */
	size_t nexternals;
	criu_notify_fn notify;
};

struct criu_restore_request {
	const char *images_dir;
	const char *work_dir;		   /* where the log goes */
	const char *log_file;		   /* unless log names one */
	const struct stasis_criu_log *log; /* the user's -v and -o; NULL: level 4 */
	bool detach;			   /* restored tree is not our child */
	bool shell_job;
	bool tcp_established;
	bool ext_unix_sk;
	const char *link_remap_dir;	 /* the image's link-remap folder, or NULL */
	const char *const *inherit_keys; /* CRIU --inherit-fd: key and our fd */
	const int *inherit_fds;
	size_t ninherit;
	/* "post-restore" comes with the tree restored but not yet running;
	 * non-zero there makes CRIU kill it. */
	criu_notify_fn notify;
};

/* Path of the criu binary stasis uses: $STASIS_CRIU, next to stasis, PATH. */
const char *criu_binary(void);

/* CRIU must be there; sets up the environment every CRIU run inherits
 * (CRIU_FAULT where breakpoints fail, CRIU_LIBS_DIR, CRIU_PAGE_WRITERS,
 * CRIU_PAGE_WRITER_CHUNKS, CRIU_PAGE_WRITER_PARTS made empty),
 * also for CRIU runs started by a container runtime. */
int criu_require(struct stasis_error **err);

/* CRIU_FILL_THREADS, how many threads fill each task's memory at a
 * restore: reserve makes the variable before any thread starts (unless the
 * user set it), configure gives it its value for an image of nprocs
 * processes (only where reserve made it). */
void criu_reserve_fill_threads(void);
void criu_configure_fill_threads(size_t nprocs);

/* How many processes write a dump's pages (CRIU_PAGE_WRITERS, which
 * criu_require sets); 1 when each task's are written while it is dumped. */
int criu_page_writers(void);

/* Whether a task too big for its pipes is handed to the writers in chunks
 * (CRIU_PAGE_WRITER_CHUNKS=1, which criu_require sets, with writers). */
bool criu_page_writer_chunks(void);

/* With stasis's CRIU and chunks, a dump staged in memory writes a big
 * task's pages from several writers at once, each chunk after a task's
 * first into a file of its own (CRIU_PAGE_WRITER_PARTS=1), which the
 * staging's commit appends to its pages image (image-stage.h): one file
 * takes one writer's copy at a time. Set by criu_stage_page_parts, for
 * that dump only; the user's "0" keeps it off. */
void criu_stage_page_parts(void);
bool criu_page_writer_parts(void);

/* The size from which a process's pages go in parts once staged: its
 * share of the writers is a chunk of its own from 64 MiB on. 0 where
 * parts cannot be had (no chunks, or the user's "0"). On the GPU machine
 * an 8.8 GB PyTorch job, which the page cache took below the dirty limit,
 * was frozen 1.19 s staged in 8 parts against 3.39 s written to disk
 * through one file (its pause 5.1 s against 7.4 s). */
uint64_t criu_page_part_bytes(void);

/* 40101 for 4.1.1; checks presence and minimum version (asked of the
 * binary once a run), and sets up CRIU's environment as criu_require. */
int criu_version(struct stasis_error **err);

/* "4.1.1" for 40101 into buf. */
const char *criu_version_string(int version, char *buf, size_t len);

/* CRIU's own "criu check". */
int criu_run_check(struct stasis_error **err);

int criu_run_dump(const struct criu_dump_request *req, struct stasis_error **err);

/* Returns the PID of the restored root through root_out. */
int criu_run_restore(const struct criu_restore_request *req, pid_t *root_out,
		     struct stasis_error **err);

#endif
