/* SPDX-License-Identifier: MIT */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "manifest.h"
#include "util.h"

static void fill(struct manifest *m)
{
	struct manifest_process *p;
	struct manifest_gpu *g;
	struct manifest_file *f;

	manifest_init(m);
	m->stasis_version = strdup("0.1.0");
	m->created = strdup("2026-11-22T00:00:00Z");
	m->hostname = strdup("host");
	m->kernel = strdup("6.18");
	m->criu_version = 40101;
	m->cuda_driver_version = 13000;
	m->options.leave_running = true;
	m->options.link_remap = true;
	strcpy(m->options.link_remap_dir, "stasis-remap-AbC123");
	g = manifest_add_gpu(m);
	g->index = 0;
	strcpy(g->uuid, "GPU-11111111-1111-1111-1111-111111111111");
	strcpy(g->name, "NVIDIA H100");
	strcpy(g->chip, "Hopper");
	g->memory_total = 80ull << 30;
	p = manifest_add_process(m);
	p->pid = 100;
	p->ppid = 1;
	strcpy(p->comm, "parent");
	p->cmdline = strdup("parent --flag \"quoted\"");
	p->cuda = true;
	p->gpu_bytes = 4ull << 30;
	p->ngpus = 1;
	p->gpus[0] = 0;
	p->restore_us = 77;
	p->unlock_us = 3;
	p = manifest_add_process(m);
	p->pid = 101;
	p->ppid = 100;
	strcpy(p->comm, "child");
	p->cmdline = strdup("child");
	manifest_add_phase(m, "criu_dump", 1234);
	manifest_add_phase(m, "criu_dump", 2345); /* replaces */
	f = manifest_add_file(m);
	f->name = strdup("criu/pages-1.img");
	f->size = 4096;
	strcpy(f->xxh128, "0123456789abcdef0123456789abcdef");
	m->image_bytes = 4096;
	m->container.runtime = strdup("containerd");
	m->container.id = strdup("web");
	m->container.namespace = strdup("k8s.io");
	m->container.image = strdup("docker.io/library/busybox:1");
	m->container.image_digest = strdup("sha256:c0e1");
	m->container.snapshotter = strdup("overlayfs");
	m->container.cri_config =
	    strdup("{\"metadata\":{\"name\":\"counter\"},\"labels\":{\"app\":\"x\"}}");
	m->container.spec = strdup("{\"root\":{\"path\":\"rootfs\"}}");
}

static void roundtrip(void **state)
{
	struct manifest a, b;
	struct stasis_error *err = NULL;
	char *text;

	(void)state;
	fill(&a);
	text = manifest_to_json(&a, true);
	manifest_init(&b);
	assert_int_equal(manifest_from_json(text, &b, &err), 0);
	assert_null(err);
	assert_int_equal(b.nprocs, 2);
	assert_int_equal(b.procs[0].pid, 100);
	assert_string_equal(b.procs[0].cmdline, "parent --flag \"quoted\"");
	assert_true(b.procs[0].cuda);
	assert_int_equal(b.procs[0].gpu_bytes, 4ull << 30);
	assert_int_equal(b.procs[0].ngpus, 1);
	assert_int_equal(b.procs[0].restore_us, 77);
	assert_int_equal(b.procs[0].unlock_us, 3);
	assert_string_equal(b.gpus[b.procs[0].gpus[0]].chip, "Hopper");
	assert_int_equal(b.criu_version, 40101);
	assert_true(b.options.leave_running);
	assert_true(b.options.link_remap);
	assert_string_equal(b.options.link_remap_dir, "stasis-remap-AbC123");
	assert_int_equal(b.nphases, 1);
	assert_int_equal(manifest_phase_usec(&b, "criu_dump"), 2345);
	assert_int_equal(b.nfiles, 1);
	assert_string_equal(b.files[0].xxh128, "0123456789abcdef0123456789abcdef");
	assert_int_equal(manifest_root(&b)->pid, 100);
	assert_string_equal(b.container.image, "docker.io/library/busybox:1");
	assert_string_equal(b.container.image_digest, "sha256:c0e1");
	assert_string_equal(b.container.snapshotter, "overlayfs");
	assert_string_equal(b.container.cri_config,
			    "{\"metadata\":{\"name\":\"counter\"},\"labels\":{\"app\":\"x\"}}");
	assert_string_equal(b.container.namespace, "k8s.io");
	free(text);
	manifest_free(&a);
	manifest_free(&b);
}

static void expect_rejected(const char *json, const char *needle, int status)
{
	struct manifest m;
	struct stasis_error *err = NULL;

	manifest_init(&m);
	assert_true(manifest_from_json(json, &m, &err) < 0);
	assert_non_null(err);
	assert_int_equal(err->status, status);
	if (!strstr(err->message, needle))
		fail_msg("'%s' does not mention '%s'", err->message, needle);
	stasis_error_free(err);
	manifest_free(&m);
}

static void rejects_bad_manifests(void **state)
{
	(void)state;
	expect_rejected("{not json", "corrupt manifest", EINVAL);
	expect_rejected("[]", "not a JSON object", EINVAL);
	expect_rejected("{}", "no format_version", EINVAL);
	expect_rejected("{\"format_version\": 99, \"processes\": []}", "newer than this stasis",
			EPROTONOSUPPORT);
	expect_rejected("{\"format_version\": 1, \"processes\": []}", "no processes", EINVAL);
	expect_rejected("{\"format_version\": 1, \"processes\": [{\"pid\": -3, \"ppid\": 1}]}",
			"valid pid", EINVAL);
	expect_rejected("{\"format_version\": 1, \"processes\": [{\"pid\": 3, \"ppid\": 1}]}",
			"no file list", EINVAL);
	expect_rejected("{\"format_version\": 1, \"processes\": [{\"pid\": 3, \"ppid\": 1}],"
			" \"files\": [{\"name\": \"../etc/passwd\", \"size\": 1, \"xxh128\": "
			"\"0123456789abcdef0123456789abcdef\"}]}",
			"valid name", EINVAL);
	expect_rejected(
	    "{\"format_version\": 1, \"processes\": [{\"pid\": 3, \"ppid\": 1, \"gpus\": "
	    "[\"GPU-x\"]}], \"files\": []}",
	    "does not list", EINVAL);
	expect_rejected("{\"format_version\": 1, \"processes\": [{\"pid\": 3, \"ppid\": 4},"
			"{\"pid\": 4, \"ppid\": 3}], \"files\": []}",
			"no root", EINVAL);
}

static void write_and_verify(void **state)
{
	char dir[] = "/tmp/stasis-unit-XXXXXX", path[256];
	struct manifest m, back;
	struct stasis_error *err = NULL;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	rmdir(dir);
	assert_int_equal(image_prepare(dir, &err), 1); /* made it */
	snprintf(path, sizeof(path), "%s/criu/inventory.img", dir);
	f = fopen(path, "w");
	fclose(f);
	snprintf(path, sizeof(path), "%s/criu/pages-1.img", dir);
	f = fopen(path, "w");
	fputs("some pages", f);
	fclose(f);
	manifest_init(&m);
	manifest_add_process(&m)->pid = 7;
	assert_int_equal(image_checksum(dir, &m, NULL, &err), 0);
	assert_int_equal(m.image_bytes, 10);
	assert_int_equal(image_write_manifest(dir, &m, &err), 0);
	/* A second checkpoint into the same directory is refused. */
	assert_true(image_prepare(dir, &err) < 0);
	assert_int_equal(err->status, EEXIST);
	stasis_error_free(err);
	err = NULL;
	manifest_init(&back);
	assert_int_equal(image_open(dir, &back, &err), 0);
	manifest_free(&back);
	/* One flipped byte is caught. */
	f = fopen(path, "w");
	fputs("some pageS", f);
	fclose(f);
	manifest_init(&back);
	assert_true(image_open(dir, &back, &err) < 0);
	assert_non_null(strstr(err->message, "does not match its checksum"));
	stasis_error_free(err);
	manifest_free(&back);
	manifest_free(&m);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	assert_int_equal(system(path), 0);
}

static void touch(const char *dir, const char *name)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("x", f);
	fclose(f);
}

/* A failed checkpoint leaves its folder as it found it: a folder it made
 * goes, whatever CRIU wrote there, one given is left empty; a complete
 * image is never touched. CRIU's log is in the run's work folder. */
static void discard_after_failure(void **state)
{
	char dir[] = "/tmp/stasis-test-discard-XXXXXX", path[PATH_MAX];
	struct stasis_error *err = NULL;

	(void)state;
	assert_non_null(mkdtemp(dir));
	rmdir(dir);
	assert_int_equal(image_prepare(dir, &err), 1);
	touch(dir, "criu/pages-1.img");
	touch(dir, "criu/restore.log");
	touch(dir, "manifest.seal");
	image_discard(dir, true);
	assert_int_equal(access(dir, F_OK), -1);
	/* An empty directory given is kept, empty. */
	assert_int_equal(mkdir(dir, 0755), 0);
	assert_int_equal(image_prepare(dir, &err), 0);
	touch(dir, "criu/pages-1.img");
	image_discard(dir, false);
	assert_int_equal(access(dir, F_OK), 0);
	assert_int_equal(dir_is_empty(dir), 0);
	/* With its manifest the image is complete: kept whole. */
	assert_int_equal(image_prepare(dir, &err), 0);
	touch(dir, "criu/pages-1.img");
	touch(dir, "manifest.json");
	image_discard(dir, false);
	snprintf(path, sizeof(path), "%s/criu/pages-1.img", dir);
	assert_int_equal(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	assert_int_equal(system(path), 0);
}

static void missing_manifest(void **state)
{
	struct manifest m;
	struct stasis_error *err = NULL;

	(void)state;
	manifest_init(&m);
	assert_true(manifest_read("/nonexistent-stasis-dir", &m, &err) < 0);
	assert_non_null(strstr(err->message, "incomplete"));
	stasis_error_free(err);
}

/* Names a manifest may list: the image's own files, one component below
 * its CRIU folder; nothing absolute, nothing that climbs, nothing hidden. */
static void file_names(void **state)
{
	(void)state;
	assert_true(manifest_file_name_ok("criu/pages-1.img"));
	assert_true(manifest_file_name_ok("criu/pages-1.img.zst"));
	assert_true(manifest_file_name_ok("criu/rootfs-diff.tar"));
	assert_false(manifest_file_name_ok("/etc/passwd"));
	assert_false(manifest_file_name_ok("criu/../../etc/passwd"));
	assert_false(manifest_file_name_ok("criu/a/b"));
	assert_false(manifest_file_name_ok("criu/.hidden"));
	assert_false(manifest_file_name_ok("criu/"));
	assert_false(manifest_file_name_ok("pages-1.img"));
	assert_false(manifest_file_name_ok("criu/x\x1b[2J"));
}

/* A manifest is input: a list of files without CRIU's inventory, more
 * phases than stasis records, a file name outside the image are refused. */
static void hostile_manifests(void **state)
{
	static const char *refused[] = {
	    "{\"format_version\":1,\"processes\":[{\"pid\":5,\"ppid\":1}],\"files\":"
	    "[{\"name\":\"/etc/shadow\",\"size\":1,\"xxh128\":"
	    "\"0123456789abcdef0123456789abcdef\"}]}",
	    "{\"format_version\":1,\"processes\":[{\"pid\":5,\"ppid\":1}],\"files\":"
	    "[{\"name\":\"criu/x\",\"size\":1,\"xxh128\":\"not-hex-not-hex-not-hex-not-hex-\"}]}",
	};
	struct stasis_error *err = NULL;
	struct manifest m;
	char *many;
	size_t len = 0;
	FILE *f;

	(void)state;
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		manifest_init(&m);
		assert_int_equal(manifest_from_json(refused[i], &m, &err), -EINVAL);
		stasis_error_free(err);
		err = NULL;
		manifest_free(&m);
	}
	manifest_init(&m);
	assert_int_equal(manifest_from_json("{\"format_version\":1,\"processes\":[{\"pid\":5,"
					    "\"ppid\":1}],\"files\":[]}",
					    &m, &err),
			 0);
	assert_int_equal(manifest_check_complete(&m, &err), -EINVAL);
	assert_non_null(strstr(err->message, "inventory"));
	stasis_error_free(err);
	err = NULL;
	manifest_free(&m);
	f = open_memstream(&many, &len);
	fputs("{\"format_version\":1,\"processes\":[{\"pid\":5,\"ppid\":1}],\"files\":[],"
	      "\"phases_us\":{",
	      f);
	for (int i = 0; i < 100000; i++)
		fprintf(f, "%s\"p%d\":1", i ? "," : "", i);
	fputs("}}", f);
	fclose(f);
	manifest_init(&m);
	assert_int_equal(manifest_from_json(many, &m, &err), -EINVAL);
	assert_non_null(strstr(err->message, "more phases"));
	stasis_error_free(err);
	manifest_free(&m);
	free(many);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(file_names),	cmocka_unit_test(hostile_manifests),
	    cmocka_unit_test(roundtrip),	cmocka_unit_test(rejects_bad_manifests),
	    cmocka_unit_test(write_and_verify), cmocka_unit_test(discard_after_failure),
	    cmocka_unit_test(missing_manifest),
	};

	return cmocka_run_group_tests_name("manifest", tests, NULL, NULL);
}
