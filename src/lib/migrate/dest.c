/* SPDX-License-Identifier: MIT */
/* stasis receive, the destination: for each connection, the TLS handshake
 * (a peer without the key goes before a message is read), the preflight
 * on the source's HELLO (CRIU, driver, GPUs and their placement, memory,
 * PIDs, or a container's name, bundle and runtime) before a byte of the
 * image is sent, the image into a staging folder in memory as it comes,
 * every checksum against the source's manifest, CRIU's restore (a
 * container: its target's, runc's) with the GPU restore inside it,
 * RESTORED, and the source's COMMIT. Without COMMIT the restored copy is
 * killed (a container deleted): the source's runs on. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "criu-rpc.h"
#include "fault.h"
#include "gate.h"
#include "gpu-handoff.h"
#include "image-hash.h"
#include "image-pack.h"
#include "image-stage.h"
#include "lock.h"
#include "message.h"
#include "migrate.h"
#include "plugin-channel.h"
#include "preflight.h"
#include "progress.h"
#include "stasis.h"
#include "steps.h"
#include "stream.h"
#include "target.h"
#include "util.h"

#define WHO "the source"
#define HELLO_TIMEOUT_MS 30000
#define COMMIT_TIMEOUT_MS 60000
/* Between two messages of the image: the source's GPU checkpoint comes
 * first (113 GB took 40 s), then CRIU sends as it dumps. */
#define STREAM_IDLE_TIMEOUT_MS 600000
#define GATE_WAIT_MS 500

/* One migration being received. */
struct receipt {
	const struct stasis_receive_options *o;
	struct tls_channel *ch;
	struct manifest m;
	struct gpu_plan plan;
	bool pidns; /* the tree is its own PID namespace: new PIDs outside it */
	bool serve; /* the pages are to be served from memory (pages_servable) */
	/* A container: its target, restored under its id or --name. */
	struct target t;
	struct stasis_restore_options restore_opts;
	int lock_fd;
	pid_t locked; /* the PID lock_fd holds: the manifest may be gone by then */
	char stage[PATH_MAX];
	int stagefd;
	struct stream_in *in;
	unsigned char *buf;
	pid_t root;
	uint64_t preflight_us, receive_us, verify_us;
	struct stasis_migrate_stats st;
};

/* The pages images are kept in memory and served to CRIU from there, each
 * byte given back once read: the machine takes the image about once. Where
 * this machine has no FUSE, they are files of the staging folder, and the
 * machine takes the image twice while CRIU restores from it. */
static bool pages_servable(void)
{
	return access("/dev/fuse", R_OK | W_OK) == 0 && !fault_at("serve", 0);
}

/* The most one pages image can hold here: the machine's memory. */
static uint64_t host_memory_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

	return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

static int preflight_memory(bool serve, uint64_t estimate, struct stasis_error **err)
{
	const char *root = image_stage_root();
	struct statvfs sv;
	char need[32], have[32];

	if (serve)
		return preflight_host_memory_fits(estimate, preflight_mem_available(),
						  "this machine (the image is kept in memory "
						  "while CRIU restores it)",
						  err);
	if (statvfs(root, &sv) < 0)
		return stasis_error_errno(err, errno, "staging folder %s: %s", root,
					  strerror(errno));
	if ((uint64_t)sv.f_bavail * sv.f_frsize < estimate) {
		stasis_error_set(
		    err, ENOSPC, STASIS_DOMAIN_USAGE, 0,
		    "the staging folder %s has %s free, the image needs about %s", root,
		    format_bytes((uint64_t)sv.f_bavail * sv.f_frsize, have, sizeof(have)),
		    format_bytes(estimate, need, sizeof(need)));
		return stasis_error_hint(err, "set STASIS_STAGE_DIR to a roomier tmpfs folder");
	}
	return preflight_host_memory_fits(2 * estimate, preflight_mem_available(),
					  "this machine (the image is staged in memory "
					  "while CRIU restores it)",
					  err);
}

/* The target the image's container names (a tree has none), with its
 * names here and what its restore needs: the name free, the bundle. */
static int container_preflight(struct receipt *rc, struct stasis_error **err)
{
	const struct manifest *m = &rc->m;
	int r;

	if (!m->container.runtime) {
		if (!rc->o->name)
			return 0;
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "%s sent a process tree; --name is for containers", WHO);
		return stasis_error_hint(err, "run stasis receive without --name");
	}
	r = target_for_image(m, m->container.runtime, &rc->t.ops, err);
	if (r == 0 && !rc->t.ops->dump_held) {
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
				 "migrating a %s container is not supported yet",
				 m->container.runtime);
		r = stasis_error_hint(err, "checkpoint it, copy the image, restore it there");
	}
	if (r < 0)
		return r;
	rc->restore_opts.runtime = rc->t.ops->runtime; /* m goes at MANIFEST */
	rc->restore_opts.name = rc->o->name;
	rc->restore_opts.gpu_map = rc->o->gpu_map;
	rc->t.restore = &rc->restore_opts;
	rc->t.dir = image_stage_root();
	r = target_restore_names(&rc->t, m, err);
	if (r < 0)
		return r;
	return rc->t.ops->restore_check ? rc->t.ops->restore_check(&rc->t, m, err) : 0;
}

static int preflight(struct receipt *rc, uint64_t estimate, struct stasis_error **err)
{
	const char *map = rc->o->gpu_map && strcmp(rc->o->gpu_map, "auto") ? rc->o->gpu_map : NULL;
	int r = container_preflight(rc, err);

	/* Decided once: the memory asked for here is what the staging uses. */
	rc->serve = pages_servable();
	if (r == 0)
		r = criu_version(err);
	if (r >= 0)
		r = preflight_memory(rc->serve, estimate, err);
	if (r == 0)
		r = restore_gpu_preflight(&rc->m, map, &rc->plan, err);
	rc->pidns = rc->m.nprocs && manifest_root(&rc->m)->ns_pid == 1;
	/* A container comes back in PID namespaces of its own. */
	if (r < 0 || rc->pidns || rc->t.ops)
		return r;
	/* The same PIDs as there: they must be free here. */
	rc->locked = manifest_root(&rc->m)->pid;
	rc->lock_fd = pid_lock(rc->locked, err);
	if (rc->lock_fd < 0)
		return rc->lock_fd;
	return restore_wait_pids_free(&rc->m, err);
}

static const char *placement(const struct receipt *rc)
{
	if (!manifest_cuda_count(&rc->m))
		return "no GPU state";
	return rc->plan.notes[0] ? rc->plan.notes : "each GPU onto itself";
}

/* HELLO: the tree and what it needs; READY once all of it is here. */
static int answer_hello(struct receipt *rc, struct stasis_error **err)
{
	json_object *hello, *man = NULL, *est = NULL, *ready;
	struct wire_header h;
	uint64_t start = now_usec();
	int r = msg_recv(rc->ch, WHO, HELLO_TIMEOUT_MS, &h, rc->buf, err);

	if (r == 0 && h.type != WIRE_HELLO)
		return msg_unexpected(WHO, &h, err);
	if (r < 0)
		return r;
	hello = msg_json(rc->buf, h.len);
	if (!json_object_object_get_ex(hello, "manifest", &man) ||
	    !json_object_object_get_ex(hello, "estimate", &est))
		r = stasis_error_set(err, EPROTO, STASIS_DOMAIN_SYSTEM, 0,
				     "%s sent no tree to migrate", WHO);
	if (r == 0)
		r = manifest_from_json(json_object_to_json_string(man), &rc->m, err);
	if (r == 0)
		r = preflight(rc, json_object_get_uint64(est), err);
	json_object_put(hello);
	rc->preflight_us = now_usec() - start;
	if (r < 0)
		return r;
	ready = json_object_new_object();
	json_object_object_add(ready, "gpus", json_object_new_string(placement(rc)));
	snprintf(rc->st.gpus, sizeof(rc->st.gpus), "%s", placement(rc));
	r = msg_send_json(rc->ch, WIRE_READY, ready);
	return r < 0 ? stasis_error_set(err, EPIPE, STASIS_DOMAIN_SYSTEM, -r,
					"%s closed the connection", WHO)
		     : 0;
}

/* The staging folder is named by this receiver's PID: when it is killed,
 * the next stasis run sweeps the folder, and its pages' FUSE folder. */
static int make_stage(struct receipt *rc, struct stasis_error **err)
{
	int r;

	image_stage_sweep();
	r = image_stage_make(rc->stage, err);
	if (r < 0)
		return stasis_error_hint(err, "set STASIS_STAGE_DIR to a writable tmpfs folder");
	if ((rc->stagefd = open(rc->stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		r = -errno;
	if (r == 0)
		r = stream_in_new(rc->stagefd, rc->serve ? host_memory_bytes() : 0, &rc->in);
	if (r < 0) {
		stasis_error_errno(err, -r, "staging the image in %s: %s", image_stage_root(),
				   strerror(-r));
		return stasis_error_hint(err, "set STASIS_STAGE_DIR to a writable tmpfs folder");
	}
	return 0;
}

/* The final manifest replaces the source's first one; the phases from
 * here on are this side's. */
static int take_manifest(struct receipt *rc, const struct wire_header *h, struct stasis_error **err)
{
	_cleanup_free_ char *text = strndup((const char *)rc->buf, h->len);
	uint64_t start = now_usec();
	int r;

	if (!text)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	manifest_free(&rc->m);
	manifest_init(&rc->m);
	r = manifest_from_json(text, &rc->m, err);
	if (r == 0)
		r = manifest_check_complete(&rc->m, err);
	if (r == 0)
		r = stream_in_verify(rc->in, &rc->m, err);
	rc->verify_us = now_usec() - start;
	rc->m.nphases = 0;
	return r;
}

/* FILE and DATA until MANIFEST. */
static int receive_image(struct receipt *rc, struct stasis_error **err)
{
	uint64_t start = now_usec();
	struct wire_header h;
	int r = make_stage(rc, err);

	progress_begin("receiving the image from %s", tls_peer(rc->ch));
	while (r == 0) {
		r = msg_recv(rc->ch, WHO, STREAM_IDLE_TIMEOUT_MS, &h, rc->buf, err);
		if (r < 0)
			break;
		rc->st.wire_bytes += WIRE_HEADER_LEN + h.len;
		if (h.type == WIRE_MANIFEST)
			break;
		if (h.type != WIRE_FILE && h.type != WIRE_DATA)
			r = msg_unexpected(WHO, &h, err);
		else
			r = stream_in_take(rc->in, &h, rc->buf, err);
		if (r == 0 && h.type == WIRE_DATA && fault_at("receive-slow", 0))
			usleep(50000);
	}
	progress_end();
	rc->receive_us = now_usec() - start;
	if (r < 0)
		return stasis_error_wrap(err, "receiving the image");
	rc->st.raw_bytes = stream_in_bytes(rc->in);
	return take_manifest(rc, &h, err);
}

static void kill_restored(struct receipt *rc)
{
	if (rc->t.ops) {
		rc->t.ops->destroy(&rc->t, &rc->m, rc->root, true, NULL);
		return;
	}
	if (rc->root > 0)
		kill(rc->root, SIGKILL); /* a PID namespace's init takes it all */
	for (size_t i = 0; i < rc->m.nprocs && !rc->pidns; i++)
		if (rc->m.procs[i].pid > 0)
			kill(rc->m.procs[i].pid, SIGKILL);
}

/* CRIU's restore from the staging folder with the GPU restore inside it;
 * a failure kills what was restored. */
static int restore(struct receipt *rc, struct stasis_error **err)
{
	_cleanup_error_ struct stasis_error *gpu_err = NULL;
	struct criu_settings settings = {.dev_map = rc->plan.dev_map, .fill_nprocs = rc->m.nprocs};
	struct criu_restore_request req = {
	    .images_dir = rc->stage,
	    .work_dir = rc->stage,
	    .log_file = "restore.log",
	    .detach = true,
	    .settings = &settings,
	};
	struct gpu_handoff handoff;
	uint64_t start = now_usec();
	bool in_memory;
	int r = image_check_processes(rc->stage, &rc->m, err), served;

	if (r == 0)
		r = stream_in_stage_pages(rc->in, rc->stage, &in_memory, err);
	if (r < 0)
		return r;
	snprintf(rc->st.pages, sizeof(rc->st.pages), "%s", in_memory ? "served" : "staged");
	if (!in_memory && rc->st.raw_bytes)
		r = preflight_host_memory_fits(rc->st.raw_bytes, preflight_mem_available(),
					       "this machine (the image is staged in memory "
					       "while CRIU restores it)",
					       err);
	if (r < 0)
		return r;
	if (rc->t.ops) {
		/* The target restores from the staging folder, its runtime's
		 * logs in a folder there. */
		rc->t.dir = rc->stage;
		snprintf(rc->t.images, sizeof(rc->t.images), "%s", rc->stage);
		return restore_target_handed_off(&rc->t, &rc->m, NULL, &rc->plan, &rc->root, err);
	}
	if (fault_at("criu-restore", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"criu restore failed: injected fault");
	r = gpu_handoff_restore_begin(&handoff, &rc->m, &rc->plan, rc->pidns, err);
	if (r < 0)
		return r;
	settings.plugin_socket = gpu_handoff_socket(&handoff);
	progress_begin("CRIU restore of %zu process%s", rc->m.nprocs,
		       rc->m.nprocs == 1 ? "" : "es");
	r = criu_run_restore(&req, &rc->root, err);
	progress_end();
	served = gpu_handoff_end(&handoff, &gpu_err);
	manifest_add_phase(&rc->m, "criu_restore", now_usec() - start);
	/* A GPU restore that failed inside CRIU's restore failed it too: its
	 * error is the one to give. */
	if (served < 0 || (r == 0 && !(served == 0 && rc->pidns && manifest_cuda_count(&rc->m))))
		r = restore_finish_gpus(&rc->m, &rc->plan, served, &gpu_err, err);
	else if (r == 0)
		r = stasis_error_set(err, EIO, STASIS_DOMAIN_CUDA, 0,
				     "CRIU's restore never asked for the GPU restore");
	if (r < 0) {
		kill_restored(rc);
		return stasis_error_wrap(err, "restore failed; the half-restored tree was killed");
	}
	return 0;
}

/* RESTORED, then the source's COMMIT; without it the copy here goes. */
static int handoff(struct receipt *rc, struct stasis_error **err)
{
	json_object *o = json_object_new_object();
	struct wire_header h;
	int r;

	json_object_object_add(o, "pid", json_object_new_int(rc->root));
	json_object_object_add(o, "gpus", json_object_new_string(placement(rc)));
	if (rc->t.ops)
		json_object_object_add(o, "container", json_object_new_string(rc->t.id));
	r = msg_send_json(rc->ch, WIRE_RESTORED, o);
	if (r < 0)
		r = stasis_error_set(err, EPIPE, STASIS_DOMAIN_SYSTEM, -r,
				     "%s closed the connection", WHO);
	if (r == 0)
		r = msg_recv(rc->ch, WHO, COMMIT_TIMEOUT_MS, &h, rc->buf, err);
	if (r == 0 && h.type != WIRE_COMMIT)
		r = msg_unexpected(WHO, &h, err);
	if (r < 0) {
		kill_restored(rc);
		stasis_error_wrap(err, "no handoff");
		return stasis_error_hint(err,
					 "the restored copy was %s; the source resumes its own",
					 rc->t.ops ? "deleted" : "killed");
	}
	return 0;
}

/* Copies the logs in folder dir (and in the folders right below it: a
 * runtime's work folder) into to_fd; returns how many. */
static int copy_logs(const char *dir, int to_fd, bool below)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char sub[PATH_MAX];

		if (de->d_type == DT_DIR && below && de->d_name[0] != '.') {
			snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
			n += copy_logs(sub, to_fd, false);
		} else if (de->d_type == DT_REG && image_is_log_file(de->d_name) &&
			   copy_file_at(dirfd(d), de->d_name, to_fd) == 0) {
			n++;
		}
	}
	closedir(d);
	return n;
}

/* A failed restore's logs outlive the staging folder: CRIU's and the
 * runtime's go to the run directory, named in the error. */
static void keep_logs(const char *stage, struct stasis_error **err)
{
	const char *base = strrchr(stage, '/');
	_cleanup_close_ int fd = -1;
	char keep[PATH_MAX];

	snprintf(keep, sizeof(keep), "%s/failed/%s", stasis_run_dir(), base ? base + 1 : stage);
	if (mkdir_p(keep) < 0 || (fd = open(keep, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return;
	if (copy_logs(stage, fd, true) == 0) {
		rmdir(keep);
		return;
	}
	/* The hint is replaced: the old one is copied first. */
	_cleanup_free_ char *hint = (*err)->hint ? strdup((*err)->hint) : NULL;

	if (hint)
		stasis_error_hint(err, "%s; its logs are kept in %s", hint, keep);
	else
		stasis_error_hint(err, "its logs are kept in %s", keep);
}

static int receive_steps(struct receipt *rc, struct stasis_error **err)
{
	uint64_t start = now_usec();
	bool restore_failed = false;
	int r = answer_hello(rc, err);

	if (r == 0)
		r = receive_image(rc, err);
	manifest_add_phase(&rc->m, "preflight", rc->preflight_us);
	manifest_add_phase(&rc->m, "receive", rc->receive_us);
	manifest_add_phase(&rc->m, "verify", rc->verify_us);
	if (r == 0) {
		r = restore(rc, err);
		restore_failed = r < 0;
	}
	/* CRIU is done with the image: its memory goes before the GPU work
	 * that comes, and before anything else can fail; its FUSE folder goes
	 * before the logs are looked for. */
	stream_in_release_pages(rc->in);
	if (restore_failed && rc->stage[0] && err && *err)
		keep_logs(rc->stage, err);
	if (rc->stage[0])
		remove_dir_tree(rc->stage);
	rc->stage[0] = '\0';
	if (r == 0)
		r = handoff(rc, err);
	manifest_add_phase(&rc->m, "total", now_usec() - start);
	rc->st.restored_pid = r == 0 ? rc->root : 0;
	if (r == 0 && rc->t.ops)
		snprintf(rc->st.container, sizeof(rc->st.container), "%s", rc->t.id);
	return r;
}

static int receive_one(const struct stasis_receive_options *o, struct tls_channel *ch,
		       stasis_receive_report_fn report, void *ctx, struct stasis_error **err)
{
	struct receipt rc = {.o = o, .ch = ch, .lock_fd = -1, .stagefd = -1};
	int r;

	manifest_init(&rc.m);
	snprintf(rc.st.peer, sizeof(rc.st.peer), "%s", tls_peer(ch));
	rc.buf = malloc(WIRE_MAX_PAYLOAD);
	r = rc.buf ? receive_steps(&rc, err) : stasis_error_errno(err, ENOMEM, "out of memory");
	if (r < 0)
		msg_send_refuse(ch, *err);
	if (rc.lock_fd >= 0)
		pid_unlock(rc.locked, rc.lock_fd);
	stream_in_release_pages(rc.in);
	if (rc.stage[0])
		remove_dir_tree(rc.stage);
	if (rc.stagefd >= 0)
		close(rc.stagefd);
	stream_in_free(rc.in);
	free(rc.buf);
	if (r < 0)
		stasis_error_wrap(err, "migration from %s", rc.st.peer);
	report(ctx, &rc.m, &rc.st, r < 0 ? *err : NULL);
	manifest_free(&rc.m);
	return r;
}

int stasis_receive(const struct stasis_receive_options *o, stasis_receive_report_fn report,
		   void *ctx, struct stasis_error **err)
{
	_cleanup_free_ unsigned char *secret = NULL;
	_cleanup_close_ int lfd = -1;
	struct tls_key key = {0};
	struct gate *gate = NULL;
	int r;

	signal(SIGPIPE, SIG_IGN);
	r = stasis_require_root(err);
	if (r == 0)
		r = wire_key_load(o->key_file, &secret, &key.len, err);
	key.data = secret;
	if (r == 0)
		r = criu_version(err);
	if (r >= 0)
		r = image_pack_preflight(err);
	if (r == 0)
		r = tls_listen(o->listen, &lfd, err);
	if (r == 0)
		r = gate_start(lfd, &key, &gate, err);
	/* Each migration is reported, failed or not, and so is each peer
	 * turned away at the gate; only with once does a migration's result
	 * become this call's, and only a peer with the key makes one. A
	 * signal between them ends it cleanly. */
	while (r == 0) {
		_cleanup_error_ struct stasis_error *one = NULL;
		struct tls_channel *ch = NULL;
		int next = gate_next(gate, GATE_WAIT_MS, &ch, &one);

		if (next == -EINTR)
			break;
		if (next == 0)
			continue;
		if (!ch) {
			report(ctx, NULL, NULL, one);
			continue;
		}
		r = receive_one(o, ch, report, ctx, &one);
		tls_close(ch);
		if (o->once)
			break;
		r = 0;
	}
	gate_stop(gate);
	if (secret)
		explicit_bzero(secret, key.len);
	return r;
}
