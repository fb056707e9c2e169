/* SPDX-License-Identifier: MIT */
/* A read-only FUSE folder over files that are still being filled. CRIU
 * reads a pages image in order, once, with pread/preadv; served from here a
 * read blocks until the decompression has got that far, so CRIU's restore
 * runs while the image is decompressed instead of after it. The files are
 * opened for direct I/O: each reply is copied once, from the decompressed
 * buffer straight into the memory CRIU restores, with no page cache
 * between, and a block read whole is given back at once, so that the
 * restore does not hold the image in memory twice. The requests are
 * decoded and answered by libfuse's low-level API; the mount and the
 * threads that take the requests are this file's (serve_mount,
 * serve_thread say why). */
#define FUSE_USE_VERSION 35

#include "image-serve.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
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
#include <unistd.h>

#include "util.h"

#define SERVE_THREADS 8
/* The largest read request: 256 pages, what FUSE_MAX_PAGES allows. */
#define SERVE_MAX_READ (1u << 20)
#define FIRST_FILE_ID (FUSE_ROOT_ID + 1)
/* Nothing here changes its name or size: let the kernel cache that. */
#define VALID_SECS 3600.0
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
	struct fuse_session *se;
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

static struct serve_file *file_of(struct image_server *s, fuse_ino_t ino)
{
	return ino >= FIRST_FILE_ID && ino - FIRST_FILE_ID < s->nfiles
		   ? &s->files[ino - FIRST_FILE_ID]
		   : NULL;
}

static void fill_attr(struct image_server *s, fuse_ino_t ino, struct stat *st)
{
	struct serve_file *f = file_of(s, ino);

	*st = (struct stat){.st_ino = ino, .st_nlink = 1, .st_blksize = 4096};
	if (f) {
		st->st_mode = S_IFREG | 0444;
		st->st_size = (off_t)f->size;
		st->st_blocks = (blkcnt_t)((f->size + 511) / 512);
	} else {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	}
}

/* The kernel may read ahead and keep several requests of one direct read
 * in flight; nothing else libfuse turns on by default is wanted here.
 * max_write stays libfuse's: the pages a request may carry, and so the
 * largest read, are derived from it. max_read must match the option given
 * to fuse_session_new. */
static void serve_init(void *userdata, struct fuse_conn_info *conn)
{
	conn->want &= FUSE_CAP_ASYNC_READ | FUSE_CAP_ASYNC_DIO;
	conn->max_read = SERVE_MAX_READ;
	conn->max_background = SERVE_THREADS * 2;
	conn->congestion_threshold = SERVE_THREADS * 2;
}

static void serve_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct image_server *s = fuse_req_userdata(req);
	struct fuse_entry_param e = {.attr_timeout = VALID_SECS, .entry_timeout = VALID_SECS};

	for (size_t i = 0; parent == FUSE_ROOT_ID && i < s->nfiles; i++) {
		if (strcmp(s->files[i].name, name) != 0)
			continue;
		e.ino = FIRST_FILE_ID + i;
		fill_attr(s, e.ino, &e.attr);
		fuse_reply_entry(req, &e);
		return;
	}
	fuse_reply_err(req, ENOENT);
}

static void serve_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	fill_attr(fuse_req_userdata(req), ino, &st);
	fuse_reply_attr(req, &st, VALID_SECS);
}

static void serve_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

/* An empty listing: readers know their names. */
static void serve_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			  struct fuse_file_info *fi)
{
	fuse_reply_buf(req, NULL, 0);
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
static void serve_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct image_server *s = fuse_req_userdata(req);
	struct serve_file *f = file_of(s, ino);
	uint64_t start = (uint64_t)off, end;
	bool failed;

	if (!f) {
		fuse_reply_err(req, EBADF);
		return;
	}
	if (off < 0 || start >= f->size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	end = f->size - start < size ? f->size : start + size;
	pthread_mutex_lock(&s->lock);
	s->waiting++;
	while (f->ready < end && !s->failed)
		pthread_cond_wait(&s->changed, &s->lock);
	s->waiting--;
	failed = f->ready < end || given_back(f, start, end);
	if (!failed) {
		/* Counted before the reply: the reader may read on, and ask
		 * how far it got, as soon as the reply is written. */
		count_read(f, start, end);
		f->sent += end - start;
		s->last_read = now_usec();
		if (!s->first_read)
			s->first_read = s->last_read;
	}
	pthread_mutex_unlock(&s->lock);
	if (failed) {
		fuse_reply_err(req, EIO);
		return;
	}
	/* Written to /dev/fuse from the buffer itself (libfuse's writev of
	 * the header and these bytes): the kernel's copy is the only one. */
	fuse_reply_buf(req, (const char *)f->data + start, (size_t)(end - start));
	pthread_mutex_lock(&s->lock);
	sent_read(f, start, end);
	pthread_mutex_unlock(&s->lock);
}

/* What is left out libfuse answers: opendir and release succeed, flush
 * says ENOSYS (the kernel then sends none, and close succeeds), statfs
 * describes an empty file system, the rest ENOSYS. */
static const struct fuse_lowlevel_ops serve_ops = {
    .init = serve_init,
    .lookup = serve_lookup,
    .getattr = serve_getattr,
    .open = serve_open,
    .read = serve_read,
    .readdir = serve_readdir,
};

/* Each thread takes requests until told to stop or the folder is
 * unmounted. Not fuse_session_loop_mt: its threads wait in a blocking read
 * of /dev/fuse that only a signal or the end of the connection interrupts,
 * and a reader that keeps a file open keeps the connection after the
 * unmount. Here the descriptor is non-blocking, shared by the threads,
 * and each waits in poll for a request or the eventfd that stops it. */
static void *serve_thread(void *arg)
{
	struct image_server *s = arg;
	struct pollfd pfd[2] = {{.fd = fuse_session_fd(s->se), .events = POLLIN},
				{.fd = s->wake, .events = POLLIN}};
	struct fuse_buf buf = {.mem = NULL}; /* libfuse allocates it, for the largest request */

	while (!fuse_session_exited(s->se)) {
		int r;

		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[1].revents)
			break;
		r = fuse_session_receive_buf(s->se, &buf);
		if (r == -EAGAIN || r == -EINTR)
			continue; /* another thread took it */
		if (r <= 0)
			break; /* 0: unmounted */
		fuse_session_process_buf(s->se, &buf);
	}
	free(buf.mem);
	return NULL;
}

/* Mounts mnt over a descriptor of /dev/fuse, non-blocking for
 * serve_thread, and hands that to libfuse (fuse_session_mount's /dev/fd/N
 * form). Not fuse_session_mount with the folder: where mount(2) says EPERM
 * it runs the fusermount3 helper, and as root where /etc/mtab is a file it
 * runs mount and umount; stasis runs no program for this, and returns the
 * mount's own errno. Nothing is left mounted on failure. */
static int serve_mount(struct image_server *s, const char *mnt)
{
	_cleanup_close_ int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC | O_NONBLOCK);
	char opts[256], devfd[32];

	if (fd < 0)
		return -errno;
	snprintf(opts, sizeof(opts),
		 "fd=%d,rootmode=40000,user_id=%u,group_id=%u,allow_other,max_read=%u", fd,
		 getuid(), getgid(), SERVE_MAX_READ);
	if (mount("stasis", mnt, "fuse.stasis", MS_NOSUID | MS_NODEV | MS_RDONLY, opts) < 0)
		return -errno;
	snprintf(devfd, sizeof(devfd), "/dev/fd/%d", fd);
	if (fuse_session_mount(s->se, devfd) < 0) {
		/* Closed first: the kernel then has no server to wait for. */
		close(TAKE_FD(fd));
		umount2(mnt, MNT_DETACH);
		return -EBADF;
	}
	TAKE_FD(fd); /* the session's: fuse_session_destroy closes it */
	snprintf(s->mnt, sizeof(s->mnt), "%s", mnt);
	return 0;
}

/* The session, told max_read as the kernel is; libfuse checks that
 * serve_init says the same. */
static int serve_session(struct image_server *s)
{
	char name[] = "stasis", o[] = "-o", max_read[32];
	char *argv[] = {name, o, max_read};
	struct fuse_args args = FUSE_ARGS_INIT(3, argv);

	snprintf(max_read, sizeof(max_read), "max_read=%u", SERVE_MAX_READ);
	s->se = fuse_session_new(&args, &serve_ops, sizeof(serve_ops), s);
	fuse_opt_free_args(&args);
	return s->se ? 0 : -ENOMEM;
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
		r = serve_session(s);
	if (r == 0)
		r = serve_mount(s, mnt);
	if (r < 0) {
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
	/* Closing the last descriptor (the session's) aborts what a reader
	 * still waits for. */
	if (s->se)
		fuse_session_destroy(s->se);
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
