/* SPDX-License-Identifier: MIT */
/* A runc container: runc runs stasis's CRIU (with stasis's plugin) to save
 * and restore it; stasis does the GPU steps from the host, by host PIDs,
 * around it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "container.h"
#include "cuda-api.h"
#include "fault.h"
#include "lock.h"
#include "note.h"
#include "progress.h"
#include "runc.h"
#include "target.h"
#include "util.h"

static int runc_containers(struct target_container **list, size_t *n, struct stasis_error **err)
{
	_cleanup_free_ struct runc_container *c = NULL;
	struct target_container *bigger;
	size_t count = 0;
	int r;

	/* What a killed run left paused is listed running again. */
	runc_target_sweep();
	r = runc_list(&c, &count, err);

	if (r < 0 || !count)
		return r;
	bigger = realloc(*list, (*n + count) * sizeof(**list));
	if (!bigger)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	*list = bigger;
	for (size_t i = 0; i < count; i++) {
		struct target_container *t = &(*list)[(*n)++];

		memset(t, 0, sizeof(*t));
		t->runtime = "runc";
		t->pid = c[i].pid;
		snprintf(t->id, sizeof(t->id), "%s", c[i].id);
		snprintf(t->status, sizeof(t->status), "%s", c[i].status);
		snprintf(t->bundle, sizeof(t->bundle), "%s", c[i].bundle);
	}
	return 0;
}

static int runc_find(struct target *t, struct stasis_error **err)
{
	struct runc_container c;
	int r = runc_require(err);

	if (r == 0)
		r = runc_state(t->checkpoint->container, &c, err);
	if (r == 0)
		r = container_require_running(c.id, c.status, err);
	if (r < 0)
		return r;
	t->root = c.pid;
	snprintf(t->id, sizeof(t->id), "%s", c.id);
	snprintf(t->bundle, sizeof(t->bundle), "%s", c.bundle);
	return 0;
}

static int runc_describe(struct target *t, struct manifest *m, struct stasis_error **err)
{
	char config[PATH_MAX + 16];
	_cleanup_free_ pid_t *pids = NULL;
	_cleanup_free_ char *spec = NULL;
	size_t n = 0;
	int r = container_processes(t->root, &pids, &n, err);

	snprintf(config, sizeof(config), "%s/config.json", t->bundle);
	spec = read_file_str(config, NULL);
	return r < 0 ? r : container_describe(t, m, spec, pids, n, err);
}

static int runc_dump(struct target *t, struct manifest *m, struct stasis_error **err)
{
	uint64_t start = now_usec();
	int r;

	if (fault_at("criu-dump", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"runc checkpoint failed: injected fault");
	progress_begin("runc checkpoint of %zu process%s", m->nprocs, m->nprocs == 1 ? "" : "es");
	r = runc_checkpoint(NULL, t->id, t->images, t->work[0] ? t->work : t->images,
			    t->checkpoint->leave_running, &t->criu, err);
	progress_end();
	manifest_add_phase(m, "runc_checkpoint", now_usec() - start);
	return r;
}

/* While a run holds a container paused, a file of the run folder names
 * it, locked by the run: a run killed meanwhile (SIGKILL, which nothing
 * can catch) leaves it unlocked, and the next stasis resumes the
 * container (runc_target_sweep). */
#define HELD_PREFIX "runc-held-"

static int mark_held(const char *id, struct stasis_error **err)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/" HELD_PREFIX "%s", stasis_run_dir(), id);
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
		return fd;
	stasis_error_errno(err, errno, "marking container %s held in %s: %s", id, path,
			   strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

static void unmark_held(const char *id, int fd)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/" HELD_PREFIX "%s", stasis_run_dir(), id);
	unlink(path);
	close(fd);
}

/* The CUDA processes of a container that a killed run had checkpointed
 * get their GPU state back, once the container runs (the driver's restore
 * needs the process's restore thread to run); one after another, which is
 * slower than the orchestration's parallel steps and enough here. Returns
 * how many. */
static size_t restore_gpu_of(pid_t init)
{
	_cleanup_free_ pid_t *pids = NULL;
	enum cuda_process_state state;
	size_t n = 0, restored = 0;

	if (container_processes(init, &pids, &n, NULL) < 0 || !cuda_available() ||
	    cuda_load(NULL) < 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (cuda_get_state(pids[i], &state) != 0)
			continue;
		if (state == CUDA_PROCESS_CHECKPOINTED && cuda_restore(pids[i], NULL, 0) != 0)
			continue;
		if ((state == CUDA_PROCESS_CHECKPOINTED || state == CUDA_PROCESS_LOCKED) &&
		    cuda_unlock(pids[i]) == 0)
			restored++;
	}
	return restored;
}

/* A mark whose run is gone (its lock free): the container it left paused
 * runs again, its CUDA processes too. */
static void resume_abandoned(int dirfd, const char *name)
{
	const char *id = name + strlen(HELD_PREFIX);
	struct runc_container c;
	int fd;

	if (target_check_name("runc", "container id", id, NULL) < 0)
		return;
	fd = openat(dirfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
		if (runc_state(id, &c, NULL) == 0 && strcmp(c.status, "paused") == 0 &&
		    runc_resume(id, NULL) == 0) {
			size_t gpu = restore_gpu_of(c.pid);

			stasis_note("resumed runc container %s (and the GPU state of %zu CUDA "
				    "process%s), which a stasis run killed while it held it paused "
				    "had left paused",
				    id, gpu, gpu == 1 ? "" : "es");
		}
		unlinkat(dirfd, name, 0);
	}
	close(fd);
}

void runc_target_sweep(void)
{
	DIR *d = opendir(stasis_run_dir());
	struct dirent *de;

	while (d && (de = readdir(d)))
		if (strncmp(de->d_name, HELD_PREFIX, strlen(HELD_PREFIX)) == 0)
			resume_abandoned(dirfd(d), de->d_name);
	if (d)
		closedir(d);
}

/* Migration: the container is paused (its cgroup frozen) before runc's
 * CRIU dumps it with --leave-running, which leaves the cgroup as it found
 * it, frozen, until held() decides: its processes killed without running
 * again, or the container resumed. */
static int runc_dump_held(struct target *t, struct manifest *m, int (*held)(void *ctx), void *ctx,
			  struct stasis_error **err)
{
	char work[PATH_MAX + 8];
	uint64_t start = now_usec();
	int r, mark;

	if (fault_at("criu-dump", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"runc checkpoint failed: injected fault");
	mark = mark_held(t->id, err);
	if (mark < 0)
		return -EIO;
	r = runc_pause(t->id, err);
	if (r < 0) {
		unmark_held(t->id, mark);
		return r;
	}
	if (t->work[0])
		snprintf(work, sizeof(work), "%s", t->work);
	else
		snprintf(work, sizeof(work), "%s/runc", t->dir);
	progress_begin("runc checkpoint of %zu process%s", m->nprocs, m->nprocs == 1 ? "" : "es");
	r = runc_checkpoint(NULL, t->id, t->images, work, true, &t->criu, err);
	progress_end();
	manifest_add_phase(m, "runc_checkpoint", now_usec() - start);
	if (r == 0)
		r = held(ctx);
	if (r == 0)
		runc_kill_paused(t->id);
	else
		runc_resume(t->id, NULL);
	unmark_held(t->id, mark);
	return r;
}

static int runc_restore_check(struct target *t, const struct manifest *m, struct stasis_error **err)
{
	char config[PATH_MAX + 16];
	struct runc_container taken;
	struct stat st;
	int r = runc_require(err);

	if (r < 0)
		return r;
	if (runc_state(t->id, &taken, NULL) == 0) {
		stasis_error_set(err, EEXIST, STASIS_DOMAIN_USAGE, 0,
				 "container name '%s' is already taken (%s)", t->id, taken.status);
		return stasis_error_hint(err, "delete that container or restore with --name NEW");
	}
	snprintf(config, sizeof(config), "%s/config.json", t->bundle);
	if (!t->bundle[0] || stat(config, &st) < 0) {
		stasis_error_set(err, ENOENT, STASIS_DOMAIN_USAGE, 0,
				 "bundle %s not found (no config.json there)",
				 t->bundle[0] ? t->bundle : "(none)");
		return stasis_error_hint(err, "give the container's bundle with --bundle PATH");
	}
	return 0;
}

static int runc_restore_images(struct target *t, struct manifest *m,
			       struct image_verifier *verifier, pid_t *root,
			       struct stasis_error **err)
{
	char work[PATH_MAX];
	struct runc_container c;
	int r;

	if (fault_at("criu-restore", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"runc restore failed: injected fault");
	if (t->work[0])
		snprintf(work, sizeof(work), "%s", t->work);
	else
		snprintf(work, sizeof(work), "%s/restore-%d", t->dir, (int)getpid());
	r = runc_restore(t->id, t->bundle, t->images, work, &t->criu, err);
	/* A migration's image was made while the container was paused, and
	 * CRIU restores the freezer's state too (after the GPU restore). */
	if (r == 0 && runc_state(t->id, &c, NULL) == 0 && strcmp(c.status, "paused") == 0)
		r = runc_resume(t->id, err);
	return r;
}

static int runc_adopt(struct target *t, struct manifest *m, pid_t *root, struct stasis_error **err)
{
	struct runc_container c;
	_cleanup_free_ pid_t *pids = NULL;
	size_t n = 0;
	int r = runc_state(t->id, &c, err);

	if (r == 0)
		r = container_processes(c.pid, &pids, &n, err);
	if (r < 0)
		return r;
	*root = c.pid;
	return container_adopt(t, m, pids, n, err);
}

static void runc_delete(struct target *t, struct manifest *m, pid_t root, bool restored,
			struct stasis_error **err)
{
	runc_destroy(t->id);
	stasis_error_hint(err, "the half-restored container '%s' was deleted; the image is intact",
			  t->id);
}

const struct target_ops target_runc = {
    .runtime = "runc",
    .restore_phase = "runc_restore",
    .list = runc_containers,
    .find = runc_find,
    .describe = runc_describe,
    .dump = runc_dump,
    .dump_held = runc_dump_held,
    .restore_check = runc_restore_check,
    .restore = runc_restore_images,
    .adopt = runc_adopt,
    .destroy = runc_delete,
};
