/* SPDX-License-Identifier: MIT */
#include "mappings.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
	char relinked[256];  /* the first deleted file still linked elsewhere */
};

#define DELETED " (deleted)"

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
		if (!scan->relinked[0] && deleted_but_linked(map_files, range, line + file))
			snprintf(scan->relinked, sizeof(scan->relinked), "%s", line + file);
		if (major != 0 || scan->unsavable[0])
			continue;
		if (reopens(map_files, range, line + file))
			continue;
		snprintf(scan->unsavable, sizeof(scan->unsavable), "%s", line + file);
		scan->start = from;
	}
	return 0;
}

/* The driver's checkpoint saves a process's CUDA contexts; an OpenCL
 * context beside them (measured: PyTorch Lightning's main process) keeps
 * its mappings of the device, which nothing can save. */
static int refuse_opencl(const struct manifest_process *p, struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
			 "PID %d (%s) uses OpenCL beside CUDA (%s is loaded); the driver's "
			 "checkpoint saves CUDA's GPU state only",
			 (int)p->pid, p->comm, OPENCL_DRIVER);
	return stasis_error_hint(err, "keep the program from loading OpenCL");
}

static int refuse_jax(pid_t pid, const char *comm, struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
			 "PID %d (%s) runs JAX, which crashes when it runs on while its GPU "
			 "state is checkpointed",
			 (int)pid, comm);
	return stasis_error_hint(err, "checkpoint it without --leave-running: it ends, and its "
				      "image restores");
}

static int refuse_relinked(const struct manifest_process *p, const char *path,
			   struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) maps %s, a file whose name is gone while another name "
			 "still links it (a POSIX semaphore, as Python's multiprocessing makes "
			 "with its spawn start method): CRIU cannot save it yet",
			 (int)p->pid, p->comm, path);
	return stasis_error_hint(err, "nothing was changed; with multiprocessing, the 'fork' "
				      "start method makes semaphores that CRIU saves");
}

int mappings_refuse_running_checkpointed(pid_t pid, const char *comm, struct stasis_error **err)
{
	struct maps_scan scan;

	if (scan_maps(pid, &scan) == 0 && scan.jax)
		return refuse_jax(pid, comm, err);
	return 0;
}

int mappings_check(const struct manifest *m, bool keeps_running, struct stasis_error **err)
{
	for (size_t i = 0; i < m->nprocs; i++) {
		const struct manifest_process *p = &m->procs[i];
		struct maps_scan scan;

		if (scan_maps(p->pid, &scan) < 0)
			continue;
		if (p->cuda && scan.opencl)
			return refuse_opencl(p, err);
		if (p->cuda && keeps_running && scan.jax)
			return refuse_jax(p->pid, p->comm, err);
		if (scan.relinked[0])
			return refuse_relinked(p, scan.relinked, err);
		if (!scan.unsavable[0])
			continue;
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
				 "PID %d (%s) maps %s at 0x%lx, which CRIU cannot save: it cannot "
				 "be opened again",
				 (int)p->pid, p->comm, scan.unsavable, scan.start);
		return stasis_error_hint(
		    err, "io_uring rings, DMA-BUFs and NCCL's buffers shared between "
			 "processes are such mappings; checkpoint before they are made or "
			 "after they are released");
	}
	return 0;
}
