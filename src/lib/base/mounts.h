/* SPDX-License-Identifier: MIT */
/* Mount tables (/proc/PID/mountinfo), read by libmount: whole lines however
 * long, and mount points unescaped (the kernel writes a space, a tab, a
 * newline and a backslash in them as "\040", "\011", "\012", "\134"). */
#ifndef STASIS_MOUNTS_H
#define STASIS_MOUNTS_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

struct mount_entry {
	int id;
	const char *point; /* unescaped */
	const char *type;  /* "tmpfs", "fuse.sshfs" */
};

/* fn(mount, ctx) for each mount of table, a mountinfo file, in its order,
 * until fn returns non-zero, which is returned (fn answers > 0 to stop, so
 * that its answer is not taken for an error). A table that cannot be read,
 * or with a line that is not a mountinfo line, is an error: -errno, *err
 * set, and fn called for none of it. */
int mounts_each(const char *table, int (*fn)(const struct mount_entry *m, void *ctx), void *ctx,
		struct stasis_error **err);

/* Whether a FUSE mount of table is at path (len bytes, absolute, as the
 * table's points are) or at one of its folders; true where the table
 * cannot be read or understood, for a caller that must not stat there. */
bool mounts_fuse_covers(const char *table, const char *path, size_t len);

#endif
