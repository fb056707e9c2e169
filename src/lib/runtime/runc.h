/* SPDX-License-Identifier: MIT */
/* runc, driven through its command line: the only file that knows it. */
#ifndef STASIS_RUNC_H
#define STASIS_RUNC_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "criu-settings.h"
#include "error.h"

struct runc_container {
	char id[256];
	char status[32]; /* "running", "stopped", "paused", "created" */
	pid_t pid;	 /* its init process, on the host */
	char bundle[PATH_MAX];
};

/* $STASIS_RUNC, else "runc" on PATH. */
const char *runc_binary(void);

/* "PATH=<the folder of stasis's CRIU>:$PATH" into buf, for runc's
 * environment: runc 1.2 and later ignore --criu and run the criu of their
 * PATH. Where stasis's CRIU is not named criu (STASIS_CRIU), the folder is
 * one made here in owner (a folder of root's that the caller made), with a
 * link named criu to it. 1 where it made the link, 0 where none was
 * needed, -errno where it could not: then runc would run another CRIU, and
 * must not run. */
int runc_criu_path(const char *owner, char *buf, size_t len);

/* The link and folder runc_criu_path made in owner, removed. */
void runc_criu_path_done(const char *owner);

/* runc's CRIU reads CRIU_CONFIG_FILE (before runc's own runc.conf): a
 * file of root's, work/criu.conf, with the lines of the user's own
 * CRIU_CONFIG_FILE where one is set, then the operation's settings and,
 * where given, more lines (extra). env gets "CRIU_CONFIG_FILE=...". */
int runc_criu_conf(const char *work, const struct criu_settings *settings, const char *extra,
		   char *env, size_t len, struct stasis_error **err);

/* runc_binary() answers; ENOENT "runc not found" otherwise. */
int runc_require(struct stasis_error **err);

/* ENOENT "no container 'ID'" when runc does not know it. */
int runc_state(const char *id, struct runc_container *c, struct stasis_error **err);
/* The same in runc's state folder root (--root). */
int runc_state_at(const char *root, const char *id, struct runc_container *c,
		  struct stasis_error **err);

/* Every container runc knows; the caller frees *out. */
int runc_list(struct runc_container **out, size_t *n, struct stasis_error **err);

/* runc checkpoint into images (CRIU's image folder), with its CRIU and
 * work folder; the container is gone after unless leave_running. root is
 * runc's state folder (--root), NULL for runc's own. */
int runc_checkpoint(const char *root, const char *id, const char *images, const char *work,
		    bool leave_running, const struct criu_settings *settings,
		    struct stasis_error **err);

/* runc restore --detach from images as container id with bundle. */
int runc_restore(const char *id, const char *bundle, const char *images, const char *work,
		 const struct criu_settings *settings, struct stasis_error **err);

/* The cgroup v2 path (from the hierarchy's root) that runc's cgroupfs driver
 * gives container id: the spec's linux.cgroupsPath (cgroups_path, NULL or
 * "" for none) when absolute, else that path or id beside runc's own cgroup
 * (own: "/a/b" from /proc/self/cgroup, so "/a/ID"). Into out. */
void runc_cgroup2_path(const char *own, const char *cgroups_path, const char *id, char *out,
		       size_t len);

/* Kill and delete a container (after a failed restore). */
void runc_destroy(const char *id);

/* runc pause / runc resume: its cgroup frozen or thawed. */
int runc_pause(const char *id, struct stasis_error **err);
int runc_resume(const char *id, struct stasis_error **err);

/* SIGKILL to every process of a paused container, which runc thaws to
 * deliver it: none of them runs another instruction of its own. Then
 * delete it. */
void runc_kill_paused(const char *id);

#endif
