/* SPDX-License-Identifier: MIT */
/* containerd, driven through its client, ctr: the only file that knows it.
 * The socket is found as ctr finds it (--address, else CONTAINERD_ADDRESS,
 * else containerd's default), the namespace as well (--namespace, else
 * CONTAINERD_NAMESPACE, else "default"). */
#ifndef STASIS_CONTAINERD_H
#define STASIS_CONTAINERD_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

struct containerd {
	char address[PATH_MAX];
	char namespace[128];
};

struct containerd_container {
	char id[256];
	char status[32]; /* its task's, lower case: "running", "stopped", ...;
			  * "created" when it has no task */
	pid_t pid;	 /* its task's init on the host; 0 without a task */
	char image[256]; /* "" for a container made from a root folder */
	char snapshot[256];
	char runc_root[PATH_MAX]; /* the runc state folder its shim uses */
	char *spec;		  /* its OCI spec, JSON text (the caller frees) */
};

/* The client for address and namespace (NULL: as ctr picks them). */
void containerd_client(struct containerd *c, const char *address, const char *namespace);

/* ctr is there and containerd answers at c's address. */
int containerd_require(const struct containerd *c, struct stasis_error **err);

/* ENOENT "no container 'ID' in namespace NS" when containerd does not know
 * it (or the namespace). The caller frees out->spec. */
int containerd_container(const struct containerd *c, const char *id,
			 struct containerd_container *out, struct stasis_error **err);

/* Every container of every namespace, as "NS" and its fields, appended to
 * *list (spec not filled). Returns how many, or -errno. */
struct target_container;
int containerd_list(const struct containerd *c, struct target_container **list, size_t *n);

/* Remove id's task (killed first when it runs) and its container. */
void containerd_remove(const struct containerd *c, const char *id);

/* Start container id with the OCI spec in spec_file, its stdio /dev/null,
 * run by runc_binary (which makes containerd's runc create a restore). */
int containerd_run(const struct containerd *c, const char *id, const char *spec_file,
		   const char *runc_binary, struct stasis_error **err);

#endif
