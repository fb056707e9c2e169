/* SPDX-License-Identifier: MIT */
/* CRIU's process tree and credentials read from crafted images, whole and
 * malformed (a field given twice, past 32 bits, of another wire type, a
 * group, field 0, a varint too long, a required field missing, a shape
 * CRIU cannot restore), and the manifest's process list taken from them and
 * checked against them. The hostile bytes are written by hand: protobuf-c
 * would not write them. */
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

#include "criu-images.h"
#include "criu-tree.h"
#include "image.h"
#include "manifest.h"
#include "util.h"

/* CRIU's magic numbers (criu/include/magic.h). */
#define CRIU_IMG_COMMON_MAGIC 0x54564319u
#define CRIU_PSTREE_MAGIC 0x50273030u
#define CRIU_CORE_MAGIC 0x55053847u

struct buf {
	uint8_t b[4096];
	size_t n;
};

static void put_raw(struct buf *o, const void *p, size_t n)
{
	assert_true(o->n + n <= sizeof(o->b));
	memcpy(o->b + o->n, p, n);
	o->n += n;
}

static void put_varint(struct buf *o, uint64_t v)
{
	do {
		uint8_t c = (v & 0x7f) | (v > 0x7f ? 0x80 : 0);

		put_raw(o, &c, 1);
		v >>= 7;
	} while (v);
}

static void put_key(struct buf *o, uint32_t number, int type)
{
	put_varint(o, (uint64_t)number << 3 | (uint64_t)type);
}

static void put_uint(struct buf *o, uint32_t number, uint64_t v)
{
	put_key(o, number, 0);
	put_varint(o, v);
}

static void put_message(struct buf *o, uint32_t number, const struct buf *m)
{
	put_key(o, number, 2);
	put_varint(o, m->n);
	put_raw(o, m->b, m->n);
}

static void put_string(struct buf *o, uint32_t number, const char *s)
{
	put_key(o, number, 2);
	put_varint(o, strlen(s));
	put_raw(o, s, strlen(s));
}

static void put_u32(struct buf *o, uint32_t v)
{
	put_raw(o, &v, sizeof(v));
}

static void put_head(struct buf *o, uint32_t magic)
{
	put_u32(o, CRIU_IMG_COMMON_MAGIC);
	put_u32(o, magic);
}

static void put_entry(struct buf *o, const struct buf *m)
{
	put_u32(o, (uint32_t)m->n);
	put_raw(o, m->b, m->n);
}

/* A pstree entry, its threads one field each. */
static void pstree_entry(struct buf *file, uint32_t pid, uint32_t ppid, const uint32_t *threads,
			 size_t n)
{
	struct buf e = {.n = 0};

	put_uint(&e, 1, pid);
	put_uint(&e, 2, ppid);
	put_uint(&e, 3, pid);
	put_uint(&e, 4, pid);
	for (size_t i = 0; i < n; i++)
		put_uint(&e, 5, threads[i]);
	put_entry(file, &e);
}

/* uid, gid, euid, egid, suid, sgid, fsuid, fsgid: fields 1 to 8. */
static void creds(struct buf *c, uint32_t uid, uint32_t gid)
{
	for (uint32_t f = 1; f <= 8; f++)
		put_uint(c, f, f % 2 ? uid : gid);
	put_uint(c, 13, 0); /* secbits */
	put_uint(c, 14, 27);
}

/* A task's core (state 1, alive; 2, a zombie, without thread state as
 * CRIU writes one), or a thread's (state 0: no task state). */
static void core_file_as(struct buf *file, const char *comm, const struct buf *creds_msg,
			 uint32_t state)
{
	struct buf core = {.n = 0}, tc = {.n = 0}, thread = {.n = 0};

	put_uint(&tc, 1, state);
	for (uint32_t f = 2; f <= 5; f++)
		put_uint(&tc, f, 0); /* exit_code, personality, flags, blk_sigset */
	put_string(&tc, 6, comm);
	put_uint(&thread, 1, 0);
	put_uint(&thread, 2, 24);
	if (creds_msg)
		put_message(&thread, 10, creds_msg);
	put_uint(&core, 1, 1); /* x86_64 */
	if (state)
		put_message(&core, 3, &tc);
	if (state != CRIU_TASK_DEAD)
		put_message(&core, 5, &thread);
	put_head(file, CRIU_CORE_MAGIC);
	put_entry(file, &core);
}

static void core_file(struct buf *file, const char *comm, const struct buf *creds_msg)
{
	core_file_as(file, comm, creds_msg, 1);
}

static int parse_pstree(const struct buf *b, struct criu_image_tree *t)
{
	_cleanup_error_ struct stasis_error *err = NULL;
	int r = criu_image_parse_pstree(b->b, b->n, t, &err);

	assert_true(r == 0 ? err == NULL : err != NULL);
	return r;
}

static void pstree_whole(void **state)
{
	struct buf b = {.n = 0}, e = {.n = 0}, packed = {.n = 0};
	struct criu_image_tree t;
	uint32_t root[] = {100, 101};

	put_head(&b, CRIU_PSTREE_MAGIC);
	pstree_entry(&b, 100, 0, root, 2);
	/* A child whose threads are packed in one field. */
	put_uint(&e, 1, 102);
	put_uint(&e, 2, 100);
	put_uint(&e, 3, 100);
	put_uint(&e, 4, 100);
	put_varint(&packed, 102);
	put_varint(&packed, 103);
	put_message(&e, 5, &packed);
	put_uint(&e, 99, 7); /* a field stasis does not know */
	put_entry(&b, &e);
	assert_int_equal(parse_pstree(&b, &t), 0);
	assert_int_equal(t.nprocs, 2);
	assert_int_equal(t.procs[0].pid, 100);
	assert_int_equal(t.procs[0].ppid, 0);
	assert_int_equal(t.procs[0].nthreads, 2);
	assert_int_equal(t.procs[1].pid, 102);
	assert_int_equal(t.procs[1].ppid, 100);
	assert_int_equal(t.procs[1].pgid, 100);
	assert_int_equal(t.procs[1].nthreads, 2);
	assert_int_equal(t.procs[1].threads[1], 103);
	criu_image_tree_free(&t);
}

enum pstree_fault {
	BAD_MAGIC,
	NO_PROCESS,
	CUT_SIZE,
	CUT_ENTRY,
	PID_TWICE,
	PID_ZERO,
	PID_TOO_BIG,
	PID_OVER_32_BITS,
	TID_OVER_32_BITS,
	NO_SID,
	GROUP_FIELD,
	FIELD_ZERO,
	LONG_VARINT,
	PID_AS_FIXED,
	CHILD_FIRST,
	SAME_PID,
	CUT_PACKED,
	NFAULTS
};

static void pstree_with(struct buf *b, enum pstree_fault f)
{
	uint32_t one = 100, child = 102;
	struct buf e = {.n = 0};
	uint8_t eleven[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};

	put_head(b, f == BAD_MAGIC ? CRIU_CORE_MAGIC : CRIU_PSTREE_MAGIC);
	switch (f) {
	case NO_PROCESS:
		return;
	case CUT_SIZE:
		put_raw(b, "\x10\x00", 2);
		return;
	case CUT_ENTRY:
		put_u32(b, 100);
		put_raw(b, "\x08\x64", 2);
		return;
	case PID_TWICE:
	case PID_ZERO:
	case PID_TOO_BIG:
	case PID_OVER_32_BITS:
	case TID_OVER_32_BITS:
	case NO_SID:
	case GROUP_FIELD:
	case FIELD_ZERO:
	case LONG_VARINT:
	case PID_AS_FIXED:
	case CUT_PACKED:
		if (f == LONG_VARINT)
			put_raw(&e, eleven, sizeof(eleven));
		else if (f == PID_AS_FIXED)
			put_raw(&e, "\x0d\x64\x00\x00\x00", 5);
		else
			put_uint(&e, 1,
				 f == PID_ZERO		 ? 0
				 : f == PID_TOO_BIG	 ? CRIU_PID_MAX + 1
				 : f == PID_OVER_32_BITS ? (1ull << 32) + 100
							 : 100);
		if (f == PID_TWICE)
			put_uint(&e, 1, 100);
		if (f == GROUP_FIELD)
			put_key(&e, 6, 3);
		if (f == FIELD_ZERO)
			put_uint(&e, 0, 1);
		put_uint(&e, 2, 0);
		put_uint(&e, 3, 100);
		if (f != NO_SID)
			put_uint(&e, 4, 100);
		if (f == CUT_PACKED)
			put_raw(&e, "\x2a\x02\x64\x80", 4); /* packed [100, a varint cut short] */
		else if (f == TID_OVER_32_BITS)
			put_uint(&e, 5, (1ull << 32) + 100);
		else
			put_uint(&e, 5, 100);
		put_entry(b, &e);
		return;
	case CHILD_FIRST:
		pstree_entry(b, 102, 100, &child, 1);
		pstree_entry(b, 100, 0, &one, 1);
		return;
	case SAME_PID:
		pstree_entry(b, 100, 0, &one, 1);
		pstree_entry(b, 100, 100, &one, 1);
		return;
	default:
		return;
	}
}

static void pstree_malformed(void **state)
{
	for (int f = 0; f < NFAULTS; f++) {
		struct buf b = {.n = 0};
		struct criu_image_tree t;

		pstree_with(&b, (enum pstree_fault)f);
		if (parse_pstree(&b, &t) == 0)
			fail_msg("malformed pstree %d was read", f);
		assert_null(t.procs);
	}
	/* Shorter than its magic numbers, or nothing at all. */
	{
		struct criu_image_tree t;

		assert_int_not_equal(
		    criu_image_parse_pstree((const uint8_t *)"\x19\x43", 2, &t, NULL), 0);
		assert_int_not_equal(criu_image_parse_pstree(NULL, 0, &t, NULL), 0);
	}
}

static void core_whole(void **state)
{
	struct buf b = {.n = 0}, c = {.n = 0};
	struct criu_image_core core;

	creds(&c, 1000, 100);
	core_file(&b, "python3", &c);
	assert_int_equal(criu_image_parse_core(b.b, b.n, &core, NULL), 0);
	assert_string_equal(core.comm, "python3");
	assert_true(core.has_creds);
	assert_int_equal(core.creds.uid, 1000);
	assert_int_equal(core.creds.euid, 1000);
	assert_int_equal(core.creds.fsuid, 1000);
	assert_int_equal(core.creds.gid, 100);
	assert_int_equal(core.creds.sgid, 100);
	/* A core without credentials reads, and says so. */
	b.n = 0;
	core_file(&b, "sleep", NULL);
	assert_int_equal(criu_image_parse_core(b.b, b.n, &core, NULL), 0);
	assert_true(core.has_thread_core);
	assert_false(core.has_creds);
	/* A zombie's: no thread state. */
	b.n = 0;
	core_file_as(&b, "sleep", NULL, CRIU_TASK_DEAD);
	assert_int_equal(criu_image_parse_core(b.b, b.n, &core, NULL), 0);
	assert_int_equal(core.task_state, CRIU_TASK_DEAD);
	assert_false(core.has_thread_core);
}

/* Cores each wrong in one way; the last is whole, and read. */
static void core_malformed(void **state)
{
	for (int f = 0; f < 13; f++) {
		struct buf b = {.n = 0}, core = {.n = 0}, thread = {.n = 0}, c = {.n = 0};
		_cleanup_error_ struct stasis_error *err = NULL;
		struct criu_image_core out;

		for (uint32_t field = 1; field <= 8; field++)
			if (!(f == 0 && field == 8)) /* 0: no fsgid */
				put_uint(&c, field, f == 1 && field == 1 ? 1ull << 32 : 0);
		if (f == 2)
			put_uint(&c, 3, 0); /* euid twice */
		if (f != 9)
			put_uint(&c, 13, 0); /* 9: no secbits, which CRIU requires */
		put_uint(&thread, 1, 0);
		put_uint(&thread, 2, 24);
		put_message(&thread, 10, &c);
		if (f == 3)
			put_message(&thread, 10, &c); /* creds twice */
		if (f == 4)
			put_uint(&thread, 10, 1); /* creds not a message */
		if (f == 10) {			  /* a thread's name twice */
			put_string(&thread, 13, "a");
			put_string(&thread, 13, "b");
		}
		put_uint(&core, 1, 1);
		if (f == 5 || f >= 11) { /* a task state that is not a number, or twice */
			struct buf tc = {.n = 0};

			if (f == 5)
				put_string(&tc, 1, "alive");
			else
				put_uint(&tc, 1, 1);
			if (f == 11)
				put_uint(&tc, 1, CRIU_TASK_DEAD);
			for (uint32_t field = 2; field <= 5; field++)
				put_uint(&tc, field, 0);
			put_string(&tc, 6, "sleep");
			put_message(&core, 3, &tc);
		}
		put_message(&core, 5, &thread);
		if (f == 6)
			put_message(&core, 5, &thread); /* thread state twice */
		put_head(&b, f == 7 ? CRIU_PSTREE_MAGIC : CRIU_CORE_MAGIC);
		put_entry(&b, &core);
		if (f == 8)
			put_entry(&b, &core); /* a second entry */
		if (f == 12) {
			assert_int_equal(criu_image_parse_core(b.b, b.n, &out, &err), 0);
			assert_true(out.has_creds);
			assert_int_equal(out.task_state, 1);
			assert_string_equal(out.comm, "sleep");
			continue;
		}
		if (criu_image_parse_core(b.b, b.n, &out, &err) == 0)
			fail_msg("malformed core %d was read", f);
		assert_non_null(err);
	}
}

/* Whole images with random bytes changed, cut short or grown: each is
 * read or refused, never read past (ASan watches). */
static void mutated(void **state)
{
	struct buf pstree = {.n = 0}, core = {.n = 0}, c = {.n = 0};
	uint32_t threads[] = {100, 101}, child = 102;
	unsigned int seed = 49;

	put_head(&pstree, CRIU_PSTREE_MAGIC);
	pstree_entry(&pstree, 100, 0, threads, 2);
	pstree_entry(&pstree, 102, 100, &child, 1);
	creds(&c, 1000, 100);
	core_file(&core, "python3", &c);
	for (int i = 0; i < 20000; i++) {
		const struct buf *whole = i % 2 ? &core : &pstree;
		size_t len = whole->n + (size_t)(rand_r(&seed) % 3) - 1;
		uint8_t *b = malloc(len + 1);
		struct criu_image_tree t;
		struct criu_image_core out;

		assert_non_null(b);
		memcpy(b, whole->b, len < whole->n ? len : whole->n);
		if (len > whole->n)
			b[whole->n] = (uint8_t)rand_r(&seed);
		for (int k = rand_r(&seed) % 4; k >= 0 && len; k--)
			b[(size_t)rand_r(&seed) % len] ^= (uint8_t)(1u << (rand_r(&seed) % 8));
		if (i % 2 == 0 && criu_image_parse_pstree(b, len, &t, NULL) == 0)
			criu_image_tree_free(&t);
		else if (i % 2)
			criu_image_parse_core(b, len, &out, NULL);
		free(b);
	}
}

/* An image folder: pstree.img and core files. */
struct folder {
	char dir[64];
};

static void write_file(const char *dir, const char *name, const struct buf *b)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(b->b, 1, b->n, f), b->n);
	fclose(f);
}

static void write_core(const char *dir, int tid, const char *comm, uint32_t uid)
{
	struct buf b = {.n = 0}, c = {.n = 0};
	char name[32];

	creds(&c, uid, uid);
	core_file(&b, comm, &c);
	snprintf(name, sizeof(name), "core-%d.img", tid);
	write_file(dir, name, &b);
}

/* Root 100 (threads 100, 101, uid 1000) and its child 102 (uid 1000). */
static void make_image(struct folder *f)
{
	struct buf b = {.n = 0};
	uint32_t root[] = {100, 101}, child = 102;

	snprintf(f->dir, sizeof(f->dir), "/tmp/stasis-criu-image-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	put_head(&b, CRIU_PSTREE_MAGIC);
	pstree_entry(&b, 100, 0, root, 2);
	pstree_entry(&b, 102, 100, &child, 1);
	write_file(f->dir, "pstree.img", &b);
	write_core(f->dir, 100, "loop", 1000);
	write_core(f->dir, 101, "worker", 1000);
	write_core(f->dir, 102, "sleep", 1000);
}

static void remove_image(struct folder *f)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
}

static void tree_read(void **state)
{
	_cleanup_error_ struct stasis_error *err = NULL;
	struct criu_image_tree t;
	struct folder f;
	char path[128];

	make_image(&f);
	assert_int_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	assert_int_equal(t.nprocs, 2);
	assert_string_equal(t.procs[0].comm, "loop");
	assert_int_equal(t.procs[0].creds.uid, 1000);
	assert_true(t.procs[0].creds.known);
	assert_string_equal(t.procs[1].comm, "sleep");
	criu_image_tree_free(&t);

	/* A thread with other credentials than its process. */
	write_core(f.dir, 101, "worker", 0);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, &err), 0);
	assert_non_null(strstr(err->message, "thread 101 of PID 100"));
	assert_null(t.procs);
	stasis_error_free(TAKE_PTR(err));

	/* A thread's core missing, or a link. */
	snprintf(path, sizeof(path), "%s/core-101.img", f.dir);
	unlink(path);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	assert_int_equal(symlink("core-100.img", path), 0);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	unlink(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	remove_image(&f);
}

/* Root 100 with threads root_threads, child 102 with child_threads. */
static void write_pstree(const char *dir, const uint32_t *root_threads, size_t nroot,
			 const uint32_t *child_threads, size_t nchild)
{
	struct buf b = {.n = 0};

	put_head(&b, CRIU_PSTREE_MAGIC);
	pstree_entry(&b, 100, 0, root_threads, nroot);
	pstree_entry(&b, 102, 100, child_threads, nchild);
	write_file(dir, "pstree.img", &b);
}

static void tree_shapes(void **state)
{
	uint32_t root[] = {100, 101}, child = 102, junk = 4214310368u, only_101 = 101;
	uint32_t twice[] = {100, 100}, taken[] = {102, 101};
	struct buf b = {.n = 0}, c = {.n = 0};
	struct criu_image_tree t;
	struct folder f;

	make_image(&f);
	/* A zombie child: CRIU writes no thread state, and junk as its thread. */
	core_file_as(&b, "sleep", NULL, CRIU_TASK_DEAD);
	write_file(f.dir, "core-102.img", &b);
	write_pstree(f.dir, root, 2, &junk, 1);
	assert_int_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	assert_true(t.procs[1].zombie);
	assert_false(t.procs[1].creds.known);
	assert_false(t.procs[0].zombie);
	criu_image_tree_free(&t);
	/* A live process's threads must name it once, and no other's. */
	write_core(f.dir, 102, "sleep", 1000);
	write_pstree(f.dir, &only_101, 1, &child, 1);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	write_pstree(f.dir, twice, 2, &child, 1);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	write_pstree(f.dir, root, 2, taken, 2);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	write_pstree(f.dir, root, 2, &junk, 1);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	write_pstree(f.dir, root, 2, &child, 1);
	assert_int_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	criu_image_tree_free(&t);
	/* A live leader or thread whose core states no credentials, a
	 * thread's core without its thread state, a leader's without its
	 * task's. */
	b.n = 0;
	core_file(&b, "sleep", NULL);
	write_file(f.dir, "core-102.img", &b);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	write_file(f.dir, "core-101.img", &b);
	write_core(f.dir, 102, "sleep", 1000);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	b.n = 0;
	core_file_as(&b, "worker", NULL, CRIU_TASK_DEAD);
	write_file(f.dir, "core-101.img", &b);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	write_core(f.dir, 101, "worker", 1000);
	b.n = 0;
	creds(&c, 1000, 1000);
	core_file_as(&b, "sleep", &c, 0);
	write_file(f.dir, "core-102.img", &b);
	assert_int_not_equal(criu_image_tree_read(f.dir, &t, NULL), 0);
	assert_null(t.procs);
	remove_image(&f);
}

static struct manifest_process *add(struct manifest *m, pid_t pid, pid_t ppid, const char *cmd)
{
	struct manifest_process *p = manifest_add_process(m);

	assert_non_null(p);
	p->pid = pid;
	p->ppid = ppid;
	snprintf(p->comm, sizeof(p->comm), "%s", cmd);
	p->cmdline = strdup(cmd);
	return p;
}

static void take_and_check(void **state)
{
	_cleanup_error_ struct stasis_error *err = NULL;
	struct manifest m;
	struct folder f;

	make_image(&f);
	manifest_init(&m);
	/* The preflight saw the root and a child gone before the freeze. */
	add(&m, 100, 1, "loop")->cuda = true;
	add(&m, 150, 100, "sleep 1");
	assert_int_equal(image_take_processes(f.dir, &m, NULL), 0);
	assert_int_equal(m.nprocs, 2);
	assert_int_equal(m.procs[0].pid, 100);
	assert_int_equal(m.procs[0].ppid, 1); /* the root's, as the preflight saw it */
	assert_true(m.procs[0].cuda);
	assert_string_equal(m.procs[0].cmdline, "loop");
	assert_int_equal(m.procs[0].creds.uid, 1000);
	assert_int_equal(m.procs[1].pid, 102);
	assert_int_equal(m.procs[1].ppid, 100);
	assert_string_equal(m.procs[1].comm, "sleep");
	assert_null(m.procs[1].cmdline);
	assert_true(m.procs[1].creds.known);
	assert_int_equal(image_check_processes(f.dir, &m, NULL), 0);

	/* The manifest states other IDs than CRIU's files. */
	m.procs[1].creds.euid = 0;
	assert_int_equal(image_check_processes(f.dir, &m, &err), -EPERM);
	assert_non_null(strstr(err->message, "process 102"));
	stasis_error_free(TAKE_PTR(err));
	m.procs[1].creds.euid = 1000;
	/* A zombie in the manifest, alive in CRIU's files. */
	m.procs[1].zombie = true;
	assert_int_equal(image_check_processes(f.dir, &m, NULL), -EPERM);
	m.procs[1].zombie = false;
	/* None at all: an image of an older stasis. */
	m.procs[1].creds.known = false;
	assert_int_equal(image_check_processes(f.dir, &m, NULL), -EPERM);
	m.procs[1].creds.known = true;
	/* A process the manifest does not list, and one too many. */
	m.procs[1].pid = 103;
	assert_int_equal(image_check_processes(f.dir, &m, NULL), -EPERM);
	m.procs[1].pid = 102;
	add(&m, 104, 100, "extra");
	assert_int_equal(image_check_processes(f.dir, &m, NULL), -EPERM);
	manifest_free(&m);

	/* A container's processes, by their PIDs inside: one started after
	 * the preflight has no PID on the host yet, its parent's as its
	 * parent. */
	manifest_init(&m);
	add(&m, 5000, 4000, "loop")->ns_pid = 100;
	m.container.runtime = strdup("runc");
	assert_int_equal(image_take_processes(f.dir, &m, NULL), 0);
	assert_int_equal(m.nprocs, 2);
	assert_int_equal(m.procs[0].pid, 5000);
	assert_int_equal(m.procs[0].ppid, 4000);
	assert_int_equal(m.procs[1].pid, 0);
	assert_int_equal(m.procs[1].ns_pid, 102);
	assert_int_equal(m.procs[1].ppid, 5000);
	assert_int_equal(image_check_processes(f.dir, &m, NULL), 0);
	m.procs[1].pid = 5002;
	assert_int_equal(image_take_processes(f.dir, &m, NULL), 0);
	assert_int_equal(m.procs[1].pid, 5002);
	assert_int_equal(image_check_processes(f.dir, &m, NULL), 0);
	manifest_free(&m);
	remove_image(&f);
}

static void manifest_creds(void **state)
{
	static const char *const bad[] = {
	    "\"creds\": 5",
	    "\"creds\": {\"uid\": 0}",
	    "\"creds\": {\"uid\": -1, \"euid\": 0, \"suid\": 0, \"fsuid\": 0, \"gid\": 0, "
	    "\"egid\": "
	    "0, \"sgid\": 0, \"fsgid\": 0}",
	    "\"creds\": {\"uid\": 4294967296, \"euid\": 0, \"suid\": 0, \"fsuid\": 0, \"gid\": 0, "
	    "\"egid\": 0, \"sgid\": 0, \"fsgid\": 0}",
	};
	struct manifest m, back;
	_cleanup_free_ char *json = NULL;
	char text[1024], ids[64];

	manifest_init(&m);
	add(&m, 100, 1, "loop")->creds =
	    (struct manifest_creds){true, 1000, 0, 1000, 0, 100, 100, 100, 100};
	add(&m, 101, 100, "old");
	json = manifest_to_json(&m, false);
	manifest_init(&back);
	assert_int_equal(manifest_from_json(json, &back, NULL), 0);
	assert_true(back.procs[0].creds.known);
	assert_true(manifest_creds_equal(&back.procs[0].creds, &m.procs[0].creds));
	assert_false(back.procs[1].creds.known);
	assert_string_equal(manifest_creds_format(&back.procs[0].creds, ids, sizeof(ids)),
			    "1000,0,1000,0:100,100,100,100");
	assert_string_equal(manifest_creds_format(&back.procs[1].creds, ids, sizeof(ids)), "-");
	manifest_free(&back);
	manifest_free(&m);
	/* PID 0: only a PID namespace's process, which has its PID inside. */
	manifest_init(&back);
	assert_int_equal(manifest_from_json("{\"format_version\": 1, \"processes\": [{\"pid\": 0, "
					    "\"ppid\": 7, \"ns_pid\": 12}], \"files\": []}",
					    &back, NULL),
			 0);
	assert_int_equal(back.procs[0].ns_pid, 12);
	manifest_free(&back);
	manifest_init(&back);
	assert_int_not_equal(manifest_from_json("{\"format_version\": 1, \"processes\": [{\"pid\": "
						"0, \"ppid\": 7}], \"files\": []}",
						&back, NULL),
			     0);
	manifest_free(&back);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		_cleanup_error_ struct stasis_error *err = NULL;

		snprintf(text, sizeof(text),
			 "{\"format_version\": 1, \"processes\": [{\"pid\": 1, \"ppid\": 0, %s}]}",
			 bad[i]);
		manifest_init(&back);
		assert_int_not_equal(manifest_from_json(text, &back, &err), 0);
		assert_non_null(strstr(err->message, "creds"));
		manifest_free(&back);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(pstree_whole),   cmocka_unit_test(pstree_malformed),
	    cmocka_unit_test(core_whole),     cmocka_unit_test(core_malformed),
	    cmocka_unit_test(tree_read),      cmocka_unit_test(tree_shapes),
	    cmocka_unit_test(mutated),	      cmocka_unit_test(take_and_check),
	    cmocka_unit_test(manifest_creds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
