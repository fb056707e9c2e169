/* SPDX-License-Identifier: MIT */
/* stasis restore: preflight (image, CRIU, driver, GPUs, PIDs) -> CRIU
 * restore -> restore all GPU state (with the GPU map) -> unlock all. A
 * failure after CRIU restored the tree kills the tree rather than leave it
 * locked. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "criu-rpc.h"
#include "fault.h"
#include "gpu-handoff.h"
#include "plugin-channel.h"
#include "gpu.h"
#include "gpumap.h"
#include "image.h"
#include "image-stage.h"
#include "interrupt.h"
#include "lock.h"
#include "mappings.h"
#include "note.h"
#include "preflight-checks.h"
#include "shm-remap.h"
#include "nvml.h"
#include "proc.h"
#include "progress.h"
#include "run-work.h"
#include "stasis.h"
#include "steps.h"
#include "target.h"
#include "thp.h"
#include "util.h"

/* Dumped processes may still be zombies, or orphans that init has not
 * reaped yet: give them a bounded moment. */
#define PID_FREE_WAIT_MS 5000

int restore_wait_pids_free(const struct manifest *m, struct stasis_error **err)
{
	for (int waited = 0;; waited += 20) {
		const struct manifest_process *taken = NULL;
		char comm[32], state;

		for (size_t i = 0; i < m->nprocs && !taken; i++)
			if (m->procs[i].pid > 0 && proc_state(m->procs[i].pid))
				taken = &m->procs[i];
		if (!taken)
			return 0;
		if (waited < PID_FREE_WAIT_MS) {
			usleep(20000);
			continue;
		}
		state = proc_state(taken->pid);
		proc_comm(taken->pid, comm, sizeof(comm));
		stasis_error_set(err, EEXIST, STASIS_DOMAIN_USAGE, 0,
				 "PID %d of the image is taken by '%s'%s", (int)taken->pid, comm,
				 state == 'Z' ? " (a zombie its parent has not reaped)" : "");
		return stasis_error_hint(
		    err, state == 'Z' ? "make its parent wait for it, then restore"
				      : "stop that process, or restore in a new PID namespace");
	}
}

static int plan_gpus(const struct manifest *m, const char *map, struct gpu_plan *plan,
		     struct stasis_error **err)
{
	_cleanup_free_ struct nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	int r;

	memset(plan, 0, sizeof(*plan));
	if (manifest_cuda_count(m) == 0)
		return 0;
	r = cuda_open(err);
	if (r < 0)
		return stasis_error_wrap(err, "the image holds GPU state");
	if (cuda_driver_version() < m->cuda_driver_version) {
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, cuda_driver_version(),
				 "the driver here (CUDA %d.%d) is older than the one that made the "
				 "image (CUDA %d.%d)",
				 cuda_driver_version() / 1000, cuda_driver_version() % 1000 / 10,
				 m->cuda_driver_version / 1000, m->cuda_driver_version % 1000 / 10);
		return stasis_error_hint(err, "upgrade the NVIDIA driver");
	}
	if (m->ngpus == 0 && (!map || !*map))
		return 0; /* made without NVML: the driver maps by itself */
	r = nvml_gpus(&gpus, &ngpus, err);
	if (r < 0)
		return r;
	r = gpu_plan_make(m, gpus, ngpus, map, plan, err);
	if (r < 0)
		return r;
	if (plan->npairs && cuda_driver_version() < CUDA_VERSION_GPU_REMAP) {
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0,
				 "restoring onto other GPUs needs driver 580 (CUDA 13.0)");
		return stasis_error_hint(err, "restore on the same GPUs or upgrade the driver");
	}
	return 0;
}

int restore_gpu_preflight(const struct manifest *m, const char *map, struct gpu_plan *plan,
			  struct stasis_error **err)
{
	int r = plan_gpus(m, map, plan, err);

	if (r < 0 || !manifest_cuda_count(m))
		return r;
	r = preflight_criu_for_gpus(err);
	if (r < 0)
		return r;
	/* Only the GPU restore needs cuInit: it runs beside what comes next,
	 * CRIU's restore above all. */
	cuda_load_begin();
	return 0;
}

int restore_resume_gpus(struct manifest *m, const struct gpu_plan *plan, struct stasis_error **err)
{
	struct gpu_batch batch = {0};
	uint64_t start = now_usec();
	int r = 0;

	if (manifest_cuda_count(m)) {
		r = cuda_load(err); /* waits for cuda_load_begin()'s */
		manifest_add_phase(m, "cuda_init_wait", now_usec() - start);
	}
	if (r == 0)
		r = gpu_batch_of_restored(&batch, m, plan, err);
	/* No rollback here: on failure the caller kills the tree. */
	if (r == 0)
		r = gpu_restore_unlock(&batch, m, err);
	gpu_batch_free(&batch);
	return r;
}

/* The GPU restore ran inside CRIU's restore, or failed there (the plugin
 * then killed the tree before it ran), or CRIU never asked for it: then it
 * runs now, after the fact. */
int restore_finish_gpus(struct manifest *m, const struct gpu_plan *plan, int served,
			struct stasis_error **gpu_err, struct stasis_error **err)
{
	if (served == 1)
		return 0;
	if (served < 0) {
		stasis_error_free(*err);
		*err = TAKE_PTR(*gpu_err);
		return served;
	}
	return restore_resume_gpus(m, plan, err);
}

/* The target's restore with the GPU handoff serving beside it; after a
 * failure, the target kills what it brought back. */
int restore_target_handed_off(struct target *t, struct manifest *m, struct image_verifier *verifier,
			      const struct gpu_plan *plan, pid_t *root_out,
			      struct stasis_error **err)
{
	_cleanup_error_ struct stasis_error *gpu_err = NULL;
	struct gpu_handoff handoff;
	uint64_t start = now_usec();
	int r, restored, served;

	*root_out = -1;
	r = gpu_handoff_restore_begin(&handoff, m, plan, !t->ops->same_pids, err);
	if (r < 0)
		return r;
	t->criu.plugin_socket = gpu_handoff_socket(&handoff);
	t->criu.dev_map = plan->dev_map;
	t->criu.fill_nprocs = m->nprocs;
	restored = t->ops->restore(t, m, verifier, root_out, err);
	t->criu.plugin_socket = NULL;
	served = gpu_handoff_end(&handoff, &gpu_err);
	manifest_add_phase(m, t->ops->restore_phase, now_usec() - start);
	/* A GPU restore that failed inside the restore failed it too: its
	 * error is the one to give. */
	r = restored;
	if (r == 0 && served >= 0 && t->ops->adopt)
		r = t->ops->adopt(t, m, root_out, err);
	if (r == 0 || served < 0)
		r = restore_finish_gpus(m, plan, served, &gpu_err, err);
	/* A signal to stop that came while it restored: what came back goes. */
	if (r == 0 && stasis_interrupted())
		r = stasis_error_set(err, EINTR, STASIS_DOMAIN_SYSTEM, EINTR,
				     "interrupted by a signal during the restore");
	if (r < 0)
		t->ops->destroy(t, m, restored == 0 ? *root_out : -1, restored == 0 || served < 0,
				err);
	return r;
}

static int restore_target(struct target *t, struct manifest *m, struct image_verifier *verifier,
			  pid_t *root_out, struct stasis_error **err)
{
	struct gpu_plan plan;
	uint64_t start = now_usec(), step_start;
	int lock_fd = -1, r = t->ops->restore_check ? t->ops->restore_check(t, m, err) : 0;

	/* CRIU was asked for its version first of all (stasis_restore). */
	if (r < 0)
		return r;
	step_start = now_usec();
	r = restore_gpu_preflight(m, t->restore->gpu_map, &plan, err);
	manifest_add_phase(m, "gpu_preflight", now_usec() - step_start);
	if (r < 0)
		return r;
	/* A tree comes back at its own PIDs: they must be free, and stay
	 * ours until it runs. */
	if (t->ops->same_pids) {
		lock_fd = pid_lock(manifest_root(m)->pid, err);
		if (lock_fd < 0)
			return lock_fd;
		/* Its own figure: a killed tree's zombies wait for their
		 * reaper, which is not the restore's cost. */
		step_start = now_usec();
		r = restore_wait_pids_free(m, err);
		manifest_add_phase(m, "pids_wait", now_usec() - step_start);
	}
	manifest_add_phase(m, "preflight", now_usec() - start);
	if (r == 0)
		r = restore_target_handed_off(t, m, verifier, &plan, root_out, err);
	if (lock_fd >= 0)
		pid_unlock(manifest_root(m)->pid, lock_fd);
	return r;
}

/* Marks the work folder of a restore that succeeded. */
#define RESTORE_SUCCEEDED "succeeded"

/* A restore that succeeded keeps its logs until the next one succeeds:
 * the folders of the earlier ones go. */
static void restore_work_succeeded(const char *work)
{
	const char *name = strrchr(work, '/') + 1;
	_cleanup_close_ int fd = -1;
	struct dirent *de;
	DIR *d;

	fd = open(work, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	close(openat(fd, RESTORE_SUCCEEDED, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
	d = opendir(stasis_run_dir());
	while (d && (de = readdir(d))) {
		char path[PATH_MAX + 300], mark[sizeof(path) + 16];

		if (strncmp(de->d_name, "restore-", 8) != 0 || !strcmp(de->d_name, name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", stasis_run_dir(), de->d_name);
		snprintf(mark, sizeof(mark), "%s/" RESTORE_SUCCEEDED, path);
		if (access(mark, F_OK) == 0)
			remove_dir_tree(path);
	}
	if (d)
		closedir(d);
}

/* A restore that failed before anything was written to its work folder
 * leaves none; a failed one keeps its logs there, and its error names the
 * folder; one that succeeded keeps them until the next succeeds. */
static void restore_work_end(const char *work, int r, struct stasis_error **err)
{
	if (r == 0)
		restore_work_succeeded(work);
	else
		run_work_failed(work, err);
}

/* CRIU's options given again at restore: CRIU needs the image's, which
 * are used whatever the user says; one the image was made without
 * changes nothing, and is said so. */
static void note_criu_option(bool given, bool recorded, const char *name, const char *why)
{
	if (given && !recorded)
		stasis_note("%s changes nothing: the image was checkpointed without it (%s)", name,
			    why);
}

/* What the user asked of the restore, against the image, before
 * anything runs. */
static int restore_check_options(const struct stasis_restore_options *o, const struct manifest *m,
				 const struct target_ops *ops, struct stasis_error **err)
{
	if (ops->runtime && (o->criu_log.file || o->criu_log.level_given)) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "%s is for a process tree's image, this is a %s container's",
				 o->criu_log.file ? "-o" : "-v", ops->runtime);
		return stasis_error_hint(err, "its runtime runs CRIU with its own log");
	}
	note_criu_option(o->shell_job, m->options.shell_job, "--shell-job",
			 "its tree was a session of its own");
	note_criu_option(o->tcp_established, m->options.tcp_established, "--tcp-established",
			 "it holds no established TCP connection");
	note_criu_option(o->ext_unix_sk, m->options.ext_unix_sk, "--ext-unix-sk",
			 "it holds no socket of a peer outside the tree");
	return o->gpu_map ? gpu_map_check_image(o->gpu_map, m, err) : 0;
}

/* The image is verified while the target restores when it notifies
 * before the processes run, and pages can be read as they come; else
 * first. */
static int restore_verified(const struct stasis_restore_options *o, struct manifest *m,
			    struct image_verifier *verifier, pid_t *root_out,
			    struct stasis_error **err)
{
	struct target t = {.dir = o->dir, .restore = o};
	char criu_dir[PATH_MAX];
	uint64_t start = now_usec();
	int r = target_for_image(m, o->runtime, &t.ops, err);

	if (r == 0)
		r = restore_check_options(o, m, t.ops, err);
	if (r == 0 && m->options.compress && !t.ops->compresses)
		r = stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
				     "a compressed %s image cannot be restored", t.ops->runtime);
	if (r == 0)
		r = target_restore_names(&t, m, err);
	if (r == 0 && m->options.link_remap)
		r = shm_remap_check(m->options.link_remap_dir, err);
	/* CRIU's files, verified, say who the processes are: the manifest's.
	 * (A compressed image's stage links to them.) */
	snprintf(criu_dir, sizeof(criu_dir), "%s/%s", o->dir, IMAGE_CRIU_SUBDIR);
	if (r == 0)
		r = image_check_processes(criu_dir, m, err);
	if (r < 0)
		return r;
	if (!t.ops->verifies_in_restore ||
	    (m->options.compress && !image_verifier_serves(verifier))) {
		progress_begin(m->options.compress ? "decompressing the image"
						   : "verifying the image's checksums");
		r = image_verify_wait(verifier, err);
		progress_end();
		manifest_add_phase(m, m->options.compress ? "decompress" : "verify_wait",
				   now_usec() - start);
	}
	if (r == 0 && stasis_interrupted())
		r = stasis_error_set(err, EINTR, STASIS_DOMAIN_SYSTEM, EINTR,
				     "interrupted by a signal before the restore: nothing was "
				     "restored");
	if (r == 0)
		r = run_work_make("restore", t.work, sizeof(t.work), err);
	if (r < 0)
		return r;
	r = restore_target(&t, m, verifier, root_out, err);
	/* CRIU's statistics, for --print-stats: what cannot be read of them
	 * leaves them out, the tree runs. */
	if (r == 0)
		criu_stats_read_restore(t.work, &m->criu_restore, NULL);
	/* The tree runs: its NCCL ranks make their communicators again. */
	if (r == 0)
		gpu_nccl_rebuilt(m, start);
	restore_work_end(t.work, r, err);
	return r;
}

int stasis_restore(const struct stasis_restore_options *o, struct manifest *m, pid_t *root_out,
		   struct stasis_error **err)
{
	struct stasis_restore_options resolved = *o;
	struct image_verifier *verifier = NULL;
	uint64_t start = now_usec();
	char dir[PATH_MAX];
	int r;

	r = stasis_enter_image_folder(o->dir, dir, sizeof(dir), err);
	if (r < 0)
		return r;
	resolved.dir = dir;
	o = &resolved;
	/* Before the verifier's thread starts: CRIU's environment is made
	 * then (a variable added while another thread reads the environment
	 * can free the array under it), and CRIU is started before eight
	 * readers fill the disk's queue. A cold restore's preflight, which
	 * asked CRIU after them, took 0.22 s (one process) and 0.97 s (two
	 * GPUs), against 20 ms from a warm page cache. */
	if (r == 0 && criu_version(err) < 0)
		r = -EIO;
	if (r == 0) {
		image_stage_sweep();
		runc_target_sweep();
		r = image_open_begin(o->dir, &o->trust, m, &verifier, err);
	}
	if (r < 0)
		return r;
	m->nphases = 0; /* from here on m carries this restore's timings */
	manifest_add_phase(m, "verify", now_usec() - start);
	if (o->thp_always) {
		r = thp_always_begin(err);
		if (r < 0) {
			image_verifier_free(verifier);
			return r;
		}
	} else {
		thp_repair();
	}
	r = restore_verified(o, m, verifier, root_out, err);
	image_verifier_free(verifier);
	if (o->thp_always)
		thp_always_end();
	if (r < 0)
		return stasis_error_wrap(err, "restore from %s", o->dir);
	manifest_add_phase(m, "restore_total", now_usec() - start);
	return 0;
}
