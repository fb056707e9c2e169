/* SPDX-License-Identifier: MIT */
/* stasis's CRIU plugin, one .so: the /dev/nvidia* descriptors and device
 * mappings that the driver's checkpoint leaves behind, and the GPU restore
 * done while CRIU still holds the tree (each part in its own file). */
#ifndef STASIS_PLUGIN_H
#define STASIS_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* "/dev/nvidia", or the tests' $STASIS_NVIDIA_DEV_PREFIX. */
const char *plugin_dev_prefix(void);

/* The file behind fd into path: 1 when it lives under the prefix, 0 when
 * not, -errno. */
int plugin_fd_path(int fd, char *path, size_t len);

/* nvidia-files.c: descriptors. */
int nvidia_dump_file(int fd, int id);
int nvidia_restore_file(int id);

/* nvidia-maps.c: device mappings. */
int nvidia_handle_vma(int fd, const struct stat *st);
int nvidia_update_vma_map(const char *path, uint64_t addr, uint64_t old_pgoff, uint64_t *new_pgoff,
			  int *plugin_fd);

/* gpu-resume.c: GPU restore with only the restore threads running. */
int gpu_resume_devices_late(int pid);

#endif
