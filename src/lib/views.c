/* SPDX-License-Identifier: MIT */
#include "views.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* How deep the JSON process tree goes: a chain of processes deeper than
 * this in an image is cut there. */
#define VIEW_MAX_DEPTH 256

static int mounts_read(const struct manifest *m, struct image_views *v, struct stasis_error **err)
{
	json_object *spec, *mounts;
	size_t n;

	if (!m->container.spec)
		return 0;
	spec = json_tokener_parse(m->container.spec);
	if (!spec)
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_IMAGE, 0,
					"the manifest's OCI spec is not JSON");
	if (!json_object_object_get_ex(spec, "mounts", &mounts) ||
	    !json_object_is_type(mounts, json_type_array)) {
		json_object_put(spec);
		return 0;
	}
	n = json_object_array_length(mounts);
	v->mounts = calloc(n ? n : 1, sizeof(*v->mounts));
	if (!v->mounts) {
		json_object_put(spec);
		return stasis_error_errno(err, ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		json_object *mount = json_object_array_get_idx(mounts, i), *field;
		struct view_mount *vm = &v->mounts[v->nmounts++];
		const char *text[3] = {"", "", ""};
		static const char *const keys[3] = {"destination", "type", "source"};

		for (int k = 0; k < 3; k++)
			if (json_object_object_get_ex(mount, keys[k], &field) &&
			    json_object_is_type(field, json_type_string))
				text[k] = json_object_get_string(field);
		vm->destination = strdup(text[0]);
		vm->type = strdup(text[1]);
		vm->source = strdup(text[2]);
		if (!vm->destination || !vm->type || !vm->source) {
			json_object_put(spec);
			return stasis_error_errno(err, ENOMEM, "out of memory");
		}
	}
	json_object_put(spec);
	return 0;
}

static int compare_ppid(const void *a, const void *b, void *tree)
{
	const struct criu_tree_view *t = tree;
	pid_t x = t->procs[*(const size_t *)a].ppid;
	pid_t y = t->procs[*(const size_t *)b].ppid;

	return x < y ? -1 : x > y;
}

/* The index of the tree's processes by parent, for their children. */
static int index_children(struct image_views *v, struct stasis_error **err)
{
	v->by_ppid = calloc(v->tree.nprocs ? v->tree.nprocs : 1, sizeof(*v->by_ppid));
	if (!v->by_ppid)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < v->tree.nprocs; i++)
		v->by_ppid[i] = i;
	qsort_r(v->by_ppid, v->tree.nprocs, sizeof(*v->by_ppid), compare_ppid, &v->tree);
	return 0;
}

size_t views_children(const struct image_views *v, pid_t pid, size_t *n)
{
	size_t lo = 0, hi = v->tree.nprocs, end;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (v->tree.procs[v->by_ppid[mid]].ppid < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (end = lo; end < v->tree.nprocs && v->tree.procs[v->by_ppid[end]].ppid == pid; end++)
		;
	*n = end - lo;
	return lo;
}

int views_dump_stats(const char *dir, struct criu_dump_stats *out, struct stasis_error **err)
{
	static const char *const work[] = {IMAGE_CRIU_SUBDIR, "runc"};
	char path[PATH_MAX];
	int r = 0;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; r == 0 && i < sizeof(work) / sizeof(work[0]) && !out->present; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, work[i]);
		if (i > 0 && access(path, F_OK) != 0)
			break; /* no runc work folder */
		r = criu_stats_read_dump(path, out, err);
	}
	return r;
}

int views_read(const char *dir, const struct manifest *m, unsigned int views,
	       struct image_views *out, struct stasis_error **err)
{
	char criu[PATH_MAX];
	unsigned int what = 0;
	int r = 0;

	memset(out, 0, sizeof(*out));
	out->shown = views;
	snprintf(criu, sizeof(criu), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	if (views & VIEW_STATS)
		r = views_dump_stats(dir, &out->stats, err);
	if (views & VIEW_FILES)
		what |= CRIU_VIEW_FILES;
	if (views & VIEW_SOCKETS)
		what |= CRIU_VIEW_SOCKETS;
	if (r >= 0 && (views & (VIEW_PS_TREE | VIEW_FILES | VIEW_SOCKETS)))
		r = criu_view_read(criu, what, &out->tree, err);
	if (r >= 0)
		r = index_children(out, err);
	if (r >= 0 && (views & VIEW_MOUNTS))
		r = mounts_read(m, out, err);
	if (r < 0) {
		views_free(out);
		return r;
	}
	return 0;
}

void views_free(struct image_views *v)
{
	if (!v)
		return;
	criu_view_free(&v->tree);
	free(v->by_ppid);
	for (size_t i = 0; i < v->nmounts; i++) {
		free(v->mounts[i].destination);
		free(v->mounts[i].type);
		free(v->mounts[i].source);
	}
	free(v->mounts);
	memset(v, 0, sizeof(*v));
}

static bool in_tree(const struct criu_tree_view *t, pid_t pid)
{
	for (size_t i = 0; i < t->nprocs; i++)
		if (t->procs[i].pid == pid)
			return true;
	return false;
}

const struct criu_process_view *views_root(const struct image_views *v)
{
	/* CRIU writes the root first; its parent is outside the tree. */
	if (v->tree.nprocs && !in_tree(&v->tree, v->tree.procs[0].ppid))
		return &v->tree.procs[0];
	return NULL;
}

static json_object *ps_node(const struct image_views *v, const struct criu_process_view *p,
			    int depth)
{
	json_object *o = json_object_new_object(), *children = json_object_new_array();
	size_t n, first = views_children(v, p->pid, &n);

	json_object_object_add(o, "pid", json_object_new_int(p->pid));
	json_object_object_add(o, "command", json_object_new_string(p->comm));
	json_object_object_add(o, "task_state", json_object_new_string(p->task_state));
	for (size_t i = first; depth < VIEW_MAX_DEPTH && i < first + n; i++) {
		const struct criu_process_view *c = &v->tree.procs[v->by_ppid[i]];

		if (c != p)
			json_object_array_add(children, ps_node(v, c, depth + 1));
	}
	if (json_object_array_length(children))
		json_object_object_add(o, "children", children);
	else
		json_object_put(children);
	return o;
}

static void add_ps_tree(const struct image_views *v, json_object *root)
{
	const struct criu_process_view *top = views_root(v);

	if (top)
		json_object_object_add(root, "process_tree", ps_node(v, top, 0));
}

static void add_files(const struct image_views *v, json_object *root)
{
	json_object *all = json_object_new_array();

	for (size_t i = 0; i < v->tree.nprocs; i++) {
		const struct criu_process_view *p = &v->tree.procs[i];
		json_object *o = json_object_new_object(), *files = json_object_new_array();

		json_object_object_add(o, "pid", json_object_new_int(p->pid));
		for (size_t j = 0; j < p->nfiles; j++) {
			json_object *f = json_object_new_object();

			json_object_object_add(f, "type", json_object_new_string(p->files[j].type));
			json_object_object_add(f, "fd", json_object_new_string(p->files[j].fd));
			json_object_object_add(f, "path", json_object_new_string(p->files[j].path));
			json_object_array_add(files, f);
		}
		json_object_object_add(o, "open_files", files);
		json_object_array_add(all, o);
	}
	json_object_object_add(root, "file_descriptors", all);
}

static void add_sockets(const struct image_views *v, json_object *root)
{
	json_object *all = json_object_new_array();

	for (size_t i = 0; i < v->tree.nprocs; i++) {
		const struct criu_process_view *p = &v->tree.procs[i];
		json_object *o, *sockets;

		if (!p->nsockets)
			continue;
		o = json_object_new_object();
		sockets = json_object_new_array();
		json_object_object_add(o, "pid", json_object_new_int(p->pid));
		for (size_t j = 0; j < p->nsockets; j++) {
			const struct criu_socket_view *s = &p->sockets[j];
			json_object *node = json_object_new_object(),
				    *data = json_object_new_object();
			bool unix_sk = !strcmp(s->family, "UNIX");

			json_object_object_add(node, "fd", json_object_new_int(s->fd));
			json_object_object_add(node, "fd_type", json_object_new_string(s->fd_type));
			json_object_object_add(
			    node, "protocol",
			    json_object_new_string(unix_sk ? "UNIX" : s->protocol));
			json_object_object_add(data, "type",
					       json_object_new_string(unix_sk ? "UNIX" : s->type));
			if (unix_sk) {
				json_object_object_add(data, "socket_type",
						       json_object_new_string(s->type));
				json_object_object_add(data, "address",
						       json_object_new_string(s->src));
			}
			json_object_object_add(data, "state", json_object_new_string(s->state));
			if (!unix_sk && s->src) {
				json_object_object_add(data, "src", json_object_new_string(s->src));
				json_object_object_add(data, "src_port",
						       json_object_new_int((int)s->src_port));
				json_object_object_add(data, "dst", json_object_new_string(s->dst));
				json_object_object_add(data, "dst_port",
						       json_object_new_int((int)s->dst_port));
			}
			json_object_object_add(data, "send_buf",
					       json_object_new_uint64(s->send_buf));
			json_object_object_add(data, "recv_buf",
					       json_object_new_uint64(s->recv_buf));
			json_object_object_add(node, "data", data);
			json_object_array_add(sockets, node);
		}
		json_object_object_add(o, "open_sockets", sockets);
		json_object_array_add(all, o);
	}
	json_object_object_add(root, "sockets", all);
}

static void add_mounts(const struct image_views *v, json_object *root)
{
	json_object *all = json_object_new_array();

	for (size_t i = 0; i < v->nmounts; i++) {
		json_object *o = json_object_new_object();

		json_object_object_add(o, "destination",
				       json_object_new_string(v->mounts[i].destination));
		json_object_object_add(o, "type", json_object_new_string(v->mounts[i].type));
		json_object_object_add(o, "source", json_object_new_string(v->mounts[i].source));
		json_object_array_add(all, o);
	}
	json_object_object_add(root, "mounts", all);
}

void views_to_json(const struct image_views *v, json_object *root)
{
	if ((v->shown & VIEW_STATS) && v->stats.present)
		json_object_object_add(root, "statistics", stats_criu_json(&v->stats, NULL));
	if (v->shown & VIEW_PS_TREE)
		add_ps_tree(v, root);
	if (v->shown & VIEW_FILES)
		add_files(v, root);
	if (v->shown & VIEW_SOCKETS)
		add_sockets(v, root);
	if (v->shown & VIEW_MOUNTS)
		add_mounts(v, root);
}
