/* SPDX-License-Identifier: MIT */
#include "devfiles.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proc.h"
#include "util.h"

#define PLUGIN_NAME "stasis_nvidia.so"

const char *nvidia_dev_prefix(void)
{
	const char *p = getenv("STASIS_NVIDIA_DEV_PREFIX");

	return p && *p ? p : "/dev/nvidia";
}

static bool is_nvidia(const char *path)
{
	return strncmp(path, nvidia_dev_prefix(), strlen(nvidia_dev_prefix())) == 0;
}

static int count_nvidia(int dirfd, const char *fd, const char *target, void *count)
{
	*(unsigned int *)count += is_nvidia(target);
	return 0;
}

unsigned int nvidia_fds_of(pid_t pid)
{
	unsigned int n = 0;

	proc_each_fd(pid, count_nvidia, &n);
	return n;
}

int nvidia_refs_of(pid_t pid, struct nvidia_refs *refs)
{
	char path[64], line[PATH_MAX + 128];
	_cleanup_fclose_ FILE *maps = NULL;

	memset(refs, 0, sizeof(*refs));
	refs->fds = nvidia_fds_of(pid);
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	maps = fopen(path, "re");
	if (!maps)
		return -errno;
	while (fgets(line, sizeof(line), maps)) {
		/* address perms offset dev inode path */
		char *file = strchr(line, '/');

		if (!file || !is_nvidia(file))
			continue;
		if (!refs->maps++)
			snprintf(refs->mapped_path, sizeof(refs->mapped_path), "%s",
				 strip_trailing(file));
	}
	return 0;
}

/* A CUDA process still mapping the device after the driver's checkpoint
 * would come back with mappings of a GPU context that is gone. */
static int refuse_mapping(const struct manifest_process *p, const struct nvidia_refs *refs,
			  struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
			 "PID %d (%s) still maps %s (%u mappings) after the GPU checkpoint; "
			 "CRIU cannot save device mappings",
			 (int)p->pid, p->comm, refs->mapped_path, refs->maps);
	return stasis_error_hint(err, "the driver did not release it: report the "
				      "program and driver version");
}

static int require_plugin(const struct manifest_process *p, const struct nvidia_refs *refs,
			  struct stasis_error **err)
{
	stasis_error_set(err, ENOENT, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) holds %u %s* descriptors and %u mappings, and stasis's "
			 "CRIU plugin (" PLUGIN_NAME ") is not installed",
			 (int)p->pid, p->comm, refs->fds, nvidia_dev_prefix(), refs->maps);
	return stasis_error_hint(err, "install stasis with 'make'");
}

int nvidia_refs_check(struct manifest *m, bool cuda_only, struct stasis_error **err)
{
	for (size_t i = 0; i < m->nprocs; i++) {
		struct manifest_process *p = &m->procs[i];
		struct nvidia_refs refs;

		if (p->cuda != cuda_only || nvidia_refs_of(p->pid, &refs) < 0)
			continue;
		if (refs.maps && cuda_only)
			return refuse_mapping(p, &refs, err);
		/* A child forked from a CUDA process (a DataLoader worker)
		 * inherits both; the plugin saves them (criu-plugin/). */
		p->device_files = refs.fds;
		p->device_maps = refs.maps;
		if ((refs.fds || refs.maps) && !stasis_criu_plugin_dir())
			return require_plugin(p, &refs, err);
	}
	return 0;
}

const char *stasis_criu_plugin_dir(void)
{
	static char dir[PATH_MAX];
	char self[PATH_MAX], plugin[PATH_MAX + 64];
	struct stat st;

	if (dir[0])
		return dir;
	if (self_dir(self, sizeof(self)) < 0)
		return NULL;
	snprintf(plugin, sizeof(plugin), "%s/../lib/stasis/criu/" PLUGIN_NAME, self);
	if (stat(plugin, &st) < 0)
		return NULL;
	snprintf(dir, sizeof(dir), "%s/../lib/stasis/criu", self);
	return dir;
}
