/* SPDX-License-Identifier: MIT */
/* The facts a restore checks in CRIU's own image files: its process tree
 * (pstree.img) and each thread's name and credentials (core-TID.img),
 * decoded with the protobuf-c code of CRIU's build as criu-images.h's views
 * are, and held to more: a field stasis reads given twice or a value past
 * 32 bits is refused, as another reader (CRIU's own) could read it
 * otherwise, and so is a tree CRIU would not restore as stated or a live
 * thread without its credentials. */
#ifndef STASIS_CRIU_TREE_H
#define STASIS_CRIU_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "manifest.h"

/* Bounds on what is read, beside criu-images.h's: far above what a dump
 * writes. */
#define CRIU_CORE_MAX_BYTES (4u << 20)	  /* a core-TID.img */
#define CRIU_IMAGE_MAX_THREADS (1u << 20) /* in the whole tree */

/* A task's state in its core (CRIU's TASK_DEAD): a zombie, restored as
 * one, without credentials or threads (CRIU writes whatever its memory
 * held as a zombie's thread). */
#define CRIU_TASK_DEAD 2

struct criu_image_process {
	pid_t pid, ppid, pgid, sid; /* as CRIU restores them */
	uint32_t *threads;	    /* their TIDs, the leader's among them */
	size_t nthreads;
	char comm[32]; /* from its leader's core */
	bool zombie;
	struct manifest_creds creds; /* every thread's; unknown for a zombie */
};

struct criu_image_tree {
	struct criu_image_process *procs; /* in pstree.img's order, the root first */
	size_t nprocs;
};

/* One thread's core, as far as the tree reads it. */
struct criu_image_core {
	char comm[32];
	uint32_t task_state; /* 0 where the core has no task state */
	bool has_thread_core;
	bool has_creds;
	struct manifest_creds creds;
};

/* Decoders of a whole file's bytes, for the unit tests as for the files:
 * pstree.img holds at most MANIFEST_MAX_PROCESSES processes, each after
 * its parent, no PID twice; a core is one entry. */
int criu_image_parse_pstree(const uint8_t *buf, size_t len, struct criu_image_tree *tree,
			    struct stasis_error **err);
int criu_image_parse_core(const uint8_t *buf, size_t len, struct criu_image_core *core,
			  struct stasis_error **err);

/* The tree of the image in dir (CRIU's folder): pstree.img, then each
 * process's core and, but for a zombie, each of its threads'; a thread
 * without credentials, or with others than its leader's (the manifest
 * records them per process), is refused. */
int criu_image_tree_read(const char *dir, struct criu_image_tree *tree, struct stasis_error **err);
void criu_image_tree_free(struct criu_image_tree *tree);

#endif
