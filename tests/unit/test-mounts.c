/* SPDX-License-Identifier: MIT */
/* Mount tables read through libmount: mount points with escaped spaces,
 * tabs, newlines and backslashes come back unescaped, a line longer than
 * any buffer the hand-written reader had is read whole, and a table that
 * cannot be read or understood counts as a FUSE mount on every path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mounts.h"
#include "util.h"

static char dir[64];
static char table[128];

/* The fields before and after a mount point, as the kernel writes them. */
#define ROOT_LINE "21 1 0:20 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
#define LINE(id, point, type) #id " 21 0:30 / " point " rw,nosuid - " type " src rw\n"

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/stasis-test-mounts-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(table, sizeof(table), "%s/mountinfo", dir);
	return 0;
}

static int teardown(void **state)
{
	unlink(table);
	return rmdir(dir);
}

static void write_table(const char *text)
{
	FILE *f = fopen(table, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

struct seen {
	char points[8][64];
	char types[8][32];
	int ids[8];
	size_t n;
};

static int remember(const struct mount_entry *m, void *ctx)
{
	struct seen *s = ctx;

	assert_true(s->n < 8);
	snprintf(s->points[s->n], sizeof(s->points[0]), "%s", m->point);
	snprintf(s->types[s->n], sizeof(s->types[0]), "%s", m->type);
	s->ids[s->n++] = m->id;
	return 0;
}

static void escaped_points_unescaped(void **state)
{
	static const char text[] =
	    ROOT_LINE LINE(30, "/mnt/a\\040b", "tmpfs") LINE(31, "/mnt/t\\011ab", "tmpfs")
		LINE(32, "/mnt/new\\012line", "fuse.sshfs") LINE(33, "/mnt/back\\134slash", "fuse");
	struct seen s = {0};

	write_table(text);
	assert_int_equal(mounts_each(table, remember, &s, NULL), 0);
	assert_int_equal(s.n, 5);
	assert_string_equal(s.points[0], "/");
	assert_string_equal(s.types[0], "ext4");
	assert_int_equal(s.ids[0], 21);
	assert_string_equal(s.points[1], "/mnt/a b");
	assert_int_equal(s.ids[1], 30);
	assert_string_equal(s.points[2], "/mnt/t\tab");
	assert_string_equal(s.points[3], "/mnt/new\nline");
	assert_string_equal(s.types[3], "fuse.sshfs");
	assert_string_equal(s.points[4], "/mnt/back\\slash");
}

static int longest_point(const struct mount_entry *m, void *ctx)
{
	size_t *longest = ctx;

	if (strlen(m->point) > *longest)
		*longest = strlen(m->point);
	return 0;
}

/* A mount point of 4,000 characters, each a space written "\040": a line
 * of over 16 KiB, four times the reader's old line buffer. */
static void long_line_read_whole(void **state)
{
	enum { SPACES = 4000 };
	_cleanup_free_ char *text = malloc(SPACES * 4 + 512);
	_cleanup_free_ char *path = malloc(SPACES + 16);
	size_t longest = 0;
	char *p = text;

	assert_non_null(text);
	assert_non_null(path);
	p += sprintf(p, "%s40 21 0:40 / /", ROOT_LINE);
	for (int i = 0; i < SPACES; i++)
		p += sprintf(p, "\\040");
	sprintf(p, " rw - fuse.sshfs u@h: rw\n" LINE(41, "/after", "tmpfs"));
	write_table(text);
	assert_int_equal(mounts_each(table, longest_point, &longest, NULL), 0);
	assert_int_equal(longest, SPACES + 1);

	path[0] = '/';
	memset(path + 1, ' ', SPACES);
	strcpy(path + 1 + SPACES, "/file");
	assert_true(mounts_fuse_covers(table, path, strlen(path)));
	assert_false(mounts_fuse_covers(table, "/after/file", strlen("/after/file")));
	assert_false(mounts_fuse_covers(table, "/ ", 2));
}

static bool covers(const char *path)
{
	return mounts_fuse_covers(table, path, strlen(path));
}

static void fuse_at_or_above(void **state)
{
	write_table(ROOT_LINE LINE(30, "/mnt/a\\040b", "fuse.sshfs") LINE(31, "/srv", "tmpfs")
			LINE(32, "/blk", "fuseblk"));
	assert_true(covers("/mnt/a b"));
	assert_true(covers("/mnt/a b/c/d"));
	assert_true(covers("/blk/x"));
	assert_false(covers("/mnt/a bc"));
	assert_false(covers("/mnt/a"));
	assert_false(covers("/mnt/a\\040b/c"));
	assert_false(covers("/srv/x"));
	/* Only len bytes of path count. */
	assert_true(mounts_fuse_covers(table, "/mnt/a b/c", strlen("/mnt/a b")));
	assert_false(mounts_fuse_covers(table, "/mnt/a bc", strlen("/mnt/a b") + 1));

	write_table(LINE(30, "/", "fuse") LINE(31, "/srv", "tmpfs"));
	assert_true(covers("/srv/x"));
}

static int stop_at_second(const struct mount_entry *m, void *ctx)
{
	int *calls = ctx;

	return ++*calls == 2 ? 7 : 0;
}

static void answer_stops(void **state)
{
	int calls = 0;

	write_table(ROOT_LINE LINE(30, "/a", "tmpfs") LINE(31, "/b", "tmpfs"));
	assert_int_equal(mounts_each(table, stop_at_second, &calls, NULL), 7);
	assert_int_equal(calls, 2);
}

static int never(const struct mount_entry *m, void *ctx)
{
	fail_msg("called for %s of a table refused", m->point);
	return 0;
}

/* A table stasis cannot read or understand: an error, and a FUSE mount
 * as far as a caller that must not stat there is concerned. */
static void bad_tables_refused(void **state)
{
	static const char *const bad[] = {
	    ROOT_LINE "30 21 0:30 / /mnt/x rw no-separator tmpfs src rw\n" LINE(31, "/b", "tmpfs"),
	    ROOT_LINE LINE(31, "/b", "tmpfs") "garbage\n",
	    "/dev/sda1 / ext4 rw 0 0\n", /* /proc/mounts' format, not mountinfo's */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct stasis_error *err = NULL;

		write_table(bad[i]);
		assert_int_equal(mounts_each(table, never, NULL, &err), -EINVAL);
		assert_non_null(err);
		assert_non_null(strstr(err->message, "no mountinfo line"));
		stasis_error_free(err);
		assert_true(covers("/b/c"));
	}
	unlink(table);
	assert_int_equal(mounts_each(table, never, NULL, NULL), -ENOENT);
	assert_true(covers("/b/c"));
}

static void empty_table_has_nothing(void **state)
{
	write_table("");
	assert_int_equal(mounts_each(table, never, NULL, NULL), 0);
	assert_false(covers("/b/c"));
}

static int count(const struct mount_entry *m, void *ctx)
{
	bool *root = ctx;

	if (strcmp(m->point, "/") == 0)
		*root = true;
	return 0;
}

static void own_table_read(void **state)
{
	bool root = false;

	assert_int_equal(mounts_each("/proc/self/mountinfo", count, &root, NULL), 0);
	assert_true(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(escaped_points_unescaped, setup, teardown),
	    cmocka_unit_test_setup_teardown(long_line_read_whole, setup, teardown),
	    cmocka_unit_test_setup_teardown(fuse_at_or_above, setup, teardown),
	    cmocka_unit_test_setup_teardown(answer_stops, setup, teardown),
	    cmocka_unit_test_setup_teardown(bad_tables_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(empty_table_has_nothing, setup, teardown),
	    cmocka_unit_test(own_table_read),
	};

	return cmocka_run_group_tests_name("mounts", tests, NULL, NULL);
}
