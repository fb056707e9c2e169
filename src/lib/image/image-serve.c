/* SPDX-License-Identifier: MIT */
/* A read-only FUSE folder over files that are still being filled. CRIU
 * reads a pages image in order, once, with pread/preadv; served from here a
 * read blocks until the decompression has got that far, so CRIU's restore
 * runs while the image is decompressed instead of after it. The files are
 * opened for direct I/O: each reply is copied once, from the decompressed
 * buffer straight into the memory CRIU restores, with no page cache
 * between, and a block read whole is given back at once, so that the
 * restore does not hold the image in memory twice. The protocol is spoken over /dev/fuse directly:
 * a reader makes a handful of requests, which need no library. */
#include "image-serve.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util.h"

#define SERVE_THREADS 8
/* The largest read request: 256 pages, what FUSE_MAX_PAGES allows. */
#define SERVE_MAX_READ (1u << 20)
/* Requests are small, but the kernel wants room for its largest write. */
#define SERVE_BUF (SERVE_MAX_READ + 4096)
#define FIRST_FILE_ID (FUSE_ROOT_ID + 1)
/* Nothing here changes its name or size: let the kernel cache that. */
#define VALID_SECS 3600
#define PAGE 4096u
/* CRIU is still reading when its last read was this recent. */
#define READING_US 100000
#define BLOCK_PAGES (SERVE_BLOCK / PAGE)

/* Which pages of a block were read. Once all were, it is given back:
 * reading it again would read zeros. One read twice keeps its block.
 * Pages are counted before the reply goes and a block is given back only
 * after every reply that copies from it went: the kernel may split one read
 * into requests that threads answer in any order. */
struct serve_block {
	uint64_t read[BLOCK_PAGES / 64];
	uint16_t nread;
	uint16_t sending; /* replies being copied from the block */
	enum { BLOCK_LIVE, BLOCK_DONE, BLOCK_FREED, BLOCK_KEPT } state;
};

struct image_server {
	int fd;
	int wake; /* eventfd: the threads stop */
	char mnt[PATH_MAX];
	struct serve_file *files;
	size_t nfiles;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	bool failed;				 /* under lock, with files[].ready */
	uint64_t started, first_read, last_read; /* now_usec(); reads: under lock */
	unsigned int waiting;			 /* reads waiting for their bytes */
	pthread_t threads[SERVE_THREADS];
	unsigned int nthreads;
};

static bool reply(struct image_server *s, uint64_t unique, int error, const void *arg, size_t len)
{
	struct fuse_out_header h = {
	    .len = (uint32_t)(sizeof(h) + (error ? 0 : len)), .error = error, .unique = unique};
	struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)arg, len}};

	if (writev(s->fd, iov, error || !len ? 1 : 2) >= 0)
		return true;
	/* ENOENT: the reader was interrupted and no longer waits. */
	if (errno != ENOENT)
		fprintf(stderr, "stasis: image server: reply: %s\n", strerror(errno));
	return false;
}

static struct serve_file *file_of(struct image_server *s, uint64_t id)
{
	return id >= FIRST_FILE_ID && id - FIRST_FILE_ID < s->nfiles ? &s->files[id - FIRST_FILE_ID]
								     : NULL;
}

static void fill_attr(struct image_server *s, uint64_t id, struct fuse_attr *a)
{
	struct serve_file *f = file_of(s, id);

	*a = (struct fuse_attr){.ino = id, .nlink = 1, .blksize = 4096, .uid = 0, .gid = 0};
	if (f) {
		a->mode = S_IFREG | 0444;
		a->size = f->size;
		a->blocks = (f->size + 511) / 512;
	} else {
		a->mode = S_IFDIR | 0555;
		a->nlink = 2;
	}
}

static void serve_init(struct image_server *s, const struct fuse_in_header *in,
		       const struct fuse_init_in *arg)
{
	struct fuse_init_out out = {
	    .major = FUSE_KERNEL_VERSION,
	    .minor = FUSE_KERNEL_MINOR_VERSION,
	    .max_readahead = arg->max_readahead,
	    .flags = arg->flags & (FUSE_ASYNC_DIO | FUSE_MAX_PAGES | FUSE_ASYNC_READ),
	    .max_background = SERVE_THREADS * 2,
	    .congestion_threshold = SERVE_THREADS * 2,
	    .max_write = 4096,
	    .time_gran = 1,
	    .max_pages = SERVE_MAX_READ / 4096,
	};

	if (arg->major != FUSE_KERNEL_VERSION) {
		reply(s, in->unique, -EPROTO, NULL, 0);
		return;
	}
	if (arg->minor < out.minor)
		out.minor = arg->minor;
	reply(s, in->unique, 0, &out, sizeof(out));
}

static void serve_lookup(struct image_server *s, const struct fuse_in_header *in, const char *name)
{
	struct fuse_entry_out out = {.entry_valid = VALID_SECS, .attr_valid = VALID_SECS};

	for (size_t i = 0; in->nodeid == FUSE_ROOT_ID && i < s->nfiles; i++) {
		if (strcmp(s->files[i].name, name) != 0)
			continue;
		out.nodeid = FIRST_FILE_ID + i;
		fill_attr(s, out.nodeid, &out.attr);
		reply(s, in->unique, 0, &out, sizeof(out));
		return;
	}
	reply(s, in->unique, -ENOENT, NULL, 0);
}

static void serve_getattr(struct image_server *s, const struct fuse_in_header *in)
{
	struct fuse_attr_out out = {.attr_valid = VALID_SECS};

	fill_attr(s, in->nodeid, &out.attr);
	reply(s, in->unique, 0, &out, sizeof(out));
}

static void serve_open(struct image_server *s, const struct fuse_in_header *in,
		       const struct fuse_open_in *arg)
{
	struct fuse_open_out out = {.fh = in->nodeid};

	if (in->opcode == FUSE_OPEN) {
		if ((arg->flags & O_ACCMODE) != O_RDONLY) {
			reply(s, in->unique, -EROFS, NULL, 0);
			return;
		}
		out.open_flags = FOPEN_DIRECT_IO;
	}
	reply(s, in->unique, 0, &out, sizeof(out));
}

static uint64_t block_len(const struct serve_file *f, uint64_t b)
{
	uint64_t start = b * SERVE_BLOCK;

	return f->size - start < SERVE_BLOCK ? f->size - start : SERVE_BLOCK;
}

/* Under the lock. */
static bool given_back(const struct serve_file *f, uint64_t off, uint64_t end)
{
	for (uint64_t b = off / SERVE_BLOCK; b * SERVE_BLOCK < end; b++)
		if (f->blocks[b].state == BLOCK_FREED)
			return true;
	return false;
}

/* Under the lock: [off, end) is about to be sent. Marks its pages read;
 * a block whose pages were all read is done. CRIU reads pages into pages;
 * a read cut elsewhere keeps its blocks, as does a page read twice. */
static void count_read(struct serve_file *f, uint64_t off, uint64_t end)
{
	bool whole = off % PAGE == 0 && (end % PAGE == 0 || end == f->size);

	for (uint64_t b = off / SERVE_BLOCK; b * SERVE_BLOCK < end; b++)
		f->blocks[b].sending++;
	for (uint64_t p = off / PAGE; p * PAGE < end; p++) {
		struct serve_block *blk = &f->blocks[p / BLOCK_PAGES];
		uint64_t bit = 1ull << (p % 64), *word = &blk->read[p % BLOCK_PAGES / 64];

		if (!whole || (*word & bit))
			blk->state = BLOCK_KEPT;
		*word |= bit;
		if (blk->state == BLOCK_LIVE &&
		    ++blk->nread == (block_len(f, p / BLOCK_PAGES) + PAGE - 1) / PAGE)
			blk->state = BLOCK_DONE;
	}
}

/* Under the lock: the reply for [off, end) went (or its reader left). A
 * done block that no reply copies from any more is given back. */
static void sent_read(struct serve_file *f, uint64_t off, uint64_t end)
{
	for (uint64_t b = off / SERVE_BLOCK; b * SERVE_BLOCK < end; b++) {
		struct serve_block *blk = &f->blocks[b];

		if (--blk->sending || blk->state != BLOCK_DONE)
			continue;
		madvise(f->data + b * SERVE_BLOCK, block_len(f, b), MADV_DONTNEED);
		blk->state = BLOCK_FREED;
	}
}

/* Waits until the bytes asked for are there, and sends them. */
static void serve_read(struct image_server *s, const struct fuse_in_header *in,
		       const struct fuse_read_in *arg)
{
	struct serve_file *f = file_of(s, arg->fh);
	uint64_t end;
	bool failed;

	if (!f) {
		reply(s, in->unique, -EBADF, NULL, 0);
		return;
	}
	if (arg->offset >= f->size) {
		reply(s, in->unique, 0, NULL, 0);
		return;
	}
	end = f->size - arg->offset < arg->size ? f->size : arg->offset + arg->size;
	pthread_mutex_lock(&s->lock);
	s->waiting++;
	while (f->ready < end && !s->failed)
		pthread_cond_wait(&s->changed, &s->lock);
	s->waiting--;
	failed = f->ready < end || given_back(f, arg->offset, end);
	if (!failed) {
		/* Counted before the reply: the reader may read on, and ask
		 * how far it got, as soon as the reply is written. */
		count_read(f, arg->offset, end);
		f->sent += end - arg->offset;
		s->last_read = now_usec();
		if (!s->first_read)
			s->first_read = s->last_read;
	}
	pthread_mutex_unlock(&s->lock);
	if (failed) {
		reply(s, in->unique, -EIO, NULL, 0);
		return;
	}
	reply(s, in->unique, 0, f->data + arg->offset, (size_t)(end - arg->offset));
	pthread_mutex_lock(&s->lock);
	sent_read(f, arg->offset, end);
	pthread_mutex_unlock(&s->lock);
}

static void serve_request(struct image_server *s, const struct fuse_in_header *in)
{
	const void *arg = in + 1;

	switch (in->opcode) {
	case FUSE_INIT:
		serve_init(s, in, arg);
		break;
	case FUSE_LOOKUP:
		serve_lookup(s, in, arg);
		break;
	case FUSE_GETATTR:
		serve_getattr(s, in);
		break;
	case FUSE_OPEN:
	case FUSE_OPENDIR:
		serve_open(s, in, arg);
		break;
	case FUSE_READ:
		serve_read(s, in, arg);
		break;
	case FUSE_READDIR: /* an empty listing: readers know their names */
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
	case FUSE_FLUSH:
		reply(s, in->unique, 0, NULL, 0);
		break;
	case FUSE_FORGET: /* these take no answer */
	case FUSE_BATCH_FORGET:
	case FUSE_INTERRUPT:
		break;
	default:
		reply(s, in->unique, -ENOSYS, NULL, 0);
	}
}

/* Reads requests until told to stop or the folder is unmounted. The fd
 * is non-blocking, as the threads share it. */
static void *serve_thread(void *arg)
{
	struct image_server *s = arg;
	struct pollfd pfd[2] = {{.fd = s->fd, .events = POLLIN}, {.fd = s->wake, .events = POLLIN}};
	void *buf = malloc(SERVE_BUF);

	while (buf) {
		ssize_t n;

		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[1].revents)
			break;
		n = read(s->fd, buf, SERVE_BUF);
		if (n < 0 && (errno == EAGAIN || errno == EINTR || errno == ENOENT))
			continue;
		if (n < (ssize_t)sizeof(struct fuse_in_header))
			break; /* ENODEV: unmounted */
		serve_request(s, buf);
	}
	free(buf);
	return NULL;
}

static int serve_mount(struct image_server *s)
{
	char opts[256];

	s->fd = open("/dev/fuse", O_RDWR | O_CLOEXEC | O_NONBLOCK);
	if (s->fd < 0)
		return -errno;
	snprintf(opts, sizeof(opts),
		 "fd=%d,rootmode=40000,user_id=%u,group_id=%u,allow_other,max_read=%u", s->fd,
		 getuid(), getgid(), SERVE_MAX_READ);
	if (mount("stasis", s->mnt, "fuse.stasis", MS_NOSUID | MS_NODEV | MS_RDONLY, opts) < 0)
		return -errno;
	return 0;
}

int image_serve_start(const char *mnt, struct serve_file *files, size_t nfiles,
		      struct image_server **out)
{
	struct image_server *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	s->files = files;
	s->nfiles = nfiles;
	s->fd = -1;
	snprintf(s->mnt, sizeof(s->mnt), "%s", mnt);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->changed, NULL);
	s->wake = eventfd(0, EFD_CLOEXEC);
	r = s->wake < 0 ? -errno : 0;
	for (size_t i = 0; r == 0 && i < nfiles; i++) {
		files[i].blocks = calloc(files[i].size / SERVE_BLOCK + 1, sizeof(*files[i].blocks));
		if (!files[i].blocks)
			r = -ENOMEM;
	}
	if (r == 0)
		r = serve_mount(s);
	if (r < 0) {
		if (s->fd >= 0)
			close(s->fd);
		s->fd = -1;
		s->mnt[0] = '\0';
		image_serve_stop(s);
		return r;
	}
	s->started = now_usec();
	for (; s->nthreads < SERVE_THREADS; s->nthreads++)
		if (pthread_create(&s->threads[s->nthreads], NULL, serve_thread, s) != 0)
			break;
	if (!s->nthreads) {
		image_serve_stop(s);
		return -EAGAIN;
	}
	*out = s;
	return 0;
}

void image_serve_ready(struct image_server *s, size_t i, uint64_t ready)
{
	pthread_mutex_lock(&s->lock);
	s->files[i].ready = ready;
	pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->lock);
}

bool image_serve_ahead(struct image_server *s, size_t i, uint64_t limit)
{
	bool ahead;

	pthread_mutex_lock(&s->lock);
	ahead = !s->failed && !s->waiting && s->files[i].ready - s->files[i].sent > limit &&
		s->last_read && now_usec() - s->last_read < READING_US;
	pthread_mutex_unlock(&s->lock);
	return ahead;
}

void image_serve_times(struct image_server *s, uint64_t *first, uint64_t *last)
{
	pthread_mutex_lock(&s->lock);
	*first = s->first_read ? s->first_read - s->started : 0;
	*last = s->last_read ? s->last_read - s->started : 0;
	pthread_mutex_unlock(&s->lock);
}

void image_serve_fail(struct image_server *s)
{
	pthread_mutex_lock(&s->lock);
	s->failed = true;
	pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->lock);
}

void image_serve_stop(struct image_server *s)
{
	uint64_t one = 1;

	if (!s)
		return;
	image_serve_fail(s);
	if (s->nthreads && write(s->wake, &one, sizeof(one)) < 0)
		fprintf(stderr, "stasis: image server: stopping: %s\n", strerror(errno));
	for (unsigned int i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	/* Closing the last descriptor aborts what a reader still waits for. */
	if (s->fd >= 0)
		close(s->fd);
	if (s->mnt[0] && umount2(s->mnt, MNT_DETACH) < 0)
		fprintf(stderr, "stasis: unmounting %s: %s\n", s->mnt, strerror(errno));
	if (s->wake >= 0)
		close(s->wake);
	for (size_t i = 0; i < s->nfiles; i++) {
		free(s->files[i].blocks);
		s->files[i].blocks = NULL;
	}
	pthread_cond_destroy(&s->changed);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
