/* SPDX-License-Identifier: MIT */
/* What /proc says about processes: existence, state, the tree below a PID. */
#ifndef STASIS_PROC_H
#define STASIS_PROC_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"
#include "manifest.h"

/* 'R', 'S', 'Z', ... or 0 when the process does not exist. */
char proc_state(pid_t pid);
/* True when the process is gone or on its way out: a zombie, or exiting. */
bool proc_exiting(pid_t pid);
pid_t proc_ppid(pid_t pid);
/* comm into buf ("?" when unknown); returns buf. */
const char *proc_comm(pid_t pid, char *buf, size_t len);

/* Calls fn for each descriptor of pid with the folder /proc/PID/fd open
 * (dirfd), the descriptor's name there and its link's target ("/path",
 * "socket:[N]"); stops at fn's first non-zero answer and returns it. 0
 * when the folder cannot be read (the process is gone). */
int proc_each_fd(pid_t pid, int (*fn)(int dirfd, const char *fd, const char *target, void *ctx),
		 void *ctx);
/* Its PID inside its own (innermost) PID namespace; 0 when unknown. */
pid_t proc_ns_pid(pid_t pid);

/* fn(text, ctx) with the text of /proc/PID/task/TID/NAME of each thread
 * that has it (fn may change the text), until fn returns non-zero, which
 * is returned. */
int proc_each_thread_file(pid_t pid, const char *name, int (*fn)(char *text, void *ctx), void *ctx);
/* cmdline with NULs turned into spaces; the caller frees it. */
char *proc_cmdline(pid_t pid);

/* 0 when pid names a live process, else ESRCH "no process with PID". */
int proc_require(pid_t pid, struct stasis_error **err);

/* All PIDs of the tree rooted at root, root first, breadth-first. */
int proc_tree(pid_t root, pid_t **pids_out, size_t *n_out, struct stasis_error **err);

/* Add pid to m->procs: parent, comm, cmdline. */
int proc_describe(pid_t pid, struct manifest *m, struct stasis_error **err);

/* Its cgroup (v2) path, "/a/b"; empty when unknown. */
void proc_cgroup(pid_t pid, char *out, size_t len);

/* Add the tree rooted at root to m->procs. */
int proc_tree_describe(pid_t root, struct manifest *m, struct stasis_error **err);

/* True when pid is this process or one of its ancestors. */
bool proc_is_self_or_ancestor(pid_t pid);

/* pid's private memory in RAM (RssAnon), in bytes; 0 when unknown. */
uint64_t proc_rss_anon(pid_t pid);

#endif
