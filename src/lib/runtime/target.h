/* SPDX-License-Identifier: MIT */
/* What stasis checkpoints and restores: a process tree, or a container of
 * a runtime (runc, containerd). The orchestration in checkpoint.c and
 * restore.c does the GPU steps, the preflight, the stats and the manifest
 * once for all of them; a target only knows how to find its processes,
 * save them and bring them back. One file per target, each filling one
 * const struct target_ops. Internal to the library. */
#ifndef STASIS_TARGET_H
#define STASIS_TARGET_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "criu-settings.h"
#include "error.h"
#include "gpumap.h"
#include "image.h"
#include "manifest.h"
#include "stasis.h"

struct target;

/* A container as stasis ps lists it. */
struct target_container {
	const char *runtime;
	char namespace[128]; /* containerd's; empty for runc */
	char id[256];
	char status[32]; /* "running", "stopped", "paused", "created" */
	pid_t pid;	 /* its init process, on the host; 0 when none */
	char bundle[PATH_MAX];
	char image[256]; /* the image it runs (containerd); empty when unknown */
};

struct target_ops {
	const char *runtime; /* as --runtime names it; NULL for a process tree */
	/* Its image may be compressed (--compress). */
	bool compresses;
	/* The image is sealed (checksums, manifest) inside dump, while the
	 * workload is still frozen; otherwise the orchestration seals it after
	 * the dump and the GPU resume; if that fails, the workload is
	 * restored from the image just written rather than lost. */
	bool seals_in_dump;
	/* The restore brings the processes back at the image's own PIDs (a
	 * tree): the orchestration locks the root's PID and waits for them to
	 * be free. A container comes back in a new PID namespace. */
	bool same_pids;
	/* The restore lets the processes run only once the image's pages are
	 * verified (CRIU's post-restore notification); otherwise the whole
	 * image is verified before the restore starts. */
	bool verifies_in_restore;
	const char *restore_phase; /* the restore's name among the timings */

	/* The containers the runtime knows, appended to *list (n entries, the
	 * caller frees it). NULL for a tree. */
	int (*list)(struct target_container **list, size_t *n, struct stasis_error **err);

	/* Checkpoint. find: is it there, can it be checkpointed (before
	 * anything changes); sets t->root, the process locked meanwhile. */
	int (*find)(struct target *t, struct stasis_error **err);
	/* Its processes into m, with what a restore elsewhere needs. */
	int (*describe)(struct target *t, struct manifest *m, struct stasis_error **err);
	/* Freeze and save the processes (their GPU state already in host
	 * memory) into t->dir; the workload is gone after unless
	 * leave_running. Records its phase in m. */
	int (*dump)(struct target *t, struct manifest *m, struct stasis_error **err);
	/* Migration (migrate/source.c): save the processes into t->images,
	 * whose pages images are pipes to the wire, and call held(ctx) while
	 * they are still frozen. Its 0 lets the dump end the workload here;
	 * anything else has it run again, and is returned. NULL: the target
	 * is not migrated. */
	int (*dump_held)(struct target *t, struct manifest *m, int (*held)(void *ctx), void *ctx,
			 struct stasis_error **err);
	/* Restore. restore_check: before anything runs (the name free, the
	 * bundle there, the runtime answering); CRIU is checked after it. May
	 * be NULL. */
	int (*restore_check)(struct target *t, const struct manifest *m, struct stasis_error **err);
	/* Bring the processes back from t->images (verifier is NULL when the
	 * image was just written); *root their root (or the container's init)
	 * on the host. The GPU handoff serves meanwhile. */
	int (*restore)(struct target *t, struct manifest *m, struct image_verifier *verifier,
		       pid_t *root, struct stasis_error **err);
	/* After restore: every process of m gets its new host PID. May be
	 * NULL when the PIDs are the image's. */
	int (*adopt)(struct target *t, struct manifest *m, pid_t *root, struct stasis_error **err);
	/* After a failed restore: kill what it brought back (restored: the
	 * processes may exist; root > 0 when the restore returned it). The
	 * image stays intact. Says what it did in err's hint. */
	void (*destroy)(struct target *t, struct manifest *m, pid_t root, bool restored,
			struct stasis_error **err);
};

struct target {
	const struct target_ops *ops;
	const char *dir; /* the image folder */
	/* At checkpoint, else NULL. */
	const struct stasis_checkpoint_options *checkpoint;
	/* At restore, else NULL. */
	const struct stasis_restore_options *restore;
	pid_t root;		  /* at checkpoint: the process locked meanwhile */
	char id[256];		  /* a container's id (the new one at restore) */
	char bundle[PATH_MAX];	  /* a container's bundle */
	char namespace[128];	  /* containerd's namespace */
	char address[PATH_MAX];	  /* containerd's socket */
	char runc_root[PATH_MAX]; /* runc's state folder under containerd's shim */
	char snapshot[256];	  /* containerd: its root's snapshot key, or "" */
	char snapshotter[64];	  /* containerd: the snapshotter that holds it */
	char images[PATH_MAX];	  /* CRIU's image folder: inside dir, or the stage */
	char stage[PATH_MAX];	  /* at checkpoint, a staging folder in memory, or "" */
	bool thp_for_gpu_step;	  /* at checkpoint: huge pages set until the GPU checkpoint */
	/* Root's work folder for CRIU's log and statistics and a runtime's
	 * work, never inside the image (run-work.h): at checkpoint, so that a
	 * failed one leaves the image folder as it found it; at restore, as
	 * the image may be read-only. "": at checkpoint, the image's CRIU
	 * folder; at restore, a folder restore-PID in dir (a migration's
	 * staging folder). */
	char work[PATH_MAX];
	/* What its CRIU gets beyond its options: the GPU handoff's socket, the
	 * restore's device map, ... (criu-settings.h) */
	struct criu_settings criu;
};

extern const struct target_ops target_tree;
extern const struct target_ops target_runc;
extern const struct target_ops target_containerd;

/* The target that --runtime names (NULL: a process tree); ENOTSUP "unknown
 * runtime" otherwise. */
int target_for_runtime(const char *runtime, const struct target_ops **ops,
		       struct stasis_error **err);

/* The target that made the image in m, checked against what the user
 * asked for (--runtime). */
int target_for_image(const struct manifest *m, const char *runtime, const struct target_ops **ops,
		     struct stasis_error **err);

/* The target's restore of m from t->images with the GPU handoff serving
 * beside it (plan from restore_gpu_preflight), the image verified already
 * when verifier is NULL; after a failure the target removes what it
 * brought back. restore.c's, for migrate/dest.c too. */
int restore_target_handed_off(struct target *t, struct manifest *m, struct image_verifier *verifier,
			      const struct gpu_plan *plan, pid_t *root_out,
			      struct stasis_error **err);

/* Resumes the runc containers that a stasis run killed by SIGKILL left
 * paused (each such run's mark in the run folder is unlocked); each is a
 * note. Every checkpoint, restore and `stasis ps` runs it first. */
void runc_target_sweep(void);

/* Every container of every runtime that answers; a runtime that is not
 * installed or not running has none. The caller frees *list. */
void target_list_containers(struct target_container **list, size_t *n);

/* t's names at restore: the image's, or the ones the user gave (--name,
 * --bundle, --namespace); a container id or namespace that its runtime
 * would refuse (a "../" in it) is refused before it names a path. */
int target_restore_names(struct target *t, const struct manifest *m, struct stasis_error **err);

/* Whether name is a container id (or a containerd namespace) that the
 * runtime accepts (runtime NULL: runc's rule); else an error that names
 * what it is ("container id"). */
int target_check_name(const char *runtime, const char *what, const char *name,
		      struct stasis_error **err);

#endif
