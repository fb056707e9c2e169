/* SPDX-License-Identifier: MIT */
/* The /dev/nvidia* descriptors a process still holds after
 * the driver's checkpoint, such as a child forked from a CUDA parent that
 * never used CUDA itself. CRIU cannot save a character device it does not
 * know; this plugin saves the path and open flags of each such descriptor
 * into the image, and at restore reopens the path, moved to the GPU that the
 * restore maps it to ($STASIS_NVIDIA_DEV_MAP, "OLD:NEW,..." minor numbers,
 * set by stasis from its GPU map). */
#include <criu/criu-plugin.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin.h"

#define RECORD_NAME "stasis-nvidia-file-%x"

/* /dev/nvidiaN with N given by the map; other paths stay as they are. */
static void map_path(const char *path, char *out, size_t len)
{
	const char *prefix = plugin_dev_prefix(), *map = plugin_setting("STASIS_NVIDIA_DEV_MAP");
	size_t plen = strlen(prefix);
	char *end;
	long minor;

	snprintf(out, len, "%s", path);
	if (!map || strncmp(path, prefix, plen) != 0)
		return;
	minor = strtol(path + plen, &end, 10);
	if (end == path + plen || *end)
		return;
	for (const char *p = map; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
		long from, to;

		if (sscanf(p, "%ld:%ld", &from, &to) == 2 && from == minor) {
			snprintf(out, len, "%s%ld", prefix, to);
			return;
		}
	}
}

/* The driver's capability devices ("/dev/nvidia-caps/nvidia-cap1"),
 * which a process opens where the driver has them: a DataLoader worker
 * inherits them from its CUDA parent with the rest. */
#define CAPS_FOLDER "-caps/nvidia-cap"

/* A recorded path that names a device of the driver's and nothing else:
 * the prefix, then letters, digits and '-' ("/dev/nvidia0", "-uvm",
 * "ctl"), or a capability's number in its folder; no other folder and no
 * '..'. */
static bool device_name_ok(const char *path)
{
	const char *rest;

	if (!plugin_is_gpu_path(path))
		return false;
	rest = path + strlen(plugin_dev_prefix());
	if (!*rest)
		return false;
	if (strncmp(rest, CAPS_FOLDER, strlen(CAPS_FOLDER)) == 0) {
		rest += strlen(CAPS_FOLDER);
		if (!*rest)
			return false;
		for (const char *c = rest; *c; c++)
			if (!isdigit((unsigned char)*c))
				return false;
		return true;
	}
	for (const char *c = rest; *c; c++)
		if (!isalnum((unsigned char)*c) && *c != '-')
			return false;
	return true;
}

int nvidia_dump_file(int fd, int id)
{
	char path[PATH_MAX], name[64];
	int flags, out, ours = plugin_fd_path(fd, path, sizeof(path));

	if (ours < 0)
		return ours;
	if (!ours || !device_name_ok(path))
		return -ENOTSUP; /* not ours: another plugin may know it */
	if (!gpu_dump_handles_devices()) {
		plugin_log(PLUGIN_LOG_ERROR, "%s is held, and no GPU step ran", path);
		return -ENOTSUP;
	}
	flags = fcntl(fd, F_GETFL);
	if (flags < 0)
		return -errno;
	snprintf(name, sizeof(name), RECORD_NAME, (unsigned int)id);
	out = openat(criu_get_image_dir(), name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0)
		return -errno;
	if (dprintf(out, "%o %s\n", (unsigned int)flags, path) < 0 || close(out) < 0)
		return -EIO;
	return 0;
}

/* The device reopened, through no link, and a character device (the tests'
 * stand-ins under their own prefix are plain files). */
static int open_device(const char *path, unsigned int flags)
{
	int fd = open(path, ((int)flags & ~(O_CREAT | O_TRUNC | O_EXCL)) | O_NOFOLLOW | O_NOCTTY);
	struct stat st;

	if (fd < 0) {
		int e = errno;

		plugin_log(PLUGIN_LOG_ERROR, "cannot reopen %s: %s", path, strerror(e));
		return -e;
	}
	if (fstat(fd, &st) < 0 ||
	    !(S_ISCHR(st.st_mode) ||
	      (plugin_setting("STASIS_NVIDIA_DEV_PREFIX") && S_ISREG(st.st_mode)))) {
		close(fd);
		plugin_log(PLUGIN_LOG_ERROR, "%s is not a device: not reopened", path);
		return -EINVAL;
	}
	return fd;
}

int nvidia_restore_file(int id)
{
	char name[64], line[PATH_MAX + 32], path[PATH_MAX], mapped[PATH_MAX];
	unsigned int flags;
	FILE *f;
	int fd;

	snprintf(name, sizeof(name), RECORD_NAME, (unsigned int)id);
	fd = openat(criu_get_image_dir(), name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -ENOTSUP;
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	if (!fgets(line, sizeof(line), f) || sscanf(line, "%o %4095s", &flags, path) != 2) {
		fclose(f);
		return -EINVAL;
	}
	fclose(f);
	map_path(path, mapped, sizeof(mapped));
	if (!device_name_ok(mapped)) {
		plugin_log(PLUGIN_LOG_ERROR, "the image names %s as a GPU device: not reopened",
			   mapped);
		return -EINVAL;
	}
	return open_device(mapped, flags);
}
