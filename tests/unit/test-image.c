/* SPDX-License-Identifier: MIT */
/* Image checksums: the follower that hashes pages images while they are
 * written must give what hashing the finished files gives, and the
 * verification must catch a changed pages file; a big file read ahead by
 * several threads hashes as one read gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image-hash.h"
#include "image-stage.h"
#include "image.h"

#define MIB (1u << 20)

static char dir[] = "/tmp/stasis-test-image-XXXXXX";

/* Appends (O_APPEND) or writes len bytes made from seed to dir/sub/name. */
static void write_file(const char *sub, const char *name, unsigned int seed, size_t len, int flags)
{
	char path[4096];
	char *buf = malloc(len);
	int fd;

	for (size_t i = 0; i < len; i++)
		buf[i] = (char)((i * 2654435761u) >> 13 ^ seed);
	snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
	fd = open(path, O_WRONLY | O_CREAT | flags, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
	free(buf);
}

static void write_chunk(const char *name, unsigned int seed, size_t len, int flags)
{
	write_file("criu", name, seed, len, flags);
}

static const char *hash_of(const struct manifest *m, const char *name)
{
	for (size_t i = 0; i < m->nfiles; i++)
		if (strcmp(m->files[i].name, name) == 0)
			return m->files[i].xxh128;
	return "";
}

static void pages_names(void **state)
{
	(void)state;
	assert_true(image_is_pages_file("criu/pages-1.img"));
	assert_true(image_is_pages_file("pages-12.img"));
	assert_false(image_is_pages_file("criu/pagemap-1.img"));
	assert_false(image_is_pages_file("criu/pages-.img"));
	assert_false(image_is_pages_file("criu/core-1.img"));
}

static void part_names(void **state)
{
	size_t base;
	unsigned k;

	(void)state;
	assert_true(image_stage_part("pages-1.img.part-12", &base, &k));
	assert_int_equal(base, strlen("pages-1.img"));
	assert_int_equal(k, 12);
	assert_false(image_stage_part("pages-1.img", &base, &k));
	assert_false(image_stage_part("pages-1.img.part-0", &base, &k));
	assert_false(image_stage_part("pages-1.img.part-", &base, &k));
	assert_false(image_stage_part("pages-1.img.part-2x", &base, &k));
	assert_false(image_stage_part(".part-1", &base, &k));
}

/* Commits stage (dir/SUB) into dir/out-SUB; the commit's result. */
static int commit_stage(const char *sub, struct manifest *m, struct stasis_error **err)
{
	char stage[4096], out[4096];
	struct image_stager *s = NULL;
	int r;

	snprintf(stage, sizeof(stage), "%s/%s", dir, sub);
	snprintf(out, sizeof(out), "%s/out-%s", dir, sub);
	assert_true(image_prepare(out, err) >= 0);
	assert_int_equal(image_stage_start(stage, out, &s, err), 0);
	r = image_stage_commit(s, m, err);
	image_stage_free(s);
	return r;
}

/* A pages image CRIU wrote in parts is committed as one file, its parts
 * appended in order, and listed once; its sum is the whole file's. */
static void commit_appends_parts(void **state)
{
	struct stasis_error *err = NULL;
	struct manifest m, whole;
	char path[4096], *want, *got;
	size_t len = 0;
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "%s/stage", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	/* Part 2 first: the directory's order is not the parts'. */
	write_file("stage", "pages-1.img.part-2", 3, 5, O_TRUNC);
	write_file("stage", "pages-1.img", 1, MIB + 3, O_TRUNC);
	write_file("stage", "pages-1.img.part-1", 2, 2 * MIB, O_TRUNC);
	write_file("stage", "core-1.img", 4, 4096, O_TRUNC);
	/* A second file in parts: each file gets its own. */
	write_file("stage", "pages-2.img.part-1", 5, 4096, O_TRUNC);
	write_file("stage", "pages-2.img", 6, 8192, O_TRUNC);
	manifest_init(&m);
	assert_int_equal(commit_stage("stage", &m, &err), 0);
	assert_int_equal(m.nfiles, 3);
	snprintf(path, sizeof(path), "%s/out-stage/criu/pages-2.img", dir);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	assert_int_equal(ftell(f), 3 * 4096);
	fclose(f);
	/* What the parts make: the same three writes into one file. */
	write_chunk("pages-1.img", 1, MIB + 3, O_TRUNC);
	write_chunk("pages-1.img", 2, 2 * MIB, O_APPEND);
	write_chunk("pages-1.img", 3, 5, O_APPEND);
	snprintf(path, sizeof(path), "%s/criu/pages-1.img", dir);
	f = fopen(path, "r");
	assert_non_null(f);
	want = malloc(3 * MIB + 8);
	len = fread(want, 1, 3 * MIB + 8, f);
	fclose(f);
	assert_int_equal(len, 3 * MIB + 8);
	snprintf(path, sizeof(path), "%s/out-stage/criu/pages-1.img", dir);
	f = fopen(path, "r");
	assert_non_null(f);
	got = malloc(3 * MIB + 9);
	assert_int_equal(fread(got, 1, 3 * MIB + 9, f), len);
	fclose(f);
	assert_memory_equal(got, want, len);
	snprintf(path, sizeof(path), "%s/out-stage/criu/pages-1.img.part-1", dir);
	assert_int_equal(access(path, F_OK), -1);
	manifest_init(&whole);
	snprintf(path, sizeof(path), "%s/out-stage", dir);
	assert_int_equal(image_checksum(path, &whole, NULL, &err), 0);
	assert_string_equal(hash_of(&m, "criu/pages-1.img"), hash_of(&whole, "criu/pages-1.img"));
	manifest_free(&whole);
	manifest_free(&m);
	free(want);
	free(got);
}

/* A gap in a file's parts, or a part without its file: the commit fails
 * and names it. */
static void commit_refuses_missing_parts(void **state)
{
	const char *cases[][2] = {{"gap", "pages-1.img.part-3"}, {"orphan", "pages-2.img.part-1"}};
	char path[4096];

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		struct stasis_error *err = NULL;
		struct manifest m;

		snprintf(path, sizeof(path), "%s/%s", dir, cases[i][0]);
		assert_int_equal(mkdir(path, 0700), 0);
		write_file(cases[i][0], "pages-1.img", 1, 4096, O_TRUNC);
		write_file(cases[i][0], "pages-1.img.part-1", 2, 4096, O_TRUNC);
		write_file(cases[i][0], cases[i][1], 3, 4096, O_TRUNC);
		manifest_init(&m);
		assert_true(commit_stage(cases[i][0], &m, &err) < 0);
		assert_non_null(strstr(err->message, "incomplete"));
		assert_non_null(strstr(err->message, i ? cases[i][1] : "pages-1.img"));
		stasis_error_free(err);
		manifest_free(&m);
	}
}

/* Written while followed, in pieces, one file replaced on the way: the
 * sums are those of the finished files. */
static void follower_matches_whole_files(void **state)
{
	struct image_follower *f = NULL;
	struct stasis_error *err = NULL;
	struct manifest followed, whole;

	(void)state;
	assert_true(image_prepare(dir, &err) >= 0);
	assert_int_equal(image_follow_start(dir, &f, &err), 0);
	for (unsigned int i = 0; i < 24; i++) {
		write_chunk("pages-1.img", i, MIB + i, O_APPEND);
		if (i == 8)
			write_chunk("pages-2.img", 99, 3 * MIB, O_APPEND);
		usleep(2000);
	}
	/* Replaced after the follower has read it: hashed whole instead. */
	unlink(strcat(strcpy((char[4096]){0}, dir), "/criu/pages-2.img"));
	write_chunk("pages-2.img", 7, 2 * MIB, O_TRUNC);
	write_chunk("core-1.img", 3, 4096, O_TRUNC);
	manifest_init(&followed);
	manifest_init(&whole);
	assert_int_equal(image_checksum(dir, &followed, f, &err), 0);
	image_follow_free(f);
	assert_int_equal(image_checksum(dir, &whole, NULL, &err), 0);
	assert_int_equal(followed.nfiles, 3);
	assert_int_equal(followed.image_bytes, whole.image_bytes);
	for (size_t i = 0; i < whole.nfiles; i++)
		assert_string_equal(hash_of(&followed, whole.files[i].name), whole.files[i].xxh128);
	manifest_free(&followed);
	manifest_free(&whole);
}

/* A byte changed in a pages file shows when the verification is awaited. */
static void verifier_catches_changed_pages(void **state)
{
	struct stasis_error *err = NULL;
	struct image_verifier *v = NULL;
	struct manifest m, opened;

	(void)state;
	manifest_init(&m);
	manifest_add_process(&m)->pid = 7;
	write_chunk("inventory.img", 1, 16, O_TRUNC);
	assert_int_equal(image_checksum(dir, &m, NULL, &err), 0);
	assert_int_equal(image_write_manifest(dir, &m, &err), 0);
	manifest_init(&opened);
	assert_int_equal(image_open(dir, &opened, &err), 0);
	manifest_free(&opened);
	write_chunk("pages-1.img", 5, 1, O_APPEND);
	manifest_init(&opened);
	assert_int_equal(image_open_begin(dir, NULL, &opened, &v, &err), 0);
	assert_int_equal(image_verify_wait(v, &err), -EBADMSG);
	assert_non_null(strstr(err->message, "pages-1.img does not match its checksum"));
	image_verifier_free(v);
	stasis_error_free(err);
	manifest_free(&opened);
	manifest_free(&m);
}

/* Read ahead by several threads, a big file hashes as it does in one go,
 * whether it ends on a chunk or not; a cancel stops it. */
static void ahead_matches_one_pass(void **state)
{
	const size_t sizes[] = {HASH_AHEAD_MIN + 123, 8 * HASH_CHUNK, HASH_AHEAD_MIN - 1};
	char *buf = malloc(HASH_CHUNK);
	atomic_bool cancel = true;

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char path[4096];
		XXH3_state_t *st = XXH3_createState();
		uint64_t offset = 0;
		char *all = malloc(sizes[i]);
		int fd;

		write_chunk("ahead.img", (unsigned int)i, sizes[i], O_TRUNC);
		snprintf(path, sizeof(path), "%s/criu/ahead.img", dir);
		fd = open(path, O_RDONLY);
		assert_int_equal(read(fd, all, sizes[i]), (ssize_t)sizes[i]);
		XXH3_128bits_reset(st);
		assert_int_equal(hash_file_ahead(fd, st, buf, &offset, NULL), 0);
		assert_int_equal(offset, sizes[i]);
		assert_true(XXH128_isEqual(XXH3_128bits_digest(st), XXH3_128bits(all, sizes[i])));
		offset = 0;
		assert_int_equal(hash_file_ahead(fd, st, buf, &offset, &cancel), -ECANCELED);
		close(fd);
		unlink(path);
		free(all);
		XXH3_freeState(st);
	}
	free(buf);
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[4200];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(pages_names),
	    cmocka_unit_test(follower_matches_whole_files),
	    cmocka_unit_test(verifier_catches_changed_pages),
	    cmocka_unit_test(ahead_matches_one_pass),
	    cmocka_unit_test(part_names),
	    cmocka_unit_test(commit_appends_parts),
	    cmocka_unit_test(commit_refuses_missing_parts),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
