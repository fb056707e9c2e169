/* SPDX-License-Identifier: MIT */
#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* /proc/PID/stat: "pid (comm) S ppid pgrp session tty tpgid flags ...";
 * comm may hold spaces and ')'. ppid and flags may be NULL. */
static int read_stat(pid_t pid, char *state, pid_t *ppid, unsigned int *flags)
{
	char path[64];
	_cleanup_free_ char *stat = NULL;
	char *close_paren;
	unsigned int fl;
	int pp;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	stat = read_file_str(path, NULL);
	if (!stat)
		return -errno;
	close_paren = strrchr(stat, ')');
	if (!close_paren ||
	    sscanf(close_paren + 1, " %c %d %*d %*d %*d %*d %u", state, &pp, &fl) != 3)
		return -EINVAL;
	if (ppid)
		*ppid = pp;
	if (flags)
		*flags = fl;
	return 0;
}

char proc_state(pid_t pid)
{
	char state;

	if (pid <= 0 || read_stat(pid, &state, NULL, NULL) < 0)
		return 0;
	return state;
}

bool proc_exiting(pid_t pid)
{
	/* The kernel's PF_EXITING: set on every thread once exit has begun,
	 * long before the process is a zombie (its memory and the driver's
	 * handles are torn down in between). */
	const unsigned int pf_exiting = 0x4;
	unsigned int flags;
	char state;
	int r = read_stat(pid, &state, NULL, &flags);

	if (r < 0)
		return r == -ENOENT || r == -ESRCH;
	return state == 'Z' || state == 'X' || state == 'x' || (flags & pf_exiting);
}

pid_t proc_ppid(pid_t pid)
{
	char state;
	pid_t ppid;

	if (read_stat(pid, &state, &ppid, NULL) < 0)
		return -1;
	return ppid;
}

const char *proc_comm(pid_t pid, char *buf, size_t len)
{
	char path[64];
	_cleanup_free_ char *comm = NULL;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	comm = read_file_str(path, NULL);
	snprintf(buf, len, "%s", comm ? strip_trailing(comm) : "?");
	return buf;
}

int proc_each_fd(pid_t pid, int (*fn)(int dirfd, const char *fd, const char *target, void *ctx),
		 void *ctx)
{
	char path[64], target[PATH_MAX];
	struct dirent *de;
	int r = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return 0;
	while (r == 0 && (de = readdir(dir))) {
		ssize_t len = readlinkat(dirfd(dir), de->d_name, target, sizeof(target) - 1);

		if (len <= 0)
			continue;
		target[len] = '\0';
		r = fn(dirfd(dir), de->d_name, target, ctx);
	}
	closedir(dir);
	return r;
}

char *proc_cmdline(pid_t pid)
{
	char path[64];
	size_t len = 0;
	char *cmd;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	cmd = read_file_str_max(path, PROC_STRINGS_MAX, &len);
	if (!cmd)
		return strdup("");
	for (size_t i = 0; i + 1 < len; i++)
		if (cmd[i] == '\0')
			cmd[i] = ' ';
	return cmd;
}

static int push_pid(pid_t **pids, size_t *n, size_t *cap, pid_t pid)
{
	pid_t *p;

	for (size_t i = 0; i < *n; i++)
		if ((*pids)[i] == pid)
			return 0;
	p = grow_array(*pids, *n, cap, sizeof(*p), 16);
	if (!p)
		return -ENOMEM;
	*pids = p;
	(*pids)[(*n)++] = pid;
	return 0;
}

/* Children of every thread of pid, from /proc/PID/task/TID/children. */
int proc_each_thread_file(pid_t pid, const char *name, int (*fn)(char *text, void *ctx), void *ctx)
{
	char path[64];
	DIR *d;
	struct dirent *de;
	int r = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return 0; /* it exited meanwhile */
	while (r == 0 && (de = readdir(d))) {
		char tpath[128];
		_cleanup_free_ char *text = NULL;

		if (de->d_name[0] == '.')
			continue;
		snprintf(tpath, sizeof(tpath), "/proc/%d/task/%s/%s", (int)pid, de->d_name, name);
		text = read_file_str(tpath, NULL);
		if (text)
			r = fn(text, ctx);
	}
	closedir(d);
	return r;
}

struct pid_set {
	pid_t **pids;
	size_t *n, *cap;
};

static int push_children(char *children, void *ctx)
{
	struct pid_set *set = ctx;
	char *save = NULL;
	int r = 0;

	for (char *tok = strtok_r(children, " \n", &save); tok && r == 0;
	     tok = strtok_r(NULL, " \n", &save))
		r = push_pid(set->pids, set->n, set->cap, (pid_t)atoi(tok));
	return r;
}

static int add_children(pid_t pid, pid_t **pids, size_t *n, size_t *cap)
{
	struct pid_set set = {.pids = pids, .n = n, .cap = cap};

	return proc_each_thread_file(pid, "children", push_children, &set);
}

int proc_require(pid_t pid, struct stasis_error **err)
{
	if (pid > 0 && proc_state(pid))
		return 0;
	stasis_error_set(err, ESRCH, STASIS_DOMAIN_USAGE, 0, "no process with PID %d", (int)pid);
	return stasis_error_hint(err, "check the PID with ps");
}

int proc_tree(pid_t root, pid_t **pids_out, size_t *n_out, struct stasis_error **err)
{
	pid_t *pids = NULL;
	size_t n = 0, cap = 0;
	int r;

	r = proc_require(root, err);
	if (r < 0)
		return r;
	r = push_pid(&pids, &n, &cap, root);
	for (size_t i = 0; r == 0 && i < n; i++)
		r = add_children(pids[i], &pids, &n, &cap);
	if (r < 0) {
		free(pids);
		return stasis_error_errno(err, -r, "listing the tree of PID %d", (int)root);
	}
	*pids_out = pids;
	*n_out = n;
	return 0;
}

int proc_describe(pid_t pid, struct manifest *m, struct stasis_error **err)
{
	struct manifest_process *p = manifest_add_process(m);

	if (!p)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	p->pid = pid;
	p->ppid = proc_ppid(pid);
	proc_comm(pid, p->comm, sizeof(p->comm));
	p->cmdline = proc_cmdline(pid);
	return 0;
}

void proc_cgroup(pid_t pid, char *out, size_t len)
{
	char path[64];
	_cleanup_free_ char *text = NULL;
	char *line;

	out[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	text = read_file_str(path, NULL);
	line = text ? strstr(text, "0::") : NULL;
	if (line)
		snprintf(out, len, "%s", strip_trailing(strtok(line + 3, "\n")));
}

int proc_tree_describe(pid_t root, struct manifest *m, struct stasis_error **err)
{
	_cleanup_free_ pid_t *pids = NULL;
	size_t n = 0;
	int r = proc_tree(root, &pids, &n, err);

	if (r < 0)
		return r;
	for (size_t i = 0; r == 0 && i < n; i++)
		r = proc_describe(pids[i], m, err);
	return r;
}

bool proc_is_self_or_ancestor(pid_t pid)
{
	for (pid_t p = getpid(); p > 0; p = proc_ppid(p))
		if (p == pid)
			return true;
	return false;
}

pid_t proc_ns_pid(pid_t pid)
{
	char path[64];
	_cleanup_free_ char *status = NULL;
	char *line, *last = NULL;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	status = read_file_str(path, NULL);
	line = status ? strstr(status, "\nNSpid:") : NULL;
	if (!line)
		return 0;
	line = strtok(line + strlen("\nNSpid:"), "\n");
	for (char *tok = strtok(line, " \t"); tok; tok = strtok(NULL, " \t"))
		last = tok;
	return last ? (pid_t)atoi(last) : 0;
}

uint64_t proc_rss_anon(pid_t pid)
{
	char path[64];
	_cleanup_free_ char *status = NULL;
	const char *line;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	status = read_file_str(path, NULL);
	line = status ? strstr(status, "\nRssAnon:") : NULL;
	return line ? strtoull(line + strlen("\nRssAnon:"), NULL, 10) * 1024 : 0;
}
