/* SPDX-License-Identifier: MIT */
/* CRIU's image files through the protobuf-c code of its build. A file is a
 * magic number or two (criu/include/magic.h), then entries, each a 32-bit
 * size and that many bytes of one message. */
#include "criu-images.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.pb-c.h"
#include "criu-images-internal.h"
#include "fdinfo.pb-c.h"
#include "fs.pb-c.h"
#include "pstree.pb-c.h"
#include "stats.pb-c.h"
#include "util.h"

static void *budget_alloc(void *data, size_t size)
{
	struct budget *b = data;

	if (size > b->left) {
		b->spent = true;
		return NULL;
	}
	b->left -= size;
	return malloc(size);
}

static void budget_free(void *data, void *p)
{
	(void)data;
	free(p);
}

void criu_budget_init(struct budget *b)
{
	b->a.alloc = budget_alloc;
	b->a.free = budget_free;
	b->a.allocator_data = b;
	b->left = CRIU_IMAGES_BUDGET;
	b->spent = false;
}

int criu_malformed(struct stasis_error **err, const char *file, const char *what)
{
	return stasis_error_set(err, EINVAL, STASIS_DOMAIN_IMAGE, 0, "CRIU's %s is malformed: %s",
				file, what);
}

void criu_entries_free(struct entries *e, struct budget *b)
{
	for (size_t i = 0; i < e->n; i++)
		protobuf_c_message_free_unpacked(e->msg[i], &b->a);
	free(e->msg);
	e->msg = NULL;
	e->n = 0;
}

static uint32_t get_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v)); /* CRIU writes them in the host's order */
	return v;
}

int criu_parse_entries(const uint8_t *buf, size_t len, const char *name, uint32_t first,
		       uint32_t magic, const ProtobufCMessageDescriptor *desc,
		       const struct wire_rules *rules, size_t max, struct budget *b,
		       struct entries *out, struct stasis_error **err)
{
	const char *why = NULL;
	size_t at = 8, cap = 0;

	memset(out, 0, sizeof(*out));
	if (len < 8 || get_u32(buf) != first || get_u32(buf + 4) != magic)
		return criu_malformed(err, name,
				      "not the image CRIU writes there (its magic differs)");
	while (at < len && !why) {
		ProtobufCMessage *msg;
		uint32_t size;

		if (len - at < 4) {
			why = "an entry's size is cut";
			break;
		}
		size = get_u32(buf + at);
		at += 4;
		if (size > len - at)
			why = "an entry runs past the end of the file";
		else if (out->n == max)
			why = "too many entries";
		if (why)
			break;
		if (out->n == cap) {
			void *more = grow_array(out->msg, out->n, &cap, sizeof(*out->msg), 16);

			if (!more) {
				criu_entries_free(out, b);
				return stasis_error_errno(err, ENOMEM, "out of memory");
			}
			out->msg = more;
		}
		if (rules && !criu_wire_check(buf + at, size, rules)) {
			why = "a field given twice, or not as CRIU writes it";
			break;
		}
		msg = protobuf_c_message_unpack(desc, &b->a, size, buf + at);
		if (!msg)
			why = b->spent ? "it decodes to too much" : "an entry does not decode";
		else
			out->msg[out->n++] = msg;
		at += size;
	}
	if (!why)
		return 0;
	criu_entries_free(out, b);
	return criu_malformed(err, name, why);
}

/* Not blocked by a FIFO in the file's place: O_NONBLOCK opens it at once,
 * and it is then refused as not a regular file. */
int criu_read_image(int dirfd, const char *name, size_t max, uint8_t **out, size_t *len,
		    struct stasis_error **err)
{
	_cleanup_close_ int fd =
	    openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	_cleanup_free_ uint8_t *buf = NULL;
	struct stat st;
	size_t got = 0;

	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0 || fstat(fd, &st) < 0)
		return stasis_error_errno(err, errno, "reading CRIU's %s: %s", name,
					  strerror(errno));
	if (!S_ISREG(st.st_mode))
		return criu_malformed(err, name, "not a regular file");
	if ((uint64_t)st.st_size > max)
		return criu_malformed(err, name, "too big");
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return stasis_error_errno(err, errno, "reading CRIU's %s: %s", name,
						  strerror(errno));
		if (n == 0)
			return criu_malformed(err, name, "it shrank while read");
		got += (size_t)n;
	}
	*out = TAKE_PTR(buf);
	*len = got;
	return 1;
}

/* One file of one entry or more: 1 with its entries, 0 when it is not
 * there, or an error. */
static int read_entries(int dirfd, const char *name, uint32_t first, uint32_t magic,
			const ProtobufCMessageDescriptor *desc, size_t max, struct budget *b,
			struct entries *out, struct stasis_error **err)
{
	_cleanup_free_ uint8_t *buf = NULL;
	size_t len = 0;
	int r = criu_read_image(dirfd, name, CRIU_IMAGES_MAX_FILE, &buf, &len, err);

	memset(out, 0, sizeof(*out));
	if (r <= 0)
		return r;
	r = criu_parse_entries(buf, len, name, first, magic, desc, NULL, max, b, out, err);
	return r < 0 ? r : 1;
}

/* ---- statistics ---- */

static int parse_stats(const uint8_t *buf, size_t len, const char *name, struct budget *b,
		       StatsEntry **out, struct stasis_error **err)
{
	struct entries e;
	int r = criu_parse_entries(buf, len, name, IMG_SERVICE_MAGIC, STATS_MAGIC,
				   &stats_entry__descriptor, NULL, 1, b, &e, err);

	if (r < 0)
		return r;
	if (e.n != 1) {
		criu_entries_free(&e, b);
		return criu_malformed(err, name, "no entry");
	}
	*out = (StatsEntry *)e.msg[0];
	free(e.msg);
	return 0;
}

int criu_stats_parse_dump(const uint8_t *buf, size_t len, struct criu_dump_stats *out,
			  struct stasis_error **err)
{
	const DumpStatsEntry *d;
	struct budget b;
	StatsEntry *s;
	int r;

	criu_budget_init(&b);
	memset(out, 0, sizeof(*out));
	r = parse_stats(buf, len, CRIU_STATS_DUMP, &b, &s, err);
	if (r < 0)
		return r;
	d = s->dump;
	if (!d) {
		stats_entry__free_unpacked(s, &b.a);
		return criu_malformed(err, CRIU_STATS_DUMP, "no dump statistics");
	}
	*out = (struct criu_dump_stats){
	    .present = true,
	    .freezing_time = d->freezing_time,
	    .frozen_time = d->frozen_time,
	    .memdump_time = d->memdump_time,
	    .memwrite_time = d->memwrite_time,
	    .pages_scanned = d->pages_scanned,
	    .pages_skipped_parent = d->pages_skipped_parent,
	    .pages_written = d->pages_written,
	    .pages_lazy = d->pages_lazy,
	    .has_irmap_resolve = d->has_irmap_resolve,
	    .irmap_resolve = d->irmap_resolve,
	    .has_page_pipes = d->has_page_pipes && d->has_page_pipe_bufs,
	    .page_pipes = d->page_pipes,
	    .page_pipe_bufs = d->page_pipe_bufs,
	    .has_shpages =
		d->has_shpages_scanned && d->has_shpages_skipped_parent && d->has_shpages_written,
	    .shpages_scanned = d->shpages_scanned,
	    .shpages_skipped_parent = d->shpages_skipped_parent,
	    .shpages_written = d->shpages_written,
	};
	stats_entry__free_unpacked(s, &b.a);
	return 0;
}

int criu_stats_parse_restore(const uint8_t *buf, size_t len, struct criu_restore_stats *out,
			     struct stasis_error **err)
{
	const RestoreStatsEntry *rs;
	struct budget b;
	StatsEntry *s;
	int r;

	criu_budget_init(&b);
	memset(out, 0, sizeof(*out));
	r = parse_stats(buf, len, CRIU_STATS_RESTORE, &b, &s, err);
	if (r < 0)
		return r;
	rs = s->restore;
	if (!rs) {
		stats_entry__free_unpacked(s, &b.a);
		return criu_malformed(err, CRIU_STATS_RESTORE, "no restore statistics");
	}
	*out = (struct criu_restore_stats){
	    .present = true,
	    .pages_compared = rs->pages_compared,
	    .pages_skipped_cow = rs->pages_skipped_cow,
	    .forking_time = rs->forking_time,
	    .restore_time = rs->restore_time,
	    .has_pages_restored = rs->has_pages_restored,
	    .pages_restored = rs->pages_restored,
	};
	stats_entry__free_unpacked(s, &b.a);
	return 0;
}

/* The statistics file name of dir: 1 with its bytes, 0 when there is none. */
static int read_stats_file(const char *dir, const char *name, uint8_t **buf, size_t *len,
			   struct stasis_error **err)
{
	_cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dirfd < 0)
		return stasis_error_errno(err, errno, "opening %s: %s", dir, strerror(errno));
	return criu_read_image(dirfd, name, 1u << 20, buf, len, err);
}

int criu_stats_read_dump(const char *dir, struct criu_dump_stats *out, struct stasis_error **err)
{
	_cleanup_free_ uint8_t *buf = NULL;
	size_t len = 0;
	int r = read_stats_file(dir, CRIU_STATS_DUMP, &buf, &len, err);

	memset(out, 0, sizeof(*out));
	return r <= 0 ? r : criu_stats_parse_dump(buf, len, out, err);
}

int criu_stats_read_restore(const char *dir, struct criu_restore_stats *out,
			    struct stasis_error **err)
{
	_cleanup_free_ uint8_t *buf = NULL;
	size_t len = 0;
	int r = read_stats_file(dir, CRIU_STATS_RESTORE, &buf, &len, err);

	memset(out, 0, sizeof(*out));
	return r <= 0 ? r : criu_stats_parse_restore(buf, len, out, err);
}

/* ---- the process tree, its files and sockets ---- */

/* What the views read of one image. */
struct reader {
	int dirfd;
	struct budget b;
	struct entries files; /* files.img */
	FileEntry **by_id;    /* its entries sorted by id */
	struct criu_tree_view *v;
	struct stasis_error **err;
};

static const char *task_state_name(uint32_t state)
{
	/* CRIU's TASK_* (criu/include/pstree.h), named as crit names them. */
	switch (state) {
	case 1:
		return "Alive";
	case 2:
		return "Dead";
	case 3:
		return "Stopped";
	case 6:
		return "Zombie";
	default:
		return "Unknown";
	}
}

static void copy_printable(char *dst, size_t size, const char *src)
{
	size_t i = 0;

	for (; src && src[i] && i + 1 < size; i++)
		dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? src[i] : '?';
	dst[i] = '\0';
}

static int pstree_read(struct reader *rd)
{
	struct entries e;
	int r =
	    read_entries(rd->dirfd, "pstree.img", IMG_COMMON_MAGIC, PSTREE_MAGIC,
			 &pstree_entry__descriptor, CRIU_IMAGES_MAX_PROCESSES, &rd->b, &e, rd->err);

	if (r == 0)
		return criu_malformed(rd->err, "pstree.img", "it is missing");
	if (r < 0)
		return r;
	if (!e.n) {
		criu_entries_free(&e, &rd->b);
		return criu_malformed(rd->err, "pstree.img", "no process");
	}
	rd->v->procs = calloc(e.n, sizeof(*rd->v->procs));
	if (!rd->v->procs) {
		criu_entries_free(&e, &rd->b);
		return stasis_error_errno(rd->err, ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < e.n; i++) {
		const PstreeEntry *p = (const PstreeEntry *)e.msg[i];
		struct criu_process_view *pv = &rd->v->procs[i];

		if (!p->pid || p->pid > CRIU_PID_MAX || p->ppid > CRIU_PID_MAX ||
		    p->pgid > CRIU_PID_MAX || p->sid > CRIU_PID_MAX) {
			criu_entries_free(&e, &rd->b);
			return criu_malformed(rd->err, "pstree.img", "a PID out of range");
		}
		for (size_t j = 0; j < i; j++) {
			if ((uint32_t)rd->v->procs[j].pid == p->pid) {
				criu_entries_free(&e, &rd->b);
				return criu_malformed(rd->err, "pstree.img", "a PID given twice");
			}
		}
		pv->pid = (pid_t)p->pid;
		pv->ppid = (pid_t)p->ppid;
		pv->pgid = (pid_t)p->pgid;
		pv->sid = (pid_t)p->sid;
		pv->nthreads = p->n_threads;
		rd->v->nprocs++;
	}
	criu_entries_free(&e, &rd->b);
	return 0;
}

/* A process's name and state, from its leader's core. */
static int core_read(struct reader *rd, struct criu_process_view *pv)
{
	char name[32];
	struct entries e;
	const CoreEntry *c;
	int r;

	snprintf(name, sizeof(name), "core-%d.img", (int)pv->pid);
	r = read_entries(rd->dirfd, name, IMG_COMMON_MAGIC, CORE_MAGIC, &core_entry__descriptor, 1,
			 &rd->b, &e, rd->err);
	if (r == 0)
		return criu_malformed(rd->err, name, "it is missing");
	if (r < 0)
		return r;
	c = e.n ? (const CoreEntry *)e.msg[0] : NULL;
	if (!c || !c->tc) {
		criu_entries_free(&e, &rd->b);
		return criu_malformed(rd->err, name, "no task core");
	}
	copy_printable(pv->comm, sizeof(pv->comm), c->tc->comm);
	snprintf(pv->task_state, sizeof(pv->task_state), "%s", task_state_name(c->tc->task_state));
	criu_entries_free(&e, &rd->b);
	return 0;
}

static int compare_file_ids(const void *a, const void *b)
{
	uint32_t x = (*(FileEntry *const *)a)->id, y = (*(FileEntry *const *)b)->id;

	return x < y ? -1 : x > y;
}

static int files_read(struct reader *rd)
{
	int r = read_entries(rd->dirfd, "files.img", IMG_COMMON_MAGIC, FILES_MAGIC,
			     &file_entry__descriptor, CRIU_IMAGES_MAX_ENTRIES, &rd->b, &rd->files,
			     rd->err);

	if (r < 0)
		return r;
	rd->by_id = calloc(rd->files.n ? rd->files.n : 1, sizeof(*rd->by_id));
	if (!rd->by_id)
		return stasis_error_errno(rd->err, ENOMEM, "out of memory");
	for (size_t i = 0; i < rd->files.n; i++)
		rd->by_id[i] = (FileEntry *)rd->files.msg[i];
	qsort(rd->by_id, rd->files.n, sizeof(*rd->by_id), compare_file_ids);
	return 0;
}

static const FileEntry *file_by_id(const struct reader *rd, uint32_t id)
{
	size_t lo = 0, hi = rd->files.n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (rd->by_id[mid]->id == id)
			return rd->by_id[mid];
		if (rd->by_id[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static const char *reg_name(const struct reader *rd, uint32_t id)
{
	const FileEntry *f = file_by_id(rd, id);

	return f && f->reg && f->reg->name ? f->reg->name : NULL;
}

/* An address of CRIU's: 1 word for IPv4, 4 for IPv6, in network order. */
static char *inet_text(uint32_t family, const uint32_t *words, size_t n)
{
	char text[INET6_ADDRSTRLEN] = "?";

	if (family == AF_INET && n == 1)
		inet_ntop(AF_INET, words, text, sizeof(text));
	else if (family == AF_INET6 && n == 4)
		inet_ntop(AF_INET6, words, text, sizeof(text));
	return strdup(text);
}

/* A unix socket's name: '@' for the NUL of an abstract one, a path up to
 * its NUL, '?' for any other byte that is not printable. */
static char *unix_name(const ProtobufCBinaryData *name)
{
	size_t n = name->len < 108 ? name->len : 108;
	char *text;

	if (n && name->data[0] != '\0')
		n = strnlen((const char *)name->data, n);
	text = malloc(n + 1);
	if (!text)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		char c = (char)name->data[i];

		text[i] = i == 0 && c == '\0' ? '@' : c >= 0x20 && c < 0x7f ? c : '?';
	}
	text[n] = '\0';
	return text;
}

static const char *sock_type_name(uint32_t type)
{
	static const char *const names[] = {"", "STREAM", "DGRAM", "RAW", "RDM", "SEQPACKET"};

	return type < sizeof(names) / sizeof(names[0]) ? names[type] : "";
}

static const char *sock_state_name(uint32_t state)
{
	/* The kernel's TCP_* states, which CRIU writes for every socket. */
	static const char *const names[] = {"",		  "ESTABLISHED", "SYN_SENT",  "SYN_RECV",
					    "FIN_WAIT1",  "FIN_WAIT2",	 "TIME_WAIT", "CLOSE",
					    "CLOSE_WAIT", "LAST_ACK",	 "LISTEN",    "CLOSING"};

	return state < sizeof(names) / sizeof(names[0]) ? names[state] : "";
}

static const char *protocol_name(uint32_t proto)
{
	switch (proto) {
	case 6:
		return "TCP";
	case 17:
		return "UDP";
	case 136:
		return "UDPLITE";
	case 1:
		return "ICMP";
	case 58:
		return "ICMPV6";
	default:
		return "";
	}
}

static int add_socket(struct reader *rd, struct criu_process_view *pv, size_t *cap,
		      const FdinfoEntry *fi, const FileEntry *f)
{
	struct criu_socket_view *s;
	const SkOptsEntry *opts = NULL;

	if (!f || (!f->isk && !f->usk && !f->psk && !f->nlsk))
		return 0;
	if (pv->nsockets == *cap) {
		void *more = grow_array(pv->sockets, pv->nsockets, cap, sizeof(*pv->sockets), 8);

		if (!more)
			return stasis_error_errno(rd->err, ENOMEM, "out of memory");
		pv->sockets = more;
	}
	s = &pv->sockets[pv->nsockets];
	memset(s, 0, sizeof(*s));
	s->fd = (int)fi->fd;
	copy_printable(
	    s->fd_type, sizeof(s->fd_type),
	    protobuf_c_enum_descriptor_get_value(&fd_types__descriptor, fi->type)
		? protobuf_c_enum_descriptor_get_value(&fd_types__descriptor, fi->type)->name
		: "?");
	if (f->isk) {
		const InetSkEntry *k = f->isk;

		snprintf(s->family, sizeof(s->family), "%s",
			 k->family == AF_INET6	? "IPV6"
			 : k->family == AF_INET ? "IPV4"
						: "?");
		snprintf(s->protocol, sizeof(s->protocol), "%s", protocol_name(k->proto));
		snprintf(s->type, sizeof(s->type), "%s", sock_type_name(k->type));
		snprintf(s->state, sizeof(s->state), "%s", sock_state_name(k->state));
		s->src = inet_text(k->family, k->src_addr, k->n_src_addr);
		s->dst = inet_text(k->family, k->dst_addr, k->n_dst_addr);
		s->src_port = k->src_port & 0xffff;
		s->dst_port = k->dst_port & 0xffff;
		opts = k->opts;
		if (!s->src || !s->dst)
			goto oom;
	} else if (f->usk) {
		snprintf(s->family, sizeof(s->family), "UNIX");
		snprintf(s->type, sizeof(s->type), "%s", sock_type_name(f->usk->type));
		snprintf(s->state, sizeof(s->state), "%s", sock_state_name(f->usk->state));
		s->src = unix_name(&f->usk->name);
		opts = f->usk->opts;
		if (!s->src)
			goto oom;
	} else if (f->psk) {
		snprintf(s->family, sizeof(s->family), "PACKET");
		opts = f->psk->opts;
	} else {
		snprintf(s->family, sizeof(s->family), "NETLINK");
		opts = f->nlsk->opts;
	}
	if (opts) {
		s->send_buf = opts->so_sndbuf;
		s->recv_buf = opts->so_rcvbuf;
	}
	pv->nsockets++;
	return 0;
oom:
	free(s->src);
	free(s->dst);
	return stasis_error_errno(rd->err, ENOMEM, "out of memory");
}

/* What a descriptor's file is, in the words of /proc/PID/fd's links where
 * a path does not say it. */
static char *file_text(const struct reader *rd, const FdinfoEntry *fi, const FileEntry *f)
{
	char text[64];
	const char *name = NULL;

	if (!f)
		return strdup("?");
	if (f->reg && f->reg->name)
		name = f->reg->name;
	else if (f->fifo && f->fifo->has_regf_id)
		name = reg_name(rd, f->fifo->regf_id);
	else if (f->fifo)
		name = reg_name(rd, f->id);
	else if (f->tty && f->tty->has_regf_id)
		name = reg_name(rd, f->tty->regf_id);
	if (name) {
		char *copy = strdup(name);

		if (copy)
			copy_printable(copy, strlen(copy) + 1, name);
		return copy;
	}
	if (f->pipe)
		snprintf(text, sizeof(text), "pipe:[%u]", f->pipe->pipe_id);
	else if (f->usk)
		snprintf(text, sizeof(text), "socket:[%u]", f->usk->ino);
	else if (f->isk)
		snprintf(text, sizeof(text), "socket:[%u]", f->isk->ino);
	else if (f->efd)
		snprintf(text, sizeof(text), "anon_inode:[eventfd]");
	else if (f->epfd)
		snprintf(text, sizeof(text), "anon_inode:[eventpoll]");
	else if (f->sgfd)
		snprintf(text, sizeof(text), "anon_inode:[signalfd]");
	else if (f->tfd)
		snprintf(text, sizeof(text), "anon_inode:[timerfd]");
	else if (f->ify)
		snprintf(text, sizeof(text), "anon_inode:inotify");
	else if (f->ffy)
		snprintf(text, sizeof(text), "anon_inode:[fanotify]");
	else if (f->pidfd)
		snprintf(text, sizeof(text), "anon_inode:[pidfd]");
	else if (f->memfd)
		snprintf(text, sizeof(text), "memfd:[%u]", f->memfd->inode_id);
	else
		snprintf(text, sizeof(text), "%s:[%u]",
			 protobuf_c_enum_descriptor_get_value(&fd_types__descriptor, fi->type)
			     ? protobuf_c_enum_descriptor_get_value(&fd_types__descriptor, fi->type)
				   ->name
			     : "?",
			 f->id);
	return strdup(text);
}

static int add_file(struct reader *rd, struct criu_process_view *pv, size_t *cap, const char *fd,
		    const char *type, char *path)
{
	struct criu_file_view *fv;

	if (!path)
		return stasis_error_errno(rd->err, ENOMEM, "out of memory");
	if (pv->nfiles == *cap) {
		void *more = grow_array(pv->files, pv->nfiles, cap, sizeof(*pv->files), 8);

		if (!more) {
			free(path);
			return stasis_error_errno(rd->err, ENOMEM, "out of memory");
		}
		pv->files = more;
	}
	fv = &pv->files[pv->nfiles++];
	snprintf(fv->fd, sizeof(fv->fd), "%s", fd);
	snprintf(fv->type, sizeof(fv->type), "%s", type);
	fv->path = path;
	return 0;
}

/* One file of one entry: 0 with it, or an error (a missing one too). */
static int read_one(struct reader *rd, const char *name, uint32_t magic,
		    const ProtobufCMessageDescriptor *desc, struct entries *e)
{
	int r = read_entries(rd->dirfd, name, IMG_COMMON_MAGIC, magic, desc, 1, &rd->b, e, rd->err);

	if (r == 0)
		return criu_malformed(rd->err, name, "it is missing");
	if (r > 0 && e->n != 1) {
		criu_entries_free(e, &rd->b);
		return criu_malformed(rd->err, name, "no entry");
	}
	return r < 0 ? r : 0;
}

static int process_files(struct reader *rd, struct criu_process_view *pv, unsigned int what)
{
	size_t file_cap = 0, sock_cap = 0;
	struct entries ids, fdinfo, fs;
	const FsEntry *fse;
	char name[48];
	int r;

	snprintf(name, sizeof(name), "ids-%d.img", (int)pv->pid);
	r = read_one(rd, name, IDS_MAGIC, &task_kobj_ids_entry__descriptor, &ids);
	if (r < 0)
		return r;
	snprintf(name, sizeof(name), "fdinfo-%u.img",
		 ((const TaskKobjIdsEntry *)ids.msg[0])->files_id);
	criu_entries_free(&ids, &rd->b);
	r = read_entries(rd->dirfd, name, IMG_COMMON_MAGIC, FDINFO_MAGIC, &fdinfo_entry__descriptor,
			 CRIU_IMAGES_MAX_ENTRIES, &rd->b, &fdinfo, rd->err);
	if (r < 0)
		return r;
	for (size_t i = 0; r >= 0 && i < fdinfo.n; i++) {
		const FdinfoEntry *fi = (const FdinfoEntry *)fdinfo.msg[i];
		const FileEntry *f = file_by_id(rd, fi->id);
		const ProtobufCEnumValue *type =
		    protobuf_c_enum_descriptor_get_value(&fd_types__descriptor, fi->type);
		char fd[16];

		if (fi->fd > INT32_MAX) {
			r = criu_malformed(rd->err, name, "a descriptor out of range");
			break;
		}
		snprintf(fd, sizeof(fd), "%u", fi->fd);
		if (what & CRIU_VIEW_FILES)
			r = add_file(rd, pv, &file_cap, fd, type ? type->name : "?",
				     file_text(rd, fi, f));
		if (r >= 0 && (what & CRIU_VIEW_SOCKETS))
			r = add_socket(rd, pv, &sock_cap, fi, f);
	}
	criu_entries_free(&fdinfo, &rd->b);
	if (r < 0 || !(what & CRIU_VIEW_FILES))
		return r;
	snprintf(name, sizeof(name), "fs-%d.img", (int)pv->pid);
	r = read_one(rd, name, FS_MAGIC, &fs_entry__descriptor, &fs);
	if (r < 0)
		return r;
	fse = (const FsEntry *)fs.msg[0];
	r = add_file(rd, pv, &file_cap, "cwd", "",
		     strdup(reg_name(rd, fse->cwd_id) ? reg_name(rd, fse->cwd_id) : "?"));
	if (r == 0)
		r = add_file(rd, pv, &file_cap, "root", "",
			     strdup(reg_name(rd, fse->root_id) ? reg_name(rd, fse->root_id) : "?"));
	criu_entries_free(&fs, &rd->b);
	for (size_t i = pv->nfiles >= 2 ? pv->nfiles - 2 : 0; r == 0 && i < pv->nfiles; i++)
		copy_printable(pv->files[i].path, strlen(pv->files[i].path) + 1, pv->files[i].path);
	return r;
}

int criu_view_read(const char *dir, unsigned int what, struct criu_tree_view *out,
		   struct stasis_error **err)
{
	struct reader rd = {.v = out, .err = err};
	int r;

	memset(out, 0, sizeof(*out));
	criu_budget_init(&rd.b);
	rd.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rd.dirfd < 0)
		return stasis_error_errno(err, errno, "opening %s: %s", dir, strerror(errno));
	r = pstree_read(&rd);
	for (size_t i = 0; r == 0 && i < out->nprocs; i++)
		r = core_read(&rd, &out->procs[i]);
	if (r == 0 && what)
		r = files_read(&rd);
	for (size_t i = 0; r == 0 && what && i < out->nprocs; i++) {
		/* A zombie has no files of its own to show. */
		if (strcmp(out->procs[i].task_state, "Alive") &&
		    strcmp(out->procs[i].task_state, "Stopped"))
			continue;
		r = process_files(&rd, &out->procs[i], what);
	}
	criu_entries_free(&rd.files, &rd.b);
	free(rd.by_id);
	close(rd.dirfd);
	if (r < 0)
		criu_view_free(out);
	return r;
}

void criu_view_free(struct criu_tree_view *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->nprocs; i++) {
		struct criu_process_view *p = &v->procs[i];

		for (size_t j = 0; j < p->nfiles; j++)
			free(p->files[j].path);
		for (size_t j = 0; j < p->nsockets; j++) {
			free(p->sockets[j].src);
			free(p->sockets[j].dst);
		}
		free(p->files);
		free(p->sockets);
	}
	free(v->procs);
	memset(v, 0, sizeof(*v));
}
