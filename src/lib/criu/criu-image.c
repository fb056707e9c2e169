/* SPDX-License-Identifier: MIT */
/* A reader of the protobuf wire format for the few fields stasis needs of
 * CRIU's images (images/pstree.proto, core.proto, creds.proto). A file is
 * CRIU's common magic, the file's own magic, then entries, each a 32-bit
 * size and that many bytes of one message. */
#include "criu-image.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* Field numbers, from CRIU's .proto files. */
enum {
	PSTREE_PID = 1,
	PSTREE_PPID = 2,
	PSTREE_PGID = 3,
	PSTREE_SID = 4,
	PSTREE_THREADS = 5,
	CORE_TC = 3,
	CORE_THREAD_CORE = 5,
	TC_TASK_STATE = 1,
	TC_COMM = 6,
	THREAD_CORE_CREDS = 10,
	THREAD_CORE_COMM = 13,
};

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };

struct pb {
	const uint8_t *p, *end;
};

struct pb_field {
	uint32_t number;
	int type;
	uint64_t value;	 /* a varint's or a fixed field's */
	struct pb bytes; /* a length-delimited field's */
};

static int malformed(struct stasis_error **err, const char *file, const char *what)
{
	return stasis_error_set(err, EINVAL, STASIS_DOMAIN_IMAGE, 0, "CRIU's %s is malformed: %s",
				file, what);
}

static int pb_varint(struct pb *b, uint64_t *out)
{
	uint64_t v = 0;

	for (int i = 0; i < 10 && b->p < b->end; i++) {
		uint8_t c = *b->p++;

		if (i == 9 && c > 1)
			return -1; /* beyond 64 bits */
		v |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -1;
}

/* The next field: 1, 0 at the message's end, -1 when it is malformed
 * (groups, which proto2's deprecated form has and CRIU never writes,
 * count as malformed). */
static int pb_next(struct pb *b, struct pb_field *f)
{
	uint64_t key, len;

	if (b->p == b->end)
		return 0;
	if (pb_varint(b, &key) < 0 || key >> 3 == 0 || key >> 3 > (1u << 29) - 1)
		return -1;
	f->number = (uint32_t)(key >> 3);
	f->type = (int)(key & 7);
	switch (f->type) {
	case WIRE_VARINT:
		return pb_varint(b, &f->value) < 0 ? -1 : 1;
	case WIRE_FIXED64:
	case WIRE_FIXED32:
		len = f->type == WIRE_FIXED64 ? 8 : 4;
		if ((uint64_t)(b->end - b->p) < len)
			return -1;
		b->p += len; /* stasis reads none */
		return 1;
	case WIRE_BYTES:
		if (pb_varint(b, &len) < 0 || len > (uint64_t)(b->end - b->p))
			return -1;
		f->bytes.p = b->p;
		f->bytes.end = b->p + len;
		b->p += len;
		return 1;
	default:
		return -1;
	}
}

/* A uint32 field: a varint that fits (protobuf-c keeps the low 32 bits of
 * a bigger one: refused, so that stasis reads what CRIU reads). */
static int pb_u32(const struct pb_field *f, uint32_t *out)
{
	if (f->type != WIRE_VARINT || f->value > UINT32_MAX)
		return -1;
	*out = (uint32_t)f->value;
	return 0;
}

/* A field stasis reads, met once: a second would replace the first (or be
 * merged with it) where CRIU reads it. */
static int pb_once(uint32_t *seen, const struct pb_field *f)
{
	if (*seen & (1u << f->number))
		return -1;
	*seen |= 1u << f->number;
	return 0;
}

static void copy_comm(char *out, size_t len, const struct pb *s)
{
	size_t n = (size_t)(s->end - s->p);

	if (n > len - 1)
		n = len - 1;
	memcpy(out, s->p, n);
	out[n] = '\0';
}

/* Checks the magic numbers; b is left at the first entry. */
static int image_magic(struct pb *b, uint32_t magic)
{
	uint32_t head[2];

	if (b->end - b->p < (ptrdiff_t)sizeof(head))
		return -1;
	memcpy(head, b->p, sizeof(head));
	b->p += sizeof(head);
	return head[0] == CRIU_IMG_COMMON_MAGIC && head[1] == magic ? 0 : -1;
}

/* The next entry: 1, 0 at the file's end, -1 when it is cut short. */
static int image_entry(struct pb *b, struct pb *entry)
{
	uint32_t size;

	if (b->p == b->end)
		return 0;
	if (b->end - b->p < (ptrdiff_t)sizeof(size))
		return -1;
	memcpy(&size, b->p, sizeof(size));
	b->p += sizeof(size);
	if (size > (uint64_t)(b->end - b->p))
		return -1;
	entry->p = b->p;
	entry->end = b->p + size;
	b->p += size;
	return 1;
}

static bool pid_ok(uint32_t pid, bool zero_ok)
{
	return (zero_ok || pid > 0) && pid <= CRIU_PID_MAX;
}

static int add_thread(struct criu_image_process *p, size_t *cap, uint64_t tid, size_t *total)
{
	uint32_t *threads;

	if (tid > UINT32_MAX || ++*total > CRIU_IMAGE_MAX_THREADS)
		return -1;
	threads = grow_array(p->threads, p->nthreads, cap, sizeof(*threads), 4);
	if (!threads)
		return -ENOMEM;
	p->threads = threads;
	p->threads[p->nthreads++] = (uint32_t)tid;
	return 0;
}

/* Threads come one by one or packed in one field (protobuf-c reads both). */
static int pstree_threads(struct criu_image_process *p, size_t *cap, const struct pb_field *f,
			  size_t *total)
{
	struct pb packed = f->bytes;
	uint64_t tid;
	int r;

	if (f->type == WIRE_VARINT)
		return add_thread(p, cap, f->value, total);
	if (f->type != WIRE_BYTES)
		return -1;
	while (packed.p < packed.end) {
		if (pb_varint(&packed, &tid) < 0)
			return -1;
		r = add_thread(p, cap, tid, total);
		if (r < 0)
			return r;
	}
	return 0;
}

static int pstree_entry(struct pb entry, struct criu_image_process *p, size_t *total)
{
	uint32_t seen = 0, v,
		 want = 1u << PSTREE_PID | 1u << PSTREE_PPID | 1u << PSTREE_PGID | 1u << PSTREE_SID;
	size_t cap = 0;
	struct pb_field f;
	int r;

	while ((r = pb_next(&entry, &f)) > 0) {
		if (f.number == PSTREE_THREADS) {
			r = pstree_threads(p, &cap, &f, total);
			if (r < 0)
				return r;
			continue;
		}
		if (f.number > PSTREE_SID)
			continue;
		if (pb_once(&seen, &f) < 0 || pb_u32(&f, &v) < 0 ||
		    !pid_ok(v, f.number != PSTREE_PID))
			return -1;
		if (f.number == PSTREE_PID)
			p->pid = (pid_t)v;
		else if (f.number == PSTREE_PPID)
			p->ppid = (pid_t)v;
		else if (f.number == PSTREE_PGID)
			p->pgid = (pid_t)v;
		else
			p->sid = (pid_t)v;
	}
	return r < 0 || (seen & want) != want ? -1 : 0;
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
	struct pb b = {buf, buf + len}, entry;
	size_t cap = 0, threads = 0;
	const char *bad;
	int r;

	memset(tree, 0, sizeof(*tree));
	if (image_magic(&b, CRIU_PSTREE_MAGIC) < 0)
		return malformed(err, "pstree.img", "not a process tree image");
	while ((r = image_entry(&b, &entry)) > 0) {
		struct criu_image_process *p;

		if (tree->nprocs == MANIFEST_MAX_PROCESSES) {
			r = -E2BIG;
			break;
		}
		p = grow_array(tree->procs, tree->nprocs, &cap, sizeof(*p), 16);
		if (!p) {
			r = -ENOMEM;
			break;
		}
		tree->procs = p;
		p = &tree->procs[tree->nprocs++];
		memset(p, 0, sizeof(*p));
		r = pstree_entry(entry, p, &threads);
		if (r < 0)
			break;
	}
	bad = r == -ENOMEM	  ? "out of memory"
	      : r == -E2BIG	  ? "more processes than a manifest may list"
	      : r < 0		  ? "an entry cut short, or a field not as CRIU writes it"
	      : tree->nprocs == 0 ? "no process"
				  : pstree_shape(tree);
	if (!bad)
		return 0;
	criu_image_tree_free(tree);
	return malformed(err, "pstree.img", bad);
}

static int parse_creds(struct pb m, struct manifest_creds *c)
{
	uint32_t *ids[] = {NULL,     &c->uid,  &c->gid,	  &c->euid, &c->egid,
			   &c->suid, &c->sgid, &c->fsuid, &c->fsgid};
	uint32_t seen = 0;
	struct pb_field f;
	int r;

	while ((r = pb_next(&m, &f)) > 0) {
		if (f.number >= ARRAY_SIZE(ids))
			continue;
		if (pb_once(&seen, &f) < 0 || pb_u32(&f, ids[f.number]) < 0)
			return -1;
	}
	if (r < 0 || seen != 0x1fe) /* fields 1 to 8, required */
		return -1;
	c->known = true;
	return 0;
}

static int parse_thread_core(struct pb m, struct criu_image_core *core)
{
	uint32_t seen = 0;
	struct pb_field f;
	int r;

	while ((r = pb_next(&m, &f)) > 0) {
		if (f.number != THREAD_CORE_CREDS && f.number != THREAD_CORE_COMM)
			continue;
		if (pb_once(&seen, &f) < 0 || f.type != WIRE_BYTES)
			return -1;
		if (f.number == THREAD_CORE_COMM && !core->comm[0])
			copy_comm(core->comm, sizeof(core->comm), &f.bytes);
		if (f.number == THREAD_CORE_CREDS && parse_creds(f.bytes, &core->creds) < 0)
			return -1;
	}
	core->has_creds = core->creds.known;
	return r;
}

static int parse_task_core(struct pb m, struct criu_image_core *core)
{
	uint32_t seen = 0;
	struct pb_field f;
	int r;

	while ((r = pb_next(&m, &f)) > 0) {
		if (f.number != TC_TASK_STATE && f.number != TC_COMM)
			continue;
		if (pb_once(&seen, &f) < 0)
			return -1;
		if (f.number == TC_TASK_STATE && pb_u32(&f, &core->task_state) < 0)
			return -1;
		if (f.number == TC_COMM && f.type != WIRE_BYTES)
			return -1;
		if (f.number == TC_COMM)
			copy_comm(core->comm, sizeof(core->comm), &f.bytes);
	}
	return r < 0 || !(seen & 1u << TC_TASK_STATE) ? -1 : 0;
}

int criu_image_parse_core(const uint8_t *buf, size_t len, struct criu_image_core *core,
			  struct stasis_error **err)
{
	struct pb b = {buf, buf + len}, entry;
	uint32_t seen = 0;
	struct pb_field f;
	int r;

	memset(core, 0, sizeof(*core));
	if (image_magic(&b, CRIU_CORE_MAGIC) < 0)
		return malformed(err, "core image", "not a core image");
	/* One entry, as CRIU reads one; nothing after it. */
	if (image_entry(&b, &entry) != 1 || b.p != b.end)
		return malformed(err, "core image", "not one whole entry");
	/* The task's name first: a thread's own may follow it. */
	while ((r = pb_next(&entry, &f)) > 0) {
		if (f.number != CORE_TC && f.number != CORE_THREAD_CORE)
			continue;
		if (pb_once(&seen, &f) < 0 || f.type != WIRE_BYTES)
			r = -1;
		else if (f.number == CORE_TC)
			r = parse_task_core(f.bytes, core);
		else
			r = parse_thread_core(f.bytes, core);
		if (r < 0)
			break;
	}
	if (r < 0)
		return malformed(err, "core image", "a field not as CRIU writes it");
	core->has_thread_core = seen & 1u << CORE_THREAD_CORE;
	return 0;
}

/* The whole of dir/name, a regular file of max bytes at most. */
static int read_image_file(int dirfd, const char *name, size_t max, uint8_t **out, size_t *len,
			   struct stasis_error **err)
{
	_cleanup_close_ int fd =
	    openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	_cleanup_free_ uint8_t *buf = NULL;
	struct stat st;
	size_t got = 0;

	if (fd < 0)
		return stasis_error_errno(err, errno, "opening CRIU's %s", name);
	if (fstat(fd, &st) < 0)
		return stasis_error_errno(err, errno, "reading CRIU's %s", name);
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max)
		return malformed(err, name, S_ISREG(st.st_mode) ? "too big" : "not a regular file");
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? stasis_error_errno(err, errno, "reading CRIU's %s", name)
				     : malformed(err, name, "shorter than its size");
		got += (size_t)n;
	}
	*out = TAKE_PTR(buf);
	*len = got;
	return 0;
}

static int read_core(int dirfd, uint32_t tid, struct criu_image_core *core,
		     struct stasis_error **err)
{
	_cleanup_free_ uint8_t *buf = NULL;
	char name[32];
	size_t len;
	int r;

	snprintf(name, sizeof(name), "core-%u.img", tid);
	r = read_image_file(dirfd, name, CRIU_CORE_MAX_BYTES, &buf, &len, err);
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
		return malformed(err, "core image", "a process's core without its task's state");
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
	r = read_image_file(dirfd, "pstree.img", CRIU_IMAGE_MAX_BYTES, &buf, &len, err);
	if (r == 0)
		r = criu_image_parse_pstree(buf, len, tree, err);
	/* The leaders first: which are zombies says whose threads count. */
	for (size_t i = 0; r == 0 && i < tree->nprocs; i++)
		r = read_leader(dirfd, &tree->procs[i], err);
	if (r == 0 && (bad = threads_shape(tree)))
		r = malformed(err, "pstree.img", bad);
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
