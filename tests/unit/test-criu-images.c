/* SPDX-License-Identifier: MIT */
/* CRIU's images as inspect and --print-stats read them: a tree written with
 * CRIU's own protobuf-c code reads back whole; malformed files (a wrong
 * magic, a size cut or past the end, a PID given twice, random damage) are
 * refused, each read within its file (ASan watches). */
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
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.pb-c.h"
#include "criu-images.h"
#include "fdinfo.pb-c.h"
#include "fs.pb-c.h"
#include "pstree.pb-c.h"
#include "stats.pb-c.h"
#include "util.h"
#include "views.h"

#define COMMON 0x54564319u
#define SERVICE 0x55105940u

/* An image file in memory: magics, then entries. */
struct img {
	uint8_t *buf;
	size_t len;
};

static void put(struct img *f, const void *p, size_t n)
{
	f->buf = realloc(f->buf, f->len + n);
	assert_non_null(f->buf);
	memcpy(f->buf + f->len, p, n);
	f->len += n;
}

static void start(struct img *f, uint32_t first, uint32_t magic)
{
	f->buf = NULL;
	f->len = 0;
	put(f, &first, 4);
	put(f, &magic, 4);
}

static void entry(struct img *f, const ProtobufCMessage *msg)
{
	uint32_t size = (uint32_t)protobuf_c_message_get_packed_size(msg);
	uint8_t *bytes = malloc(size ? size : 1);

	assert_non_null(bytes);
	protobuf_c_message_pack(msg, bytes);
	put(f, &size, 4);
	put(f, bytes, size);
	free(bytes);
}

static void save(const char *dir, const char *name, struct img *f)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write_all(fd, f->buf, f->len), 0);
	close(fd);
	free(f->buf);
	f->buf = NULL;
}

static void write_stats(const char *dir)
{
	DumpStatsEntry d = DUMP_STATS_ENTRY__INIT;
	RestoreStatsEntry r = RESTORE_STATS_ENTRY__INIT;
	StatsEntry s = STATS_ENTRY__INIT;
	struct img f;

	d.freezing_time = 11;
	d.frozen_time = 22;
	d.memdump_time = 33;
	d.memwrite_time = 44;
	d.pages_scanned = 1000;
	d.pages_written = 900;
	s.dump = &d;
	start(&f, SERVICE, 0x57093306u);
	entry(&f, &s.base);
	save(dir, CRIU_STATS_DUMP, &f);
	r.forking_time = 5;
	r.restore_time = 6;
	r.has_pages_restored = true;
	r.pages_restored = 7;
	s.dump = NULL;
	s.restore = &r;
	start(&f, SERVICE, 0x57093306u);
	entry(&f, &s.base);
	save(dir, CRIU_STATS_RESTORE, &f);
}

static void write_process(const char *dir, uint32_t pid, const char *comm)
{
	TaskCoreEntry tc = TASK_CORE_ENTRY__INIT;
	CoreEntry core = CORE_ENTRY__INIT;
	TaskKobjIdsEntry ids = TASK_KOBJ_IDS_ENTRY__INIT;
	FsEntry fs = FS_ENTRY__INIT;
	FdinfoEntry fds[4] = {FDINFO_ENTRY__INIT, FDINFO_ENTRY__INIT, FDINFO_ENTRY__INIT,
			      FDINFO_ENTRY__INIT};
	char name[64];
	struct img f;

	tc.task_state = 1;
	tc.comm = (char *)comm;
	core.mtype = CORE_ENTRY__MARCH__X86_64;
	core.tc = &tc;
	snprintf(name, sizeof(name), "core-%u.img", pid);
	start(&f, COMMON, 0x55053847u);
	entry(&f, &core.base);
	save(dir, name, &f);

	ids.files_id = pid;
	snprintf(name, sizeof(name), "ids-%u.img", pid);
	start(&f, COMMON, 0x54432030u);
	entry(&f, &ids.base);
	save(dir, name, &f);

	fs.cwd_id = 1;
	fs.root_id = 2;
	snprintf(name, sizeof(name), "fs-%u.img", pid);
	start(&f, COMMON, 0x51403912u);
	entry(&f, &fs.base);
	save(dir, name, &f);

	snprintf(name, sizeof(name), "fdinfo-%u.img", pid);
	start(&f, COMMON, 0x56213732u);
	for (uint32_t i = 0; i < 4; i++) {
		static const FdTypes types[4] = {FD_TYPES__REG, FD_TYPES__PIPE, FD_TYPES__UNIXSK,
						 FD_TYPES__INETSK};

		fds[i].id = 3 + i;
		fds[i].fd = i;
		fds[i].type = types[i];
		entry(&f, &fds[i].base);
	}
	save(dir, name, &f);
}

static void write_files(const char *dir)
{
	RegFileEntry regs[3] = {REG_FILE_ENTRY__INIT, REG_FILE_ENTRY__INIT, REG_FILE_ENTRY__INIT};
	PipeEntry pipe = PIPE_ENTRY__INIT;
	UnixSkEntry usk = UNIX_SK_ENTRY__INIT;
	InetSkEntry isk = INET_SK_ENTRY__INIT;
	SkOptsEntry opts = SK_OPTS_ENTRY__INIT;
	FownEntry fown = FOWN_ENTRY__INIT;
	FileEntry files[6] = {FILE_ENTRY__INIT, FILE_ENTRY__INIT, FILE_ENTRY__INIT,
			      FILE_ENTRY__INIT, FILE_ENTRY__INIT, FILE_ENTRY__INIT};
	static const char *const names[3] = {"/work", "/", "/tmp/data"};
	uint32_t src = htonl(0x7f000001), dst = 0;
	struct img f;

	opts.so_sndbuf = 4096;
	opts.so_rcvbuf = 8192;
	for (int i = 0; i < 3; i++) {
		regs[i].id = (uint32_t)i + 1;
		regs[i].name = (char *)names[i];
		regs[i].fown = &fown;
		files[i].type = FD_TYPES__REG;
		files[i].id = (uint32_t)i + 1;
		files[i].reg = &regs[i];
	}
	pipe.id = 4;
	pipe.pipe_id = 77;
	pipe.fown = &fown;
	files[3].type = FD_TYPES__PIPE;
	files[3].id = 4;
	files[3].pipe = &pipe;
	usk.id = 5;
	usk.ino = 99;
	usk.type = 1;
	usk.state = 10;
	usk.name.data = (uint8_t *)"/run/sock\0";
	usk.name.len = 10;
	usk.fown = &fown;
	usk.opts = &opts;
	files[4].type = FD_TYPES__UNIXSK;
	files[4].id = 5;
	files[4].usk = &usk;
	isk.id = 6;
	isk.family = AF_INET;
	isk.type = 1;
	isk.proto = 6;
	isk.state = 10;
	isk.src_port = 8080;
	isk.n_src_addr = 1;
	isk.src_addr = &src;
	isk.n_dst_addr = 1;
	isk.dst_addr = &dst;
	isk.fown = &fown;
	isk.opts = &opts;
	files[5].type = FD_TYPES__INETSK;
	files[5].id = 6;
	files[5].isk = &isk;
	start(&f, COMMON, 0x56303138u);
	/* Not in id order: the reader sorts them. */
	for (int i = 5; i >= 0; i--)
		entry(&f, &files[i].base);
	save(dir, "files.img", &f);
}

static void write_tree(const char *dir, uint32_t child_ppid)
{
	PstreeEntry p[2] = {PSTREE_ENTRY__INIT, PSTREE_ENTRY__INIT};
	uint32_t threads[2] = {100, 101};
	struct img f;

	p[0].pid = 100;
	p[0].ppid = 1;
	p[0].pgid = 100;
	p[0].sid = 100;
	p[0].n_threads = 1;
	p[0].threads = &threads[0];
	p[1].pid = 101;
	p[1].ppid = child_ppid;
	p[1].pgid = 100;
	p[1].sid = 100;
	p[1].n_threads = 1;
	p[1].threads = &threads[1];
	start(&f, COMMON, 0x50273030u);
	entry(&f, &p[0].base);
	entry(&f, &p[1].base);
	save(dir, "pstree.img", &f);
	write_process(dir, 100, "parent");
	write_process(dir, 101, "child");
	write_files(dir);
	write_stats(dir);
}

static char *make_dir(void)
{
	char *dir = strdup("/tmp/stasis-criu-images-XXXXXX");

	assert_non_null(dir);
	assert_non_null(mkdtemp(dir));
	return dir;
}

static void test_tree_reads_back(void **state)
{
	_cleanup_free_ char *dir = make_dir();
	struct criu_tree_view v;
	struct stasis_error *err = NULL;
	const struct criu_process_view *p;

	(void)state;
	write_tree(dir, 100);
	assert_int_equal(criu_view_read(dir, CRIU_VIEW_FILES | CRIU_VIEW_SOCKETS, &v, &err), 0);
	assert_int_equal(v.nprocs, 2);
	p = &v.procs[0];
	assert_int_equal(p->pid, 100);
	assert_string_equal(p->comm, "parent");
	assert_string_equal(p->task_state, "Alive");
	assert_int_equal(v.procs[1].ppid, 100);
	/* 4 descriptors, then cwd and root. */
	assert_int_equal(p->nfiles, 6);
	assert_string_equal(p->files[0].type, "REG");
	assert_string_equal(p->files[0].path, "/tmp/data");
	assert_string_equal(p->files[1].path, "pipe:[77]");
	assert_string_equal(p->files[2].path, "socket:[99]");
	assert_string_equal(p->files[4].fd, "cwd");
	assert_string_equal(p->files[4].path, "/work");
	assert_string_equal(p->files[5].fd, "root");
	assert_string_equal(p->files[5].path, "/");
	assert_int_equal(p->nsockets, 2);
	assert_string_equal(p->sockets[0].family, "UNIX");
	assert_string_equal(p->sockets[0].src, "/run/sock");
	assert_string_equal(p->sockets[0].state, "LISTEN");
	assert_string_equal(p->sockets[1].protocol, "TCP");
	assert_string_equal(p->sockets[1].src, "127.0.0.1");
	assert_int_equal(p->sockets[1].src_port, 8080);
	assert_int_equal(p->sockets[1].recv_buf, 8192);
	criu_view_free(&v);
	remove_dir_tree(dir);
}

static void test_stats_read_back(void **state)
{
	_cleanup_free_ char *dir = make_dir();
	struct criu_dump_stats d;
	struct criu_restore_stats r;
	struct stasis_error *err = NULL;

	(void)state;
	assert_int_equal(criu_stats_read_dump(dir, &d, &err), 0);
	assert_false(d.present); /* none there */
	write_stats(dir);
	assert_int_equal(criu_stats_read_dump(dir, &d, &err), 0);
	assert_true(d.present);
	assert_int_equal(d.frozen_time, 22);
	assert_int_equal(d.pages_written, 900);
	assert_int_equal(criu_stats_read_restore(dir, &r, &err), 0);
	assert_true(r.present);
	assert_int_equal(r.restore_time, 6);
	assert_int_equal(r.pages_restored, 7);
	remove_dir_tree(dir);
}

static void expect_refused(const uint8_t *buf, size_t len, const char *why)
{
	struct criu_dump_stats d;
	struct stasis_error *err = NULL;

	assert_true(criu_stats_parse_dump(buf, len, &d, &err) < 0);
	assert_non_null(err);
	assert_non_null(strstr(err->message, why));
	assert_false(d.present);
	stasis_error_free(err);
}

static void test_stats_malformed(void **state)
{
	uint8_t buf[64] = {0};
	uint32_t words[3] = {SERVICE, 0x57093306u, 1000};

	(void)state;
	expect_refused(buf, 0, "magic");
	memcpy(buf, words, 8);
	buf[0] ^= 1;
	expect_refused(buf, 8, "magic");
	memcpy(buf, words, 8);
	expect_refused(buf, 8, "no entry");
	memcpy(buf, words, 12);
	expect_refused(buf, 10, "cut");
	expect_refused(buf, 12, "past the end");
	words[2] = 2;
	memcpy(buf, words, 12);
	buf[12] = 0xff; /* a key with no end */
	buf[13] = 0xff;
	expect_refused(buf, 14, "does not decode");
	/* A whole stats entry without the dump's: refused for stats-dump. */
	words[2] = 0;
	memcpy(buf, words, 12);
	expect_refused(buf, 12, "no dump statistics");
	/* Two entries in a file of one. */
	memcpy(buf, words, 12);
	memcpy(buf + 12, &words[2], 4);
	expect_refused(buf, 16, "too many entries");
}

static void test_tree_refusals(void **state)
{
	_cleanup_free_ char *dir = make_dir();
	char path[512];
	struct criu_tree_view v;
	struct stasis_error *err = NULL;
	PstreeEntry p = PSTREE_ENTRY__INIT;
	struct img f;

	(void)state;
	assert_true(criu_view_read(dir, 0, &v, &err) < 0);
	assert_non_null(strstr(err->message, "pstree.img"));
	stasis_error_free(err);
	err = NULL;
	/* A PID given twice. */
	write_tree(dir, 100);
	p.pid = 100;
	start(&f, COMMON, 0x50273030u);
	entry(&f, &p.base);
	entry(&f, &p.base);
	save(dir, "pstree.img", &f);
	assert_true(criu_view_read(dir, 0, &v, &err) < 0);
	assert_non_null(strstr(err->message, "twice"));
	stasis_error_free(err);
	err = NULL;
	/* A link where a file should be is not followed. */
	snprintf(path, sizeof(path), "%s/pstree.img", dir);
	unlink(path);
	assert_int_equal(symlink("/etc/passwd", path), 0);
	assert_true(criu_view_read(dir, 0, &v, &err) < 0);
	stasis_error_free(err);
	remove_dir_tree(dir);
}

/* A process that is its own parent: the JSON tree stops, the root found. */
static void test_views_own_parent(void **state)
{
	_cleanup_free_ char *dir = make_dir();
	struct image_views views;
	struct stasis_error *err = NULL;
	json_object *root = json_object_new_object();
	char criu[600];

	(void)state;
	snprintf(criu, sizeof(criu), "%s/criu", dir);
	assert_int_equal(mkdir(criu, 0700), 0);
	write_tree(criu, 101);
	assert_int_equal(views_read(dir, NULL, VIEW_PS_TREE, &views, &err), 0);
	views_to_json(&views, root);
	assert_non_null(json_object_to_json_string(root));
	json_object_put(root);
	views_free(&views);
	remove_dir_tree(dir);
}

/* A chain of 300 processes: the JSON tree is cut at its depth bound. */
static void test_views_deep_chain(void **state)
{
	_cleanup_free_ char *dir = make_dir();
	struct image_views views;
	struct stasis_error *err = NULL;
	json_object *root = json_object_new_object(), *node;
	PstreeEntry p = PSTREE_ENTRY__INIT;
	char criu[600];
	struct img f;
	int depth = 0;

	(void)state;
	snprintf(criu, sizeof(criu), "%s/criu", dir);
	assert_int_equal(mkdir(criu, 0700), 0);
	start(&f, COMMON, 0x50273030u);
	for (uint32_t pid = 1000; pid < 1300; pid++) {
		p.pid = pid;
		p.ppid = pid == 1000 ? 1 : pid - 1;
		entry(&f, &p.base);
		write_process(criu, pid, "link");
	}
	save(criu, "pstree.img", &f);
	assert_int_equal(views_read(dir, NULL, VIEW_PS_TREE, &views, &err), 0);
	views_to_json(&views, root);
	assert_true(json_object_object_get_ex(root, "process_tree", &node));
	while (json_object_object_get_ex(node, "children", &node)) {
		node = json_object_array_get_idx(node, 0);
		depth++;
	}
	assert_int_equal(depth, 256);
	json_object_put(root);
	views_free(&views);
	remove_dir_tree(dir);
}

/* Each file of a good tree damaged at random (bits flipped, cut, grown):
 * read or refused, never read past. */
static void test_damaged_images(void **state)
{
	static const char *const names[] = {"pstree.img",     "core-100.img", "ids-100.img",
					    "fdinfo-100.img", "fs-100.img",   "files.img",
					    CRIU_STATS_DUMP};
	_cleanup_free_ char *dir = make_dir();
	unsigned int seed = 52;
	size_t read_ok = 0, refused = 0;

	(void)state;
	for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
		char path[512];
		_cleanup_free_ char *good = NULL;
		size_t len = 0;

		write_tree(dir, 100);
		snprintf(path, sizeof(path), "%s/%s", dir, names[n]);
		good = read_file_str(path, &len);
		assert_non_null(good);
		for (int round = 0; round < 600; round++) {
			_cleanup_free_ uint8_t *bad = malloc(len + 16);
			size_t bad_len = len;
			struct criu_tree_view v;
			struct criu_dump_stats d;
			struct stasis_error *err = NULL;
			int fd, r;

			assert_non_null(bad);
			memcpy(bad, good, len);
			switch (rand_r(&seed) % 3) {
			case 0:
				for (int k = 1 + rand_r(&seed) % 4; k > 0; k--)
					bad[rand_r(&seed) % len] ^=
					    (uint8_t)(1u << (rand_r(&seed) % 8));
				break;
			case 1:
				bad_len = rand_r(&seed) % len;
				break;
			default:
				for (int k = 0; k < 16; k++)
					bad[len + k] = (uint8_t)rand_r(&seed);
				bad_len = len + 1 + rand_r(&seed) % 16;
			}
			fd = open(path, O_WRONLY | O_TRUNC);
			assert_true(fd >= 0);
			assert_int_equal(write_all(fd, bad, bad_len), 0);
			close(fd);
			r = n == 6 ? criu_stats_read_dump(dir, &d, &err)
				   : criu_view_read(dir, CRIU_VIEW_FILES | CRIU_VIEW_SOCKETS, &v,
						    &err);
			if (r < 0) {
				assert_non_null(err);
				refused++;
			} else {
				read_ok++;
				if (n != 6)
					criu_view_free(&v);
			}
			stasis_error_free(err);
		}
	}
	assert_true(refused > 0);
	assert_true(read_ok > 0);
	remove_dir_tree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tree_reads_back),  cmocka_unit_test(test_stats_read_back),
	    cmocka_unit_test(test_stats_malformed),  cmocka_unit_test(test_tree_refusals),
	    cmocka_unit_test(test_views_own_parent), cmocka_unit_test(test_views_deep_chain),
	    cmocka_unit_test(test_damaged_images),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
