/* SPDX-License-Identifier: MIT */
#include "manifest.h"

#include <ctype.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

void manifest_init(struct manifest *m)
{
	memset(m, 0, sizeof(*m));
	m->format_version = MANIFEST_FORMAT_VERSION;
}

void manifest_free(struct manifest *m)
{
	if (!m)
		return;
	free(m->stasis_version);
	free(m->created);
	free(m->hostname);
	free(m->kernel);
	free(m->nvidia_driver);
	free(m->container.runtime);
	free(m->container.id);
	free(m->container.bundle);
	free(m->container.spec);
	free(m->container.namespace);
	free(m->container.image);
	free(m->container.image_digest);
	free(m->container.snapshotter);
	free(m->container.cri_config);
	for (size_t i = 0; i < m->nprocs; i++)
		free(m->procs[i].cmdline);
	free(m->procs);
	free(m->gpus);
	free(m->phases);
	for (size_t i = 0; i < m->nfiles; i++)
		free(m->files[i].name);
	free(m->files);
	memset(m, 0, sizeof(*m));
}

/* Grow an array by one zeroed element; NULL when out of memory. */
static void *grow(void **array, size_t *count, size_t size)
{
	char *bigger = realloc(*array, (*count + 1) * size);

	if (!bigger)
		return NULL;
	*array = bigger;
	memset(bigger + *count * size, 0, size);
	return bigger + (*count)++ * size;
}

int manifest_add_phase(struct manifest *m, const char *name, uint64_t usec)
{
	struct manifest_phase *p;

	for (size_t i = 0; i < m->nphases; i++) {
		if (strcmp(m->phases[i].name, name) == 0) {
			m->phases[i].usec = usec;
			return 0;
		}
	}
	p = grow((void **)&m->phases, &m->nphases, sizeof(*p));
	if (!p)
		return -ENOMEM;
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->usec = usec;
	return 0;
}

static const struct manifest_phase *find_phase(const struct manifest *m, const char *name)
{
	for (size_t i = 0; i < m->nphases; i++)
		if (strcmp(m->phases[i].name, name) == 0)
			return &m->phases[i];
	return NULL;
}

uint64_t manifest_phase_usec(const struct manifest *m, const char *name)
{
	const struct manifest_phase *p = find_phase(m, name);

	return p ? p->usec : 0;
}

bool manifest_has_phase(const struct manifest *m, const char *name)
{
	return find_phase(m, name) != NULL;
}

struct manifest_process *manifest_add_process(struct manifest *m)
{
	return grow((void **)&m->procs, &m->nprocs, sizeof(struct manifest_process));
}

struct manifest_gpu *manifest_add_gpu(struct manifest *m)
{
	return grow((void **)&m->gpus, &m->ngpus, sizeof(struct manifest_gpu));
}

struct manifest_file *manifest_add_file(struct manifest *m)
{
	return grow((void **)&m->files, &m->nfiles, sizeof(struct manifest_file));
}

size_t manifest_cuda_count(const struct manifest *m)
{
	size_t n = 0;

	for (size_t i = 0; i < m->nprocs; i++)
		n += m->procs[i].cuda;
	return n;
}

bool manifest_creds_equal(const struct manifest_creds *a, const struct manifest_creds *b)
{
	return a->uid == b->uid && a->euid == b->euid && a->suid == b->suid &&
	       a->fsuid == b->fsuid && a->gid == b->gid && a->egid == b->egid &&
	       a->sgid == b->sgid && a->fsgid == b->fsgid;
}

const char *manifest_creds_format(const struct manifest_creds *c, char *buf, size_t len)
{
	if (!c->known)
		snprintf(buf, len, "-");
	else if (c->uid == c->euid && c->uid == c->suid && c->uid == c->fsuid &&
		 c->gid == c->egid && c->gid == c->sgid && c->gid == c->fsgid)
		snprintf(buf, len, "%u:%u", c->uid, c->gid);
	else
		snprintf(buf, len, "%u,%u,%u,%u:%u,%u,%u,%u", c->uid, c->euid, c->suid, c->fsuid,
			 c->gid, c->egid, c->sgid, c->fsgid);
	return buf;
}

const struct manifest_process *manifest_root(const struct manifest *m)
{
	for (size_t i = 0; i < m->nprocs; i++) {
		bool parent_inside = false;

		for (size_t j = 0; j < m->nprocs; j++)
			if (m->procs[j].pid == m->procs[i].ppid)
				parent_inside = true;
		if (!parent_inside)
			return &m->procs[i];
	}
	return NULL;
}

/* ---- encoding ---- */

static void add_str(json_object *o, const char *key, const char *value)
{
	if (value)
		json_object_object_add(o, key, json_object_new_string(value));
}

static void add_u64(json_object *o, const char *key, uint64_t value)
{
	json_object_object_add(o, key, json_object_new_uint64(value));
}

/* A manifest_creds's IDs by their names in the manifest. */
static const struct {
	const char *name;
	size_t offset;
} creds_fields[] = {
    {"uid", offsetof(struct manifest_creds, uid)},
    {"euid", offsetof(struct manifest_creds, euid)},
    {"suid", offsetof(struct manifest_creds, suid)},
    {"fsuid", offsetof(struct manifest_creds, fsuid)},
    {"gid", offsetof(struct manifest_creds, gid)},
    {"egid", offsetof(struct manifest_creds, egid)},
    {"sgid", offsetof(struct manifest_creds, sgid)},
    {"fsgid", offsetof(struct manifest_creds, fsgid)},
};

static json_object *creds_to_json(const struct manifest_creds *c)
{
	json_object *o = json_object_new_object();

	for (size_t i = 0; i < ARRAY_SIZE(creds_fields); i++)
		add_u64(o, creds_fields[i].name,
			*(const uint32_t *)((const char *)c + creds_fields[i].offset));
	return o;
}

static json_object *process_to_json(const struct manifest *m, const struct manifest_process *p)
{
	json_object *o = json_object_new_object();
	json_object *gpus = json_object_new_array();

	json_object_object_add(o, "pid", json_object_new_int(p->pid));
	json_object_object_add(o, "ppid", json_object_new_int(p->ppid));
	add_str(o, "comm", p->comm);
	add_str(o, "cmdline", p->cmdline ? p->cmdline : "");
	json_object_object_add(o, "cuda", json_object_new_boolean(p->cuda));
	add_u64(o, "gpu_bytes", p->gpu_bytes);
	for (size_t i = 0; i < p->ngpus; i++)
		if (p->gpus[i] >= 0 && (size_t)p->gpus[i] < m->ngpus)
			json_object_array_add(gpus,
					      json_object_new_string(m->gpus[p->gpus[i]].uuid));
	json_object_object_add(o, "gpus", gpus);
	if (p->cuda) {
		add_u64(o, "lock_us", p->lock_us);
		add_u64(o, "checkpoint_us", p->checkpoint_us);
	}
	if (p->ns_pid)
		json_object_object_add(o, "ns_pid", json_object_new_int(p->ns_pid));
	if (p->device_files)
		json_object_object_add(o, "device_files",
				       json_object_new_int((int)p->device_files));
	if (p->device_maps)
		json_object_object_add(o, "device_maps", json_object_new_int((int)p->device_maps));
	if (p->cuda && p->restore_us) {
		add_u64(o, "restore_us", p->restore_us);
		add_u64(o, "unlock_us", p->unlock_us);
	}
	if (p->zombie)
		json_object_object_add(o, "zombie", json_object_new_boolean(true));
	if (p->creds.known)
		json_object_object_add(o, "creds", creds_to_json(&p->creds));
	return o;
}

static json_object *gpu_to_json(const struct manifest_gpu *g)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "index", json_object_new_int(g->index));
	add_str(o, "uuid", g->uuid);
	add_str(o, "name", g->name);
	add_str(o, "chip", g->chip);
	add_u64(o, "memory_total", g->memory_total);
	json_object_object_add(o, "minor", json_object_new_int(g->minor));
	return o;
}

static json_object *container_to_json(const struct manifest_container *c)
{
	json_object *o = json_object_new_object();
	json_object *spec = c->spec ? json_tokener_parse(c->spec) : NULL;

	add_str(o, "runtime", c->runtime);
	add_str(o, "id", c->id);
	add_str(o, "bundle", c->bundle);
	add_str(o, "namespace", c->namespace);
	add_str(o, "image", c->image);
	add_str(o, "image_digest", c->image_digest);
	add_str(o, "snapshotter", c->snapshotter);
	json_object_object_add(o, "spec", spec ? spec : json_object_new_object());
	if (c->cri_config) {
		json_object *cri = json_tokener_parse(c->cri_config);

		if (cri)
			json_object_object_add(o, "cri_config", cri);
	}
	return o;
}

char *manifest_to_json(const struct manifest *m, bool pretty)
{
	json_object *root = json_object_new_object();
	json_object *opts = json_object_new_object();
	json_object *procs = json_object_new_array();
	json_object *gpus = json_object_new_array();
	json_object *phases = json_object_new_object();
	json_object *files = json_object_new_array();
	char *text;

	json_object_object_add(root, "format_version", json_object_new_int(m->format_version));
	add_str(root, "stasis_version", m->stasis_version);
	add_str(root, "created", m->created);
	add_str(root, "hostname", m->hostname);
	add_str(root, "kernel", m->kernel);
	json_object_object_add(root, "criu_version", json_object_new_int(m->criu_version));
	json_object_object_add(root, "cuda_driver_version",
			       json_object_new_int(m->cuda_driver_version));
	add_str(root, "nvidia_driver", m->nvidia_driver);

	json_object_object_add(opts, "leave_running",
			       json_object_new_boolean(m->options.leave_running));
	json_object_object_add(opts, "shell_job", json_object_new_boolean(m->options.shell_job));
	json_object_object_add(opts, "tcp_established",
			       json_object_new_boolean(m->options.tcp_established));
	json_object_object_add(opts, "ext_unix_sk",
			       json_object_new_boolean(m->options.ext_unix_sk));
	json_object_object_add(opts, "compress", json_object_new_boolean(m->options.compress));
	json_object_object_add(opts, "staged", json_object_new_boolean(m->options.staged));
	json_object_object_add(opts, "link_remap", json_object_new_boolean(m->options.link_remap));
	if (m->options.link_remap_dir[0])
		json_object_object_add(opts, "link_remap_dir",
				       json_object_new_string(m->options.link_remap_dir));
	json_object_object_add(root, "options", opts);
	if (m->container.runtime)
		json_object_object_add(root, "container", container_to_json(&m->container));

	for (size_t i = 0; i < m->nprocs; i++)
		json_object_array_add(procs, process_to_json(m, &m->procs[i]));
	json_object_object_add(root, "processes", procs);
	for (size_t i = 0; i < m->ngpus; i++)
		json_object_array_add(gpus, gpu_to_json(&m->gpus[i]));
	json_object_object_add(root, "gpus", gpus);
	for (size_t i = 0; i < m->nphases; i++)
		add_u64(phases, m->phases[i].name, m->phases[i].usec);
	json_object_object_add(root, "phases_us", phases);

	for (size_t i = 0; i < m->nfiles; i++) {
		json_object *f = json_object_new_object();

		add_str(f, "name", m->files[i].name);
		add_u64(f, "size", m->files[i].size);
		add_str(f, "xxh128", m->files[i].xxh128);
		if (m->files[i].unpacked_size)
			add_u64(f, "unpacked_size", m->files[i].unpacked_size);
		json_object_array_add(files, f);
	}
	json_object_object_add(root, "files", files);
	add_u64(root, "image_bytes", m->image_bytes);

	text = strdup(json_object_to_json_string_ext(
	    root,
	    (pretty ? JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED : JSON_C_TO_STRING_PLAIN) |
		JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(root);
	return text;
}

/* ---- decoding ---- */

static int corrupt(struct stasis_error **err, const char *what)
{
	return stasis_error_set(err, EINVAL, STASIS_DOMAIN_IMAGE, 0, "corrupt manifest: %s", what);
}

static json_object *field(json_object *o, const char *key, json_type type)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, type))
		return NULL;
	return v;
}

static char *dup_field(json_object *o, const char *key)
{
	json_object *v = field(o, key, json_type_string);

	return v ? strdup(json_object_get_string(v)) : NULL;
}

static bool get_u64(json_object *o, const char *key, uint64_t *out)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return false;
	*out = json_object_get_uint64(v);
	return true;
}

static bool get_bool(json_object *o, const char *key)
{
	json_object *v = field(o, key, json_type_boolean);

	return v && json_object_get_boolean(v);
}

static int gpu_index_by_uuid(const struct manifest *m, const char *uuid)
{
	for (size_t i = 0; i < m->ngpus; i++)
		if (strcmp(m->gpus[i].uuid, uuid) == 0)
			return (int)i;
	return -1;
}

static int decode_gpus(json_object *root, struct manifest *m, struct stasis_error **err)
{
	json_object *arr = field(root, "gpus", json_type_array);

	if (!arr)
		return 0; /* CPU-only images may omit it */
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *o = json_object_array_get_idx(arr, i);
		json_object *uuid = field(o, "uuid", json_type_string);
		json_object *v;
		struct manifest_gpu *g;

		if (!uuid)
			return corrupt(err, "a GPU without uuid");
		g = manifest_add_gpu(m);
		if (!g)
			return stasis_error_errno(err, ENOMEM, "out of memory");
		snprintf(g->uuid, sizeof(g->uuid), "%s", json_object_get_string(uuid));
		if ((v = field(o, "name", json_type_string)))
			snprintf(g->name, sizeof(g->name), "%s", json_object_get_string(v));
		if ((v = field(o, "chip", json_type_string)))
			snprintf(g->chip, sizeof(g->chip), "%s", json_object_get_string(v));
		if ((v = field(o, "index", json_type_int)))
			g->index = json_object_get_int(v);
		get_u64(o, "memory_total", &g->memory_total);
		g->minor = (v = field(o, "minor", json_type_int)) ? json_object_get_int(v) : -1;
	}
	return 0;
}

/* Every ID there, each a number that fits 32 bits; the whole object
 * missing leaves c unknown. */
static int decode_creds(json_object *o, struct manifest_creds *c, struct stasis_error **err)
{
	json_object *creds, *v;

	if (!json_object_object_get_ex(o, "creds", &creds))
		return 0;
	if (!json_object_is_type(creds, json_type_object))
		return corrupt(err, "a process's creds are not an object");
	for (size_t i = 0; i < ARRAY_SIZE(creds_fields); i++) {
		int64_t id;

		v = field(creds, creds_fields[i].name, json_type_int);
		id = v ? json_object_get_int64(v) : -1;
		if (id < 0 || id > UINT32_MAX)
			return corrupt(err, "a process's creds lack a valid ID");
		*(uint32_t *)((char *)c + creds_fields[i].offset) = (uint32_t)id;
	}
	c->known = true;
	return 0;
}

static int decode_process(json_object *o, struct manifest *m, struct stasis_error **err)
{
	json_object *pid = field(o, "pid", json_type_int);
	json_object *ppid = field(o, "ppid", json_type_int);
	json_object *comm = field(o, "comm", json_type_string);
	json_object *gpus = field(o, "gpus", json_type_array);
	struct manifest_process *p;
	json_object *v;

	pid_t ns_pid = (v = field(o, "ns_pid", json_type_int)) ? json_object_get_int(v) : 0;

	/* 0: a process of a PID namespace that its checkpoint's preflight did
	 * not see; its PID on the host is not known. */
	if (!pid || !ppid || json_object_get_int(pid) < 0 ||
	    (json_object_get_int(pid) == 0 && ns_pid <= 0))
		return corrupt(err, "a process without a valid pid");
	p = manifest_add_process(m);
	if (!p)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	p->pid = json_object_get_int(pid);
	p->ns_pid = ns_pid;
	p->ppid = json_object_get_int(ppid);
	if (comm)
		snprintf(p->comm, sizeof(p->comm), "%s", json_object_get_string(comm));
	p->cmdline = dup_field(o, "cmdline");
	p->cuda = get_bool(o, "cuda");
	get_u64(o, "gpu_bytes", &p->gpu_bytes);
	get_u64(o, "lock_us", &p->lock_us);
	get_u64(o, "checkpoint_us", &p->checkpoint_us);
	get_u64(o, "restore_us", &p->restore_us);
	get_u64(o, "unlock_us", &p->unlock_us);
	if ((v = field(o, "device_files", json_type_int)))
		p->device_files = (unsigned int)json_object_get_int(v);
	if ((v = field(o, "device_maps", json_type_int)))
		p->device_maps = (unsigned int)json_object_get_int(v);
	p->zombie = get_bool(o, "zombie");
	if (decode_creds(o, &p->creds, err) < 0)
		return -EINVAL;
	for (size_t i = 0; gpus && i < json_object_array_length(gpus); i++) {
		const char *uuid = json_object_get_string(json_object_array_get_idx(gpus, i));
		int idx = uuid ? gpu_index_by_uuid(m, uuid) : -1;

		if (idx < 0)
			return corrupt(err, "a process uses a GPU the manifest does not list");
		if (p->ngpus < MANIFEST_MAX_PROCESS_GPUS)
			p->gpus[p->ngpus++] = idx;
	}
	return 0;
}

static int decode_container(json_object *root, struct manifest *m, struct stasis_error **err)
{
	json_object *c = field(root, "container", json_type_object), *spec;

	if (!c)
		return 0;
	m->container.runtime = dup_field(c, "runtime");
	m->container.id = dup_field(c, "id");
	m->container.bundle = dup_field(c, "bundle");
	m->container.namespace = dup_field(c, "namespace");
	m->container.image = dup_field(c, "image");
	m->container.image_digest = dup_field(c, "image_digest");
	m->container.snapshotter = dup_field(c, "snapshotter");
	if (!m->container.runtime || !m->container.id)
		return corrupt(err, "a container without runtime or id");
	spec = field(c, "spec", json_type_object);
	if (spec)
		m->container.spec = strdup(json_object_to_json_string_ext(
		    spec, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	spec = field(c, "cri_config", json_type_object);
	if (spec)
		m->container.cri_config = strdup(json_object_to_json_string_ext(
		    spec, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	return 0;
}

bool manifest_file_name_ok(const char *name)
{
	const char *base = name + strlen(IMAGE_CRIU_SUBDIR "/");

	if (strncmp(name, IMAGE_CRIU_SUBDIR "/", strlen(IMAGE_CRIU_SUBDIR "/")) != 0 ||
	    !isalnum((unsigned char)base[0]) || strlen(base) > 255)
		return false;
	for (const char *c = base; *c; c++)
		if (!isalnum((unsigned char)*c) && !strchr("._+-", *c))
			return false;
	return true;
}

static bool hex_ok(const char *s, size_t len)
{
	if (strlen(s) != len)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isxdigit((unsigned char)s[i]))
			return false;
	return true;
}

static int decode_files(json_object *root, struct manifest *m, struct stasis_error **err)
{
	json_object *arr = field(root, "files", json_type_array);

	if (!arr)
		return corrupt(err, "no file list");
	if (json_object_array_length(arr) > MANIFEST_MAX_FILES)
		return corrupt(err, "more files than an image has");
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *o = json_object_array_get_idx(arr, i);
		json_object *name = field(o, "name", json_type_string);
		json_object *hash = field(o, "xxh128", json_type_string);
		struct manifest_file *f;

		if (!name || !hash || !hex_ok(json_object_get_string(hash), 32) ||
		    !manifest_file_name_ok(json_object_get_string(name)))
			return corrupt(err, "a file entry without a valid name or checksum");
		f = manifest_add_file(m);
		if (!f)
			return stasis_error_errno(err, ENOMEM, "out of memory");
		f->name = strdup(json_object_get_string(name));
		snprintf(f->xxh128, sizeof(f->xxh128), "%s", json_object_get_string(hash));
		if (!get_u64(o, "size", &f->size))
			return corrupt(err, "a file entry without a size");
		get_u64(o, "unpacked_size", &f->unpacked_size);
	}
	return 0;
}

int manifest_check_complete(const struct manifest *m, struct stasis_error **err)
{
	/* Without its inventory CRIU has nothing to restore: a list without it
	 * is not an image's, however it verifies. */
	for (size_t i = 0; i < m->nfiles; i++)
		if (strcmp(m->files[i].name, IMAGE_CRIU_SUBDIR "/inventory.img") == 0)
			return 0;
	corrupt(err, "its file list has no CRIU inventory (criu/inventory.img)");
	return stasis_error_hint(err, "the image is damaged, or not stasis's");
}

static int decode(json_object *root, struct manifest *m, struct stasis_error **err)
{
	json_object *v, *procs, *opts, *phases;
	int r;

	if (!json_object_is_type(root, json_type_object))
		return corrupt(err, "not a JSON object");
	v = field(root, "format_version", json_type_int);
	if (!v)
		return corrupt(err, "no format_version");
	m->format_version = json_object_get_int(v);
	if (m->format_version > MANIFEST_FORMAT_VERSION) {
		stasis_error_set(err, EPROTONOSUPPORT, STASIS_DOMAIN_IMAGE, m->format_version,
				 "image format version %d is newer than this stasis reads (%d)",
				 m->format_version, MANIFEST_FORMAT_VERSION);
		return stasis_error_hint(err, "restore it with a newer stasis");
	}
	if (m->format_version < 1)
		return corrupt(err, "invalid format_version");
	m->stasis_version = dup_field(root, "stasis_version");
	m->created = dup_field(root, "created");
	m->hostname = dup_field(root, "hostname");
	m->kernel = dup_field(root, "kernel");
	m->nvidia_driver = dup_field(root, "nvidia_driver");
	if ((v = field(root, "criu_version", json_type_int)))
		m->criu_version = json_object_get_int(v);
	if ((v = field(root, "cuda_driver_version", json_type_int)))
		m->cuda_driver_version = json_object_get_int(v);
	if ((opts = field(root, "options", json_type_object))) {
		m->options.leave_running = get_bool(opts, "leave_running");
		m->options.shell_job = get_bool(opts, "shell_job");
		m->options.tcp_established = get_bool(opts, "tcp_established");
		m->options.ext_unix_sk = get_bool(opts, "ext_unix_sk");
		m->options.compress = get_bool(opts, "compress");
		m->options.staged = get_bool(opts, "staged");
		m->options.link_remap = get_bool(opts, "link_remap");
		if ((v = field(opts, "link_remap_dir", json_type_string)))
			snprintf(m->options.link_remap_dir, sizeof(m->options.link_remap_dir), "%s",
				 json_object_get_string(v));
	}
	r = decode_gpus(root, m, err);
	if (r < 0)
		return r;
	r = decode_container(root, m, err);
	if (r < 0)
		return r;
	procs = field(root, "processes", json_type_array);
	if (!procs || json_object_array_length(procs) == 0)
		return corrupt(err, "no processes");
	if (json_object_array_length(procs) > MANIFEST_MAX_PROCESSES)
		return corrupt(err, "more processes than stasis checkpoints");
	for (size_t i = 0; i < json_object_array_length(procs); i++) {
		r = decode_process(json_object_array_get_idx(procs, i), m, err);
		if (r < 0)
			return r;
	}
	if (!manifest_root(m))
		return corrupt(err, "the process tree has no root");
	if ((phases = field(root, "phases_us", json_type_object))) {
		if (json_object_object_length(phases) > MANIFEST_MAX_PHASES)
			return corrupt(err, "more phases than stasis records");
		json_object_object_foreach (phases, key, val) {
			if (json_object_is_type(val, json_type_int))
				manifest_add_phase(m, key, json_object_get_uint64(val));
		}
	}
	r = decode_files(root, m, err);
	if (r < 0)
		return r;
	get_u64(root, "image_bytes", &m->image_bytes);
	return 0;
}

int manifest_from_json(const char *text, struct manifest *m, struct stasis_error **err)
{
	json_tokener *tok = json_tokener_new();
	json_object *root;
	int r;

	if (!tok)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	root = json_tokener_parse_ex(tok, text, (int)strlen(text));
	if (!root || json_tokener_get_error(tok) != json_tokener_success) {
		r = corrupt(err, json_tokener_error_desc(json_tokener_get_error(tok)));
		json_tokener_free(tok);
		json_object_put(root);
		return r;
	}
	json_tokener_free(tok);
	r = decode(root, m, err);
	json_object_put(root);
	return r;
}

int manifest_write(const char *dir, const struct manifest *m, struct stasis_error **err)
{
	_cleanup_free_ char *text = manifest_to_json(m, true);
	int r;

	if (!text)
		return stasis_error_errno(err, ENOMEM, "out of memory encoding the manifest");
	r = write_file_atomic(dir, MANIFEST_NAME, text, strlen(text));
	if (r < 0)
		return stasis_error_errno(err, -r, "writing %s/%s: %s", dir, MANIFEST_NAME,
					  strerror(-r));
	return 0;
}

/* The manifest's text: a regular file of the image folder, not followed,
 * and no bigger than a manifest gets (a FIFO, a device or /dev/zero
 * planted there must neither hang nor fill memory). */
int manifest_read_text(const char *dir, char **out, struct stasis_error **err)
{
	char path[4096];
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *text = NULL;
	struct stat st;
	size_t got = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, MANIFEST_NAME);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		stasis_error_set(err, ENOENT, STASIS_DOMAIN_IMAGE, 0,
				 "%s has no %s: not a stasis image, or an incomplete one", dir,
				 MANIFEST_NAME);
		return stasis_error_hint(err, "checkpoint again into an empty directory");
	}
	if (fd < 0 || fstat(fd, &st) < 0)
		return stasis_error_errno(err, errno, "reading %s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode) || st.st_size > MANIFEST_MAX_BYTES) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_IMAGE, 0, "%s is %s", path,
				 S_ISREG(st.st_mode) ? "bigger than a manifest gets"
						     : "not a regular file");
		return stasis_error_hint(err, "the image is damaged, or not stasis's");
	}
	text = malloc((size_t)st.st_size + 1);
	while (text && got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (!text || got != (size_t)st.st_size)
		return stasis_error_errno(err, text ? EIO : ENOMEM, "reading %s: %s", path,
					  text ? "it changed while it was read" : "out of memory");
	text[got] = '\0';
	if (memchr(text, '\0', got))
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_IMAGE, 0, "%s is not text",
					path);
	*out = TAKE_PTR(text);
	return 0;
}

int manifest_read(const char *dir, struct manifest *m, struct stasis_error **err)
{
	char path[4096];
	_cleanup_free_ char *text = NULL;
	int r;

	r = manifest_read_text(dir, &text, err);
	if (r < 0)
		return r;
	snprintf(path, sizeof(path), "%s/%s", dir, MANIFEST_NAME);
	r = manifest_from_json(text, m, err);
	if (r < 0)
		return stasis_error_wrap(err, "%s", path);
	return 0;
}
