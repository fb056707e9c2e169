/* SPDX-License-Identifier: MIT */
/* A containerd container. Checkpoint: runc, with the state folder that
 * containerd's shim gives it, runs stasis's CRIU; then the stopped task and
 * the container are removed from containerd, as runc's checkpoint removes a
 * runc container. Restore: containerd creates the container again from the
 * OCI spec in the image, with stasis as its runc binary (runc-wrap.h), so
 * that its shim restores the image and owns the task after. */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "container.h"
#include "containerd.h"
#include "fault.h"
#include "lock.h"
#include "progress.h"
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
	return containerd_list(&c, list, n) < 0 ? stasis_error_errno(err, ENOMEM, "out of memory")
						: 0;
}

/* A container on a snapshot of an image has its writable layer there,
 * which the image does not carry yet: refused before anything changes. */
static int require_root_folder(const struct containerd_container *cc, struct stasis_error **err)
{
	if (!cc->image[0] && !cc->snapshot[0])
		return 0;
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "container '%s' runs on a snapshot of image '%s'; stasis saves containerd "
			 "containers whose root is a folder on the host (ctr run --rootfs)",
			 cc->id, cc->image[0] ? cc->image : "(none)");
	return stasis_error_hint(err, "run it from a root folder, or use runc's own checkpoint");
}

static int containerd_find(struct target *t, struct stasis_error **err)
{
	const struct stasis_checkpoint_options *o = t->checkpoint;
	struct containerd c;
	struct containerd_container cc;
	int r;

	containerd_client(&c, o->address, o->namespace);
	r = containerd_require(&c, err);
	if (r == 0)
		r = containerd_container(&c, o->container, &cc, err);
	if (r < 0)
		return r;
	free(cc.spec);
	r = require_root_folder(&cc, err);
	if (r == 0)
		r = container_require_running(cc.id, cc.status, err);
	if (r < 0)
		return r;
	t->root = cc.pid;
	snprintf(t->id, sizeof(t->id), "%s", cc.id);
	snprintf(t->namespace, sizeof(t->namespace), "%s", c.namespace);
	snprintf(t->address, sizeof(t->address), "%s", c.address);
	snprintf(t->runc_root, sizeof(t->runc_root), "%s", cc.runc_root);
	return 0;
}

static int containerd_describe(struct target *t, struct manifest *m, struct stasis_error **err)
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
	r = container_processes(t->root, &pids, &n, err);
	if (r == 0)
		r = container_describe(t, m, cc.spec, pids, n, err);
	free(cc.spec);
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

static int containerd_dump(struct target *t, struct manifest *m, struct stasis_error **err)
{
	bool leave_running = t->checkpoint->leave_running;
	uint64_t start = now_usec();
	int r;

	if (fault_at("criu-dump", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"runc checkpoint failed: injected fault");
	progress_begin("runc checkpoint of %zu process%s", m->nprocs, m->nprocs == 1 ? "" : "es");
	r = runc_checkpoint(t->runc_root, t->id, t->images, t->images, leave_running, err);
	progress_end();
	manifest_add_phase(m, "runc_checkpoint", now_usec() - start);
	/* Its task stopped when CRIU killed it; the image holds the rest. */
	if (r == 0 && !leave_running)
		remove_container(t);
	return r;
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
	if (!m->container.spec)
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
					"the image has no OCI spec for container '%s'", t->id);
	if (containerd_container(&c, t->id, &taken, NULL) == 0) {
		free(taken.spec);
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

static int containerd_restore_images(struct target *t, struct manifest *m,
				     struct image_verifier *verifier, pid_t *root,
				     struct stasis_error **err)
{
	char dir[PATH_MAX], work[PATH_MAX], spec_file[PATH_MAX + 16], link[PATH_MAX + 32];
	const char *socket = getenv("STASIS_PLUGIN_SOCKET"), *map = getenv("STASIS_NVIDIA_DEV_MAP");
	struct runc_wrap_request req = {.images = t->images,
					.work = work,
					.plugin_socket = socket ? socket : "",
					.dev_map = map ? map : ""};
	_cleanup_free_ char *spec = spec_for(t, m);
	struct containerd c;
	int r;

	if (fault_at("criu-restore", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"containerd restore failed: injected fault");
	if (!spec)
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
					"the image's OCI spec is not valid JSON");
	wrap_dir(t, dir, sizeof(dir));
	snprintf(work, sizeof(work), "%s/restore-%d", t->dir, (int)getpid());
	r = runc_wrap_prepare(dir, &req, link, sizeof(link), err);
	if (r < 0)
		return r;
	r = write_file_atomic(dir, "config.json", spec, strlen(spec));
	if (r < 0)
		return stasis_error_errno(err, -r, "writing the spec in %s", dir);
	snprintf(spec_file, sizeof(spec_file), "%s/config.json", dir);
	client_of(t, &c);
	progress_begin("containerd restore of %zu process%s", m->nprocs,
		       m->nprocs == 1 ? "" : "es");
	r = containerd_run(&c, t->id, spec_file, link, err);
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
	free(cc.spec);
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
