/* SPDX-License-Identifier: MIT */
/* CRIU's process tree as the manifest lists it and a restore checks it:
 * pstree.img, and each thread's core for its name, its task's state and
 * its credentials (images/pstree.proto, core.proto, creds.proto), unpacked
 * with the protobuf-c code of CRIU's build.
 *
 * An image is input, and what stasis checks must be what CRIU restores,
 * though CRIU may unpack it with another protobuf-c than stasis's (a
 * runtime's own CRIU), and where the wire is ambiguous readers differ: of
 * a field given twice one keeps the last, merges two messages or replaces
 * the first; of a uint32 past 32 bits protobuf-c keeps the low bits. So
 * each entry is walked on the wire before it is unpacked, and refused for
 * a field stasis reads given twice, a uint32 of it past 32 bits, a group or
 * field 0. protobuf-c then refuses a required field missing or one of the
 * wrong type; what is left is checked after: PIDs in range, each process
 * after its parent, threads that name their process once, their number. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.pb-c.h"
#include "criu-images-internal.h"
#include "criu-images.h"
#include "criu-tree.h"
#include "pstree.pb-c.h"
#include "util.h"

/* ---- the wire, walked ---- */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };

static const uint8_t *wire_varint(const uint8_t *p, const uint8_t *end, uint64_t *out)
{
	uint64_t v = 0;

	for (int i = 0; i < 10 && p < end; i++) {
		uint8_t c = *p++;

		if (i == 9 && c > 1)
			return NULL; /* beyond 64 bits */
		v |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			*out = v;
			return p;
		}
	}
	return NULL;
}

struct wire_at {
	uint32_t number;
	int type;
	uint64_t value;		    /* a varint's */
	const uint8_t *bytes, *end; /* a field's bytes past its key */
};

/* The next field of p..end: where it ends, or NULL when it is malformed
 * (groups, which proto2's deprecated form has and CRIU never writes, count
 * as malformed). */
static const uint8_t *wire_next(const uint8_t *p, const uint8_t *end, struct wire_at *f)
{
	uint64_t key, n = 0;

	p = wire_varint(p, end, &key);
	if (!p || key >> 3 == 0 || key >> 3 > (1u << 29) - 1)
		return NULL;
	f->number = (uint32_t)(key >> 3);
	f->type = (int)(key & 7);
	f->value = 0;
	if (f->type == WIRE_VARINT)
		p = wire_varint(p, end, &f->value);
	else if (f->type == WIRE_BYTES)
		p = wire_varint(p, end, &n);
	else if (f->type == WIRE_FIXED64 || f->type == WIRE_FIXED32)
		n = f->type == WIRE_FIXED64 ? 8 : 4;
	else
		return NULL;
	if (!p || n > (uint64_t)(end - p))
		return NULL;
	f->bytes = p;
	f->end = p + n;
	return f->end;
}

static bool wire_packed_u32(const uint8_t *p, const uint8_t *end)
{
	uint64_t v;

	while (p < end) {
		p = wire_varint(p, end, &v);
		if (!p || v > UINT32_MAX)
			return false;
	}
	return true;
}

static bool wire_field_ok(const struct wire_field *rule, const struct wire_at *f)
{
	switch (rule->kind) {
	case WIRE_ONE_U32:
		return f->type == WIRE_VARINT && f->value <= UINT32_MAX;
	case WIRE_EACH_U32:
		if (f->type == WIRE_VARINT)
			return f->value <= UINT32_MAX;
		return f->type == WIRE_BYTES && wire_packed_u32(f->bytes, f->end);
	case WIRE_ONE_BYTES:
		return f->type == WIRE_BYTES;
	case WIRE_ONE_MESSAGE:
		return f->type == WIRE_BYTES &&
		       criu_wire_check(f->bytes, (size_t)(f->end - f->bytes), rule->inner);
	}
	return false;
}

bool criu_wire_check(const uint8_t *p, size_t len, const struct wire_rules *rules)
{
	const uint8_t *end = p + len;
	uint32_t seen = 0;
	struct wire_at f;

	while (p < end) {
		size_t i = 0;

		p = wire_next(p, end, &f);
		if (!p)
			return false;
		while (i < rules->n && rules->fields[i].number != f.number)
			i++;
		if (i == rules->n)
			continue; /* a field stasis does not read */
		if (rules->fields[i].kind != WIRE_EACH_U32 && (seen & 1u << i))
			return false;
		seen |= 1u << i;
		if (!wire_field_ok(&rules->fields[i], &f))
			return false;
	}
	return true;
}

/* The fields read, by their numbers in CRIU's .proto files. */
static const struct wire_field pstree_fields[] = {
    {1, WIRE_ONE_U32, NULL},  /* pid */
    {2, WIRE_ONE_U32, NULL},  /* ppid */
    {3, WIRE_ONE_U32, NULL},  /* pgid */
    {4, WIRE_ONE_U32, NULL},  /* sid */
    {5, WIRE_EACH_U32, NULL}, /* threads */
};
static const struct wire_rules pstree_rules = {pstree_fields, ARRAY_SIZE(pstree_fields)};

static const struct wire_field creds_fields[] = {
    {1, WIRE_ONE_U32, NULL}, {2, WIRE_ONE_U32, NULL}, {3, WIRE_ONE_U32, NULL},
    {4, WIRE_ONE_U32, NULL}, {5, WIRE_ONE_U32, NULL}, {6, WIRE_ONE_U32, NULL},
    {7, WIRE_ONE_U32, NULL}, {8, WIRE_ONE_U32, NULL}, /* uid to fsgid */
};
static const struct wire_rules creds_rules = {creds_fields, ARRAY_SIZE(creds_fields)};

static const struct wire_field task_core_fields[] = {
    {1, WIRE_ONE_U32, NULL},   /* task_state */
    {6, WIRE_ONE_BYTES, NULL}, /* comm */
};
static const struct wire_rules task_core_rules = {task_core_fields, ARRAY_SIZE(task_core_fields)};

static const struct wire_field thread_core_fields[] = {
    {10, WIRE_ONE_MESSAGE, &creds_rules}, /* creds */
    {13, WIRE_ONE_BYTES, NULL},		  /* comm */
};
static const struct wire_rules thread_core_rules = {thread_core_fields,
						    ARRAY_SIZE(thread_core_fields)};

static const struct wire_field core_fields[] = {
    {3, WIRE_ONE_MESSAGE, &task_core_rules},   /* tc */
    {5, WIRE_ONE_MESSAGE, &thread_core_rules}, /* thread_core */
};
static const struct wire_rules core_rules = {core_fields, ARRAY_SIZE(core_fields)};

/* ---- pstree.img ---- */

static bool pid_ok(uint32_t pid, bool zero_ok)
{
	return (zero_ok || pid > 0) && pid <= CRIU_PID_MAX;
}

/* One entry's process, its threads copied: NULL, or what is wrong. */
static const char *take_process(struct criu_image_process *p, const PstreeEntry *e, size_t *threads)
{
	if (!pid_ok(e->pid, false) || !pid_ok(e->ppid, true) || !pid_ok(e->pgid, true) ||
	    !pid_ok(e->sid, true))
		return "a PID out of range";
	if (e->n_threads > CRIU_IMAGE_MAX_THREADS - *threads)
		return "more threads than stasis reads";
	*threads += e->n_threads;
	p->threads = malloc(e->n_threads ? e->n_threads * sizeof(*p->threads) : 1);
	if (!p->threads)
		return "out of memory";
	if (e->n_threads)
		memcpy(p->threads, e->threads, e->n_threads * sizeof(*p->threads));
	p->nthreads = e->n_threads;
	p->pid = (pid_t)e->pid;
	p->ppid = (pid_t)e->ppid;
	p->pgid = (pid_t)e->pgid;
	p->sid = (pid_t)e->sid;
	return NULL;
}

static int compare_tids(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* The shape CRIU's restore needs: the root first, each other process after
 * its parent, no PID twice. */
static const char *pstree_shape(const struct criu_image_tree *t)
{
	for (size_t i = 0; i < t->nprocs; i++) {
		bool parent = i == 0;

		for (size_t j = 0; j < i; j++) {
			if (t->procs[j].pid == t->procs[i].pid)
				return "a PID is there twice";
			parent = parent || t->procs[j].pid == t->procs[i].ppid;
		}
		if (!parent)
			return "a process comes before its parent";
	}
	return NULL;
}

/* Each live process's threads are PIDs that name it once; no TID is
 * there twice in the tree. */
static const char *threads_shape(const struct criu_image_tree *t)
{
	_cleanup_free_ uint32_t *all = NULL;
	size_t n = 0;

	for (size_t i = 0; i < t->nprocs; i++) {
		const struct criu_image_process *p = &t->procs[i];
		size_t leader = 0;

		if (p->zombie)
			continue;
		for (size_t j = 0; j < p->nthreads; j++) {
			if (!pid_ok(p->threads[j], false))
				return "a thread's PID is out of range";
			leader += p->threads[j] == (uint32_t)p->pid;
		}
		if (leader != 1)
			return "a process's threads do not name it once";
		n += p->nthreads;
	}
	all = calloc(n ? n : 1, sizeof(*all));
	if (!all)
		return "out of memory";
	n = 0;
	for (size_t i = 0; i < t->nprocs; i++)
		for (size_t j = 0; !t->procs[i].zombie && j < t->procs[i].nthreads; j++)
			all[n++] = t->procs[i].threads[j];
	qsort(all, n, sizeof(*all), compare_tids);
	for (size_t i = 1; i < n; i++)
		if (all[i] == all[i - 1])
			return "a thread is there twice";
	return NULL;
}

int criu_image_parse_pstree(const uint8_t *buf, size_t len, struct criu_image_tree *tree,
			    struct stasis_error **err)
{
	const char *bad = NULL;
	size_t threads = 0;
	struct entries e;
	struct budget b;
	int r;

	memset(tree, 0, sizeof(*tree));
	criu_budget_init(&b);
	r = criu_parse_entries(buf, len, "pstree.img", IMG_COMMON_MAGIC, PSTREE_MAGIC,
			       &pstree_entry__descriptor, &pstree_rules, MANIFEST_MAX_PROCESSES, &b,
			       &e, err);
	if (r < 0)
		return r;
	tree->procs = calloc(e.n ? e.n : 1, sizeof(*tree->procs));
	if (!tree->procs)
		bad = "out of memory";
	for (size_t i = 0; !bad && i < e.n; i++) {
		bad = take_process(&tree->procs[i], (const PstreeEntry *)e.msg[i], &threads);
		tree->nprocs += !bad;
	}
	if (!bad)
		bad = tree->nprocs == 0 ? "no process" : pstree_shape(tree);
	criu_entries_free(&e, &b);
	if (!bad)
		return 0;
	criu_image_tree_free(tree);
	return criu_malformed(err, "pstree.img", bad);
}

/* ---- core-TID.img ---- */

static void take_creds(struct manifest_creds *c, const CredsEntry *e)
{
	*c = (struct manifest_creds){
	    .known = true,
	    .uid = e->uid,
	    .euid = e->euid,
	    .suid = e->suid,
	    .fsuid = e->fsuid,
	    .gid = e->gid,
	    .egid = e->egid,
	    .sgid = e->sgid,
	    .fsgid = e->fsgid,
	};
}

/* The task's name, else a thread's own; each within comm's bytes. */
static void take_core(struct criu_image_core *core, const CoreEntry *c)
{
	if (c->tc) {
		core->task_state = c->tc->task_state;
		snprintf(core->comm, sizeof(core->comm), "%s", c->tc->comm ? c->tc->comm : "");
	}
	if (!c->thread_core)
		return;
	core->has_thread_core = true;
	if (!core->comm[0] && c->thread_core->comm)
		snprintf(core->comm, sizeof(core->comm), "%s", c->thread_core->comm);
	if (c->thread_core->creds) {
		take_creds(&core->creds, c->thread_core->creds);
		core->has_creds = true;
	}
}

int criu_image_parse_core(const uint8_t *buf, size_t len, struct criu_image_core *core,
			  struct stasis_error **err)
{
	struct entries e;
	struct budget b;
	int r;

	memset(core, 0, sizeof(*core));
	criu_budget_init(&b);
	/* One entry, as CRIU reads one; nothing after it. */
	r = criu_parse_entries(buf, len, "core image", IMG_COMMON_MAGIC, CORE_MAGIC,
			       &core_entry__descriptor, &core_rules, 1, &b, &e, err);
	if (r < 0)
		return r;
	if (e.n != 1) {
		criu_entries_free(&e, &b);
		return criu_malformed(err, "core image", "not one whole entry");
	}
	take_core(core, (const CoreEntry *)e.msg[0]);
	criu_entries_free(&e, &b);
	return 0;
}

/* ---- the image's folder ---- */

/* The whole of dirfd's name, which must be there. */
static int read_file(int dirfd, const char *name, size_t max, uint8_t **buf, size_t *len,
		     struct stasis_error **err)
{
	int r = criu_read_image(dirfd, name, max, buf, len, err);

	if (r == 0)
		return stasis_error_errno(err, ENOENT, "opening CRIU's %s: %s", name,
					  strerror(ENOENT));
	return r < 0 ? r : 0;
}

static int read_core(int dirfd, uint32_t tid, struct criu_image_core *core,
		     struct stasis_error **err)
{
	_cleanup_free_ uint8_t *buf = NULL;
	char name[32];
	size_t len;
	int r;

	snprintf(name, sizeof(name), "core-%u.img", tid);
	r = read_file(dirfd, name, CRIU_CORE_MAX_BYTES, &buf, &len, err);
	if (r == 0)
		r = criu_image_parse_core(buf, len, core, err);
	if (r < 0)
		stasis_error_wrap(err, "thread %u", tid);
	return r;
}

/* A live thread's core must hold its credentials: CRIU restores a thread
 * without them as root. */
static int live_creds(const struct criu_image_core *core, uint32_t tid, struct stasis_error **err)
{
	if (core->has_thread_core && core->has_creds)
		return 0;
	return stasis_error_set(err, EINVAL, STASIS_DOMAIN_IMAGE, 0,
				"CRIU's core-%u.img states no credentials", tid);
}

/* The leader's core: the process's name and state, and but for a
 * zombie its credentials. */
static int read_leader(int dirfd, struct criu_image_process *p, struct stasis_error **err)
{
	struct criu_image_core core;
	int r = read_core(dirfd, (uint32_t)p->pid, &core, err);

	if (r < 0)
		return r;
	if (!core.task_state)
		return criu_malformed(err, "core image",
				      "a process's core without its task's state");
	snprintf(p->comm, sizeof(p->comm), "%s", core.comm);
	p->zombie = core.task_state == CRIU_TASK_DEAD;
	if (p->zombie)
		return 0;
	r = live_creds(&core, (uint32_t)p->pid, err);
	p->creds = core.creds;
	return r;
}

/* The other threads of a live process: the leader's credentials. */
static int read_threads(int dirfd, const struct criu_image_process *p, struct stasis_error **err)
{
	struct criu_image_core core;
	int r;

	for (size_t i = 0; !p->zombie && i < p->nthreads; i++) {
		if (p->threads[i] == (uint32_t)p->pid)
			continue;
		r = read_core(dirfd, p->threads[i], &core, err);
		if (r == 0)
			r = live_creds(&core, p->threads[i], err);
		if (r < 0)
			return r;
		if (!manifest_creds_equal(&core.creds, &p->creds))
			return stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_IMAGE, 0,
						"thread %u of PID %d runs with other credentials "
						"than its process, which stasis does not record",
						p->threads[i], (int)p->pid);
	}
	return 0;
}

int criu_image_tree_read(const char *dir, struct criu_image_tree *tree, struct stasis_error **err)
{
	_cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_free_ uint8_t *buf = NULL;
	const char *bad;
	size_t len;
	int r;

	memset(tree, 0, sizeof(*tree));
	if (dirfd < 0)
		return stasis_error_errno(err, errno, "opening CRIU's images in %s", dir);
	r = read_file(dirfd, "pstree.img", CRIU_IMAGES_MAX_FILE, &buf, &len, err);
	if (r == 0)
		r = criu_image_parse_pstree(buf, len, tree, err);
	/* The leaders first: which are zombies says whose threads count. */
	for (size_t i = 0; r == 0 && i < tree->nprocs; i++)
		r = read_leader(dirfd, &tree->procs[i], err);
	if (r == 0 && (bad = threads_shape(tree)))
		r = criu_malformed(err, "pstree.img", bad);
	for (size_t i = 0; r == 0 && i < tree->nprocs; i++)
		r = read_threads(dirfd, &tree->procs[i], err);
	if (r < 0)
		criu_image_tree_free(tree);
	return r;
}

void criu_image_tree_free(struct criu_image_tree *tree)
{
	if (!tree)
		return;
	for (size_t i = 0; i < tree->nprocs; i++)
		free(tree->procs[i].threads);
	free(tree->procs);
	memset(tree, 0, sizeof(*tree));
}
