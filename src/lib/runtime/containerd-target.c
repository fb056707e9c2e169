/* SPDX-License-Identifier: MIT */
/* A containerd container. Checkpoint: runc, with the state folder that
 * containerd's shim gives it, runs stasis's CRIU; a container on an image
 * snapshot has its writable layer's changes saved beside CRIU's files
 * (rootfs-diff.h); then the stopped task and the container are removed
 * from containerd, as runc's checkpoint removes a runc container. Restore:
 * containerd creates the container again, from the OCI spec in the image
 * or from its image on a fresh snapshot, with stasis as its runc binary
 * (runc-wrap.h), so that its shim restores the image and owns the task
 * after. */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "container.h"
#include "containerd-links.h"
#include "containerd.h"
#include "fault.h"
#include "lock.h"
#include "progress.h"
#include "rootfs-diff.h"
#include "runc-wrap.h"
#include "runc.h"
#include "target.h"
#include "util.h"

static void client_of(const struct target *t, struct containerd *c)
{
	containerd_client(c, t->address[0] ? t->address : NULL,
			  t->namespace[0] ? t->namespace : NULL);
}

static int containerd_containers(struct target_container **list, size_t *n,
				 struct stasis_error **err)
{
	struct containerd c;

	containerd_client(&c, NULL, NULL);
	containerd_links_sweep(&c);
	return containerd_list(&c, list, n) < 0 ? stasis_error_errno(err, ENOMEM, "out of memory")
						: 0;
}

/* The snapshotters whose containers stasis saves: those its tests run
 * (containerd's walking differ gives their changes). */
static bool snapshotter_supported(const char *name)
{
	return strcmp(name, "overlayfs") == 0 || strcmp(name, "native") == 0;
}

/* A container's root: a folder on the host, or a snapshot of an image on
 * a snapshotter stasis knows; anything else is refused before anything
 * changes. */
static int require_supported_root(const struct containerd_container *cc, struct stasis_error **err)
{
	if (!cc->image[0] && !cc->snapshot[0])
		return 0;
	if (!cc->image[0] || !cc->snapshot[0]) {
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
				 "container '%s' has %s but no %s; stasis saves containerd "
				 "containers on an image's snapshot or on a root folder",
				 cc->id, cc->image[0] ? "an image" : "a snapshot",
				 cc->image[0] ? "snapshot" : "image");
		return stasis_error_hint(err, "run it with ctr run IMAGE ID, or from a root "
					      "folder (ctr run --rootfs)");
	}
	if (snapshotter_supported(cc->snapshotter))
		return 0;
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "container '%s' runs on the '%s' snapshotter; stasis saves image "
			 "containers on the overlayfs and native snapshotters",
			 cc->id, cc->snapshotter[0] ? cc->snapshotter : "(unknown)");
	return stasis_error_hint(err, "run it with --snapshotter overlayfs (or native)");
}

static int containerd_find(struct target *t, struct stasis_error **err)
{
	const struct stasis_checkpoint_options *o = t->checkpoint;
	struct containerd c;
	struct containerd_container cc;
	int r;

	containerd_client(&c, o->address, o->namespace);
	r = containerd_require(&c, err);
	if (r == 0) {
		containerd_links_sweep(&c);
		r = containerd_container(&c, o->container, &cc, err);
	}
	if (r < 0)
		return r;
	containerd_container_free(&cc);
	r = require_supported_root(&cc, err);
	if (r == 0)
		r = container_require_running(cc.id, cc.status, err);
	if (r < 0)
		return r;
	t->root = cc.pid;
	snprintf(t->id, sizeof(t->id), "%s", cc.id);
	snprintf(t->namespace, sizeof(t->namespace), "%s", c.namespace);
	snprintf(t->address, sizeof(t->address), "%s", c.address);
	snprintf(t->runc_root, sizeof(t->runc_root), "%s", cc.runc_root);
	snprintf(t->snapshot, sizeof(t->snapshot), "%s", cc.snapshot);
	snprintf(t->snapshotter, sizeof(t->snapshotter), "%s", cc.snapshotter);
	return 0;
}

/* The spec runc runs the container with: its bundle's config.json, which
 * after a restore of an image container is the image's spec, not the one
 * containerd keeps; containerd's where runc does not say. */
static char *running_spec(const struct target *t, const struct containerd_container *cc)
{
	struct runc_container state;
	char path[PATH_MAX + 16];
	char *text;

	if (runc_state_at(t->runc_root, t->id, &state, NULL) == 0 && state.bundle[0]) {
		snprintf(path, sizeof(path), "%s/config.json", state.bundle);
		text = read_file_str(path, NULL);
		if (text)
			return text;
	}
	return cc->spec ? strdup(cc->spec) : NULL;
}

/* An image container's image in m: its name, digest and snapshotter. */
static void describe_image(const struct containerd *c, const struct containerd_container *cc,
			   struct manifest *m)
{
	char digest[160];

	if (!cc->image[0])
		return;
	m->container.image = strdup(cc->image);
	m->container.snapshotter = strdup(cc->snapshotter);
	/* What the CRI needs of it to restore it from an archive. */
	if (cc->cri_config)
		m->container.cri_config = strdup(cc->cri_config);
	if (containerd_image_digest(c, cc->image, digest, sizeof(digest), NULL) == 0)
		m->container.image_digest = strdup(digest);
}

static int containerd_describe(struct target *t, struct manifest *m, struct stasis_error **err)
{
	struct containerd c;
	struct containerd_container cc;
	_cleanup_free_ pid_t *pids = NULL;
	size_t n = 0;
	int r;

	_cleanup_free_ char *spec = NULL;

	client_of(t, &c);
	r = containerd_container(&c, t->id, &cc, err);
	if (r < 0)
		return r;
	spec = running_spec(t, &cc);
	r = container_processes(t->root, &pids, &n, err);
	if (r == 0)
		r = container_describe(t, m, spec, pids, n, err);
	if (r == 0)
		describe_image(&c, &cc, m);
	containerd_container_free(&cc);
	return r;
}

/* The folder of the restored container's runc link, which containerd uses
 * for as long as the container lives. */
static void wrap_dir(const struct target *t, char *out, size_t len)
{
	snprintf(out, len, "%s/containerd/%s/%s", stasis_run_dir(), t->namespace, t->id);
}

/* Removes id from containerd, and the runc link a restore gave it. */
static void remove_container(const struct target *t)
{
	char dir[PATH_MAX];
	struct containerd c;

	client_of(t, &c);
	containerd_remove(&c, t->id);
	wrap_dir(t, dir, sizeof(dir));
	runc_wrap_remove(dir);
}

/* The writable layer's changes since the image, once CRIU has saved the
 * processes (they no longer write), as an OCI layer tar among CRIU's
 * files, so that the image's checksums cover it. containerd's differ
 * writes it, whatever the snapshotter: ctr snapshots diff. After a failure
 * the container stays in containerd with its snapshot. */
static int save_rootfs_diff(struct target *t, struct manifest *m, struct stasis_error **err)
{
	char path[PATH_MAX + 32];
	uint64_t start = now_usec();
	struct containerd c;
	_cleanup_close_ int fd = -1;
	int r;

	snprintf(path, sizeof(path), "%s/" ROOTFS_DIFF_NAME, t->images);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return stasis_error_errno(err, errno, "creating %s: %s", path, strerror(errno));
	client_of(t, &c);
	r = fault_at("rootfs-diff", 0)
		? stasis_error_set(err, EIO, STASIS_DOMAIN_USAGE, 0, "rootfs diff: injected fault")
		: containerd_snapshot_diff(&c, t->snapshotter, t->snapshot, fd, err);
	if (r == 0 && fsync(fd) < 0)
		r = stasis_error_errno(err, errno, "writing %s: %s", path, strerror(errno));
	manifest_add_phase(m, "rootfs_diff", now_usec() - start);
	if (r < 0 && !t->checkpoint->leave_running)
		return stasis_error_hint(err,
					 "the checkpoint stopped the container; '%s' stays in "
					 "containerd with its snapshot '%s' (ctr tasks delete %s, "
					 "then start it again)",
					 t->id, t->snapshot, t->id);
	return r;
}

/* With --leave-running the task is paused (its cgroup frozen) for runc's
 * dump and the rootfs diff: runc's CRIU leaves a cgroup frozen as it found
 * it, so the diff holds the files as the dumped processes left them, and
 * no file the workload renames meanwhile makes the diff fail. */
static int containerd_dump(struct target *t, struct manifest *m, struct stasis_error **err)
{
	bool leave_running = t->checkpoint->leave_running;
	bool hold = leave_running && t->snapshot[0];
	uint64_t start = now_usec();
	struct containerd c;
	int r = 0;

	if (fault_at("criu-dump", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"runc checkpoint failed: injected fault");
	client_of(t, &c);
	if (hold && containerd_task_pause(&c, t->id, err) < 0)
		return stasis_error_hint(err, "nothing was dumped; the container runs on");
	progress_begin("runc checkpoint of %zu process%s", m->nprocs, m->nprocs == 1 ? "" : "es");
	r = runc_checkpoint(t->runc_root, t->id, t->images, t->work[0] ? t->work : t->images,
			    leave_running, &t->criu, err);
	progress_end();
	manifest_add_phase(m, "runc_checkpoint", now_usec() - start);
	if (r == 0 && t->snapshot[0])
		r = save_rootfs_diff(t, m, err);
	if (hold && containerd_task_resume(&c, t->id, r < 0 ? NULL : err) < 0 && r == 0)
		r = stasis_error_hint(err, "the container stays paused: ctr -n %s tasks resume %s",
				      c.namespace, t->id);
	/* Its task stopped when CRIU killed it; the image holds the rest. */
	if (r == 0 && !leave_running)
		remove_container(t);
	return r;
}

/* An image container comes back on a fresh snapshot of the same image,
 * which the destination's containerd must have (the same digest, when the
 * checkpoint knew it). */
static int require_image(const struct containerd *c, const struct manifest *m,
			 struct stasis_error **err)
{
	const char *image = m->container.image, *want = m->container.image_digest;
	char digest[160];
	int r;

	if (!image)
		return 0;
	r = containerd_image_digest(c, image, digest, sizeof(digest), err);
	if (r < 0)
		return r;
	if (want && strcmp(want, digest) != 0) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "image '%s' in containerd's namespace '%s' is %s, but the "
				 "container was checkpointed on %s",
				 image, c->namespace, digest, want);
		return stasis_error_hint(err, "its rootfs-diff.tar applies only to that image; "
					      "import the same image");
	}
	if (m->container.snapshotter && !snapshotter_supported(m->container.snapshotter))
		return stasis_error_set(
		    err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
		    "the image's snapshotter '%s' is not one stasis restores on",
		    m->container.snapshotter);
	return 0;
}

static int containerd_restore_check(struct target *t, const struct manifest *m,
				    struct stasis_error **err)
{
	struct containerd c;
	struct containerd_container taken;
	int r;

	client_of(t, &c);
	snprintf(t->namespace, sizeof(t->namespace), "%s", c.namespace);
	snprintf(t->address, sizeof(t->address), "%s", c.address);
	r = containerd_require(&c, err);
	if (r < 0)
		return r;
	containerd_links_sweep(&c);
	if (!m->container.spec)
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
					"the image has no OCI spec for container '%s'", t->id);
	r = require_image(&c, m, err);
	if (r < 0)
		return r;
	if (containerd_container(&c, t->id, &taken, NULL) == 0) {
		containerd_container_free(&taken);
		stasis_error_set(err, EEXIST, STASIS_DOMAIN_USAGE, 0,
				 "container name '%s' is already taken in namespace '%s' (%s)",
				 t->id, c.namespace, taken.status);
		return stasis_error_hint(err,
					 "delete it (ctr -n %s containers delete %s) or restore "
					 "with --name NEW",
					 c.namespace, t->id);
	}
	return 0;
}

/* The image's spec, for the container's new name and namespace: the
 * cgroup containerd gave it by default moves with them. */
static char *spec_for(const struct target *t, const struct manifest *m)
{
	char old_path[512], new_path[512];
	json_object *spec = json_tokener_parse(m->container.spec), *linux_, *path;
	char *text;

	if (!spec)
		return NULL;
	snprintf(old_path, sizeof(old_path), "/%s/%s",
		 m->container.namespace ? m->container.namespace : "", m->container.id);
	snprintf(new_path, sizeof(new_path), "/%s/%s", t->namespace, t->id);
	if (json_object_object_get_ex(spec, "linux", &linux_) &&
	    json_object_object_get_ex(linux_, "cgroupsPath", &path) &&
	    strcmp(json_object_get_string(path), old_path) == 0)
		json_object_object_add(linux_, "cgroupsPath", json_object_new_string(new_path));
	text = strdup(json_object_to_json_string_ext(spec, JSON_C_TO_STRING_PLAIN |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(spec);
	return text;
}

/* The spec's process.args, NULL-terminated, pointing into spec (which
 * must outlive them); NULL when it has none. */
static const char **process_args(json_object *spec)
{
	json_object *process, *args;
	const char **out;
	size_t n;

	if (!json_object_object_get_ex(spec, "process", &process) ||
	    !json_object_object_get_ex(process, "args", &args) ||
	    !json_object_is_type(args, json_type_array))
		return NULL;
	n = json_object_array_length(args);
	out = calloc(n + 1, sizeof(*out));
	for (size_t i = 0; out && i < n; i++)
		out[i] = json_object_get_string(json_object_array_get_idx(args, i));
	return out;
}

/* containerd creates the container, with the link as its runc: from the
 * spec (a root folder), or from its image on a fresh snapshot, the image's
 * process args making containerd's own record of it read the same. */
static int run_container(const struct target *t, const struct manifest *m, const char *spec_file,
			 const char *link, struct stasis_error **err)
{
	struct containerd_run run = {.id = t->id, .runc_binary = link, .spec_file = spec_file};
	json_object *spec = NULL;
	_cleanup_free_ const char **args = NULL;
	struct containerd c;
	int r;

	if (m->container.image) {
		spec = json_tokener_parse(m->container.spec);
		args = spec ? process_args(spec) : NULL;
		run.image = m->container.image;
		run.snapshotter = m->container.snapshotter;
		run.args = args;
	}
	client_of(t, &c);
	r = containerd_run(&c, &run, err);
	json_object_put(spec);
	return r;
}

static int containerd_restore_images(struct target *t, struct manifest *m,
				     struct image_verifier *verifier, pid_t *root,
				     struct stasis_error **err)
{
	char dir[PATH_MAX], work[PATH_MAX], spec_file[PATH_MAX + 16], link[PATH_MAX + 32];
	char diff[PATH_MAX + 32];
	/* The restore's own, as the GPU handoff gave them (restore.c). */
	struct runc_wrap_request req = {.images = t->images,
					.work = work,
					.plugin_socket =
					    t->criu.plugin_socket ? t->criu.plugin_socket : "",
					.dev_map = t->criu.dev_map ? t->criu.dev_map : ""};
	_cleanup_free_ char *spec = spec_for(t, m);
	_cleanup_close_ int lock = -1;
	int r;

	if (fault_at("criu-restore", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"containerd restore failed: injected fault");
	if (!spec)
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
					"the image's OCI spec is not valid JSON");
	wrap_dir(t, dir, sizeof(dir));
	if (t->work[0])
		snprintf(work, sizeof(work), "%s", t->work);
	else
		snprintf(work, sizeof(work), "%s/restore-%d", t->dir, (int)getpid());
	snprintf(spec_file, sizeof(spec_file), "%s/config.json", dir);
	snprintf(diff, sizeof(diff), "%s/" ROOTFS_DIFF_NAME, t->images);
	if (m->container.image) {
		req.spec = spec_file;
		req.rootfs_diff = diff;
		if (fault_at("rootfs-apply", 0))
			strcat(diff, ".injected-fault"); /* a diff that is not there */
	}
	/* No sweep removes the link folder until containerd knows its
	 * container. */
	lock = containerd_links_hold(dir);
	r = runc_wrap_prepare(dir, &req, link, sizeof(link), err);
	if (r < 0)
		return r;
	r = write_file_atomic(dir, "config.json", spec, strlen(spec));
	if (r == 0)
		r = write_file_atomic(dir, LINKS_ADDRESS_FILE, t->address, strlen(t->address));
	if (r < 0)
		return stasis_error_errno(err, -r, "writing the spec in %s", dir);
	progress_begin("containerd restore of %zu process%s", m->nprocs,
		       m->nprocs == 1 ? "" : "es");
	r = run_container(t, m, spec_file, link, err);
	progress_end();
	return r < 0 ? stasis_error_hint(err, "CRIU's log: %s/restore.log", work) : 0;
}

static int containerd_adopt(struct target *t, struct manifest *m, pid_t *root,
			    struct stasis_error **err)
{
	struct containerd c;
	struct containerd_container cc;
	_cleanup_free_ pid_t *pids = NULL;
	size_t n = 0;
	int r;

	client_of(t, &c);
	r = containerd_container(&c, t->id, &cc, err);
	if (r < 0)
		return r;
	containerd_container_free(&cc);
	if (cc.pid <= 0)
		return stasis_error_set(err, ESRCH, STASIS_DOMAIN_CRIU, 0,
					"container '%s' has no running task after its restore",
					t->id);
	r = container_processes(cc.pid, &pids, &n, err);
	if (r < 0)
		return r;
	*root = cc.pid;
	return container_adopt(t, m, pids, n, err);
}

static void containerd_delete(struct target *t, struct manifest *m, pid_t root, bool restored,
			      struct stasis_error **err)
{
	remove_container(t);
	stasis_error_hint(err,
			  "the half-restored container '%s' was deleted from containerd; the "
			  "image is intact",
			  t->id);
}

const struct target_ops target_containerd = {
    .runtime = "containerd",
    .restore_phase = "containerd_restore",
    .list = containerd_containers,
    .find = containerd_find,
    .describe = containerd_describe,
    .dump = containerd_dump,
    .restore_check = containerd_restore_check,
    .restore = containerd_restore_images,
    .adopt = containerd_adopt,
    .destroy = containerd_delete,
};
