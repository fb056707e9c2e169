/* SPDX-License-Identifier: MIT */
/* Namespaces of a process tree that CRIU cannot bring back here, found
 * before anything changes. Tried kind by kind with unshare: a tree in a
 * network, IPC, UTS or time namespace of its own, or in a PID namespace
 * whose first process is its root, is saved and restored. CRIU saves a
 * tree in a user or cgroup namespace of its own and then fails every
 * restore of it (the tree would be lost), and so it does for a process in
 * another network namespace than its root's; it fails the dump of a mount
 * namespace of the tree's own and of any other namespace nested in the
 * tree, only after the GPU state was checkpointed. */
#ifndef STASIS_NAMESPACES_H
#define STASIS_NAMESPACES_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"
#include "manifest.h"

/* The kinds, as /proc/PID/ns names them. */
enum ns_kind {
	NS_USER,
	NS_MNT,
	NS_PID,
	NS_NET,
	NS_IPC,
	NS_UTS,
	NS_CGROUP,
	NS_TIME,
	NS_PID_FOR_CHILDREN,
	NS_TIME_FOR_CHILDREN,
	NS_KINDS,
};

/* A process's namespaces: the inode of each kind, 0 where unknown (a
 * kind this kernel lacks, or the process is gone). */
struct proc_namespaces {
	unsigned long ino[NS_KINDS];
	pid_t ns_pid; /* its PID in its own PID namespace */
};

enum ns_refusal {
	NS_RESTORES,	  /* nothing here that CRIU cannot restore */
	NS_OWN,		  /* a namespace of its own of a kind CRIU loses */
	NS_NESTED,	  /* another namespace than its tree's root's */
	NS_FOR_CHILDREN,  /* its children are made in another one */
	NS_PID_NOT_FIRST, /* a PID namespace of its own, not as its first process */
	NS_PID_CUDA,	  /* a CUDA process in a PID namespace of its own */
};

struct ns_verdict {
	enum ns_refusal why;
	enum ns_kind kind;
};

/* "user", "mnt", ... as /proc/PID/ns names the kind. */
const char *namespaces_kind_name(enum ns_kind kind);

/* Fills *ns from /proc/PID/ns (/proc/self/ns for pid 0); a negative
 * errno where the process is there but its namespaces cannot be read. */
int namespaces_read(pid_t pid, struct proc_namespaces *ns);

/* The verdict on process p of a tree whose root is root (p itself where
 * is_root), against the namespaces stasis and its CRIU run in (self).
 * pidns_cuda_ok: the restore finds CUDA processes by their PIDs inside
 * their PID namespace (a migration), not by the PIDs they had here. */
struct ns_verdict namespaces_judge(const struct proc_namespaces *self,
				   const struct proc_namespaces *root,
				   const struct proc_namespaces *p, bool is_root, bool cuda,
				   bool pidns_cuda_ok);

/* Refuse, naming the process and the namespace, a tree of m (not a
 * container's: its runtime makes its namespaces) with a namespace that
 * CRIU cannot restore here. */
int namespaces_check(const struct manifest *m, bool pidns_cuda_ok, struct stasis_error **err);

/* For stasis ps, where the tree is not known: why a process of no
 * container cannot be checkpointed as a tree for its own namespaces,
 * into why; false when nothing of them blocks it. */
bool namespaces_blocker(pid_t pid, bool cuda, char *why, size_t len);

#endif
