/* SPDX-License-Identifier: MIT */
/* Mount tables through libmount (mounts.h). libmount reads a table whole
 * before anyone looks at it: no mount point is matched half read. */
#include "mounts.h"

#include <errno.h>
#include <libmount.h>
#include <string.h>

#include "util.h"

static void tablep(struct libmnt_table **tb)
{
	mnt_unref_table(*tb);
}

static void iterp(struct libmnt_iter **it)
{
	mnt_free_iter(*it);
}

/* libmount skips a line it cannot parse; stasis takes the whole table for
 * unreadable then, as a mount point on that line could be the one asked
 * about. */
static int refuse_line(struct libmnt_table *tb, const char *filename, int line)
{
	bool *bad = mnt_table_get_userdata(tb);

	*bad = true;
	return -EINVAL;
}

/* Each entry is a mountinfo line: libmount guesses the format from the
 * first line, and would read another format's lines too. */
static bool all_mountinfo(struct libmnt_table *tb, struct libmnt_iter *it)
{
	struct libmnt_fs *fs;

	mnt_reset_iter(it, MNT_ITER_FORWARD);
	while (mnt_table_next_fs(tb, it, &fs) == 0)
		if (!mnt_fs_is_kernel(fs) || !mnt_fs_get_target(fs) || !mnt_fs_get_fstype(fs))
			return false;
	mnt_reset_iter(it, MNT_ITER_FORWARD);
	return true;
}

static int read_table(const char *table, struct libmnt_table *tb, struct libmnt_iter *it,
		      struct stasis_error **err)
{
	bool bad = false;
	int r;

	mnt_table_set_userdata(tb, &bad);
	mnt_table_set_parser_errcb(tb, refuse_line);
	r = mnt_table_parse_file(tb, table);
	mnt_table_set_userdata(tb, NULL);
	if (r < 0 && !bad)
		return stasis_error_errno(err, -r, "reading the mount table %s: %s", table,
					  strerror(-r));
	if (bad || !all_mountinfo(tb, it))
		return stasis_error_errno(err, EINVAL, "%s has a line that is no mountinfo line",
					  table);
	return 0;
}

int mounts_each(const char *table, int (*fn)(const struct mount_entry *m, void *ctx), void *ctx,
		struct stasis_error **err)
{
	_cleanup_(tablep) struct libmnt_table *tb = mnt_new_table();
	_cleanup_(iterp) struct libmnt_iter *it = mnt_new_iter(MNT_ITER_FORWARD);
	struct libmnt_fs *fs;
	int r;

	if (!tb || !it)
		return stasis_error_errno(err, ENOMEM, "reading the mount table %s: %s", table,
					  strerror(ENOMEM));
	r = read_table(table, tb, it, err);
	while (r == 0 && mnt_table_next_fs(tb, it, &fs) == 0) {
		struct mount_entry m = {
		    .id = mnt_fs_get_id(fs),
		    .point = mnt_fs_get_target(fs),
		    .type = mnt_fs_get_fstype(fs),
		};

		r = fn(&m, ctx);
	}
	return r;
}

struct fuse_search {
	const char *path;
	size_t len;
};

/* fuse, fuse.NAME (sshfs's), fuseblk: a type that begins with "fuse". */
static int fuse_at_or_above(const struct mount_entry *m, void *ctx)
{
	const struct fuse_search *s = ctx;
	size_t n = strlen(m->point);

	if (strncmp(m->type, "fuse", 4) != 0)
		return 0;
	return strcmp(m->point, "/") == 0 || (n <= s->len && memcmp(s->path, m->point, n) == 0 &&
					      (n == s->len || s->path[n] == '/'));
}

bool mounts_fuse_covers(const char *table, const char *path, size_t len)
{
	struct fuse_search s = {.path = path, .len = len};

	return mounts_each(table, fuse_at_or_above, &s, NULL) != 0;
}
