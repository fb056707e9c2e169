/* SPDX-License-Identifier: MIT */
/* containerd cannot start a task from a CRIU image folder; its shim only
 * runs "runc create" and "runc start". So a container that stasis restores
 * under containerd is given stasis itself as its runc binary, through a
 * link named RUNC_WRAP_NAME in a folder of its own: there the first
 * "create" becomes "runc restore" of the image a request file names, its
 * "start" does nothing, and every other command (kill, delete, state) goes
 * to runc unchanged, with stasis's CRIU. The shim owns the restored
 * process as it owns any task. */
#ifndef STASIS_RUNC_WRAP_H
#define STASIS_RUNC_WRAP_H

#include <stddef.h>

#include "error.h"

#define RUNC_WRAP_NAME "stasis-runc"

struct runc_wrap_request {
	const char *images;	   /* CRIU's image folder */
	const char *work;	   /* runc's and CRIU's logs */
	const char *plugin_socket; /* the GPU handoff's, "" when none */
	const char *dev_map;	   /* STASIS_NVIDIA_DEV_MAP */
	/* A container on an image snapshot: the OCI spec that replaces the
	 * one containerd wrote in the bundle, and its writable layer's
	 * changes, applied onto the bundle's root before CRIU runs; "" for a
	 * container whose root is a folder. */
	const char *spec;
	const char *rootfs_diff;
};

/* The link for a restore in folder dir (made if needed), with the request
 * that its next "create" restores; *link gets its path. */
int runc_wrap_prepare(const char *dir, const struct runc_wrap_request *req, char *link, size_t len,
		      struct stasis_error **err);

/* The link's folder, once its container is gone. */
void runc_wrap_remove(const char *dir);

/* Run as RUNC_WRAP_NAME: what the shim asked of runc. */
int runc_wrap_main(int argc, char **argv);

#endif
