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
	char status[32];	  /* its task's, lower case: "running", "stopped", ...;
				   * "created" when it has no task */
	pid_t pid;		  /* its task's init on the host; 0 without a task */
	char image[256];	  /* "" for a container made from a root folder */
	char snapshot[256];	  /* its root's snapshot key, "" when none */
	char snapshotter[64];	  /* the snapshotter that holds it */
	char runc_root[PATH_MAX]; /* the runc state folder its shim uses */
	char *spec;		  /* its OCI spec, JSON text (the caller frees) */
	/* The CRI's ContainerConfig of a container the CRI made (the kubelet's
	 * request, with its name, labels and annotations), JSON text, else
	 * NULL (the caller frees). */
	char *cri_config;
};

/* What containerd_container filled in c that it made (spec, cri_config). */
void containerd_container_free(struct containerd_container *c);

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

/* A container to start, its stdio /dev/null, run by runc_binary (which
 * makes containerd's runc create a restore): from the OCI spec in
 * spec_file (a root folder), or from image on a new snapshot with args as
 * its command (the runc link puts the image's own spec in place). */
struct containerd_run {
	const char *id;
	const char *runc_binary;
	const char *spec_file;
	const char *image;
	const char *snapshotter;
	const char *const *args; /* NULL-terminated; NULL for the image's */
};

int containerd_run(const struct containerd *c, const struct containerd_run *run,
		   struct stasis_error **err);

/* The digest of image ref in c's namespace into digest (ENOENT "image ...
 * is not in containerd's namespace ..." when it is not there). */
int containerd_image_digest(const struct containerd *c, const char *ref, char *digest, size_t len,
			    struct stasis_error **err);

/* The changes of snapshot key against its parent as an uncompressed OCI
 * layer tar (whiteouts for deletions), written to fd. */
int containerd_snapshot_diff(const struct containerd *c, const char *snapshotter, const char *key,
			     int fd, struct stasis_error **err);

/* ctr tasks pause / resume: the task's cgroup frozen or thawed. */
int containerd_task_pause(const struct containerd *c, const char *id, struct stasis_error **err);
int containerd_task_resume(const struct containerd *c, const char *id, struct stasis_error **err);

/* The ids of c's namespace's containers, one a line, into *ids (the caller
 * frees); -errno or ctr's status when containerd did not answer. */
int containerd_ids(const struct containerd *c, char **ids);

#endif
