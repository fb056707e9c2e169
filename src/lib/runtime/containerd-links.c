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

/* The folder of every link folder, $STASIS_RUN_DIR/containerd: its own
 * flock is the lock, so that no lock file outlives the link folders. */
static void links_base(char *out, size_t len)
{
	snprintf(out, len, "%s/containerd", stasis_run_dir());
}

int containerd_links_hold(const char *link_dir)
{
	char base[PATH_MAX];

	links_base(base, sizeof(base));
	for (int tries = 0; tries < 3; tries++) {
		int fd;

		if (mkdir_p(link_dir) < 0)
			return -1;
		fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			continue;
		/* link_dir keeps base from being removed; a sweep leaves a
		 * folder without an address, so it is still there unless base
		 * was made anew in between. */
		if (flock(fd, LOCK_SH) == 0 && access(link_dir, F_OK) == 0)
			return fd;
		close(fd);
	}
	return -1;
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

	links_base(base, sizeof(base));
	lock = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (lock < 0)
		return; /* no link folders */
	if (flock(lock, LOCK_EX | LOCK_NB) < 0) {
		close(lock);
		return; /* a restore is making one */
	}
	d = opendir(base);
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.')
			sweep_namespace(c, base, de->d_name);
	if (d)
		closedir(d);
	close(lock);
}
