/* SPDX-License-Identifier: MIT */
#include "mappings.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <unistd.h>

#include "mounts.h"
#include "proc.h"
#include "shm-remap.h"
#include "util.h"

/* CRIU's name for an AIO ring, which it saves although it cannot open it. */
#define AIO_RING "/[aio]"

/* What CRIU does in vma_get_mapfile (criu/proc_parse.c): only files of
 * pseudo file systems (device major 0) are opened for reading, and a
 * socket or an AIO ring that refuses is still saved. */
static bool reopens(int map_files, const char *range, const char *path)
{
	struct stat st;
	int fd = openat(map_files, range, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd >= 0) {
		close(fd);
		return true;
	}
	if (errno != ENXIO || fstatat(map_files, range, &st, 0) < 0)
		return true; /* gone meanwhile, or CRIU's own error to give */
	return S_ISSOCK(st.st_mode) ||
	       ((st.st_mode & S_IFMT) == 0 && strncmp(path, AIO_RING, strlen(AIO_RING)) == 0);
}

/* What one read of a process's maps found. */
struct maps_scan {
	bool opencl;	     /* OPENCL_DRIVER is mapped */
	bool jax;	     /* a library of JAX_RUNTIME_DIRS is mapped */
	char unsavable[256]; /* the first mapping CRIU could not open again */
	unsigned long start; /* and its address */
	char relinked[256];  /* the first deleted file still linked, not in SHM_DIR */
	bool shm_relinked;   /* some deleted file still linked is in SHM_DIR */
	char cuda_ipc[256];  /* the first of CUDA IPC's shared files mapped */
	pid_t pid;
	char exposed_ghost[256]; /* the first deleted file whose folders another user can change */
	dev_t shmem_dev;	 /* kernel_shmem_dev's */
	char memfd_exe[256];	 /* the program, where it runs from a memfd */
};

/* SHM_DIR is the one folder whose relinked files CRIU may save, by its
 * link-remap: CRIU makes a hard link of the file at the dump, and at the
 * restore links the old name again and removes both. Only in a folder of
 * root's that is no link and whose sticky bit keeps others from renaming
 * what is in it may stasis, as root, let CRIU make and remove names where
 * a path from the process says (and its CRIU confines them: shm-remap.h). */

/* The files the driver's CUDA IPC maps into its exporter and importers
 * (measured with driver 580: /dev/shm/cuda.shm.0.<exporter's PID, hex>.N). */
#define CUDA_IPC_PREFIX SHM_DIR "cuda.shm."

/* A mapped file whose name is gone while the file has another (a POSIX
 * semaphore: glibc makes it under a temporary name, links it to its own
 * and unlinks the first): CRIU saves a deleted file's contents only when
 * no name is left, and for this one asks for its link-remap option, which
 * leaves a file in the folder (and none at all with --leave-running,
 * whose image then cannot restore). */
static bool deleted_but_linked(int map_files, const char *range, const char *path)
{
	size_t len = strlen(path);
	struct stat st;

	return len > strlen(DELETED) && strcmp(path + len - strlen(DELETED), DELETED) == 0 &&
	       fstatat(map_files, range, &st, 0) == 0 && S_ISREG(st.st_mode) && st.st_nlink > 0;
}

/* The device of the kernel's own tmpfs, which holds every memfd and all
 * anonymous shared memory ("/memfd:NAME (deleted)", "/dev/zero (deleted)";
 * a restored process's shared memory is a memfd of CRIU's): CRIU saves
 * such files by their contents and makes them again without a path
 * (is_memfd in criu/memfd.c compares this device), so they are in no
 * folder. (dev_t)-1 where the kernel has no memfd_create. */
static dev_t kernel_shmem_dev(void)
{
	/* The kernel's, the same for every process: one memfd, not one a scan. */
	static dev_t dev;
	static bool known;
	_cleanup_close_ int fd = -1;
	struct stat st;

	if (known)
		return dev;
	fd = memfd_create("stasis-shmem-dev", MFD_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0)
		return (dev_t)-1; /* asked again next time */
	dev = st.st_dev;
	known = true;
	return dev;
}

/* A file with no name left (NCCL's buffers in SHM_DIR, a temporary file):
 * CRIU saves its contents into the image, and at restore creates it again
 * as root beside its old name ("NAME.cr.N.ghost"), along the old path. */
static bool deleted_unlinked(int dirfd, const char *entry, const char *path, dev_t shmem_dev)
{
	size_t len = strlen(path);
	struct stat st;

	return path[0] == '/' && len > strlen(DELETED) &&
	       strcmp(path + len - strlen(DELETED), DELETED) == 0 &&
	       fstatat(dirfd, entry, &st, 0) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 0 &&
	       st.st_dev != shmem_dev;
}

/* Whether a FUSE mount (in pid's /proc/PID/mountinfo, whose mount points
 * are within pid's root) is at path or one of its folders: a stat there
 * asks the mount's daemon, which a user runs and can leave unanswered,
 * holding stasis for ever. Read before any stat of the path; where the
 * table cannot be read or understood, as though one were. */
static bool path_crosses_fuse(pid_t pid, const char *path, size_t len)
{
	char table[64];

	snprintf(table, sizeof(table), "/proc/%d/mountinfo", (int)pid);
	return mounts_fuse_covers(table, path, len);
}

/* Whether path is absolute with no empty, "." or ".." part: the mount
 * table's points are, and "a//b" or "a/./b" would not match them (the
 * kernel's names are so; a socket's name is what its binder wrote). */
bool mappings_path_canonical(const char *path, size_t len)
{
	if (len == 0 || path[0] != '/')
		return false;
	for (size_t i = 0; i < len;) {
		size_t end = i + 1, n;

		while (end < len && path[end] != '/')
			end++;
		n = end - i - 1; /* the part between path[i] == '/' and end */
		if ((n == 0 && len > 1) || (n == 1 && path[i + 1] == '.') ||
		    (n == 2 && path[i + 1] == '.' && path[i + 2] == '.'))
			return false;
		i = end;
	}
	return true;
}

/* The rule for each folder, from the last up to pid's root: root's, not a
 * link, on no FUSE mount (whose owner says what its folders are), and
 * writable by a group (an ACL's mask shows there too) or others only where
 * sticky and world-writable (/tmp, /dev/shm), so that no one else can
 * rename what root makes in it. The same rule as stasis's CRIU's at the
 * dump and the restore (patch 0008), for the files preflight sees. A name
 * in a sticky folder is its file's owner's to rename: stasis's CRIU links,
 * opens, chowns and chmods what it makes there through descriptors
 * (patches 0008 and 0009), so no kernel setting is needed. */
bool mappings_folders_root_only(pid_t pid, const char *path, size_t len)
{
	char at[PATH_MAX + 32];
	int root_len = snprintf(at, sizeof(at), "/proc/%d/root", (int)pid);

	if (root_len < 0 || (size_t)root_len + len >= sizeof(at) ||
	    !mappings_path_canonical(path, len) || path_crosses_fuse(pid, path, len))
		return false;
	memcpy(at + root_len, path, len);
	at[root_len + len] = '\0';
	/* From the file's folder up to the process's root. */
	for (char *slash = strrchr(at + root_len, '/'); slash;
	     slash = strrchr(at + root_len, '/')) {
		struct statfs fs;
		struct stat st;
		bool others;

		*slash = '\0';
		if (slash == at + root_len)
			break; /* the root itself, whose owner the process's mount decides */
		if (lstat(at, &st) < 0 || statfs(at, &fs) < 0)
			return false;
		others = st.st_mode & (S_IWGRP | S_IWOTH);
		if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || fs.f_type == FUSE_SUPER_MAGIC ||
		    (others && !((st.st_mode & S_ISVTX) && (st.st_mode & S_IWOTH))))
			return false;
	}
	return true;
}

bool mappings_folder_shared_sticky(pid_t pid, const char *path)
{
	const char *slash = strrchr(path, '/');
	char at[PATH_MAX + 32];
	struct stat st;
	int n;

	if (!slash)
		return false;
	n = snprintf(at, sizeof(at), "/proc/%d/root%.*s", (int)pid, (int)(slash - path), path);
	if (n < 0 || (size_t)n >= sizeof(at) || lstat(at, &st) < 0)
		return false;
	return S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) && (st.st_mode & S_IWOTH);
}

bool mappings_links_protected(void)
{
	return read_file_u64("/proc/sys/fs/protected_symlinks", 0) >= 1 &&
	       read_file_u64("/proc/sys/fs/protected_hardlinks", 0) >= 1;
}

static void note_ghost(struct maps_scan *scan, const char *path)
{
	if (!mappings_folders_root_only(scan->pid, path, strlen(path) - strlen(DELETED)) &&
	    !scan->exposed_ghost[0])
		snprintf(scan->exposed_ghost, sizeof(scan->exposed_ghost), "%s", path);
}

/* A deleted name directly in SHM_DIR: "/dev/shm/sem.XXXXXX (deleted)". */
static bool in_shm_dir(const char *path)
{
	size_t len = strlen(path) - strlen(DELETED);

	if (strlen(path) < strlen(SHM_DIR) + strlen(DELETED))
		return false;
	return strncmp(path, SHM_DIR, strlen(SHM_DIR)) == 0 &&
	       !memchr(path + strlen(SHM_DIR), '/', len - strlen(SHM_DIR));
}

static void note_relinked(struct maps_scan *scan, const char *path)
{
	if (in_shm_dir(path))
		scan->shm_relinked = true;
	else if (!scan->relinked[0])
		snprintf(scan->relinked, sizeof(scan->relinked), "%s", path);
}

static bool is_opencl(const char *file)
{
	const char *base = strrchr(file, '/');

	return base && strncmp(base + 1, OPENCL_DRIVER, strlen(OPENCL_DRIVER)) == 0;
}

static bool is_jax(const char *file)
{
	static const char *const dirs[] = {JAX_RUNTIME_DIRS};

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if (strstr(file, dirs[i]))
			return true;
	return false;
}

static int scan_maps(pid_t pid, struct maps_scan *scan)
{
	char name[64], line[PATH_MAX + 128];
	_cleanup_fclose_ FILE *maps = NULL;
	_cleanup_close_ int map_files = -1;

	memset(scan, 0, sizeof(*scan));
	scan->pid = pid;
	scan->shmem_dev = kernel_shmem_dev();
	snprintf(name, sizeof(name), "/proc/%d/maps", (int)pid);
	maps = fopen(name, "re");
	snprintf(name, sizeof(name), "/proc/%d/map_files", (int)pid);
	map_files = open(name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!maps || map_files < 0)
		return -errno;
	while (fgets(line, sizeof(line), maps)) {
		unsigned long from, to, inode;
		unsigned int major, minor;
		int file = 0;
		char range[64];

		/* address perms offset dev inode path */
		if (sscanf(line, "%lx-%lx %*s %*s %x:%x %lu %n", &from, &to, &major, &minor, &inode,
			   &file) < 5 ||
		    !inode || !file)
			continue;
		strip_trailing(line + file);
		scan->opencl = scan->opencl || is_opencl(line + file);
		scan->jax = scan->jax || is_jax(line + file);
		snprintf(range, sizeof(range), "%lx-%lx", from, to);
		if (deleted_but_linked(map_files, range, line + file))
			note_relinked(scan, line + file);
		else if (deleted_unlinked(map_files, range, line + file, scan->shmem_dev))
			note_ghost(scan, line + file);
		if (!scan->cuda_ipc[0] &&
		    strncmp(line + file, CUDA_IPC_PREFIX, strlen(CUDA_IPC_PREFIX)) == 0)
			snprintf(scan->cuda_ipc, sizeof(scan->cuda_ipc), "%s", line + file);
		if (major != 0 || scan->unsavable[0])
			continue;
		if (reopens(map_files, range, line + file))
			continue;
		snprintf(scan->unsavable, sizeof(scan->unsavable), "%s", line + file);
		scan->start = from;
	}
	return 0;
}

static int note_relinked_fd(int dirfd, const char *fd, const char *target, void *scan)
{
	if (target[0] == '/' && deleted_but_linked(dirfd, fd, target))
		note_relinked(scan, target);
	else if (deleted_unlinked(dirfd, fd, target, ((struct maps_scan *)scan)->shmem_dev))
		note_ghost(scan, target);
	return 0;
}

/* The program a process runs (/proc/PID/exe), which CRIU saves as a file
 * of its own beside the mappings of it: deleted, the same rules as any
 * deleted file apply; from a memfd (fexecve), CRIU's dump succeeds but its
 * restore fails ("No entry for reg-file-ID": the program's file entry is
 * the memfd's, which it never wrote), and the process would be lost. */
static void scan_exe(pid_t pid, struct maps_scan *scan)
{
	char name[64], target[PATH_MAX];
	_cleanup_close_ int dir = -1;
	struct stat st;
	ssize_t len;

	snprintf(name, sizeof(name), "/proc/%d", (int)pid);
	dir = open(name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return;
	len = readlinkat(dir, "exe", target, sizeof(target) - 1);
	if (len < 0)
		return; /* gone meanwhile */
	target[len] = '\0';
	if (fstatat(dir, "exe", &st, 0) == 0 && st.st_dev == scan->shmem_dev)
		snprintf(scan->memfd_exe, sizeof(scan->memfd_exe), "%s", target);
	else
		note_relinked_fd(dir, "exe", target, scan);
}

/* The driver's checkpoint saves a process's CUDA contexts. NVIDIA's OpenCL
 * driver keeps mappings of the device beside them (measured in PyTorch
 * Lightning's process: six, still there after the CUDA checkpoint, made
 * when hwloc, which Open MPI loads, asked OpenCL for its devices). */
static int refuse_opencl(const struct manifest_process *p, struct stasis_error **err)
{
	stasis_error_set(
	    err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
	    "PID %d (%s) uses OpenCL beside CUDA (%s is loaded and keeps "
	    "mappings of the GPU); the driver's checkpoint saves CUDA's GPU state only",
	    (int)p->pid, p->comm, OPENCL_DRIVER);
	return stasis_error_hint(err, "nothing was changed; where hwloc loads it (Open MPI, "
				      "PyTorch Lightning), start the program with "
				      "HWLOC_COMPONENTS=-opencl");
}

/* 'stasis gpu suspend' checkpoints a process's GPU state while its
 * threads run (no CRIU freezes them), and JAX crashes in that window:
 * measured on two H200s with one visible (driver 580), JAX's default
 * preallocation (105.5 GiB) died of SIGSEGV 52 s into such a GPU
 * checkpoint, the job lost. A checkpoint does it inside CRIU's freeze. */
static int refuse_jax(pid_t pid, const char *comm, struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
			 "PID %d (%s) runs JAX, which can crash while the driver checkpoints "
			 "its GPU state with its threads running, as 'gpu suspend' does",
			 (int)pid, comm);
	return stasis_error_hint(err, "nothing was changed; 'stasis checkpoint "
				      "--leave-running' saves it with its threads stopped");
}

static int refuse_relinked(const struct manifest_process *p, const char *path, const char *why,
			   struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) holds %s, a file whose name is gone while another name "
			 "still links it: %s",
			 (int)p->pid, p->comm, path, why);
	return stasis_error_hint(err, "nothing was changed; with Python's multiprocessing, "
				      "the 'fork' start method makes no such files");
}

static int refuse_memfd_exe(const struct manifest_process *p, const char *exe,
			    struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) runs its program from a memfd (%s): CRIU saves such a "
			 "process but cannot restore it",
			 (int)p->pid, p->comm, exe);
	return stasis_error_hint(err, "nothing was changed; run the program from a file");
}

static int refuse_exposed_ghost(const struct manifest_process *p, const char *path,
				struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) holds %s, a deleted file in a folder that a user other "
			 "than root can change: at restore CRIU creates its contents there "
			 "again as root, along that path",
			 (int)p->pid, p->comm, path);
	return stasis_error_hint(err, "nothing was changed; keep such files in /dev/shm or "
				      "/tmp, or close them before the checkpoint "
				      "(docs/SECURITY.md)");
}

/* The processes of m that map the file at path, "PID N, PID M". */
static void mappers(const struct manifest *m, const char *path, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < m->nprocs && used < len; i++) {
		char name[64], line[PATH_MAX + 128];
		_cleanup_fclose_ FILE *maps = NULL;
		bool found = false;

		snprintf(name, sizeof(name), "/proc/%d/maps", (int)m->procs[i].pid);
		maps = fopen(name, "re");
		while (maps && !found && fgets(line, sizeof(line), maps))
			found = strstr(line, path) != NULL;
		if (found)
			used += (size_t)snprintf(buf + used, len - used, "%sPID %d",
						 used ? ", " : "", (int)m->procs[i].pid);
	}
}

/* CUDA IPC: GPU memory of one process mapped into others. Driver 580's
 * checkpoint takes both sides, and the importer's restore fails (measured:
 * a rollback then left it checkpointed); NVIDIA supports it from 610. */
static int refuse_cuda_ipc(const char *who, const char *path, struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
			 "%s share%s GPU memory through CUDA IPC (mapping %s); the driver "
			 "cannot restore processes that import another's GPU memory",
			 who[0] ? who : "processes of the tree", strchr(who, ',') ? "" : "s", path);
	return stasis_error_hint(err, "nothing was changed; share tensors through host "
				      "memory, or checkpoint before the GPU memory is shared");
}

int mappings_refuse_running_checkpointed(pid_t pid, const char *comm, struct stasis_error **err)
{
	struct maps_scan scan;

	char who[32];

	if (scan_maps(pid, &scan) < 0)
		return 0;
	if (scan.jax)
		return refuse_jax(pid, comm, err);
	snprintf(who, sizeof(who), "PID %d", (int)pid);
	return scan.cuda_ipc[0] ? refuse_cuda_ipc(who, scan.cuda_ipc, err) : 0;
}

static int refuse_unsavable(const struct manifest_process *p, const struct maps_scan *scan,
			    struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) maps %s at 0x%lx, which CRIU cannot save: it cannot "
			 "be opened again",
			 (int)p->pid, p->comm, scan->unsavable, scan->start);
	return stasis_error_hint(err,
				 "io_uring rings, DMA-BUFs and NCCL's buffers shared between "
				 "processes are such mappings; checkpoint before they are made "
				 "or after they are released");
}

int mappings_check(const struct manifest *m, bool shm_remap_ok, bool *link_remap,
		   struct stasis_error **err)
{
	*link_remap = false;
	for (size_t i = 0; i < m->nprocs; i++) {
		const struct manifest_process *p = &m->procs[i];
		struct maps_scan scan;

		if (scan_maps(p->pid, &scan) < 0)
			continue;
		/* Descriptors of deleted files still linked: CRIU's link-remap
		 * would take those too. */
		proc_each_fd(p->pid, note_relinked_fd, &scan);
		scan_exe(p->pid, &scan);
		if (scan.memfd_exe[0])
			return refuse_memfd_exe(p, scan.memfd_exe, err);
		if (p->cuda && scan.opencl)
			return refuse_opencl(p, err);
		if (scan.cuda_ipc[0]) {
			char who[256];

			mappers(m, scan.cuda_ipc, who, sizeof(who));
			return refuse_cuda_ipc(who, scan.cuda_ipc, err);
		}
		if (scan.exposed_ghost[0])
			return refuse_exposed_ghost(p, scan.exposed_ghost, err);
		if (scan.relinked[0])
			return refuse_relinked(p, scan.relinked,
					       "CRIU saves such a file only in " SHM_DIR, err);
		if (scan.shm_relinked && !shm_remap_ok)
			return refuse_relinked(
			    p, "a file in " SHM_DIR,
			    "its image could restore only on this machine, from a checkpoint "
			    "that ends the tree (not --leave-running, a migration or a container)",
			    err);
		*link_remap = *link_remap || scan.shm_relinked;
		if (scan.unsavable[0])
			return refuse_unsavable(p, &scan, err);
	}
	return 0;
}
