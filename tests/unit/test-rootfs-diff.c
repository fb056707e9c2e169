/* SPDX-License-Identifier: MIT */
/* The rootfs diff's apply: whiteouts and opaque folders delete the image's
 * files, every other member lands with its owner, mode, times, attributes
 * and link, long names in both PAX and GNU form, and nothing leads outside
 * the root (a link of the image or of the diff is never passed through, a
 * ".." inside a name is refused, an absolute name lands inside). Needs root
 * (chroot); the tars come from GNU tar, as Kubernetes' and containerd's
 * would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "error.h"
#include "rootfs-diff.h"
#include "util.h"

#define LONG_NAME                                                                                  \
	"a-folder-name-long-enough-that-ustar-cannot-hold-it-in-its-hundred-bytes/"                \
	"and-a-file-below-it-with-a-long-name-too.txt"

static char dir[] = "/tmp/stasis-test-rootfs-diff-XXXXXX";

static void sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	assert_int_equal(system(cmd), 0);
}

static void put(const char *rel, const char *text)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static char *get(const char *rel)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return read_file_str(path, NULL);
}

static bool exists(const char *rel)
{
	char path[4096];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return lstat(path, &st) == 0;
}

static void expect_text(const char *rel, const char *want)
{
	char *text = get(rel);

	assert_non_null(text);
	assert_string_equal(text, want);
	free(text);
}

/* The image's root: a few files the layer changes, deletes and empties. */
static void make_base(void)
{
	sh("rm -rf %s/root %s/layer %s/*.tar && mkdir -p %s/root/etc %s/root/data/sub %s/layer",
	   dir, dir, dir, dir, dir, dir);
	put("root/etc/motd", "old\n");
	put("root/etc/gone", "x\n");
	put("root/data/sub/a", "a\n");
	put("root/data/sub/b", "b\n");
	put("root/keep", "keep\n");
}

static int apply(const char *tar)
{
	char tar_path[4096], root[4096];
	struct stasis_error *err = NULL;
	int r;

	snprintf(tar_path, sizeof(tar_path), "%s/%s", dir, tar);
	snprintf(root, sizeof(root), "%s/root", dir);
	r = rootfs_diff_apply(tar_path, root, &err);
	if (err)
		print_message("rootfs_diff_apply: %s\n", err->message);
	stasis_error_free(err);
	return r;
}

static void changes_and_deletions(const char *format)
{
	char link[64] = "";

	make_base();
	sh("cd %s/layer && mkdir -p etc data/sub new $(dirname " LONG_NAME
	   ") && echo new >etc/motd && "
	   ": >etc/.wh.gone && : >data/sub/.wh..wh..opq && echo c >data/sub/c && "
	   "echo file >new/file && chmod 0640 new/file && ln new/file new/hard && "
	   "ln -s ../etc/motd new/link && echo long >" LONG_NAME " && "
	   "tar --format=%s --numeric-owner -cf ../%s.tar .",
	   dir, format, format);
	assert_int_equal(apply(strcmp(format, "gnu") == 0 ? "gnu.tar" : "pax.tar"), 0);
	expect_text("root/etc/motd", "new\n");
	assert_false(exists("root/etc/gone"));
	assert_false(exists("root/etc/.wh.gone"));
	assert_false(exists("root/data/sub/a"));
	assert_false(exists("root/data/sub/b"));
	assert_false(exists("root/data/sub/.wh..wh..opq"));
	expect_text("root/data/sub/c", "c\n");
	expect_text("root/keep", "keep\n");
	expect_text("root/" LONG_NAME, "long\n");
	{
		char path[4096], hard[4096];
		struct stat a, b;

		snprintf(path, sizeof(path), "%s/root/new/file", dir);
		snprintf(hard, sizeof(hard), "%s/root/new/hard", dir);
		assert_int_equal(stat(path, &a), 0);
		assert_int_equal(stat(hard, &b), 0);
		assert_int_equal(a.st_mode & 07777, 0640);
		assert_true(a.st_ino == b.st_ino);
		snprintf(path, sizeof(path), "%s/root/new/link", dir);
		assert_true(readlink(path, link, sizeof(link) - 1) > 0);
		assert_string_equal(link, "../etc/motd");
	}
}

static void pax_changes_and_deletions(void **state)
{
	changes_and_deletions("pax");
}

static void gnu_changes_and_deletions(void **state)
{
	changes_and_deletions("gnu");
}

/* A folder of the image replaced by a file, and a file by a folder. */
static void type_changes(void **state)
{
	make_base();
	sh("cd %s/layer && echo now-a-file >data && mkdir keep && echo in >keep/in && "
	   "tar --no-recursion -cf ../types.tar data keep keep/in",
	   dir);
	assert_int_equal(apply("types.tar"), 0);
	expect_text("root/data", "now-a-file\n");
	expect_text("root/keep/in", "in\n");
}

/* Each member's numeric owner, mode with its set-ID bits, modification
 * time and extended attributes; a read-only folder of the diff gets its
 * mode after the files in it. */
static void metadata(void **state)
{
	char path[4096], value[16] = "";
	struct stat st;

	make_base();
	sh("mkdir -p %s/layer/ro && echo s >%s/layer/ro/suid && chown 1234:5678 %s/layer/ro/suid "
	   "&& "
	   "chmod 4750 %s/layer/ro/suid && touch -d @1000000000 %s/layer/ro/suid",
	   dir, dir, dir, dir, dir);
	snprintf(path, sizeof(path), "%s/layer/ro/suid", dir);
	assert_int_equal(setxattr(path, "user.stasis", "yes", 3, 0), 0);
	sh("chmod 0555 %s/layer/ro && touch -d @1100000000 %s/layer/ro && cd %s/layer && "
	   "tar --format=pax --xattrs --xattrs-include='user.*' --numeric-owner -cf ../meta.tar ro",
	   dir, dir, dir);
	assert_int_equal(apply("meta.tar"), 0);
	snprintf(path, sizeof(path), "%s/root/ro/suid", dir);
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_uid, 1234);
	assert_int_equal(st.st_gid, 5678);
	assert_int_equal(st.st_mode & 07777, 04750);
	assert_int_equal(st.st_mtime, 1000000000);
	assert_int_equal(st.st_atime, 1000000000);
	assert_int_equal(getxattr(path, "user.stasis", value, sizeof(value) - 1), 3);
	assert_string_equal(value, "yes");
	snprintf(path, sizeof(path), "%s/root/ro", dir);
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0555);
	assert_int_equal(st.st_mtime, 1100000000);
}

/* A member that leads through the image's absolute link to "/" is
 * refused; one named "../../x" ends inside the root. */
static void stays_inside_root(void **state)
{
	char name[64], host[128], rel[128];

	snprintf(name, sizeof(name), "stasis-escape-%d", (int)getpid());
	snprintf(host, sizeof(host), "/%s", name);
	snprintf(rel, sizeof(rel), "root/%s", name);
	make_base();
	sh("ln -s / %s/root/esc && mkdir -p %s/layer/esc && echo out >%s/layer/esc/%s && "
	   "cd %s/layer && tar -cf ../esc.tar esc/%s && "
	   "tar -P -cf ../dots.tar --transform='s,^esc/,../../,' esc/%s",
	   dir, dir, dir, name, dir, name, name);
	assert_true(apply("esc.tar") < 0);
	assert_int_equal(access(host, F_OK), -1);
	assert_false(exists(rel));
	assert_int_equal(apply("dots.tar"), 0);
	assert_int_equal(access(host, F_OK), -1);
	expect_text(rel, "out\n");
}

/* apply(tar) fails, its message naming want. */
static void expect_refused(const char *tar, const char *want)
{
	char tar_path[4096], root[4096];
	struct stasis_error *err = NULL;

	snprintf(tar_path, sizeof(tar_path), "%s/%s", dir, tar);
	snprintf(root, sizeof(root), "%s/root", dir);
	assert_true(rootfs_diff_apply(tar_path, root, &err) < 0);
	assert_non_null(err);
	if (!strstr(err->message, want))
		fail_msg("\"%s\" lacks \"%s\"", err->message, want);
	stasis_error_free(err);
}

/* Hostile diffs: a symbolic link of the diff to "/" then a file and a
 * hard link through it, and a ".." inside a name, are refused; an
 * absolute name lands inside the root. Nothing reaches the host. */
static void hostile_members(void **state)
{
	char name[64], host[128], rel[128];

	snprintf(name, sizeof(name), "stasis-hostile-%d", (int)getpid());
	snprintf(host, sizeof(host), "/%s", name);
	snprintf(rel, sizeof(rel), "root/%s", name);
	make_base();
	sh("cd %s/layer && ln -s / out && mkdir d && echo evil >d/%s && ln -s ../../.. up && "
	   "echo x >d/x && ln d/x d/hard && "
	   "tar -cf ../through.tar --transform='s,^d/,out/,' out d/%s && "
	   "tar --no-recursion -cf ../hard.tar --transform='flags=h;s,^d/x$,up/etc/motd,' up d d/x "
	   "d/hard && "
	   "tar -P -cf ../inner-dots.tar --transform='s,^d/,new/../../,' d/%s && "
	   "tar -P -cf ../absolute.tar --transform='s,^d/,/,' d/%s",
	   dir, name, name, name, name);
	expect_refused("through.tar", "symlink");
	assert_int_equal(access(host, F_OK), -1);
	assert_false(exists(rel));
	expect_refused("hard.tar", "symlink");
	expect_text("root/etc/motd", "old\n");
	expect_refused("inner-dots.tar", "'..'");
	assert_int_equal(access(host, F_OK), -1);
	assert_false(exists(rel));
	assert_int_equal(apply("absolute.tar"), 0);
	assert_int_equal(access(host, F_OK), -1);
	expect_text(rel, "evil\n");
}

static void cut_short(void **state)
{
	make_base();
	sh("cd %s/layer && head -c 100000 /dev/zero >big && tar -cf ../full.tar big && "
	   "head -c 5000 ../full.tar >../cut.tar",
	   dir);
	assert_true(apply("cut.tar") < 0);
	assert_int_equal(apply("missing.tar"), -ENOENT);
}

/* A device node in the diff is refused, and the error names it whole
 * (a shadowed length once cut it to "/: unknown"). */
static void refuses_device_nodes(void **state)
{
	struct stasis_error *err = NULL;
	char tar[4096], root[4096];

	make_base();
	sh("cd %s/layer && mkdir -p dev && mknod dev/sda-copy b 8 0 && chmod 666 dev/sda-copy && "
	   "tar -cf ../dev.tar dev/sda-copy",
	   dir);
	snprintf(tar, sizeof(tar), "%s/dev.tar", dir);
	snprintf(root, sizeof(root), "%s/root", dir);
	assert_true(rootfs_diff_apply(tar, root, &err) < 0);
	assert_non_null(err);
	assert_non_null(strstr(err->message, "/dev/sda-copy: a device node"));
	assert_false(exists("root/dev/sda-copy"));
	stasis_error_free(err);
}

static int setup(void **state)
{
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(pax_changes_and_deletions),
	    cmocka_unit_test(gnu_changes_and_deletions),
	    cmocka_unit_test(type_changes),
	    cmocka_unit_test(metadata),
	    cmocka_unit_test(stays_inside_root),
	    cmocka_unit_test(hostile_members),
	    cmocka_unit_test(cut_short),
	    cmocka_unit_test(refuses_device_nodes),
	};

	if (geteuid() != 0) {
		printf("test-rootfs-diff: needs root (chroot); skipped\n");
		return 0;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
