/* SPDX-License-Identifier: MIT */
/* Device mappings of /dev/nvidia* in a process the driver does not know as
 * a CUDA process: a DataLoader worker forked from a CUDA parent inherits
 * the parent's ~30 mappings of /dev/nvidiactl and /dev/nvidia0 and never
 * uses them. CRIU saves such a mapping as an ordinary file mapping (start,
 * end, protection, flags, offset; no pages for a shared one) once a plugin
 * claims it. At restore it becomes a mapping of an empty memfd at the same
 * address with the same protection: the address space is as it was for
 * every other mapping, and a touch of the old device range gets SIGBUS
 * instead of reaching a GPU context that no longer exists. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin.h"

int nvidia_handle_vma(int fd, const struct stat *st)
{
	char path[PATH_MAX];

	if (!S_ISCHR(st->st_mode) || plugin_fd_path(fd, path, sizeof(path)) != 1)
		return -ENOTSUP;
	if (!gpu_dump_handles_devices()) {
		plugin_log(PLUGIN_LOG_ERROR, "%s is mapped, and no GPU step ran", path);
		return -ENOTSUP;
	}
	return 0;
}

int nvidia_update_vma_map(const char *path, uint64_t addr, uint64_t old_pgoff, uint64_t *new_pgoff,
			  int *plugin_fd)
{
	int fd;

	(void)addr;
	if (!plugin_is_gpu_path(path))
		return -ENOTSUP;
	/* CRIU maps each group of adjacent mappings of one file through one
	 * descriptor and closes it after the group's last mapping; a fresh
	 * memfd per call keeps the groups apart (stasis's CRIU closes the
	 * ones a group does not take). */
	fd = memfd_create("stasis-nvidia-reserved", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	*plugin_fd = fd;
	*new_pgoff = old_pgoff;
	return 0;
}
