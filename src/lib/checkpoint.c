/* SPDX-License-Identifier: MIT */
/* stasis checkpoint: preflight -> CRIU dump, inside which stasis's plugin
 * has every CUDA process locked before the freeze and its GPU state
 * checkpointed once the tree is frozen (the manifest is written while CRIU
 * still holds the tree frozen) -> with leave_running: restore + unlock
 * all. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "criu-rpc.h"
#include "devfiles.h"
#include "fault.h"
#include "gpu-handoff.h"
#include "gpu.h"
#include "image-pack.h"
#include "image-stage.h"
#include "image.h"
#include "interrupt.h"
#include "lock.h"
#include "mappings.h"
#include "namespaces.h"
#include "sockets.h"
#include "nvml.h"
#include "nccl.h"
#include "peer-limit.h"
#include "preflight-checks.h"
#include "preflight.h"
#include "proc.h"
#include "progress.h"
#include "run-work.h"
#include "stasis.h"
#include "steps.h"
#include "views.h"
#include "target.h"
#include "thp.h"
#include "util.h"

int stasis_require_root(struct stasis_error **err)
{
	if (geteuid() == 0)
		return 0;
	stasis_error_set(err, EPERM, STASIS_DOMAIN_USAGE, 0, "stasis must run as root");
	return stasis_error_hint(err, "run it with sudo");
}

int stasis_enter_image_folder(const char *given, char *dir, size_t len, struct stasis_error **err)
{
	int r = stasis_require_root(err);

	/* From here on the image folder is reached by a path no one but root
	 * can change. */
	return r < 0 ? r : image_resolve_folder(given, dir, len, err);
}

void checkpoint_fill_host_facts(struct manifest *m)
{
	struct utsname uts;
	char created[64];
	time_t now = time(NULL);
	struct tm tm;

	m->stasis_version = strdup(STASIS_VERSION);
	m->page_writers = criu_page_writers();
	m->page_writer_chunks = criu_page_writer_chunks();
	gmtime_r(&now, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	m->created = strdup(created);
	if (uname(&uts) == 0) {
		m->hostname = strdup(uts.nodename);
		m->kernel = strdup(uts.release);
	}
}

static int checkpoint_write_manifest(const char *dir, struct manifest *m, struct stasis_error **err)
{
	if (fault_at("manifest", 0))
		return stasis_error_set(err, ENOSPC, STASIS_DOMAIN_SYSTEM, ENOSPC,
					"writing the manifest: injected fault");
	return image_write_manifest(dir, m, err);
}

int checkpoint_seal_image(const char *dir, struct manifest *m, struct image_follower *follower,
			  struct stasis_error **err)
{
	char criu_dir[PATH_MAX];
	uint64_t start = now_usec();
	int r;

	/* Test-only: time to kill stasis while it seals. */
	if (fault_at("seal-slow", 0))
		sleep(30);
	snprintf(criu_dir, sizeof(criu_dir), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	r = image_take_processes(criu_dir, m, err);
	if (r < 0)
		return r;
	progress_begin("checksumming the image");
	r = image_checksum(dir, m, follower, err);
	manifest_add_phase(m, "checksum", now_usec() - start);
	progress_end();
	if (r == 0)
		r = image_sync(dir, m, err);
	return r < 0 ? r : checkpoint_write_manifest(dir, m, err);
}

/* A staged image goes to its folder once the workload runs again; it is
 * complete, with its manifest, only once its pages are on disk. */
static int checkpoint_seal_staged(struct target *t, struct manifest *m, struct image_stager *stager,
				  struct stasis_error **err)
{
	char criu_dir[PATH_MAX];
	uint64_t start = now_usec();
	int r;

	progress_begin("writing the image from memory to %s", t->dir);
	r = image_stage_commit(stager, m, err);
	manifest_add_phase(m, "stage_write", now_usec() - start);
	progress_end();
	snprintf(criu_dir, sizeof(criu_dir), "%s/%s", t->dir, IMAGE_CRIU_SUBDIR);
	if (r == 0)
		r = image_take_processes(criu_dir, m, err);
	return r < 0 ? r : checkpoint_write_manifest(t->dir, m, err);
}

/* With --leave-running, stage the image in memory where the preflight
 * finds room for it: the workload then waits for CRIU and the GPU only,
 * not for the disk. */
static void checkpoint_pick_stage(struct target *t, struct manifest *m)
{
	const struct stasis_checkpoint_options *o = t->checkpoint;

	if (!o->leave_running)
		return;
	if (o->compress)
		m->unstaged_why = "--compress writes the image while CRIU dumps";
	else if (o->no_stage)
		m->unstaged_why = "--no-stage";
	else
		m->unstaged_why = preflight_stage(m, t->dir, image_stage_root(), o->stage);
	if (m->unstaged_why)
		return;
	if (image_stage_make(t->stage, NULL) < 0) {
		m->unstaged_why = "no staging folder could be made";
		return;
	}
	snprintf(t->images, sizeof(t->images), "%s", t->stage);
	m->options.staged = true;
	m->page_writer_parts = criu_page_parts_possible();
	t->criu.page_parts = m->page_writer_parts;
}

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

static int describe_gpus(struct gpu_batch *batch, struct manifest *m)
{
	gpu_mark_cuda(batch, m);
	nvml_describe_processes(m);
	for (size_t i = 0; i < batch->n; i++)
		for (size_t j = 0; j < m->nprocs; j++)
			if (m->procs[j].pid == batch->procs[i].pid)
				batch->procs[i].gpu_bytes = m->procs[j].gpu_bytes;
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
			 bool compress, bool keeps_running, bool same_machine,
			 struct stasis_error **err)
{
	const struct preflight_tree t = {.m = m,
					 .batch = batch,
					 .dir = dir,
					 .compress = compress,
					 .keeps_running = keeps_running,
					 .same_machine = same_machine};
	int r = find_cuda_processes(m, batch, err);

	if (r == 0)
		r = describe_gpus(batch, m);
	if (r == 0)
		r = preflight_tree_run(&t, err);
	batch->lock_rounds = nccl_lock_rounds(batch);
	return r;
}

/* The target's dump with the GPU steps inside it: stasis's CRIU plugin has
 * every CUDA process locked before CRIU seizes the tree and checkpointed
 * once it is frozen (gpu-handoff.h). */
int checkpoint_dump_gpus_inside(const struct gpu_dump_plan *plan, struct criu_settings *criu,
				int (*dump)(void *ctx, struct stasis_error **err), void *ctx,
				struct stasis_error **err)
{
	struct gpu_batch *batch = plan->batch;
	struct gpu_handoff h;
	int r = 0;

	/* Without CUDA processes no GPU step stands between the preflight
	 * and the dump: a signal before it stops the dump here. */
	if (!batch->n)
		r = stasis_check_interrupted("sigterm-before-gpu-checkpoint", "the GPU checkpoint",
					     err);
	if (r == 0 && !batch->n)
		r = stasis_check_interrupted("sigterm-before-dump", "the dump", err);
	if (r == 0)
		r = gpu_handoff_dump_begin(&h, plan, err);
	if (r < 0)
		return r;
	criu->plugin_socket = gpu_handoff_socket(&h);
	r = dump(ctx, err);
	criu->plugin_socket = NULL;
	return gpu_handoff_dump_end(&h, r, err);
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
	/* Resumed inside CRIU already, where stasis's plugin ran. */
	if (!leave_running || gpu_batch_running(batch))
		return 0;
	/* gpu_resume rolls back by itself on failure. */
	r = gpu_resume(batch, err);
	gpu_record(batch, m);
	return r < 0 ? stasis_error_wrap(err, "image written, but resuming the GPU work failed")
		     : 0;
}

/* The image could not be sealed and the workload is gone: bring it back
 * from the image just written rather than lose it. The GPU handoff does
 * not serve here, so the GPU restore comes after the target's restore. */
static void recover_from_image(struct target *t, struct manifest *m, struct stasis_error **err)
{
	struct gpu_plan identity = {0};
	pid_t root = -1;
	int r = t->ops->restore(t, m, NULL, &root, NULL);

	if (r == 0 && t->ops->adopt)
		r = t->ops->adopt(t, m, &root, NULL);
	if (r == 0)
		r = restore_resume_gpus(m, &identity, NULL);
	if (r == 0) {
		stasis_error_hint(
		    err, "'%s' was restored from the image just written and runs again", t->id);
		return;
	}
	t->ops->destroy(t, m, root, true, NULL);
	stasis_error_hint(err, "restoring '%s' from %s failed too; it is gone", t->id, t->dir);
}

/* A target that can hold its workload frozen after its dump (dump_held)
 * seals the image meanwhile: the workload is killed only once its image
 * is on disk, and runs on if that fails. */
struct held_seal {
	const char *dir;
	struct manifest *m;
	struct image_follower *follower;
	struct stasis_error **err;
};

static int seal_while_held(void *ctx)
{
	struct held_seal *h = ctx;

	return checkpoint_seal_image(h->dir, h->m, h->follower, h->err);
}

/* The target's dump, with the GPU steps around it and the image sealed
 * after it unless the target sealed it inside or held the workload while
 * it was sealed. pause_start: when the workload stopped. */
/* The driver's copy is in host memory now, in the pages it faulted in:
 * nothing after it needs the machine-wide setting. */
static void thp_after_gpu_copy(void *ctx)
{
	struct target *t = ctx;

	thp_always_end();
	t->thp_for_gpu_step = false;
}

/* The target's dump, in the shape the GPU handoff calls. */
struct target_dump_call {
	struct target *t;
	struct manifest *m;
	struct held_seal *seal;
};

static int target_dump(void *ctx, struct stasis_error **err)
{
	struct target_dump_call *d = ctx;

	return d->t->ops->dump(d->t, d->m, err);
}

static int target_dump_held(void *ctx, struct stasis_error **err)
{
	struct target_dump_call *d = ctx;

	return d->t->ops->dump_held(d->t, d->m, seal_while_held, d->seal, err);
}

static int checkpoint_dump(struct target *t, struct manifest *m, struct gpu_batch *batch,
			   uint64_t pause_start, struct stasis_error **err)
{
	bool leave_running = t->checkpoint->leave_running;
	/* With --leave-running the seal waits for nothing the workload does, so
	 * it comes once the workload runs again, not while it waits. */
	bool seal_after = !t->ops->seals_in_dump || leave_running;
	bool held = !leave_running && seal_after && t->ops->dump_held;
	struct image_follower *follower = NULL;
	struct image_stager *stager = NULL;
	struct held_seal seal = {.dir = t->dir, .m = m, .err = err};
	struct target_dump_call dump = {.t = t, .m = m, .seal = &seal};
	struct gpu_dump_plan plan = {.batch = batch,
				     .m = m,
				     .leave_running = leave_running,
				     .copied = t->thp_for_gpu_step ? thp_after_gpu_copy : NULL,
				     .ctx = t};
	int r = 0;

	if (t->stage[0])
		r = image_stage_start(t->stage, t->dir, &stager, err);
	else if (seal_after && !t->checkpoint->compress)
		image_follow_start(t->dir, &follower, NULL);
	if (r < 0) {
		gpu_rollback(batch, err);
		return r;
	}
	seal.follower = follower;
	r = checkpoint_dump_gpus_inside(&plan, &t->criu, held ? target_dump_held : target_dump,
					&dump, err);
	r = checkpoint_dump_end(batch, m, leave_running, r, err);
	/* The job's NCCL calls wait until its communicators are made again:
	 * part of the pause it sees. */
	if (r == 0 && leave_running)
		gpu_nccl_rebuilt(m, pause_start);
	if (r == 0 && leave_running)
		manifest_add_phase(m, "pause", now_usec() - pause_start);
	if (r == 0 && (stager || (seal_after && !held))) {
		r = stager ? checkpoint_seal_staged(t, m, stager, err)
			   : checkpoint_seal_image(t->dir, m, follower, err);
		if (r < 0 && leave_running)
			stasis_error_hint(err, "the workload runs on; no image was kept in %s",
					  t->dir);
		else if (r < 0)
			recover_from_image(t, m, err);
	}
	image_follow_free(follower);
	image_stage_free(stager);
	return r;
}

static int checkpoint_prepared(struct target *t, struct manifest *m, struct gpu_batch *batch,
			       uint64_t start, struct stasis_error **err)
{
	const struct stasis_checkpoint_options *o = t->checkpoint;
	uint64_t pause_start;
	int r;

	checkpoint_fill_host_facts(m);
	m->options.leave_running = o->leave_running;
	r = t->ops->describe(t, m, err);
	if (r == 0 && o->compress)
		r = image_pack_preflight(err);
	if (r == 0)
		r = checkpoint_preflight(m, batch, o->dir, o->compress, o->leave_running, true,
					 err);
	manifest_add_phase(m, "preflight", now_usec() - start);
	if (r < 0)
		return r;
	checkpoint_pick_stage(t, m);

	/* From here on the workload changes: every failure rolls back. */
	pause_start = now_usec();
	r = checkpoint_dump(t, m, batch, pause_start, err);
	/* No GPU copy was made (no CUDA process, or a failure before it). */
	if (t->thp_for_gpu_step)
		thp_after_gpu_copy(t);
	return r;
}

/* Everything that can be checked before the lock: the target is there,
 * CRIU answers, the image folder can be made. */
static int checkpoint_find(struct target *t, struct manifest *m, struct stasis_error **err)
{
	const struct stasis_checkpoint_options *o = t->checkpoint;
	int r = 0;

	if (o->compress && !t->ops->compresses) {
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
				 "--compress is not supported for %s containers yet",
				 t->ops->runtime);
		return stasis_error_hint(err, "checkpoint the container without --compress");
	}
	r = t->ops->find(t, err);
	if (r == 0)
		r = criu_version(err);
	if (r < 0)
		return r;
	m->criu_version = r;
	return 0;
}

static int checkpoint_target(struct target *t, struct manifest *m, struct gpu_batch *batch,
			     struct stasis_error **err)
{
	uint64_t start = now_usec();
	bool made;
	int lock_fd, r = checkpoint_find(t, m, err);

	if (r < 0)
		return r;
	lock_fd = pid_lock(t->root, err);
	if (lock_fd < 0)
		return lock_fd;
	r = image_prepare(t->dir, err);
	if (r >= 0) {
		made = r == 1;
		r = run_work_make("checkpoint", t->work, sizeof(t->work), err);
		if (r == 0)
			r = checkpoint_prepared(t, m, batch, start, err);
		if (r < 0)
			image_discard(t->dir, made);
	}
	pid_unlock(t->root, lock_fd);
	return r;
}

/* A checkpoint that succeeded takes CRIU's logs and statistics along with
 * its image, as ever, and its work folder goes; a failed one keeps its
 * work folder, and its error names it: the image folder is as it was. */
static void checkpoint_work_end(struct target *t, int r, struct stasis_error **err)
{
	if (!t->work[0])
		return;
	if (r < 0) {
		run_work_failed(t->work, err);
		return;
	}
	if (image_take_logs(t->dir, t->work) == 0)
		remove_dir_tree(t->work);
}

/* The driver's checkpoint copies GPU memory into fresh host memory, faulting
 * it in 4 KiB at a time where the machine leaves huge pages to madvise().
 * With them that copy of 16 GiB took 5.3-6.3 s against 7.6-8.4 s on the GPU
 * machine, and CRIU's dump of it and a --leave-running GPU restore from it
 * were faster too. So every checkpoint sets "always" as --thp does, from
 * the preflight until the copy is made, where the mode is madvise; not
 * where its owner chose "never", nor with --no-thp. Returns whether this
 * run set them. */
static bool checkpoint_thp_for_gpu_step(const struct stasis_checkpoint_options *o,
					struct manifest *m)
{
	char mode[32] = "";

	if (o->no_thp)
		m->no_huge_pages_why = "--no-thp";
	else if (thp_machine_mode(mode, sizeof(mode)) < 0)
		m->no_huge_pages_why = "the machine's transparent huge pages could not be read";
	else if (strcmp(mode, "never") == 0)
		m->no_huge_pages_why = "the machine's transparent huge pages are 'never'";
	else if (strcmp(mode, "madvise") == 0 && thp_always_begin(NULL) < 0)
		m->no_huge_pages_why = "transparent huge pages could not be set to 'always'";
	else
		m->huge_pages = true;
	if (m->huge_pages && strcmp(mode, "madvise") == 0)
		return true;
	thp_repair();
	return false;
}

int stasis_checkpoint(const struct stasis_checkpoint_options *o, struct manifest *m,
		      struct stasis_error **err)
{
	struct gpu_batch batch = {.lock_timeout_ms = o->lock_timeout_ms};
	struct stasis_checkpoint_options resolved = *o;
	struct target t = {.checkpoint = &resolved};
	uint64_t start = now_usec();
	char dir[PATH_MAX];
	struct seal_key key;
	int r;

	r = stasis_enter_image_folder(o->dir, dir, sizeof(dir), err);
	if (r < 0)
		return r;
	resolved.dir = dir;
	o = &resolved;
	t.dir = o->dir;
	if (!batch.lock_timeout_ms)
		batch.lock_timeout_ms = GPU_DEFAULT_LOCK_TIMEOUT_MS;
	snprintf(t.images, sizeof(t.images), "%s/%s", o->dir, IMAGE_CRIU_SUBDIR);
	r = target_for_runtime(o->runtime, &t.ops, err);
	if (r == 0 && o->runtime)
		r = target_check_name(o->runtime, "container id", o->container ? o->container : "",
				      err);
	if (r == 0 && o->runtime && o->namespace)
		r = target_check_name("containerd", "namespace", o->namespace, err);
	/* The key that seals the image, made now on first use: one that
	 * cannot be read fails here, before anything changes. */
	if (r == 0 && (r = seal_host_key(true, &key, err)) == 0)
		seal_key_free(&key);
	if (r == 0 && o->thp_always)
		r = thp_always_begin(err);
	if (r < 0)
		return r;
	if (o->thp_always)
		m->huge_pages = true;
	else
		t.thp_for_gpu_step = checkpoint_thp_for_gpu_step(o, m);
	image_stage_sweep();
	runc_target_sweep();
	r = checkpoint_target(&t, m, &batch, err);
	image_stage_remove(t.stage);
	gpu_batch_free(&batch);
	if (o->thp_always || t.thp_for_gpu_step)
		thp_always_end();
	/* Errors name their step and process already. */
	if (r < 0) {
		checkpoint_work_end(&t, r, err);
		return r;
	}
	/* Durable here: every seal flushed the image before its manifest. */
	manifest_add_phase(m, "durable", now_usec() - start);
	manifest_add_phase(m, "total", now_usec() - start);
	/* CRIU's log and statistics into the image, then its statistics, for
	 * --print-stats: what cannot be read of them leaves them out, the
	 * image is whole. */
	checkpoint_work_end(&t, 0, err);
	views_dump_stats(o->dir, &m->criu_dump, NULL);
	/* Rewrite the manifest so it carries the final timings too. */
	return image_write_manifest(o->dir, m, err);
}
