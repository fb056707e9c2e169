/* SPDX-License-Identifier: MIT */
/* stasis checkpoint: preflight -> lock all -> checkpoint all GPU state ->
 * CRIU dump (the manifest is written while CRIU still holds the tree
 * frozen) -> with leave_running: restore + unlock all. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "container.h"
#include "criu-rpc.h"
#include "devfiles.h"
#include "fault.h"
#include "gpu.h"
#include "image.h"
#include "lock.h"
#include "mappings.h"
#include "nvml.h"
#include "preflight.h"
#include "proc.h"
#include "progress.h"
#include "stasis.h"
#include "steps.h"
#include "thp.h"
#include "util.h"

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
	(void)sig;
	interrupted = 1;
}

void stasis_install_interrupt_handlers(void)
{
	struct sigaction sa = {.sa_handler = on_interrupt};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

bool stasis_interrupted(void)
{
	return interrupted;
}

int stasis_require_root(struct stasis_error **err)
{
	if (geteuid() == 0)
		return 0;
	stasis_error_set(err, EPERM, STASIS_DOMAIN_USAGE, 0, "stasis must run as root");
	return stasis_error_hint(err, "run it with sudo");
}

/* fault names the test switch that simulates a signal at this point. */
int checkpoint_check_interrupted(const char *fault, const char *step, struct stasis_error **err)
{
	if (fault_at(fault, 0))
		raise(SIGTERM);
	if (!interrupted)
		return 0;
	return stasis_error_set(err, EINTR, STASIS_DOMAIN_SYSTEM, EINTR,
				"interrupted by a signal before %s", step);
}

void checkpoint_fill_host_facts(struct manifest *m)
{
	struct utsname uts;
	char created[64];
	time_t now = time(NULL);
	struct tm tm;

	m->stasis_version = strdup(STASIS_VERSION);
	gmtime_r(&now, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	m->created = strdup(created);
	if (uname(&uts) == 0) {
		m->hostname = strdup(uts.nodename);
		m->kernel = strdup(uts.release);
	}
}

int checkpoint_preflight_tree(pid_t pid, bool shell_job, struct stasis_error **err)
{
	int r = proc_require(pid, err);

	if (r < 0)
		return r;
	if (proc_is_self_or_ancestor(pid)) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "PID %d is stasis itself or one of its parents", (int)pid);
		return stasis_error_hint(err,
					 "checkpoint a process that stasis did not start from");
	}
	if (!shell_job && getsid(pid) != pid) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "PID %d is not a session leader (its session is %d)", (int)pid,
				 (int)getsid(pid));
		return stasis_error_hint(err, "start it with setsid, or pass --shell-job");
	}
	return 0;
}

int checkpoint_seal_image(const char *dir, struct manifest *m, struct image_follower *follower,
			  struct stasis_error **err)
{
	uint64_t start = now_usec();
	int r;

	progress_begin("checksumming the image");
	r = image_checksum(dir, m, follower, err);
	manifest_add_phase(m, "checksum", now_usec() - start);
	progress_end();
	if (r == 0 && fault_at("manifest", 0))
		r = stasis_error_set(err, ENOSPC, STASIS_DOMAIN_SYSTEM, ENOSPC,
				     "writing the manifest: injected fault");
	if (r == 0)
		r = manifest_write(dir, m, err);
	return r;
}

/* What the post-dump notification needs: CRIU calls back without a
 * user pointer, and one stasis run does one checkpoint. */
static struct {
	const char *dir;
	struct manifest *m;
	struct stasis_error **err;
	struct image_follower *follower;
	struct image_packer *packer;
	uint64_t dump_start;
	int result;
} post_dump;

/* With --compress, what the compression threads have left after CRIU. */
int checkpoint_pack_finish(struct image_packer *packer, struct manifest *m,
			   struct stasis_error **err)
{
	uint64_t start = now_usec();
	int r;

	if (!packer)
		return 0;
	progress_begin("compressing the rest of the image");
	r = image_pack_finish(packer, m, err);
	manifest_add_phase(m, "compress_finish", now_usec() - start);
	progress_end();
	return r;
}

/* The tree is still frozen here. Only once the image is durable may CRIU
 * kill it; a non-zero answer makes CRIU resume the tree instead. */
static int on_criu_notify(const char *action)
{
	if (strcmp(action, "post-dump") != 0)
		return 0;
	manifest_add_phase(post_dump.m, "criu_dump", now_usec() - post_dump.dump_start);
	progress_end();
	post_dump.result = checkpoint_check_interrupted("sigterm-before-manifest",
							"writing the manifest", post_dump.err);
	if (post_dump.result == 0)
		post_dump.result =
		    checkpoint_pack_finish(post_dump.packer, post_dump.m, post_dump.err);
	if (post_dump.result == 0)
		post_dump.result = checkpoint_seal_image(post_dump.dir, post_dump.m,
							 post_dump.follower, post_dump.err);
	return post_dump.result < 0 ? 1 : 0;
}

static int dump_tree(const struct stasis_checkpoint_options *o, struct manifest *m,
		     struct stasis_error **err)
{
	char images[4096];
	struct criu_dump_request req = {
	    .pid = o->pid,
	    .images_dir = images,
	    .log_file = "dump.log",
	    .leave_running = o->leave_running,
	    .shell_job = o->shell_job,
	    .tcp_established = o->tcp_established,
	    .notify = on_criu_notify,
	};
	int r;

	snprintf(images, sizeof(images), "%s/%s", o->dir, IMAGE_CRIU_SUBDIR);
	post_dump.dir = o->dir;
	post_dump.m = m;
	post_dump.err = err;
	post_dump.result = 0;
	post_dump.dump_start = now_usec();
	if (fault_at("criu-dump", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"criu dump failed: injected fault");
	post_dump.follower = NULL;
	post_dump.packer = NULL;
	if (o->compress) {
		r = image_pack_start(o->dir, m->nprocs, &post_dump.packer, err);
		if (r < 0)
			return r;
		req.images_dir = image_pack_stage(post_dump.packer);
		req.work_dir = images;
	} else {
		/* Without the follower the seal hashes everything after the dump. */
		image_follow_start(o->dir, &post_dump.follower, NULL);
	}
	progress_begin("CRIU dump of %zu process%s", m->nprocs, m->nprocs == 1 ? "" : "es");
	r = criu_run_dump(&req, err);
	progress_end();
	image_follow_free(post_dump.follower);
	image_pack_free(post_dump.packer);
	if (post_dump.result < 0) {
		/* CRIU reports the refused notification; the cause is ours. */
		return post_dump.result;
	}
	return r;
}

static int describe_gpus(struct gpu_batch *batch, struct manifest *m)
{
	for (size_t i = 0; i < batch->n; i++) {
		for (size_t j = 0; j < m->nprocs; j++) {
			if (m->procs[j].pid != batch->procs[i].pid)
				continue;
			m->procs[j].cuda = true;
		}
	}
	nvml_describe_processes(m);
	return 0;
}

/* Which processes of the tree use CUDA; none when there is no driver. */
static int find_cuda_processes(struct manifest *m, struct gpu_batch *batch,
			       struct stasis_error **err)
{
	_cleanup_free_ pid_t *pids = calloc(m->nprocs ? m->nprocs : 1, sizeof(*pids));
	int r;

	if (!pids)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	if (!cuda_available())
		return 0;
	for (size_t i = 0; i < m->nprocs; i++)
		pids[i] = m->procs[i].pid;
	r = gpu_find_cuda(pids, m->nprocs, batch, err);
	if (r < 0)
		return r;
	m->cuda_driver_version = batch->n ? cuda_driver_version() : 0;
	return gpu_preflight_running(batch, err);
}

int checkpoint_preflight(struct manifest *m, struct gpu_batch *batch, const char *dir,
			 bool compress, struct stasis_error **err)
{
	int r = find_cuda_processes(m, batch, err);

	if (r == 0)
		r = describe_gpus(batch, m);
	if (r == 0)
		r = preflight_gpu_checkpoint(m, err);
	if (r == 0)
		r = nvidia_refs_check(m, false, err);
	if (r == 0)
		r = mappings_check(m, err);
	if (r == 0)
		r = preflight_image_room(m, dir, compress, err);
	return r;
}

int checkpoint_suspend_gpus(struct gpu_batch *batch, struct manifest *m, struct stasis_error **err)
{
	int r = gpu_lock_all(batch, err);

	if (r == 0)
		r = checkpoint_check_interrupted("sigterm-before-gpu-checkpoint",
						 "the GPU checkpoint", err);
	if (r == 0)
		r = gpu_checkpoint_all(batch, err);
	/* What the driver left behind must be something CRIU can save. */
	if (r == 0)
		r = nvidia_refs_check(m, true, err);
	gpu_record(batch, m);
	return r;
}

/* After CRIU's (or runc's) dump, r its result: roll back after a failure,
 * resume with leave_running. */
int checkpoint_dump_end(struct gpu_batch *batch, struct manifest *m, bool leave_running, int r,
			struct stasis_error **err)
{
	if (r < 0) {
		gpu_rollback(batch, err);
		return r;
	}
	if (!leave_running)
		return 0;
	/* gpu_resume rolls back by itself on failure. */
	r = gpu_resume(batch, err);
	gpu_record(batch, m);
	return r < 0 ? stasis_error_wrap(err, "image written, but resuming the GPU work failed")
		     : 0;
}

static int checkpoint_prepared(const struct stasis_checkpoint_options *o, struct manifest *m,
			       struct gpu_batch *batch, uint64_t start, struct stasis_error **err)
{
	int r;

	checkpoint_fill_host_facts(m);
	m->options.leave_running = o->leave_running;
	m->options.shell_job = o->shell_job;
	m->options.tcp_established = o->tcp_established;
	r = proc_tree_describe(o->pid, m, err);
	if (r == 0 && o->compress)
		r = image_pack_preflight(err);
	if (r == 0)
		r = checkpoint_preflight(m, batch, o->dir, o->compress, err);
	manifest_add_phase(m, "preflight", now_usec() - start);
	if (r < 0)
		return r;

	/* From here on the workload changes: every failure rolls back. */
	r = checkpoint_suspend_gpus(batch, m, err);
	if (r == 0)
		r = checkpoint_check_interrupted("sigterm-before-dump", "the CRIU dump", err);
	if (r < 0) {
		gpu_rollback(batch, err);
		return r;
	}
	r = dump_tree(o, m, err);
	return checkpoint_dump_end(batch, m, o->leave_running, r, err);
}

static int checkpoint_locked(const struct stasis_checkpoint_options *o, struct manifest *m,
			     struct gpu_batch *batch, struct stasis_error **err)
{
	uint64_t start = now_usec();
	bool made;
	int r;

	r = criu_version(err);
	if (r < 0)
		return r;
	m->criu_version = r;
	r = image_prepare(o->dir, err);
	if (r < 0)
		return r;
	made = r == 1;
	r = checkpoint_prepared(o, m, batch, start, err);
	if (r < 0)
		image_discard(o->dir, made);
	return r;
}

int stasis_checkpoint(const struct stasis_checkpoint_options *o, struct manifest *m,
		      struct stasis_error **err)
{
	struct gpu_batch batch = {.lock_timeout_ms = o->lock_timeout_ms};
	uint64_t start = now_usec();
	int lock_fd, r;

	if (!batch.lock_timeout_ms)
		batch.lock_timeout_ms = GPU_DEFAULT_LOCK_TIMEOUT_MS;
	r = stasis_require_root(err);
	if (r == 0 && o->runtime && o->compress) {
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
				 "--compress is not supported for containers yet");
		r = stasis_error_hint(err, "checkpoint the container without --compress");
	}
	if (r == 0 && o->thp_always)
		r = thp_always_begin(err);
	if (r < 0)
		return r;
	if (o->runtime) {
		r = container_checkpoint(o, m, &batch, err);
	} else {
		r = checkpoint_preflight_tree(o->pid, o->shell_job, err);
		lock_fd = r < 0 ? r : pid_lock(o->pid, err);
		if (lock_fd >= 0) {
			r = checkpoint_locked(o, m, &batch, err);
			pid_unlock(o->pid, lock_fd);
		}
		r = lock_fd < 0 ? lock_fd : r;
	}
	gpu_batch_free(&batch);
	if (o->thp_always)
		thp_always_end();
	/* Errors name their step and process already. */
	if (r < 0)
		return r;
	/* Durable before it is called done; the workload already runs again
	 * (or is gone), so this costs no downtime. */
	r = image_sync(o->dir, m, err);
	if (r < 0)
		return r;
	manifest_add_phase(m, "total", now_usec() - start);
	/* Rewrite the manifest so it carries the final timings too. */
	return manifest_write(o->dir, m, err);
}
