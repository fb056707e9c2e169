/* SPDX-License-Identifier: MIT */
/* stasis's CRIU plugin, one .so: the /dev/nvidia* descriptors and device
 * mappings that the driver's checkpoint leaves behind, and the GPU steps
 * done while CRIU holds the tree, the checkpoint and the restore (each part
 * in its own file). The driver calls run in stasis, never in CRIU, which
 * forks the restored tree. */
#ifndef STASIS_PLUGIN_H
#define STASIS_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* A setting of stasis's (STASIS_PLUGIN_SOCKET, STASIS_NVIDIA_DEV_MAP):
 * CRIU's --setting where CRIU takes settings, else the environment's. */
const char *plugin_setting(const char *name);
/* "/dev/nvidia", or the tests' $STASIS_NVIDIA_DEV_PREFIX. */
const char *plugin_dev_prefix(void);
/* Whether path names a GPU device file (lives under the prefix). */
int plugin_is_gpu_path(const char *path);

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

/* gpu-dump.c: the lock before CRIU freezes the tree, the checkpoint once
 * it is frozen, with only the restore threads running, and the GPU state
 * back before CRIU lets a tree that runs on go. */
void gpu_dump_init(void);
void gpu_dump_fini(int ret);
/* Whether the dump's GPU steps are handled, so that the device files and
 * mappings left after them may be saved. */
bool gpu_dump_handles_devices(void);
int gpu_pause_devices(int pid);
int gpu_checkpoint_devices(int pid);

/* gpu-helper.c: stasis's GPU helper where no stasis started CRIU. */
int plugin_helper_start(void);
int plugin_helper_fd(void); /* -1 when none runs */
void plugin_helper_stop(void);

/* plugin-talk.c: a growing list of PIDs or TIDs, and the plugin channel to
 * stasis. */
struct pid_list {
	pid_t *pids;
	size_t n, cap;
};

/* Appends pid; false when out of memory. */
bool pid_list_push(struct pid_list *l, pid_t pid);

enum { PLUGIN_LOG_ERROR = 1, PLUGIN_LOG_WARN = 2, PLUGIN_LOG_INFO = 3, PLUGIN_LOG_DEBUG = 4 };

/* A line in CRIU's own log (dump.log, restore.log), naming stasis. */
void plugin_log(unsigned int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The socket to stasis named in $STASIS_PLUGIN_SOCKET, or to the helper:
 * its fd, -ENOENT when no stasis asked for the GPU steps, or -errno. */
int plugin_connect_stasis(void);

/* The whole conversation after the opening message: 0, 1 when stasis says
 * the GPU work failed (answer holds its words), or -errno of a local
 * failure. Every thread woken is stopped again before it returns; with
 * frozen_shape, a process that made a thread or a process meanwhile fails
 * it (CRIU dumps the tree as it listed it). */
int plugin_exchange(int fd, const char *opening, char *answer, size_t len, bool frozen_shape);

/* How many restore threads the last exchange woke, its GPU work done. */
extern int plugin_woken_last;

#endif
