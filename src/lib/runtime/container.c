/* SPDX-License-Identifier: MIT */
/* checkpoint: preflight (runtime, container running, GPU refusals) -> lock
 * and checkpoint the CUDA processes by host PID -> runc checkpoint (runc
 * runs CRIU) -> manifest. restore: preflight (name free, bundle there, GPU
 * map) -> runc restore -> find the new host PIDs by their PIDs inside the
 * container -> GPU restore and unlock. */
#include "container.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "criu-rpc.h"
#include "fault.h"
#include "gpu-handoff.h"
#include "image.h"
#include "lock.h"
#include "preflight.h"
#include "proc.h"
#include "progress.h"
#include "runc.h"
#include "steps.h"
#include "util.h"

static int require_runc(const char *runtime, struct stasis_error **err)
{
	if (strcmp(runtime, "runc") != 0) {
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0, "unknown runtime '%s'",
				 runtime);
		return stasis_error_hint(err, "stasis drives runc");
	}
	return runc_require(err);
}

static int describe_container(const struct runc_container *c, struct manifest *m,
			      struct stasis_error **err)
{
	char path[PATH_MAX + 16];
	_cleanup_free_ pid_t *pids = NULL;
	size_t n = 0;
	int r;

	m->container.runtime = strdup("runc");
	m->container.id = strdup(c->id);
	m->container.bundle = strdup(c->bundle);
	snprintf(path, sizeof(path), "%s/config.json", c->bundle);
	m->container.spec = read_file_str(path, NULL);
	r = runc_processes(c, &pids, &n, err);
	for (size_t i = 0; r == 0 && i < n; i++) {
		r = proc_describe(pids[i], m, err);
		if (r == 0)
			m->procs[m->nprocs - 1].ns_pid = proc_ns_pid(pids[i]);
	}
	return r;
}

static int preflight(const struct stasis_checkpoint_options *o, struct runc_container *c,
		     struct manifest *m, struct stasis_error **err)
{
	int r = require_runc(o->runtime, err);

	if (r == 0)
		r = runc_state(o->container, c, err);
	if (r < 0)
		return r;
	if (strcmp(c->status, "running") != 0) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "container '%s' is not running (it is %s)", c->id, c->status);
		return stasis_error_hint(err, "only a running container can be checkpointed");
	}
	r = criu_version(err);
	if (r < 0)
		return r;
	m->criu_version = r;
	return image_prepare(o->dir, err);
}

/* New host PIDs for the processes of m, matched by their PIDs inside the
 * container, which CRIU keeps. Every CUDA process must be there; the others
 * may have come and gone since (a shell's short-lived children). */
static int adopt_host_pids(const char *id, struct manifest *m, pid_t *init,
			   struct stasis_error **err)
{
	struct runc_container c;
	_cleanup_free_ pid_t *pids = NULL, *ns = NULL;
	size_t n = 0;
	int r = runc_state(id, &c, err);

	if (r == 0)
		r = runc_processes(&c, &pids, &n, err);
	if (r < 0)
		return r;
	ns = calloc(n ? n : 1, sizeof(*ns));
	if (!ns)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		ns[i] = proc_ns_pid(pids[i]);
	*init = c.pid;
	for (size_t j = 0; j < m->nprocs; j++) {
		struct manifest_process *p = &m->procs[j];
		pid_t host = 0;

		for (size_t i = 0; i < n && !host; i++)
			if (ns[i] == p->ns_pid)
				host = pids[i];
		if (!host && p->cuda)
			return stasis_error_set(err, ESRCH, STASIS_DOMAIN_CRIU, 0,
						"CUDA process %d of container '%s' (PID %d inside) "
						"is not there after runc restore",
						(int)p->pid, id, (int)p->ns_pid);
		p->pid = host;
	}
	return 0;
}

/* The container is gone but its image has no manifest: bring it back from
 * the image rather than lose the workload. */
static void restore_after_failure(const struct stasis_checkpoint_options *o,
				  const struct runc_container *c, struct manifest *m,
				  struct stasis_error **err)
{
	char images[PATH_MAX], work[PATH_MAX];
	struct gpu_plan identity = {0};
	pid_t init;
	int r;

	snprintf(images, sizeof(images), "%s/%s", o->dir, IMAGE_CRIU_SUBDIR);
	snprintf(work, sizeof(work), "%s/rollback", o->dir);
	r = runc_restore(c->id, c->bundle, images, work, NULL);
	if (r == 0)
		r = adopt_host_pids(c->id, m, &init, NULL);
	if (r == 0)
		r = restore_resume_gpus(m, &identity, NULL);
	if (r == 0) {
		stasis_error_hint(err,
				  "container '%s' was restored from the image just written "
				  "and runs again",
				  c->id);
		return;
	}
	runc_destroy(c->id);
	stasis_error_hint(err, "restoring container '%s' from %s failed too; it is gone", c->id,
			  o->dir);
}

static int dump(const struct stasis_checkpoint_options *o, struct manifest *m,
		struct stasis_error **err)
{
	char images[PATH_MAX];
	uint64_t start = now_usec();
	int r;

	snprintf(images, sizeof(images), "%s/%s", o->dir, IMAGE_CRIU_SUBDIR);
	if (fault_at("criu-dump", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"runc checkpoint failed: injected fault");
	progress_begin("runc checkpoint of %zu process%s", m->nprocs, m->nprocs == 1 ? "" : "es");
	r = runc_checkpoint(o->container, images, images, o->leave_running, err);
	progress_end();
	manifest_add_phase(m, "runc_checkpoint", now_usec() - start);
	return r;
}

int container_checkpoint(const struct stasis_checkpoint_options *o, struct manifest *m,
			 struct gpu_batch *batch, struct stasis_error **err)
{
	struct runc_container c;
	struct image_follower *follower = NULL;
	uint64_t start = now_usec();
	bool made;
	int r, lock_fd;

	r = preflight(o, &c, m, err);
	if (r < 0)
		return r;
	made = r == 1;
	lock_fd = pid_lock(c.pid, err);
	if (lock_fd < 0) {
		image_discard(o->dir, made);
		return lock_fd;
	}
	checkpoint_fill_host_facts(m);
	m->options.leave_running = o->leave_running;
	r = describe_container(&c, m, err);
	if (r == 0)
		r = checkpoint_preflight(m, batch, o->dir, false, err);
	manifest_add_phase(m, "preflight", now_usec() - start);
	/* From here on the container changes: every failure rolls back. */
	if (r == 0)
		r = checkpoint_suspend_gpus(batch, m, err);
	if (r == 0)
		r = checkpoint_check_interrupted("sigterm-before-dump", "runc checkpoint", err);
	if (r < 0) {
		gpu_rollback(batch, err);
		pid_unlock(c.pid, lock_fd);
		image_discard(o->dir, made);
		return r;
	}
	image_follow_start(o->dir, &follower, NULL);
	r = dump(o, m, err);
	r = checkpoint_dump_end(batch, m, o->leave_running, r, err);
	if (r == 0) {
		r = checkpoint_seal_image(o->dir, m, follower, err);
		if (r < 0 && !o->leave_running)
			restore_after_failure(o, &c, m, err);
	}
	image_follow_free(follower);
	pid_unlock(c.pid, lock_fd);
	if (r < 0)
		image_discard(o->dir, made);
	return r;
}

static int restore_preflight(const struct stasis_restore_options *o, const struct manifest *m,
			     const char **id, const char **bundle, struct stasis_error **err)
{
	char config[PATH_MAX + 16];
	struct runc_container taken;
	struct stat st;
	int r = require_runc(o->runtime, err);

	if (r < 0)
		return r;
	*id = o->name ? o->name : m->container.id;
	*bundle = o->bundle ? o->bundle : m->container.bundle;
	if (runc_state(*id, &taken, NULL) == 0) {
		stasis_error_set(err, EEXIST, STASIS_DOMAIN_USAGE, 0,
				 "container name '%s' is already taken (%s)", *id, taken.status);
		return stasis_error_hint(err, "delete that container or restore with --name NEW");
	}
	snprintf(config, sizeof(config), "%s/config.json", *bundle ? *bundle : "");
	if (!*bundle || stat(config, &st) < 0) {
		stasis_error_set(err, ENOENT, STASIS_DOMAIN_USAGE, 0,
				 "bundle %s not found (no config.json there)",
				 *bundle ? *bundle : "(none)");
		return stasis_error_hint(err, "give the container's bundle with --bundle PATH");
	}
	return criu_version(err) < 0 ? -EIO : 0;
}

int container_restore(const struct stasis_restore_options *o, struct manifest *m, pid_t *root_out,
		      struct stasis_error **err)
{
	char images[PATH_MAX], work[PATH_MAX];
	_cleanup_error_ struct stasis_error *gpu_err = NULL;
	const char *id, *bundle;
	struct gpu_handoff handoff;
	struct gpu_plan plan;
	uint64_t start;
	int served, r = restore_preflight(o, m, &id, &bundle, err);

	if (r == 0)
		r = restore_gpu_preflight(m, o->gpu_map, &plan, err);
	if (r < 0)
		return r;
	snprintf(images, sizeof(images), "%s/%s", o->dir, IMAGE_CRIU_SUBDIR);
	snprintf(work, sizeof(work), "%s/restore-%d", o->dir, (int)getpid());
	start = now_usec();
	r = gpu_handoff_restore_begin(&handoff, m, &plan, true, err);
	progress_begin("runc restore of %zu process%s", m->nprocs, m->nprocs == 1 ? "" : "es");
	if (r == 0)
		r = fault_at("criu-restore", 0)
			? stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					   "runc restore failed: injected fault")
			: runc_restore(id, bundle, images, work, err);
	progress_end();
	served = gpu_handoff_end(&handoff, &gpu_err);
	manifest_add_phase(m, "runc_restore", now_usec() - start);
	/* A GPU restore that failed inside CRIU failed runc's restore too:
	 * its error is the one to give. */
	if (r == 0 && served >= 0)
		r = adopt_host_pids(id, m, root_out, err);
	if (r == 0 || served < 0)
		r = restore_finish_gpus(m, &plan, served, &gpu_err, err);
	if (r < 0) {
		runc_destroy(id);
		stasis_error_hint(err,
				  "the half-restored container '%s' was deleted; the image is "
				  "intact",
				  id);
	}
	return r;
}
