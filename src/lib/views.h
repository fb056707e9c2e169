/* SPDX-License-Identifier: MIT */
/* inspect's views of an image, as checkpointctl names them: CRIU's dump
 * statistics, the process tree, each process's open files and sockets, and
 * the container's mounts. The library reads and shapes them; the CLI
 * prints. */
#ifndef STASIS_VIEWS_H
#define STASIS_VIEWS_H

#include <json-c/json.h>

#include "criu-images.h"
#include "manifest.h"

enum {
	VIEW_PS_TREE = 1 << 0,
	VIEW_FILES = 1 << 1,
	VIEW_SOCKETS = 1 << 2,
	VIEW_MOUNTS = 1 << 3,
	VIEW_STATS = 1 << 4,
};

/* One mount of a container's OCI spec. */
struct view_mount {
	char *destination, *type, *source;
};

struct image_views {
	unsigned int shown; /* VIEW_* */
	struct criu_dump_stats stats;
	struct criu_tree_view tree;
	size_t *by_ppid; /* indexes of tree.procs, sorted by parent */
	struct view_mount *mounts;
	size_t nmounts;
};

/* Reads what views asks of the image in dir, whose manifest is m: a view
 * that cannot be read fails the whole with an error that names its file. */
int views_read(const char *dir, const struct manifest *m, unsigned int views,
	       struct image_views *out, struct stasis_error **err);
void views_free(struct image_views *v);

/* The views as checkpointctl's JSON has them: "statistics",
 * "process_tree", "file_descriptors", "sockets", "mounts", added to root. */
void views_to_json(const struct image_views *v, json_object *root);

/* CRIU's statistics of the dump that made the image in dir, from CRIU's
 * work folder there: its CRIU folder, or runc's work folder where runc
 * dumped a container it held. 0 without them where there are none. */
int views_dump_stats(const char *dir, struct criu_dump_stats *out, struct stasis_error **err);

/* CRIU's statistics under CRIU's names ("freezing_time", ...). */
json_object *stats_criu_json(const struct criu_dump_stats *d, const struct criu_restore_stats *r);

/* The process of v's tree whose parent is not in it, the first such. */
const struct criu_process_view *views_root(const struct image_views *v);

/* The children of pid in v's tree: *n of them, v->tree.procs[v->by_ppid[i]]
 * for i from the index returned. */
size_t views_children(const struct image_views *v, pid_t pid, size_t *n);

#endif
