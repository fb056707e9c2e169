/* SPDX-License-Identifier: MIT */
/* libstasis: checkpoint and restore of process trees that use NVIDIA GPUs.
 * Every function returns 0 or a negative errno-style value with *err set. */
#ifndef STASIS_H
#define STASIS_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"
#include "image-seal.h"
#include "manifest.h"

#define STASIS_VERSION "0.1.0"

/* CRIU's log, as criu's -v and -o set it: a process tree's only (a
 * container runtime runs CRIU with its own). */
struct stasis_criu_log {
	const char *file; /* a name in CRIU's work folder; NULL: dump.log, restore.log */
	int level;	  /* CRIU's 0 (none) to 4 (all), where level_given */
	bool level_given; /* else 4 */
};

struct stasis_checkpoint_options {
	pid_t pid;
	const char *runtime;   /* "runc" or "containerd" for a container, NULL for a tree */
	const char *container; /* its id, with runtime */
	const char *namespace; /* containerd's namespace; NULL: $CONTAINERD_NAMESPACE, "default" */
	const char *address;   /* containerd's socket; NULL: $CONTAINERD_ADDRESS, its default */
	const char *dir;
	bool leave_running;
	bool shell_job;
	bool tcp_established;
	bool ext_unix_sk; /* CRIU's --ext-unix-sk: sockets whose peer is not in the tree */
	struct stasis_criu_log criu_log;
	unsigned int lock_timeout_ms;
	bool thp_always; /* transparent huge pages "always" meanwhile (thp.h) */
	bool no_thp;	 /* not the huge pages its GPU step gets (thp.h) */
	bool compress;	 /* zstd the pages images (image-pack.c) */
	bool no_stage;	 /* with leave_running, never stage the image in memory */
	bool stage;	 /* with leave_running, stage even what the page cache would take */
};

/* Checkpoint the tree rooted at pid, or the container, into dir; m
 * receives the manifest. */
int stasis_checkpoint(const struct stasis_checkpoint_options *opts, struct manifest *m,
		      struct stasis_error **err);

struct stasis_restore_options {
	const char *dir;
	const char *runtime;   /* "runc" or "containerd" for a container image */
	const char *namespace; /* containerd's; NULL: the image's */
	const char *address;   /* containerd's socket, as at checkpoint */
	const char *bundle;    /* instead of the one in the manifest */
	const char *name;      /* a new container id */
	bool detach;	       /* leave the restored tree to init */
	const char *gpu_map;   /* "OLD=NEW,..." or NULL */
	bool thp_always;       /* transparent huge pages "always" meanwhile */
	/* CRIU's options as the user gave them again at restore: the image's
	 * are used whatever they say, and one that the image lacks is a note
	 * that it changes nothing. */
	bool shell_job, tcp_established, ext_unix_sk;
	struct stasis_criu_log criu_log;
	/* Keys besides the host's that may have sealed the image (--trust-key). */
	struct image_trust trust;
};

/* Restore the image in dir. m receives the manifest with restore timings;
 * root_out the PID of the restored root (a child of the caller unless
 * detach; a container's init is always the runtime's). */
int stasis_restore(const struct stasis_restore_options *opts, struct manifest *m, pid_t *root_out,
		   struct stasis_error **err);

/* Stats as podman prints them: phases, per-process GPU timings, sizes. */
char *stasis_stats_json(const struct manifest *m);

/* Set by SIGINT/SIGTERM while an operation runs: it stops and rolls back. */
void stasis_install_interrupt_handlers(void);
bool stasis_interrupted(void);

/* Must be root: CRIU and the driver's checkpoint API need it. */
int stasis_require_root(struct stasis_error **err);

#endif
