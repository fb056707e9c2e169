/* SPDX-License-Identifier: MIT */
#include "preflight.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <linux/magic.h>

#include "criu-rpc.h"
#include "criu-settings.h"
#include "nvml.h"
#include "proc.h"
#include "util.h"

int preflight_host_memory_fits(uint64_t need, uint64_t available, const char *where,
			       struct stasis_error **err)
{
	char a[32], b[32], c[32];

	if (need + PREFLIGHT_HOST_RESERVE <= available)
		return 0;
	stasis_error_set(err, ENOMEM, STASIS_DOMAIN_USAGE, 0,
			 "not enough free host memory in %s for the GPU state: %s of GPU memory "
			 "to copy plus %s reserve, %s available",
			 where, format_bytes(need, a, sizeof(a)),
			 format_bytes(PREFLIGHT_HOST_RESERVE, b, sizeof(b)),
			 format_bytes(available, c, sizeof(c)));
	return stasis_error_hint(err, "free host memory or raise the memory limit, then retry");
}

uint64_t preflight_mem_available(void)
{
	_cleanup_free_ char *info = read_file_str("/proc/meminfo", NULL);
	const char *line = info ? strstr(info, "MemAvailable:") : NULL;

	return line ? strtoull(line + strlen("MemAvailable:"), NULL, 10) * 1024 : UINT64_MAX;
}

static uint64_t read_u64(const char *dir, const char *name)
{
	char path[PATH_MAX + 32];

	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/%s", dir, name);
	return read_file_u64(path, UINT64_MAX);
}

/* The room left under memory.max in cgroup and every ancestor. */
static uint64_t cgroup_headroom(const char *cgroup, char *limited_by, size_t len)
{
	char dir[PATH_MAX];
	uint64_t best = UINT64_MAX;

	snprintf(dir, sizeof(dir), "%s", cgroup);
	while (dir[0] && strcmp(dir, "/") != 0) {
		uint64_t max = read_u64(dir, "memory.max"), cur = read_u64(dir, "memory.current");
		char *slash;

		if (max != UINT64_MAX && cur != UINT64_MAX) {
			uint64_t room = max > cur ? max - cur : 0;

			if (room < best) {
				best = room;
				snprintf(limited_by, len, "cgroup %s", dir);
			}
		}
		slash = strrchr(dir, '/');
		if (!slash)
			break;
		*slash = '\0';
	}
	return best;
}

static int check_host_memory(const struct manifest *m, struct stasis_error **err)
{
	_cleanup_free_ char(*cgroups)[PATH_MAX] = calloc(m->nprocs ? m->nprocs : 1, PATH_MAX);
	uint64_t total = 0;
	int r;

	if (!cgroups)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < m->nprocs; i++)
		if (m->procs[i].cuda)
			proc_cgroup(m->procs[i].pid, cgroups[i], PATH_MAX);
	for (size_t i = 0; i < m->nprocs; i++) {
		char where[PATH_MAX + 16];
		uint64_t need = 0, room;

		if (!m->procs[i].cuda)
			continue;
		total += m->procs[i].gpu_bytes;
		/* The GPU memory lands in each process, charged to its cgroup. */
		for (size_t j = 0; j < m->nprocs; j++)
			if (m->procs[j].cuda && strcmp(cgroups[j], cgroups[i]) == 0)
				need += m->procs[j].gpu_bytes;
		room = cgroup_headroom(cgroups[i], where, sizeof(where));
		if (room != UINT64_MAX) {
			r = preflight_host_memory_fits(need, room, where, err);
			if (r < 0)
				return stasis_error_wrap(err, "PID %d", (int)m->procs[i].pid);
		}
	}
	return total ? preflight_host_memory_fits(total, preflight_mem_available(), "the machine",
						  err)
		     : 0;
}

static pid_t find_mps_daemon(void)
{
	DIR *dir = opendir("/proc");
	struct dirent *de;
	pid_t found = 0;

	if (!dir)
		return 0;
	while (!found && (de = readdir(dir))) {
		pid_t pid = (pid_t)atoi(de->d_name);
		char comm[32];

		/* nvidia-cuda-mps-control and -server, cut to 15 characters. */
		if (pid > 0 && strcmp(proc_comm(pid, comm, sizeof(comm)), "nvidia-cuda-mps") == 0)
			found = pid;
	}
	closedir(dir);
	return found;
}

static int check_mig(const struct manifest *m, struct stasis_error **err)
{
	_cleanup_free_ struct nvml_gpu *gpus = NULL;
	size_t n = 0;

	if (nvml_gpus(&gpus, &n, NULL) < 0)
		return 0;
	for (size_t i = 0; i < m->nprocs; i++) {
		const struct manifest_process *p = &m->procs[i];

		for (size_t j = 0; p->cuda && j < p->ngpus; j++)
			for (size_t g = 0; g < n; g++) {
				if (strcmp(gpus[g].uuid, m->gpus[p->gpus[j]].uuid) != 0 ||
				    gpus[g].mig != 1)
					continue;
				stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
						 "PID %d (%s) uses GPU %d (%s), which is in MIG "
						 "mode; the driver cannot checkpoint MIG instances",
						 (int)p->pid, p->comm, gpus[g].index, gpus[g].uuid);
				return stasis_error_hint(err, "run the workload on a GPU "
							      "with MIG disabled");
			}
	}
	return 0;
}

int preflight_host_memory(const struct manifest *m, struct stasis_error **err)
{
	return manifest_cuda_count(m) ? check_host_memory(m, err) : 0;
}

int preflight_gpu_mode(const struct manifest *m, struct stasis_error **err)
{
	pid_t mps;
	int r;

	if (!manifest_cuda_count(m))
		return 0;
	r = check_mig(m, err);
	if (r < 0)
		return r;
	mps = find_mps_daemon();
	if (mps) {
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
				 "MPS is in use (nvidia-cuda-mps daemon, PID %d); the driver "
				 "cannot checkpoint MPS clients",
				 (int)mps);
		return stasis_error_hint(err, "stop the MPS daemon and run the workload "
					      "without MPS");
	}
	return 0;
}

/* A field of a /proc/PID/status text in bytes ("RssAnon:"), 0 when absent. */
static uint64_t status_bytes(const char *status, const char *field)
{
	const char *line = status ? strstr(status, field) : NULL;

	return line ? strtoull(line + strlen(field), NULL, 10) * 1024 : 0;
}

void preflight_image_estimate(const struct manifest *m, struct image_estimate *e)
{
	uint64_t shmem = 0;

	memset(e, 0, sizeof(*e));
	for (size_t i = 0; i < m->nprocs; i++) {
		char path[64];
		_cleanup_free_ char *status = NULL;
		uint64_t s, anon, gpu = m->procs[i].cuda ? m->procs[i].gpu_bytes : 0;

		snprintf(path, sizeof(path), "/proc/%d/status", (int)m->procs[i].pid);
		status = read_file_str(path, NULL);
		s = status_bytes(status, "RssShmem:");
		anon = status_bytes(status, "RssAnon:");
		e->gpu += gpu;
		/* Private memory is saved per process, shared memory once. */
		e->host += anon;
		shmem = s > shmem ? s : shmem;
		/* The driver's copy lands in the process's own memory. */
		if (anon + gpu > e->largest)
			e->largest = anon + gpu;
	}
	e->host += shmem;
	e->total = e->gpu + e->host;
	e->total += e->total / 20 + PREFLIGHT_IMAGE_SLACK;
}

static int refuse_room(const struct image_estimate *e, uint64_t free_bytes, const char *dir,
		       struct stasis_error **err)
{
	char need[32], gpu[32], host[32], have[32];

	stasis_error_set(err, ENOSPC, STASIS_DOMAIN_USAGE, 0,
			 "not enough free space for the image in %s: about %s expected (%s of GPU "
			 "memory, %s of process memory, 5%% margin), %s free",
			 dir, format_bytes(e->total, need, sizeof(need)),
			 format_bytes(e->gpu, gpu, sizeof(gpu)),
			 format_bytes(e->host, host, sizeof(host)),
			 format_bytes(free_bytes, have, sizeof(have)));
	return stasis_error_hint(err, "checkpoint into a file system with more room (-D), free "
				      "space there, pass --compress, or hold less GPU memory");
}

int preflight_image_room(const struct manifest *m, const char *dir, bool compress,
			 struct stasis_error **err)
{
	struct image_estimate e;
	struct statvfs vfs;
	struct statfs fs;
	uint64_t free_bytes;

	if (statvfs(dir, &vfs) < 0 || statfs(dir, &fs) < 0)
		return stasis_error_errno(err, errno, "%s: %s", dir, strerror(errno));
	preflight_image_estimate(m, &e);
	free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	/* How far the pages compress is known only once they are read; a
	 * full disk during the dump rolls back like any other failure. */
	if (!compress && e.total > free_bytes)
		return refuse_room(&e, free_bytes, dir, err);
	/* In tmpfs the image takes host memory, while the GPU state also
	 * sits in the processes' memory. */
	if (fs.f_type == TMPFS_MAGIC && !compress) {
		char where[PATH_MAX + 64];

		snprintf(where, sizeof(where), "the machine (the image goes to tmpfs at %s)", dir);
		return preflight_host_memory_fits(e.gpu + e.total, preflight_mem_available(), where,
						  err);
	}
	return 0;
}

uint64_t preflight_dirty_limit(uint64_t dirty_bytes, unsigned int dirty_ratio, uint64_t dirtyable)
{
	if (dirty_bytes)
		return dirty_bytes;
	return dirtyable / 100 * dirty_ratio;
}

const char *preflight_stage_decide(const struct image_estimate *e, const struct stage_facts *f,
				   bool forced)
{
	/* The driver's copy of the GPU state takes its share of the machine's
	 * memory first; it is charged to the workload's cgroup, not stasis's. */
	uint64_t dirtyable = f->available > e->gpu ? f->available - e->gpu : 0;
	bool in_parts = f->part_bytes && e->largest >= f->part_bytes;

	if (f->own_room < dirtyable)
		dirtyable = f->own_room;
	if (!forced && !in_parts &&
	    e->total <= preflight_dirty_limit(f->dirty_bytes, f->dirty_ratio, dirtyable))
		return "the page cache takes the image below the dirty limit";
	if (f->stage_room < e->total)
		return "not enough room in the staging folder";
	/* The GPU state sits in the processes' memory until the GPU restore,
	 * beside the staged image. */
	if (e->gpu + e->total + PREFLIGHT_HOST_RESERVE > f->available)
		return "not enough free host memory to hold the image";
	/* tmpfs pages cannot be reclaimed: past its limit, stasis's cgroup
	 * would kill CRIU or stasis in the middle of the dump. */
	if (e->total + PREFLIGHT_HOST_RESERVE > f->own_room)
		return "not enough room under the memory limit of stasis's cgroup";
	return NULL;
}

const char *preflight_stage(const struct manifest *m, const char *dir, const char *stage_root,
			    bool forced)
{
	char cgroup[PATH_MAX], limited_by[PATH_MAX + 16];
	struct image_estimate e;
	struct stage_facts f;
	struct statfs dir_fs, stage_fs;
	struct statvfs stage_vfs;

	if (statfs(dir, &dir_fs) < 0 || dir_fs.f_type == TMPFS_MAGIC)
		return "the image folder is in memory already";
	if (statfs(stage_root, &stage_fs) < 0 || statvfs(stage_root, &stage_vfs) < 0 ||
	    access(stage_root, W_OK) < 0)
		return "no writable staging folder";
	if (stage_fs.f_type != TMPFS_MAGIC)
		return "the staging folder is not in memory (tmpfs)";
	preflight_image_estimate(m, &e);
	f.available = preflight_mem_available();
	/* CRIU runs in stasis's cgroup: its writes are charged there. */
	proc_cgroup(getpid(), cgroup, sizeof(cgroup));
	f.own_room =
	    cgroup[0] ? cgroup_headroom(cgroup, limited_by, sizeof(limited_by)) : UINT64_MAX;
	f.dirty_bytes = read_file_u64("/proc/sys/vm/dirty_bytes", 0);
	f.dirty_ratio = (unsigned int)read_file_u64("/proc/sys/vm/dirty_ratio", 20);
	f.stage_room = (uint64_t)stage_vfs.f_bavail * stage_vfs.f_frsize;
	f.part_bytes = criu_page_part_bytes();
	return preflight_stage_decide(&e, &f, forced);
}
