/* SPDX-License-Identifier: MIT */
/* The registration of stasis's CRIU plugin and what its parts share. */
#include <criu/criu-plugin.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugin.h"

/* stasis's CRIU (patch 0012): CRIU's --setting, else its environment. */
extern const char *criu_setting(const char *name) __attribute__((weak));

const char *plugin_setting(const char *name)
{
	return criu_setting ? criu_setting(name) : getenv(name);
}

const char *plugin_dev_prefix(void)
{
	const char *p = plugin_setting("STASIS_NVIDIA_DEV_PREFIX");

	return p && *p ? p : "/dev/nvidia";
}

int plugin_is_gpu_path(const char *path)
{
	const char *prefix = plugin_dev_prefix();

	return strncmp(path, prefix, strlen(prefix)) == 0;
}

int plugin_fd_path(int fd, char *path, size_t len)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, len - 1);
	if (n < 0)
		return -errno;
	path[n] = '\0';
	return plugin_is_gpu_path(path);
}

static int plugin_init(int stage)
{
	if (stage == CR_PLUGIN_STAGE__DUMP)
		gpu_dump_init();
	/* A restore that stasis did not start gets the helper too. */
	if (stage == CR_PLUGIN_STAGE__RESTORE && !plugin_setting("STASIS_PLUGIN_SOCKET"))
		plugin_helper_start();
	return 0;
}

static void plugin_fini(int stage, int ret)
{
	if (stage == CR_PLUGIN_STAGE__DUMP)
		gpu_dump_fini(ret);
	else
		plugin_helper_stop();
}

CR_PLUGIN_REGISTER("stasis_nvidia", plugin_init, plugin_fini)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__DUMP_EXT_FILE, nvidia_dump_file)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__RESTORE_EXT_FILE, nvidia_restore_file)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__HANDLE_DEVICE_VMA, nvidia_handle_vma)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__UPDATE_VMA_MAP, nvidia_update_vma_map)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__RESUME_DEVICES_LATE, gpu_resume_devices_late)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__PAUSE_DEVICES, gpu_pause_devices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, gpu_checkpoint_devices)
