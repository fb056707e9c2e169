/* SPDX-License-Identifier: MIT */
#include "sockets.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mappings.h"
#include "proc.h"
#include "util.h"

struct inodes {
	unsigned long *inodes;
	size_t n, cap;
};

static int add_socket_inode(int dirfd, const char *fd, const char *target, void *ctx)
{
	struct inodes *set = ctx;
	unsigned long ino, *bigger;

	if (sscanf(target, "socket:[%lu]", &ino) != 1)
		return 0;
	bigger = grow_array(set->inodes, set->n, &set->cap, sizeof(*bigger), 16);
	if (!bigger)
		return -ENOMEM;
	set->inodes = bigger;
	set->inodes[set->n++] = ino;
	return 0;
}

/* The socket inodes among pid's descriptors; the caller frees them. */
static int socket_inodes(pid_t pid, unsigned long **out, size_t *n)
{
	struct inodes set = {0};
	int r = proc_each_fd(pid, add_socket_inode, &set);

	if (r < 0) {
		free(set.inodes);
		return r;
	}
	*out = set.inodes;
	*n = set.n;
	return 0;
}

/* The TCP states CRIU saves only with --tcp-established (include/net/tcp_states.h):
 * ESTABLISHED, SYN_SENT, FIN_WAIT1, FIN_WAIT2, CLOSE_WAIT, LAST_ACK, CLOSING. */
static bool connected_state(unsigned int st)
{
	return st == 0x01 || st == 0x02 || st == 0x04 || st == 0x05 || st == 0x08 || st == 0x09 ||
	       st == 0x0B;
}

static bool has_inode(const unsigned long *inodes, size_t n, unsigned long ino)
{
	for (size_t i = 0; i < n; i++)
		if (inodes[i] == ino)
			return true;
	return false;
}

/* The first connected socket of pid's in /proc/PID/net/TABLE: its ports. */
static bool find_connected(pid_t pid, const char *table, const unsigned long *inodes, size_t n,
			   unsigned int *local, unsigned int *remote)
{
	char path[64], line[512];
	_cleanup_fclose_ FILE *f = NULL;

	snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, table);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f)) {
		unsigned int st;
		unsigned long ino;

		/* sl local:port remote:port st tx:rx tr:when retrnsmt uid timeout inode */
		if (sscanf(line,
			   " %*u: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%x %x %*s %*s %*s %*u %*u %lu",
			   local, remote, &st, &ino) == 4 &&
		    connected_state(st) && has_inode(inodes, n, ino))
			return true;
	}
	return false;
}

/* The path a unix socket of pid's is bound to, within pid's root, in
 * path: CRIU's restore binds it again there as root, then chowns and
 * chmods it by that path (sk-unix.c); a relative name is CRIU's from the
 * process's folder. False where the socket has no path (an abstract name
 * or none). */
static bool bound_path(pid_t pid, const char *name, char *path, size_t size)
{
	char link[64], cwd[PATH_MAX];
	ssize_t len;

	if (name[0] == '/')
		return (size_t)snprintf(path, size, "%s", name) < size;
	if (name[0] == '@' || !name[0])
		return false;
	snprintf(link, sizeof(link), "/proc/%d/cwd", (int)pid);
	len = readlink(link, cwd, sizeof(cwd) - 1);
	if (len < 0)
		return (size_t)snprintf(path, size, "?/%s", name) < size; /* fails the rule */
	cwd[len] = '\0';
	return (size_t)snprintf(path, size, "%s/%s", strcmp(cwd, "/") ? cwd : "", name) < size;
}

/* The first unix socket of pid's bound to a path whose folders a user
 * other than root can change, or in a shared sticky folder while the
 * kernel's link protection is off: its path in bad. */
static bool find_exposed_unix(pid_t pid, const unsigned long *inodes, size_t n, char *bad,
			      size_t size, bool *shared)
{
	char table[64], line[PATH_MAX + 128];
	_cleanup_fclose_ FILE *f = NULL;

	snprintf(table, sizeof(table), "/proc/%d/net/unix", (int)pid);
	f = fopen(table, "re");
	while (f && fgets(line, sizeof(line), f)) {
		char name[PATH_MAX] = "";
		unsigned long ino;
		bool sticky_shared;

		/* Num RefCount Protocol Flags Type St Inode [Path] */
		if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu %4095[^\n]", &ino, name) < 1 ||
		    !has_inode(inodes, n, ino) || !bound_path(pid, name, bad, size))
			continue;
		if (!mappings_folders_root_only(pid, bad, strlen(bad), &sticky_shared)) {
			*shared = false;
			return true;
		}
		if (sticky_shared && !mappings_links_protected()) {
			*shared = true;
			return true;
		}
	}
	return false;
}

static int refuse_unix(const struct manifest_process *p, const char *path, bool shared,
		       struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) holds a unix socket bound to %s, %s: at restore CRIU "
			 "binds it again as root along that path, and chowns and chmods it",
			 (int)p->pid, p->comm, path,
			 shared ? "in a sticky folder while fs.protected_symlinks or "
				  "fs.protected_hardlinks is off"
				: "in a folder that a user other than root can change");
	return stasis_error_hint(err,
				 shared ? "nothing was changed; " LINKS_PROTECTION_ON
					: "nothing was changed; bind it in a folder of root's or "
					  "to an abstract name, or close it before the checkpoint "
					  "(docs/SECURITY.md)");
}

static int refuse_tcp(const struct manifest_process *p, unsigned int local, unsigned int remote,
		      struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) holds a connected TCP socket (local port %u, remote "
			 "port %u), which CRIU saves only with --tcp-established",
			 (int)p->pid, p->comm, local, remote);
	return stasis_error_hint(err, "checkpoint with --tcp-established to keep the "
				      "connection (its peer must still be there at restore), "
				      "or close it first");
}

int sockets_check(const struct manifest *m, struct stasis_error **err)
{
	for (size_t i = 0; i < m->nprocs; i++) {
		const struct manifest_process *p = &m->procs[i];
		_cleanup_free_ unsigned long *inodes = NULL;
		char path[PATH_MAX + 2];
		unsigned int local, remote;
		size_t n;
		bool shared;

		/* Each process's descriptors read once, for both kinds. */
		if (socket_inodes(p->pid, &inodes, &n) < 0 || !n)
			continue;
		if (find_exposed_unix(p->pid, inodes, n, path, sizeof(path), &shared))
			return refuse_unix(p, path, shared, err);
		if (!m->options.tcp_established &&
		    (find_connected(p->pid, "tcp", inodes, n, &local, &remote) ||
		     find_connected(p->pid, "tcp6", inodes, n, &local, &remote)))
			return refuse_tcp(p, local, remote, err);
	}
	return 0;
}
