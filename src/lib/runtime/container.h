/* SPDX-License-Identifier: MIT */
/* What the container targets (runc.c's, containerd's) share: a container's
 * processes described from the host, and found again after a restore by
 * their PIDs inside the container, which CRIU keeps. */
#ifndef STASIS_CONTAINER_H
#define STASIS_CONTAINER_H

#include <sys/types.h>

#include "error.h"
#include "manifest.h"
#include "target.h"

/* m's container (runtime, t's id, bundle and namespace, its OCI spec as
 * JSON text) and its processes pids, each with its PID inside it. */
int container_describe(const struct target *t, struct manifest *m, const char *spec,
		       const pid_t *pids, size_t n, struct stasis_error **err);

/* New host PIDs for m's processes among pids (the restored container's),
 * matched by their PIDs inside it. Every CUDA process must be there; the
 * others may have come and gone since (a shell's short-lived children). */
int container_adopt(const struct target *t, struct manifest *m, const pid_t *pids, size_t n,
		    struct stasis_error **err);

/* The processes of the container whose init is init on the host: its
 * tree and every other member of its cgroup (exec'd processes). The
 * caller frees *pids. */
int container_processes(pid_t init, pid_t **pids, size_t *n, struct stasis_error **err);

/* EINVAL "container ID is not running (it is STATUS)". */
int container_require_running(const char *id, const char *status, struct stasis_error **err);

#endif
