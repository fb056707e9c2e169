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
typedef int (*criu_notify_fn)(const char *action, void *ctx);

struct stasis_criu_log;
struct criu_settings;

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
	const struct criu_settings *settings; /* the operation's; NULL: none */
	criu_notify_fn notify;
	void *notify_ctx; /* notify's second argument */
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
	const struct criu_settings *settings; /* the operation's; NULL: none */
	/* "post-restore" comes with the tree restored but not yet running;
	 * non-zero there makes CRIU kill it. */
	criu_notify_fn notify;
	void *notify_ctx; /* notify's second argument */
};

/* Path of the criu binary stasis uses: $STASIS_CRIU, next to stasis, PATH. */
const char *criu_binary(void);

/* The first executable name in $PATH's folders, into out. */
bool criu_find_in_path(const char *name, char *out, size_t len);

/* CRIU must be there. */
int criu_require(struct stasis_error **err);
/* 40101 for 4.1.1; checks presence and minimum version (asked of the
 * binary once a run). */
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
