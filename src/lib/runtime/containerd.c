/* SPDX-License-Identifier: MIT */
#include "containerd.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "exec.h"
#include "target.h"
#include "util.h"

#define DEFAULT_ADDRESS "/run/containerd/containerd.sock"
/* Where containerd's runc shim keeps runc's state unless its runtime
 * options say otherwise (pkg/process RuncRoot). */
#define SHIM_RUNC_ROOT "/run/containerd/runc"
/* The protobuf field of containerd.runc.v1.Options naming runc's state
 * folder (its root). */
#define OPTION_ROOT 7

static const char *ctr_binary(void)
{
	const char *env = getenv("STASIS_CTR");

	return env && *env ? env : "ctr";
}

static const char *first_set(const char *a, const char *b, const char *fallback)
{
	return a && *a ? a : b && *b ? b : fallback;
}

void containerd_client(struct containerd *c, const char *address, const char *namespace)
{
	snprintf(c->address, sizeof(c->address), "%s",
		 first_set(address, getenv("CONTAINERD_ADDRESS"), DEFAULT_ADDRESS));
	snprintf(c->namespace, sizeof(c->namespace), "%s",
		 first_set(namespace, getenv("CONTAINERD_NAMESPACE"), "default"));
}

/* ctr ARGS... against c's socket and namespace; out as exec_run's. Where
 * no socket is, -ECONNREFUSED at once: ctr would wait out its connect
 * timeout (stasis ps on a machine without containerd). */
static int ctr_to(const struct containerd *c, const char *const *args, int out_fd, char **out)
{
	const char *head[] = {ctr_binary(), "--address",	 c->address, "--namespace",
			      c->namespace, "--connect-timeout", "3s"};
	_cleanup_free_ const char **argv = NULL;
	size_t n = 0, nargs = 0;
	const char *socket = c->address;
	struct stat st;

	if (strncmp(socket, "unix://", 7) == 0)
		socket += 7;
	if (stat(socket, &st) < 0 || !S_ISSOCK(st.st_mode))
		return -ECONNREFUSED;
	while (args[nargs])
		nargs++;
	argv = calloc(ARRAY_SIZE(head) + nargs + 1, sizeof(*argv));
	if (!argv)
		return -ENOMEM;
	for (size_t i = 0; i < ARRAY_SIZE(head); i++)
		argv[n++] = head[i];
	for (size_t i = 0; i < nargs; i++)
		argv[n++] = args[i];
	return out_fd >= 0 ? exec_run_to(argv, out_fd, out) : exec_run(argv, out);
}

static int ctr(const struct containerd *c, const char *const *args, char **out)
{
	return ctr_to(c, args, -1, out);
}

int containerd_require(const struct containerd *c, struct stasis_error **err)
{
	const char *version[] = {"version", NULL};
	_cleanup_free_ char *out = NULL;
	int r = ctr(c, version, &out);

	if (r == 0)
		return 0;
	if (r == -ENOENT || r == 127) {
		stasis_error_set(err, ENOENT, STASIS_DOMAIN_USAGE, 0, "ctr not found (%s)",
				 ctr_binary());
		return stasis_error_hint(err, "install containerd, or set STASIS_CTR to its ctr");
	}
	stasis_error_set(err, ECONNREFUSED, STASIS_DOMAIN_USAGE, 0,
			 "containerd does not answer at %s", c->address);
	return stasis_error_hint(err, "start containerd, or give its socket with --address "
				      "(or CONTAINERD_ADDRESS)");
}

/* "TASK PID STATUS" lines of ctr task ls: id's task, if it has one. */
static void task_of(const struct containerd *c, const char *id, struct containerd_container *out)
{
	const char *ls[] = {"task", "ls", NULL};
	_cleanup_free_ char *text = NULL;
	char *save = NULL;

	snprintf(out->status, sizeof(out->status), "created");
	out->pid = 0;
	if (ctr(c, ls, &text) != 0 || !text)
		return;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char task[256], status[32];
		int pid;

		if (sscanf(line, "%255s %d %31s", task, &pid, status) != 3 || strcmp(task, id) != 0)
			continue;
		out->pid = pid;
		for (char *s = status; *s; s++)
			*s = (char)(*s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s);
		snprintf(out->status, sizeof(out->status), "%s", status);
	}
}

static int base64_value(char ch)
{
	static const char alphabet[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const char *p = ch ? strchr(alphabet, ch) : NULL;

	return p ? (int)(p - alphabet) : -1;
}

/* Decodes base64 text into out (at most len bytes); returns the length. */
static size_t base64_decode(const char *text, unsigned char *out, size_t len)
{
	unsigned int bits = 0, nbits = 0;
	size_t n = 0;

	for (; *text && n < len; text++) {
		int v = base64_value(*text);

		if (v < 0)
			continue;
		bits = (bits << 6) | (unsigned int)v;
		nbits += 6;
		if (nbits >= 8) {
			nbits -= 8;
			out[n++] = (unsigned char)(bits >> nbits);
		}
	}
	return n;
}

/* A string field of the runtime options (a containerd.runc.v1.Options
 * message, base64 in ctr's JSON); "" when it is not set. Only the
 * length-delimited fields below 16 that it holds are read. */
static void runc_option(json_object *info, int field, char *out, size_t len)
{
	unsigned char buf[4096];
	json_object *runtime, *options, *value;
	size_t n, i = 0;

	out[0] = '\0';
	if (!json_object_object_get_ex(info, "Runtime", &runtime) ||
	    !json_object_object_get_ex(runtime, "Options", &options) ||
	    !json_object_object_get_ex(options, "value", &value) ||
	    !json_object_is_type(value, json_type_string))
		return;
	n = base64_decode(json_object_get_string(value), buf, sizeof(buf));
	while (i + 2 <= n) {
		unsigned int key = buf[i], size = buf[i + 1];

		i += 2;
		if ((key & 7) == 0) { /* a varint: a bool or number option */
			i--;
			while (i < n && (buf[i++] & 0x80))
				;
			continue;
		}
		if ((key & 7) != 2 || size >= 0x80 || i + size > n)
			return; /* not an option this reads */
		if ((int)(key >> 3) == field) {
			snprintf(out, len, "%.*s", (int)size, (const char *)buf + i);
			return;
		}
		i += size;
	}
}

/* The CRI's metadata of a container it made (containerd keeps it as an
 * extension: JSON, base64 in ctr's, version "v1"): what its restore from
 * an archive needs of its ContainerConfig (the name, image, labels and
 * annotations), with its log's full path, as JSON text; NULL where there
 * is none, or none this reads (more than 1 MiB, another version). */
static char *cri_config(json_object *info)
{
	static const char *const keep[] = {"metadata", "image", "labels", "annotations"};
	json_object *ext, *meta, *value, *o, *inner, *config, *version, *log, *v, *out;
	const char *b64;
	unsigned char *buf;
	char *text = NULL;
	size_t n;

	if (!json_object_object_get_ex(info, "Extensions", &ext) ||
	    !json_object_object_get_ex(ext, "io.cri-containerd.container.metadata", &meta) ||
	    !json_object_object_get_ex(meta, "value", &value) ||
	    !json_object_is_type(value, json_type_string))
		return NULL;
	b64 = json_object_get_string(value);
	n = strlen(b64);
	if (n > (4u << 20) / 3 || !(buf = malloc(n + 1)))
		return NULL;
	buf[base64_decode(b64, buf, n)] = '\0';
	o = json_tokener_parse((const char *)buf);
	free(buf);
	if (!o || !json_object_object_get_ex(o, "Version", &version) ||
	    strcmp(json_object_get_string(version) ? json_object_get_string(version) : "", "v1") !=
		0 ||
	    !json_object_object_get_ex(o, "Metadata", &inner) ||
	    !json_object_object_get_ex(inner, "Config", &config) ||
	    !json_object_is_type(config, json_type_object)) {
		json_object_put(o);
		return NULL;
	}
	out = json_object_new_object();
	for (size_t i = 0; out && i < sizeof(keep) / sizeof(keep[0]); i++)
		if (json_object_object_get_ex(config, keep[i], &v))
			json_object_object_add(out, keep[i], json_object_get(v));
	if (out && json_object_object_get_ex(inner, "LogPath", &log) &&
	    json_object_is_type(log, json_type_string))
		json_object_object_add(out, "log_path", json_object_get(log));
	if (out)
		text = strdup(json_object_to_json_string_ext(
		    out, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(out);
	json_object_put(o);
	return text;
}

void containerd_container_free(struct containerd_container *c)
{
	free(c->spec);
	free(c->cri_config);
	c->spec = c->cri_config = NULL;
}

static void copy_string(json_object *o, const char *key, char *out, size_t len)
{
	json_object *v;

	snprintf(out, len, "%s",
		 json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "");
}

int containerd_container(const struct containerd *c, const char *id,
			 struct containerd_container *out, struct stasis_error **err)
{
	const char *info[] = {"containers", "info", id, NULL};
	_cleanup_free_ char *text = NULL;
	json_object *o = NULL, *spec;

	memset(out, 0, sizeof(*out));
	if (ctr(c, info, &text) == 0)
		o = json_tokener_parse(text);
	if (!o) {
		stasis_error_set(err, ENOENT, STASIS_DOMAIN_USAGE, 0,
				 "no container '%s' in containerd's namespace '%s'", id,
				 c->namespace);
		return stasis_error_hint(err, "'ctr -n %s containers ls' shows its containers",
					 c->namespace);
	}
	snprintf(out->id, sizeof(out->id), "%s", id);
	copy_string(o, "Image", out->image, sizeof(out->image));
	copy_string(o, "SnapshotKey", out->snapshot, sizeof(out->snapshot));
	copy_string(o, "Snapshotter", out->snapshotter, sizeof(out->snapshotter));
	runc_option(o, OPTION_ROOT, out->runc_root, sizeof(out->runc_root));
	if (!out->runc_root[0])
		snprintf(out->runc_root, sizeof(out->runc_root), SHIM_RUNC_ROOT "/%s",
			 c->namespace);
	if (json_object_object_get_ex(o, "Spec", &spec))
		out->spec = strdup(json_object_to_json_string_ext(
		    spec, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	out->cri_config = cri_config(o);
	json_object_put(o);
	task_of(c, id, out);
	return 0;
}

static int append(struct target_container **list, size_t *n, const char *namespace,
		  const struct containerd_container *cc)
{
	struct target_container *bigger = realloc(*list, (*n + 1) * sizeof(**list));
	struct target_container *t;

	if (!bigger)
		return -ENOMEM;
	*list = bigger;
	t = &bigger[(*n)++];
	memset(t, 0, sizeof(*t));
	t->runtime = "containerd";
	t->pid = cc->pid;
	snprintf(t->namespace, sizeof(t->namespace), "%s", namespace);
	snprintf(t->id, sizeof(t->id), "%s", cc->id);
	snprintf(t->status, sizeof(t->status), "%s", cc->status);
	snprintf(t->image, sizeof(t->image), "%s", cc->image);
	return 0;
}

/* Every container of c's namespace. */
static int list_namespace(const struct containerd *c, struct target_container **list, size_t *n)
{
	const char *ls[] = {"containers", "ls", "-q", NULL};
	_cleanup_free_ char *ids = NULL;
	char *save = NULL;
	int found = 0;

	if (ctr(c, ls, &ids) != 0 || !ids)
		return 0;
	for (char *id = strtok_r(ids, "\n", &save); id; id = strtok_r(NULL, "\n", &save)) {
		struct containerd_container cc;

		if (containerd_container(c, strip_trailing(id), &cc, NULL) < 0)
			continue;
		containerd_container_free(&cc);
		if (append(list, n, c->namespace, &cc) < 0)
			return -ENOMEM;
		found++;
	}
	return found;
}

int containerd_list(const struct containerd *c, struct target_container **list, size_t *n)
{
	const char *ls[] = {"namespaces", "ls", "-q", NULL};
	_cleanup_free_ char *names = NULL;
	char *save = NULL;
	int found = 0;

	if (ctr(c, ls, &names) != 0 || !names)
		return 0;
	for (char *ns = strtok_r(names, "\n", &save); ns; ns = strtok_r(NULL, "\n", &save)) {
		struct containerd in_ns = *c;
		int r;

		snprintf(in_ns.namespace, sizeof(in_ns.namespace), "%s", strip_trailing(ns));
		r = list_namespace(&in_ns, list, n);
		if (r < 0)
			return r;
		found += r;
	}
	return found;
}

void containerd_remove(const struct containerd *c, const char *id)
{
	const char *kill[] = {"tasks", "kill", "--signal", "SIGKILL", id, NULL};
	const char *del[] = {"tasks", "delete", "--force", id, NULL};
	const char *rm[] = {"containers", "delete", id, NULL};

	ctr(c, kill, NULL);
	ctr(c, del, NULL);
	ctr(c, rm, NULL);
}

int containerd_run(const struct containerd *c, const struct containerd_run *run,
		   struct stasis_error **err)
{
	const char *head[] = {"run", "--detach", "--null-io", "--runc-binary", run->runc_binary};
	_cleanup_free_ const char **args = NULL;
	_cleanup_free_ char *out = NULL;
	size_t n = 0, nargs = 0;

	while (run->args && run->args[nargs])
		nargs++;
	args = calloc(ARRAY_SIZE(head) + nargs + 8, sizeof(*args));
	if (!args)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < ARRAY_SIZE(head); i++)
		args[n++] = head[i];
	if (run->image) {
		if (run->snapshotter && *run->snapshotter) {
			args[n++] = "--snapshotter";
			args[n++] = run->snapshotter;
		}
		args[n++] = run->image;
		args[n++] = run->id;
		for (size_t i = 0; i < nargs; i++)
			args[n++] = run->args[i];
	} else {
		args[n++] = "--config";
		args[n++] = run->spec_file;
		args[n++] = run->id;
	}
	if (ctr(c, args, &out) == 0)
		return 0;
	return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
				"containerd could not start '%s' from the image: %s", run->id,
				out && *last_line(out) ? last_line(out) : "ctr run failed");
}

/* "REF TYPE DIGEST SIZE ..." lines of ctr images ls. */
int containerd_image_digest(const struct containerd *c, const char *ref, char *digest, size_t len,
			    struct stasis_error **err)
{
	const char *ls[] = {"images", "ls", NULL};
	_cleanup_free_ char *text = NULL;
	char *save = NULL;
	int r = ctr(c, ls, &text);

	if (r != 0 || !text)
		return stasis_error_set(err, EIO, STASIS_DOMAIN_USAGE, 0,
					"containerd did not list its images at %s", c->address);
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[512], type[256], sum[160];

		if (sscanf(line, "%511s %255s %159s", name, type, sum) == 3 &&
		    strcmp(name, ref) == 0) {
			snprintf(digest, len, "%s", sum);
			return 0;
		}
	}
	stasis_error_set(err, ENOENT, STASIS_DOMAIN_USAGE, 0,
			 "image '%s' is not in containerd's namespace '%s'", ref, c->namespace);
	return stasis_error_hint(err,
				 "pull or import it first (ctr -n %s images pull %s, or images "
				 "import); nothing was changed",
				 c->namespace, ref);
}

int containerd_snapshot_diff(const struct containerd *c, const char *snapshotter, const char *key,
			     int fd, struct stasis_error **err)
{
	const char *diff[] = {"snapshots",
			      "--snapshotter",
			      snapshotter,
			      "diff",
			      "--media-type",
			      "application/vnd.oci.image.layer.v1.tar",
			      key,
			      NULL};
	_cleanup_free_ char *out = NULL;
	int r = ctr_to(c, diff, fd, &out);

	if (r == 0)
		return 0;
	return stasis_error_set(
	    err, EIO, STASIS_DOMAIN_USAGE, 0, "containerd could not diff snapshot '%s' (%s): %s",
	    key, snapshotter,
	    out && *last_line(out) ? last_line(out) : "ctr snapshots diff failed");
}

/* ctr tasks pause / resume ID: its cgroup frozen or thawed, with
 * containerd knowing. */
static int task_freeze(const struct containerd *c, const char *verb, const char *id,
		       struct stasis_error **err)
{
	const char *args[] = {"tasks", verb, id, NULL};
	_cleanup_free_ char *out = NULL;
	int r = ctr(c, args, &out);

	if (r == 0)
		return 0;
	return stasis_error_set(
	    err, EIO, STASIS_DOMAIN_USAGE, 0, "ctr tasks %s %s failed: %s", verb, id,
	    out && *last_line(out) ? last_line(out) : "containerd did not answer");
}

int containerd_task_pause(const struct containerd *c, const char *id, struct stasis_error **err)
{
	return task_freeze(c, "pause", id, err);
}

int containerd_task_resume(const struct containerd *c, const char *id, struct stasis_error **err)
{
	return task_freeze(c, "resume", id, err);
}

int containerd_ids(const struct containerd *c, char **ids)
{
	const char *ls[] = {"containers", "ls", "-q", NULL};

	*ids = NULL;
	return ctr(c, ls, ids);
}
