/* SPDX-License-Identifier: MIT */
/* Every check made before anything changes, as two tables with a cause
 * code each: one over a tree that checkpoint and migrate describe (its
 * manifest, gathered in one pass of /proc, and its CUDA processes), one
 * over a single running process, for gpu suspend and stasis ps. A refusal
 * names its check's code at the end of its one line ("[preflight: nccl]"),
 * and stasis ps shows each process's verdict by the same codes. */
#ifndef STASIS_PREFLIGHT_CHECKS_H
#define STASIS_PREFLIGHT_CHECKS_H
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"
#include "gpu.h"
#include "manifest.h"

/* What a tree's checks read: the facts, and the operation's shape. */
struct preflight_tree {
	struct manifest *m;	 /* the tree, described */
	struct gpu_batch *batch; /* its CUDA processes */
	const char *dir;	 /* where the image goes */
	bool compress;		 /* --compress: its size is not known yet */
	bool keeps_running;	 /* --leave-running */
	bool same_machine;	 /* false: a migration */
};

struct preflight_tree_check {
	const char *cause;
	int (*run)(const struct preflight_tree *t, struct stasis_error **err);
};

/* The tree's checks, in the order they run. */
extern const struct preflight_tree_check preflight_tree_checks[];
extern const size_t preflight_tree_nchecks;

/* GPU work needs stasis's CRIU: refused (cause "criu") where the CRIU
 * stasis runs takes no settings; for restores too. */
int preflight_criu_for_gpus(struct stasis_error **err);

/* Every tree check in turn; the first refusal, with its cause. */
int preflight_tree_run(const struct preflight_tree *t, struct stasis_error **err);

/* What a running process's checks read. */
struct preflight_process {
	pid_t pid;
	const char *comm;
	bool cuda;		 /* it has a CUDA context */
	unsigned int device_fds; /* /dev/nvidia* descriptors it holds */
	bool in_container;	 /* a container's runtime makes its namespaces */
};

/* A row checks one thing of a process: refuse for gpu suspend (NULL: not
 * its concern), blocker for stasis ps, a short why (NULL: not shown). */
struct preflight_process_check {
	const char *cause;
	int (*refuse)(const struct preflight_process *p, struct stasis_error **err);
	bool (*blocker)(const struct preflight_process *p, char *why, size_t len);
};

extern const struct preflight_process_check preflight_process_checks[];
extern const size_t preflight_process_nchecks;

/* gpu suspend: the first refusal, with its cause. */
int preflight_process_refuse(const struct preflight_process *p, struct stasis_error **err);

/* stasis ps: the first blocker's cause, its why in why; NULL where none. */
const char *preflight_process_blocker(const struct preflight_process *p, char *why, size_t len);
#endif
