/* SPDX-License-Identifier: MIT */
/* stasis migrate, the source: preflight here, then the destination's
 * preflight (HELLO, READY), then the GPU lock and checkpoint, then the
 * target's dump (CRIU's for a tree, runc's for a container) with its pages
 * images going through pipes (image-pipe.c) straight onto the wire and its
 * other images into a staging folder in memory, sent once the dump is
 * done. The target holds the workload frozen meanwhile (CRIU's post-dump
 * notification; a paused container) and waits for the destination's
 * RESTORED: then COMMIT goes out and the workload goes here. Anything else
 * (a refusal, the connection gone, SIGTERM) has it run again here, and the
 * GPU state is rolled back. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "criu-rpc.h"
#include "fault.h"
#include "image-pack.h"
#include "image-pipe.h"
#include "image-stage.h"
#include "image.h"
#include "lock.h"
#include "message.h"
#include "migrate.h"
#include "preflight.h"
#include "proc.h"
#include "progress.h"
#include "sender.h"
#include "stasis.h"
#include "steps.h"
#include "gpu-handoff.h"
#include "interrupt.h"
#include "stream.h"
#include "target.h"
#include "util.h"

#define WHO "the destination"
#define PIPES_SPARE 32u
/* Frames in flight between CRIU's pipes and the wire: the reader fills
 * some while the sender sends others. */
#define PIPE_BUFFERS 8u
#define READY_TIMEOUT_MS 120000
/* The destination's restore: ten minutes, and a second more for every
 * 200 MB of image (a cold 35 GB restore took 25 s on the GPU machines).
 * Past it the workload runs again here. */
#define RESTORED_TIMEOUT_MIN_MS 600000u
#define RESTORED_BYTES_PER_MS 200000u

/* One migration's state, passed to each of its steps. */
struct migration {
	struct target *t;
	struct tls_channel *ch;
	struct stream_out *stream;
	struct page_pipes *pipes;
	struct frame_sender *sender;
	struct manifest *m;
	struct stasis_migrate_stats *st;
	struct stasis_error **err;
	char stage[PATH_MAX];
	int stagefd;
	uint64_t frozen_start;
	uint64_t manifest_bytes; /* on the wire, beside the stream's */
	int result;
	bool committed;
};

int stasis_compress_parse(const char *text, enum stasis_compress *out)
{
	static const char *const names[] = {"auto", "on", "off"};

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (text && strcmp(text, names[i]) == 0) {
			*out = (enum stasis_compress)i;
			return 0;
		}
	return -EINVAL;
}

/* The pipe reader's: a frame of pages-ID.img queued for the wire. After a
 * failure or a signal the pipes are still read to their end, so that CRIU
 * never waits on a full pipe, but nothing more is sent. */
static void deliver(void *ctx, unsigned int id, unsigned char *buf, size_t len, bool end)
{
	struct migration *mig = ctx;

	(void)end;
	if (len && !stasis_interrupted())
		frame_sender_push(mig->sender, id, buf, len);
	else if (buf)
		page_pipes_give_back(mig->pipes, buf);
}

static void frame_sent(void *ctx, unsigned char *buf)
{
	struct migration *mig = ctx;

	page_pipes_give_back(mig->pipes, buf);
}

/* The pipes read to their end and the sender stopped, which then leaves
 * the channel; the reader first: it may wait on the sender for room. */
static void stop_pages(struct migration *mig, bool send_queued)
{
	page_pipes_stop(mig->pipes);
	frame_sender_finish(mig->sender, send_queued);
}

/* CRIU is done with its pages: the last of them read and sent. */
static void pages_done(struct migration *mig)
{
	stop_pages(mig, true);
	/* The reader waited for a free frame: the wire held CRIU back. */
	manifest_add_phase(mig->m, "wire_stall", page_pipes_stall_usec(mig->pipes));
	manifest_add_phase(mig->m, "sender_idle", frame_sender_idle_usec(mig->sender));
}

/* The images CRIU left in the staging folder (all but the piped pages,
 * its log and the pipes' links). */
static int send_staged(struct migration *mig, struct stasis_error **err)
{
	_cleanup_close_ int fd = openat(mig->stagefd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(TAKE_FD(fd));
	struct dirent *de;
	int r = d ? 0 : -errno;

	progress_begin("sending CRIU's other images");
	while (r == 0 && d && (de = readdir(d))) {
		if (de->d_type != DT_REG || strcmp(de->d_name, "dump.log") == 0 ||
		    stream_out_sent(mig->stream, de->d_name))
			continue;
		r = stream_out_file(mig->stream, mig->stagefd, de->d_name);
	}
	progress_end();
	if (d)
		closedir(d);
	if (r < 0)
		return stasis_error_errno(err, -r, "sending the image to %s: %s", WHO,
					  strerror(-r));
	return 0;
}

/* The manifest with every file's checksum: the destination checks them
 * all, then restores. */
static int send_manifest(struct migration *mig, struct stasis_error **err)
{
	_cleanup_free_ char *json = NULL;
	int r = stream_out_describe(mig->stream, mig->m);

	if (r == 0 && !(json = manifest_to_json(mig->m, false)))
		r = -ENOMEM;
	if (r == 0)
		r = tls_send(mig->ch, WIRE_MANIFEST, 0, json, strlen(json));
	mig->manifest_bytes = r == 0 ? WIRE_HEADER_LEN + strlen(json) : 0;
	if (r < 0)
		return stasis_error_errno(err, -r, "sending the manifest to %s: %s", WHO,
					  strerror(-r));
	return 0;
}

int restored_timeout_ms(uint64_t bytes)
{
	uint64_t ms = RESTORED_TIMEOUT_MIN_MS + bytes / RESTORED_BYTES_PER_MS;

	return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Until the destination runs the tree (RESTORED), fails (REFUSE), or is
 * gone, or a signal comes, or its deadline passes. */
static int await_restored(struct migration *mig, struct stasis_error **err)
{
	_cleanup_free_ unsigned char *buf = malloc(WIRE_MAX_PAYLOAD);
	json_object *o, *pid = NULL, *gpus = NULL, *container = NULL;
	struct wire_header h;
	int r;

	if (!buf)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	progress_begin("waiting for %s to restore", WHO);
	r = msg_recv(mig->ch, WHO, restored_timeout_ms(mig->m->image_bytes), &h, buf, err);
	progress_end();
	if (r == 0 && h.type != WIRE_RESTORED)
		r = msg_unexpected(WHO, &h, err);
	if (r < 0)
		return r;
	o = msg_json(buf, h.len);
	if (json_object_object_get_ex(o, "pid", &pid))
		mig->st->restored_pid = json_object_get_int(pid);
	if (json_object_object_get_ex(o, "gpus", &gpus))
		snprintf(mig->st->gpus, sizeof(mig->st->gpus), "%s", json_object_get_string(gpus));
	if (json_object_object_get_ex(o, "container", &container))
		snprintf(mig->st->container, sizeof(mig->st->container), "%s",
			 json_object_get_string(container));
	json_object_put(o);
	return 0;
}

static int stream_failed(struct migration *mig, struct stasis_error **err)
{
	int r;

	if (stasis_interrupted())
		return stasis_error_set(err, EINTR, STASIS_DOMAIN_SYSTEM, EINTR,
					"interrupted by a signal while sending the image");
	r = stream_out_error(mig->stream);
	if (r == 0)
		return 0;
	return stasis_error_set(err, EPIPE, STASIS_DOMAIN_SYSTEM, -r,
				"sending the image to %s failed: %s", WHO, strerror(-r));
}

/* The target holds the workload frozen here: 0 lets it go, which only a
 * destination that runs it may allow. */
static int on_held(void *ctx)
{
	struct migration *mig = ctx;
	uint64_t start = now_usec();
	int r;

	pages_done(mig);
	r = stream_failed(mig, mig->err);
	if (r == 0)
		r = stasis_check_interrupted("sigterm-before-manifest", "sending the manifest",
					     mig->err);
	/* The processes are those CRIU saved, which the destination checks. */
	if (r == 0)
		r = image_take_processes(mig->stage, mig->m, mig->err);
	if (r == 0)
		r = send_staged(mig, mig->err);
	if (r == 0)
		r = send_manifest(mig, mig->err);
	manifest_add_phase(mig->m, "send_rest", now_usec() - start);
	start = now_usec();
	if (r == 0)
		r = await_restored(mig, mig->err);
	manifest_add_phase(mig->m, "remote_restore", now_usec() - start);
	if (r == 0)
		r = stasis_check_interrupted("sigterm-before-commit", "the handoff", mig->err);
	/* Committed only once COMMIT is on its way: without it the
	 * destination kills its copy. */
	if (r == 0 && (r = tls_send(mig->ch, WIRE_COMMIT, 0, NULL, 0)) < 0)
		stasis_error_set(mig->err, EPIPE, STASIS_DOMAIN_SYSTEM, -r,
				 "%s went away before the handoff", WHO);
	mig->st->pause_us = now_usec() - mig->frozen_start;
	mig->committed = r == 0;
	mig->result = r;
	return r;
}

static int make_stage(struct migration *mig, size_t nprocs, struct stasis_error **err)
{
	int r = 0;

	r = image_stage_make(mig->stage, NULL);
	if (r == 0 && (mig->stagefd = open(mig->stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		r = -errno;
	mig->t->dir = mig->stage;
	snprintf(mig->t->images, sizeof(mig->t->images), "%s", mig->stage);
	if (r == 0)
		r = frame_sender_start(mig->stream, PIPE_BUFFERS, frame_sent, mig, &mig->sender);
	if (r == 0)
		r = page_pipes_start(mig->stagefd, (unsigned int)(nprocs + PIPES_SPARE),
				     PIPE_BUFFERS, PACK_FRAME, deliver, mig, &mig->pipes);
	if (r < 0) {
		stasis_error_errno(err, -r, "staging CRIU's images in %s: %s", image_stage_root(),
				   strerror(-r));
		return stasis_error_hint(err, "set STASIS_STAGE_DIR to a writable tmpfs folder");
	}
	return 0;
}

static void drop_stage(struct migration *mig)
{
	frame_sender_free(mig->sender);
	mig->sender = NULL;
	page_pipes_free(mig->pipes);
	mig->pipes = NULL;
	if (mig->stagefd >= 0)
		close(mig->stagefd);
	mig->stagefd = -1;
	if (mig->stage[0])
		remove_dir_tree(mig->stage);
	mig->stage[0] = '\0';
}

static int dump_to_wire(void *ctx, struct stasis_error **err)
{
	struct migration *mig = ctx;
	int r;

	mig->result = 0;
	r = mig->t->ops->dump_held(mig->t, mig->m, on_held, mig, err);
	/* CRIU reports the refused notification; the cause is ours. */
	return mig->result < 0 ? mig->result : r;
}

/* After a failure the target resumed the workload and the GPU state was
 * rolled back: say whether it runs (a container: runc says running). */
static int confirm_running(struct migration *mig, struct stasis_error **err)
{
	_cleanup_error_ struct stasis_error *stopped = NULL;

	/* A container's short-lived processes (a shell's children) may have
	 * ended since: its runtime says whether it runs. */
	if (mig->t->ops->runtime && mig->t->ops->find(mig->t, &stopped) < 0) {
		stasis_error_wrap(err, "migration failed");
		return stasis_error_hint(err, "and it did not run again here: %s",
					 stopped->message);
	}
	for (size_t i = 0; i < mig->m->nprocs && !mig->t->ops->runtime; i++) {
		char s = proc_state(mig->m->procs[i].pid);

		if (!s || s == 'Z' || s == 'T' || s == 't') {
			stasis_error_wrap(err, "migration failed");
			return stasis_error_hint(err,
						 "and PID %d did not run again here (state %c)",
						 (int)mig->m->procs[i].pid, s ? s : '-');
		}
	}
	stasis_error_wrap(err, "migration failed");
	return stasis_error_hint(err, "the workload runs here again, unchanged; nothing was "
				      "kept there");
}

/* HELLO with what the destination's preflight needs; READY or REFUSE. */
static int remote_preflight(struct migration *mig, const struct stasis_migrate_options *o,
			    struct stasis_error **err)
{
	_cleanup_free_ unsigned char *buf = malloc(WIRE_MAX_PAYLOAD);
	_cleanup_free_ char *json = manifest_to_json(mig->m, false);
	json_object *hello = json_object_new_object(), *ready, *gpus = NULL;
	struct image_estimate e;
	struct wire_header h;
	int r;

	if (!buf || !json) {
		json_object_put(hello);
		return stasis_error_errno(err, ENOMEM, "out of memory");
	}
	preflight_image_estimate(mig->m, &e);
	json_object_object_add(hello, "manifest", json_tokener_parse(json));
	json_object_object_add(hello, "estimate", json_object_new_uint64(e.total));
	json_object_object_add(hello, "gpu_bytes", json_object_new_uint64(e.gpu));
	r = msg_send_json(mig->ch, WIRE_HELLO, hello);
	if (r < 0)
		return stasis_error_set(err, EPIPE, STASIS_DOMAIN_SYSTEM, -r,
					"%s closed the connection", WHO);
	r = msg_recv(mig->ch, WHO, READY_TIMEOUT_MS, &h, buf, err);
	if (r == 0 && h.type != WIRE_READY)
		r = msg_unexpected(WHO, &h, err);
	if (r < 0)
		return stasis_error_wrap(err, "nothing changed here");
	ready = msg_json(buf, h.len);
	if (json_object_object_get_ex(ready, "gpus", &gpus))
		snprintf(mig->st->gpus, sizeof(mig->st->gpus), "%s", json_object_get_string(gpus));
	json_object_put(ready);
	return 0;
}

/* Everything that must hold before the workload changes, here and there. */
static int prepare(struct migration *mig, const struct stasis_migrate_options *o,
		   struct gpu_batch *batch, const struct tls_key *key, struct stasis_error **err)
{
	uint64_t start = now_usec();
	int r = criu_version(err);

	if (r < 0)
		return r;
	mig->m->criu_version = r;
	checkpoint_fill_host_facts(mig->m);
	r = mig->t->ops->describe(mig->t, mig->m, err);
	/* A tree that is its own PID namespace comes back in a new one, under
	 * the same PIDs inside it: the destination finds it by those. (A
	 * container's processes carry them already.) */
	if (r == 0 && !mig->m->container.runtime && proc_ns_pid(mig->t->root) == 1)
		for (size_t i = 0; i < mig->m->nprocs; i++)
			mig->m->procs[i].ns_pid = proc_ns_pid(mig->m->procs[i].pid);
	if (r == 0)
		r = image_pack_preflight(err);
	if (r == 0)
		/* The tree stays frozen until the GPU restore of a rollback. */
		r = checkpoint_preflight(mig->m, batch, image_stage_root(), true, false, false,
					 err);
	manifest_add_phase(mig->m, "preflight", now_usec() - start);
	start = now_usec();
	if (r == 0)
		r = tls_connect(o->to, key, &mig->ch, err);
	if (r == 0)
		snprintf(mig->st->peer, sizeof(mig->st->peer), "%s", tls_peer(mig->ch));
	if (r == 0)
		r = remote_preflight(mig, o, err);
	manifest_add_phase(mig->m, "remote_preflight", now_usec() - start);
	if (r == 0)
		r = stream_out_new(mig->ch, o->compress, &mig->stream) < 0
			? stasis_error_errno(err, ENOMEM, "out of memory")
			: 0;
	return r;
}

/* From the GPU lock on, every failure resumes the tree here. */
static int migrate_frozen(struct migration *mig, const struct stasis_migrate_options *o,
			  struct gpu_batch *batch, struct stasis_error **err)
{
	int r;

	mig->frozen_start = now_usec();
	r = make_stage(mig, mig->m->nprocs, err);
	if (r < 0) {
		if (!mig->pipes) /* nothing was frozen */
			return r;
		return confirm_running(mig, err);
	}
	r = checkpoint_dump_gpus_inside(&(struct gpu_dump_plan){.batch = batch, .m = mig->m},
					&mig->t->criu, dump_to_wire, mig, err);
	r = checkpoint_dump_end(batch, mig->m, false, r, err);
	if (r < 0 && !mig->committed)
		return confirm_running(mig, err);
	return r;
}

static int migrate_locked(struct migration *mig, const struct stasis_migrate_options *o,
			  const struct tls_key *key, struct stasis_error **err)
{
	struct gpu_batch batch = {.lock_timeout_ms = o->lock_timeout_ms};
	uint64_t start = now_usec(), raw, wire;
	int r;

	if (!batch.lock_timeout_ms)
		batch.lock_timeout_ms = GPU_DEFAULT_LOCK_TIMEOUT_MS;
	r = prepare(mig, o, &batch, key, err);
	if (r == 0)
		r = migrate_frozen(mig, o, &batch, err);
	/* The sender thread is done with the channel before REFUSE goes. */
	stop_pages(mig, false);
	if (r < 0 && mig->ch)
		msg_send_refuse(mig->ch, *err);
	stream_out_counts(mig->stream, &raw, &wire);
	mig->st->raw_bytes = raw;
	mig->st->wire_bytes = wire + mig->manifest_bytes;
	manifest_add_phase(mig->m, "total", now_usec() - start);
	gpu_batch_free(&batch);
	drop_stage(mig);
	stream_out_free(mig->stream);
	tls_close(mig->ch);
	mig->stream = NULL;
	mig->ch = NULL;
	return r;
}

/* SIGINT and SIGTERM only set the flag the migration looks at: calls they
 * interrupt go on (libcriu's exchange with CRIU above all, which fails
 * otherwise), and the migration stops at its next step, resuming the tree. */
static void restart_after_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM};

	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++) {
		struct sigaction sa;

		if (sigaction(sigs[i], NULL, &sa) == 0 && sa.sa_handler != SIG_DFL) {
			sa.sa_flags |= SA_RESTART;
			sigaction(sigs[i], &sa, NULL);
		}
	}
}

/* The workload's target, found and checked before anything changes. */
static int find_target(const struct stasis_migrate_options *o, struct target *t,
		       struct stasis_error **err)
{
	int r = target_for_runtime(o->runtime, &t->ops, err);

	if (r == 0 && o->runtime)
		r = target_check_name(o->runtime, "container id", o->container ? o->container : "",
				      err);
	if (r == 0 && !t->ops->dump_held) {
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
				 "migrating a %s container is not supported yet", o->runtime);
		return stasis_error_hint(err, "checkpoint it, copy the image, restore it there");
	}
	return r < 0 ? r : t->ops->find(t, err);
}

int stasis_migrate(const struct stasis_migrate_options *o, struct manifest *m,
		   struct stasis_migrate_stats *st, struct stasis_error **err)
{
	const struct stasis_checkpoint_options co = {
	    .pid = o->pid,
	    .runtime = o->runtime,
	    .container = o->container,
	    .lock_timeout_ms = o->lock_timeout_ms,
	};
	_cleanup_free_ unsigned char *secret = NULL;
	struct target t = {.checkpoint = &co};
	struct migration mig = {.t = &t, .m = m, .st = st, .err = err, .stagefd = -1};
	struct tls_key key = {0};
	int r, lock_fd;

	memset(st, 0, sizeof(*st));
	signal(SIGPIPE, SIG_IGN);
	restart_after_signals();
	r = stasis_require_root(err);
	if (r == 0)
		r = wire_key_load(o->key_file, &secret, &key.len, err);
	key.data = secret;
	if (r == 0)
		r = find_target(o, &t, err);
	if (r < 0)
		return r;
	lock_fd = pid_lock(t.root, err);
	if (lock_fd < 0)
		return lock_fd;
	r = migrate_locked(&mig, o, &key, err);
	pid_unlock(t.root, lock_fd);
	if (secret)
		explicit_bzero(secret, key.len);
	return r;
}
