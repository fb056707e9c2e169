/* SPDX-License-Identifier: MIT */
/* Mappings CRIU cannot save, found before anything changes. CRIU opens
 * every file mapping of a pseudo file system again through
 * /proc/PID/map_files; one whose file has no open (an io_uring ring, a
 * DMA-BUF, the buffers NCCL shares between ranks) makes its dump fail
 * after the GPU state was already checkpointed. */
#ifndef STASIS_MAPPINGS_H
#define STASIS_MAPPINGS_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"
#include "manifest.h"

/* What the kernel appends to the name of a file unlinked since it was
 * opened, in /proc's links and maps. */
#define DELETED " (deleted)"

/* NVIDIA's OpenCL driver, as its file name begins. */
#define OPENCL_DRIVER "libnvidia-opencl.so"

/* JAX's runtime, as the folders of its libraries are named. */
#define JAX_RUNTIME_DIRS "/jaxlib/", "/jax_plugins/"

/* Refuse, naming the process and the mapping, when a process of m has
 * one, when a CUDA process of m has an OpenCL context too or runs JAX, or
 * when processes of m share GPU memory through CUDA IPC. A file
 * deleted while another name links it (a POSIX semaphore of Python's
 * spawn start method) is saved by CRIU's link-remap where it is in
 * /dev/shm and shm_remap_ok (the image restores on this machine from a
 * dump that ends the tree): *link_remap then says to ask CRIU for it. */
int mappings_check(const struct manifest *m, bool shm_remap_ok, bool *link_remap,
		   struct stasis_error **err);

/* Refuse a process that is to run on while its GPU state is checkpointed
 * (gpu suspend) when it runs JAX. Measured with JAX's CUDA plugin and
 * driver 580: such a process crashes in libcuda within seconds and its GPU
 * state cannot be restored any more, so the job would be lost; the GPU
 * checkpoint of a checkpoint that ends it was seen to end it too. Also one
 * that shares GPU memory through CUDA IPC, whose GPU restore fails. */
int mappings_refuse_running_checkpointed(pid_t pid, const char *comm, struct stasis_error **err);

/* Whether path is absolute with no empty, "." or ".." part (the rule
 * below refuses any other). */
bool mappings_path_canonical(const char *path, size_t len);

/* Whether no user but root can change which folder the first len bytes of
 * path (a path within pid's root) lead through: every folder root's, no
 * link, on no FUSE mount, writable by a group or others only where sticky
 * and world-writable. */
bool mappings_folders_root_only(pid_t pid, const char *path, size_t len);

/* Whether the folder of path (within pid's root) is sticky and writable by
 * all (/tmp, /dev/shm): a name in it is its file's owner's to rename. */
bool mappings_folder_shared_sticky(pid_t pid, const char *path);

/* fs.protected_symlinks and fs.protected_hardlinks are both on. */
bool mappings_links_protected(void);

/* What turns them on, for the refusals that still need them. */
#define LINKS_PROTECTION_ON "sysctl -w fs.protected_symlinks=1 fs.protected_hardlinks=1"

#endif
