/* SPDX-License-Identifier: MIT */
#include "containerd-links.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "lock.h"
#include "runc-wrap.h"
#include "util.h"

#define LINKS_LOCK "containerd.lock"

int containerd_links_lock(int how)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/" LINKS_LOCK, stasis_run_dir());
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0 && flock(fd, how) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool listed_id(const char *ids, const char *id)
{
	size_t len = strlen(id);

	for (const char *p = ids; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);

		if (n == len && strncmp(p, id, len) == 0)
			return true;
		p = nl ? nl + 1 : p + n;
	}
	return false;
}

/* The link folders of namespace folder ns whose container c's containerd
 * no longer knows (deleted with ctr, or lost with its state): removed. A
 * folder of another containerd (another address), or of a namespace that
 * containerd did not list, is left. */
static void sweep_namespace(const struct containerd *c, const char *base, const char *ns)
{
	struct containerd in_ns = *c;
	_cleanup_free_ char *ids = NULL;
	char dir[PATH_MAX];
	struct dirent *de;
	DIR *d;

	snprintf(in_ns.namespace, sizeof(in_ns.namespace), "%s", ns);
	if (containerd_ids(&in_ns, &ids) != 0 || !ids)
		return;
	snprintf(dir, sizeof(dir), "%s/%s", base, ns);
	d = opendir(dir);
	while (d && (de = readdir(d))) {
		char link_dir[PATH_MAX + 256], file[PATH_MAX + 300];
		_cleanup_free_ char *address = NULL;

		if (de->d_name[0] == '.' || listed_id(ids, de->d_name))
			continue;
		snprintf(link_dir, sizeof(link_dir), "%s/%s", dir, de->d_name);
		snprintf(file, sizeof(file), "%s/" LINKS_ADDRESS_FILE, link_dir);
		address = read_file_str(file, NULL);
		if (address && strcmp(strip_trailing(address), c->address) == 0)
			runc_wrap_remove(link_dir);
	}
	if (d)
		closedir(d);
}

void containerd_links_sweep(const struct containerd *c)
{
	char base[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int lock;

	snprintf(base, sizeof(base), "%s/containerd", stasis_run_dir());
	if (access(base, F_OK) < 0)
		return;
	lock = containerd_links_lock(LOCK_EX | LOCK_NB);
	if (lock < 0)
		return;
	d = opendir(base);
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.')
			sweep_namespace(c, base, de->d_name);
	if (d)
		closedir(d);
	close(lock);
}
