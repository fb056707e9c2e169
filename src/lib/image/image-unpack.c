/* SPDX-License-Identifier: MIT */
/* Decompressing a compressed image for CRIU. A reader thread reads each
 * NAME.img.zst in large sequential reads, hashes what it read (that is the
 * image's verification) and hands its frames to a pool that decompresses
 * them side by side straight into the memory the caller gave for NAME.img.
 * The frames finish out of order; the caller hears how far each file is
 * whole from its start, so that it can serve it while the rest comes.
 * Several files are read at once: CRIU restores a tree's processes side by
 * side, each from its own pages image, and none must wait for another's. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <xxhash.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "image-hash.h"
#include "image-pack.h"
#include "image-unpack.h"
#include "image.h"
#include "util.h"

/* Read this much at a time; a frame cut at the end moves to the next. */
#define READ_CHUNK (32u << 20)
/* Ask the disk this far ahead, so that it reads on while this thread
 * hashes and hands out what it has. */
#define READ_AHEAD (4 * READ_CHUNK)
#define QUEUE_LEN 64
#define CHUNK_CAP (READ_CHUNK + ZSTD_COMPRESSBOUND(PACK_FRAME) + PACK_MARK_LEN)
/* Read buffers kept for reuse: fresh memory is slow to fill in a VM, and
 * the disk would wait for it. */
#define SPARE_CHUNKS 8
#define PAUSE_POLL_US 500
/* Files read at once, at most. */
#define MAX_READERS 16

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

struct chunk {
	unsigned char *data;
	int refs; /* under the unpacker's lock */
};

struct unpack_file;

struct unpack_job {
	struct chunk *chunk;
	struct unpack_file *file;
	size_t seq; /* the frame's place in its file */
	const unsigned char *src;
	size_t srclen;
	unsigned char *dst;
	size_t dstlen;
	bool shuffled;
};

struct unpacker {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	struct unpack_job queue[QUEUE_LEN];
	size_t head, queued;
	bool done;
	int error;     /* the first, as -errno */
	size_t failed; /* the file it came from */
	pthread_t workers[PACK_MAX_THREADS];
	unsigned int nworkers;
	const atomic_bool *cancel;
	struct unpack_sink *sink;
	struct chunk *spare[SPARE_CHUNKS];
	size_t nspare;
	/* The files: the next one a reader takes, under the lock. */
	int dirfd;
	const struct manifest *m;
	struct manifest_file *actual;
	size_t next;
};

/* One compressed file: where it goes and how far it got. */
struct unpack_file {
	size_t index; /* in the manifest */
	int in;
	unsigned char *map;
	uint64_t unpacked, produced, read;
	uint64_t read_usec, pause_usec;
	size_t pending; /* frames handed out and not done, under the lock */
	bool shuffle_next;
	XXH3_state_t *state;
	/* Where each frame handed out ends, and whether it is done; the
	 * first whole ones are reported. Under the unpacker's lock. */
	struct frame_mark {
		uint64_t end;
		bool done;
	} * marks;
	size_t nmarks, cap, whole;
};

/* Under the lock. */
static void chunk_put(struct unpacker *u, struct chunk *c)
{
	if (--c->refs)
		return;
	if (u->nspare < SPARE_CHUNKS) {
		u->spare[u->nspare++] = c;
		return;
	}
	free(c->data);
	free(c);
}

/* Under the lock: the first failure stops every reader and is the one
 * reported. */
static void set_error(struct unpacker *u, int error, size_t index)
{
	if (error >= 0 || u->error)
		return;
	u->error = error;
	u->failed = index;
}

static int run_job(const struct unpack_job *j, ZSTD_DCtx *dctx, unsigned char *tmp)
{
	unsigned char *dst = j->shuffled ? tmp : j->dst;
	size_t n;

	madvise((void *)((uintptr_t)j->dst & ~(uintptr_t)4095),
		j->dstlen + ((uintptr_t)j->dst & 4095), MADV_POPULATE_WRITE);
	n = ZSTD_decompressDCtx(dctx, dst, j->dstlen, j->src, j->srclen);
	if (ZSTD_isError(n) || n != j->dstlen)
		return -EBADMSG;
	if (j->shuffled)
		pack_unshuffle(tmp, j->dst, j->dstlen);
	return 0;
}

/* Under the lock. */
static void frame_done(struct unpacker *u, struct unpack_file *f, size_t seq)
{
	size_t whole = f->whole;

	f->marks[seq].done = true;
	while (f->whole < f->nmarks && f->marks[f->whole].done)
		f->whole++;
	if (f->whole != whole && u->sink->ready)
		u->sink->ready(u->sink->ctx, f->index, f->marks[f->whole - 1].end);
}

/* Under the lock. */
static int add_mark(struct unpack_file *f, uint64_t end)
{
	struct frame_mark *m = grow_array(f->marks, f->nmarks, &f->cap, sizeof(*m), 256);

	if (!m)
		return -ENOMEM;
	f->marks = m;
	f->marks[f->nmarks++] = (struct frame_mark){.end = end};
	return 0;
}

static void *unpack_worker(void *arg)
{
	struct unpacker *u = arg;
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	unsigned char *tmp = malloc(PACK_FRAME);

	pthread_mutex_lock(&u->lock);
	if (!dctx || !tmp)
		u->error = u->error ? u->error : -ENOMEM;
	for (;;) {
		struct unpack_job j;
		bool skip;
		int r;

		while (!u->queued && !u->done)
			pthread_cond_wait(&u->changed, &u->lock);
		if (!u->queued)
			break;
		j = u->queue[u->head];
		u->head = (u->head + 1) % QUEUE_LEN;
		u->queued--;
		skip = u->error != 0;
		pthread_cond_broadcast(&u->changed);
		pthread_mutex_unlock(&u->lock);
		r = skip ? 0 : run_job(&j, dctx, tmp);
		pthread_mutex_lock(&u->lock);
		set_error(u, r, j.file->index);
		if (r == 0 && !skip)
			frame_done(u, j.file, j.seq);
		j.file->pending--;
		chunk_put(u, j.chunk);
		pthread_cond_broadcast(&u->changed);
	}
	pthread_mutex_unlock(&u->lock);
	ZSTD_freeDCtx(dctx);
	free(tmp);
	return NULL;
}

/* While the sink asks for a pause, or until cancelled. */
static void pause_while_asked(struct unpacker *u, struct unpack_file *f)
{
	uint64_t start;

	if (!u->sink->pause || !u->sink->pause(u->sink->ctx, f->index))
		return;
	start = now_usec();
	while (!(u->cancel && atomic_load(u->cancel)) && u->sink->pause(u->sink->ctx, f->index))
		usleep(PAUSE_POLL_US);
	f->pause_usec += now_usec() - start;
}

static int push(struct unpacker *u, struct unpack_job *j)
{
	int r;

	pause_while_asked(u, j->file);
	pthread_mutex_lock(&u->lock);
	if (u->queued == QUEUE_LEN) {
		uint64_t start = now_usec();

		while (u->queued == QUEUE_LEN && !u->error)
			pthread_cond_wait(&u->changed, &u->lock);
		u->sink->queue_usec += now_usec() - start;
	}
	if (!u->error) {
		j->seq = j->file->nmarks;
		set_error(u, add_mark(j->file, (uint64_t)(j->dst - j->file->map) + j->dstlen),
			  j->file->index);
	}
	if (!u->error) {
		u->queue[(u->head + u->queued) % QUEUE_LEN] = *j;
		u->queued++;
		j->file->pending++;
		j->chunk->refs++;
		pthread_cond_broadcast(&u->changed);
	}
	r = u->error;
	pthread_mutex_unlock(&u->lock);
	return r;
}

/* Wait until every frame of f handed out is done. */
static int drain(struct unpacker *u, struct unpack_file *f)
{
	int r;

	pthread_mutex_lock(&u->lock);
	while (f->pending)
		pthread_cond_wait(&u->changed, &u->lock);
	r = u->error;
	pthread_mutex_unlock(&u->lock);
	return r;
}

/* Hand out the frames wholly in c->data[0..len); *used is how far. */
static int split_frames(struct unpacker *u, struct unpack_file *f, struct chunk *c, size_t len,
			bool eof, size_t *used)
{
	size_t pos = 0;
	int r = 0;

	while (pos < len && r == 0) {
		const unsigned char *src = c->data + pos;
		size_t left = len - pos, size;
		unsigned long long content;
		struct unpack_job j;

		if (left >= 8 && pack_le32(src) == PACK_SKIPPABLE_MAGIC) {
			if (left < PACK_MARK_LEN)
				break;
			if (pack_le32(src + 4) != 4 || pack_le32(src + 8) != PACK_SHUFFLE_WIDTH)
				return -EBADMSG;
			f->shuffle_next = true;
			pos += PACK_MARK_LEN;
			continue;
		}
		size = ZSTD_findFrameCompressedSize(src, left);
		if (ZSTD_isError(size)) {
			if (ZSTD_getErrorCode(size) == ZSTD_error_srcSize_wrong && !eof)
				break; /* the rest comes with the next read */
			return -EBADMSG;
		}
		content = ZSTD_getFrameContentSize(src, size);
		if (content == ZSTD_CONTENTSIZE_UNKNOWN || content == ZSTD_CONTENTSIZE_ERROR ||
		    content > PACK_FRAME || f->produced + content > f->unpacked)
			return -EBADMSG;
		j = (struct unpack_job){.chunk = c,
					.file = f,
					.src = src,
					.srclen = size,
					.dst = f->map + f->produced,
					.dstlen = (size_t)content,
					.shuffled = f->shuffle_next};
		f->shuffle_next = false;
		f->produced += content;
		pos += size;
		r = push(u, &j);
	}
	*used = pos;
	return r;
}

static struct chunk *chunk_new(struct unpacker *u)
{
	struct chunk *c = NULL;

	pthread_mutex_lock(&u->lock);
	if (u->nspare)
		c = u->spare[--u->nspare];
	pthread_mutex_unlock(&u->lock);
	if (!c && (c = calloc(1, sizeof(*c))) && !(c->data = malloc(CHUNK_CAP))) {
		free(c);
		c = NULL;
	}
	if (c)
		c->refs = 1;
	return c;
}

static void chunk_release(struct unpacker *u, struct chunk *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&u->lock);
	chunk_put(u, c);
	pthread_mutex_unlock(&u->lock);
}

/* Read into c->data from *len on until READ_CHUNK or the end. */
static int fill(struct unpacker *u, struct unpack_file *f, struct chunk *c, size_t *len, bool *eof)
{
	posix_fadvise(f->in, (off_t)(f->read + READ_CHUNK), READ_AHEAD, POSIX_FADV_WILLNEED);
	while (*len < READ_CHUNK && !*eof) {
		uint64_t start = now_usec();
		ssize_t n = read(f->in, c->data + *len, CHUNK_CAP - *len);

		f->read_usec += now_usec() - start;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		XXH3_128bits_update(f->state, c->data + *len, (size_t)n);
		f->read += (uint64_t)n;
		*len += (size_t)n;
		*eof = n == 0;
	}
	return 0;
}

/* Read f->in to its end, handing out its frames; a frame cut by the end
 * of a read is copied to the start of the next. */
static int read_frames(struct unpacker *u, struct unpack_file *f)
{
	struct chunk *prev = NULL;
	size_t carry = 0, prev_used = 0;
	bool eof = false;
	int r = 0;

	posix_fadvise(f->in, 0, 0, POSIX_FADV_SEQUENTIAL);
	while (!eof && r == 0) {
		struct chunk *c = chunk_new(u);
		size_t len = carry, used = 0;

		if (!c) {
			r = -ENOMEM;
			break;
		}
		if (carry)
			memcpy(c->data, prev->data + prev_used, carry);
		chunk_release(u, prev);
		prev = c;
		r = fill(u, f, c, &len, &eof);
		if (r == 0 && u->cancel && atomic_load(u->cancel))
			r = -ECANCELED;
		if (r == 0)
			r = split_frames(u, f, c, len, eof, &used);
		carry = len - used;
		prev_used = used;
		/* A frame that does not fit a whole read is no frame of ours. */
		if (r == 0 && carry && (eof || (!used && len == CHUNK_CAP)))
			r = -EBADMSG;
	}
	chunk_release(u, prev);
	return r;
}

static int unpack_file(struct unpacker *u, size_t index)
{
	const struct manifest_file *mf = &u->m->files[index];
	struct unpack_file f = {.index = index, .unpacked = mf->unpacked_size};
	int r = 0, drained;

	f.map = u->sink->maps[index];
	f.state = XXH3_createState();
	f.in = image_open_file(u->dirfd, mf->name);
	if (!f.state)
		r = -ENOMEM;
	else if (f.in < 0)
		r = f.in;
	if (r == 0) {
		XXH3_128bits_reset(f.state);
		r = read_frames(u, &f);
	}
	/* The workers may still write into the memory and mark frames. */
	drained = drain(u, &f);
	if (r == 0)
		r = drained;
	if (r == 0 && f.produced != f.unpacked)
		r = -EBADMSG;
	if (r == 0) {
		hash_hex(f.state, u->actual[index].xxh128);
		u->actual[index].size = f.read;
	}
	pthread_mutex_lock(&u->lock);
	set_error(u, r, index);
	u->sink->read_usec += f.read_usec;
	u->sink->pause_usec += f.pause_usec;
	pthread_mutex_unlock(&u->lock);
	if (f.in >= 0)
		close(f.in);
	XXH3_freeState(f.state);
	free(f.marks);
	return r;
}

/* Under the lock: the next compressed file no reader has taken. */
static bool take_file(struct unpacker *u, size_t *index)
{
	while (u->next < u->m->nfiles && !image_is_packed_file(u->m->files[u->next].name))
		u->next++;
	if (u->error || u->next == u->m->nfiles)
		return false;
	*index = u->next++;
	return true;
}

static void *unpack_reader(void *arg)
{
	struct unpacker *u = arg;
	size_t index;

	for (;;) {
		pthread_mutex_lock(&u->lock);
		bool more = take_file(u, &index);
		pthread_mutex_unlock(&u->lock);
		if (!more || unpack_file(u, index) < 0)
			return NULL;
	}
}

static size_t packed_files(const struct manifest *m)
{
	size_t n = 0;

	for (size_t i = 0; i < m->nfiles; i++)
		n += image_is_packed_file(m->files[i].name);
	return n;
}

static void stop_workers(struct unpacker *u)
{
	pthread_mutex_lock(&u->lock);
	u->done = true;
	pthread_cond_broadcast(&u->changed);
	pthread_mutex_unlock(&u->lock);
	for (unsigned int i = 0; i < u->nworkers; i++)
		pthread_join(u->workers[i], NULL);
}

int image_unpack(int dirfd, const struct manifest *m, struct manifest_file *actual,
		 struct unpack_sink *sink, const atomic_bool *cancel, size_t *failed)
{
	struct unpacker u = {
	    .cancel = cancel, .sink = sink, .dirfd = dirfd, .m = m, .actual = actual};
	pthread_t readers[MAX_READERS];
	size_t nreaders = 0, want = packed_files(m);

	pthread_mutex_init(&u.lock, NULL);
	pthread_cond_init(&u.changed, NULL);
	for (unsigned int n = sink->threads ? sink->threads : pack_threads(); u.nworkers < n;
	     u.nworkers++)
		if (pthread_create(&u.workers[u.nworkers], NULL, unpack_worker, &u) != 0)
			break;
	if (!u.nworkers)
		set_error(&u, -EAGAIN, 0);
	if (want > MAX_READERS)
		want = MAX_READERS;
	/* Fewer readers than files only means that some files wait. */
	while (u.nworkers && nreaders < want &&
	       pthread_create(&readers[nreaders], NULL, unpack_reader, &u) == 0)
		nreaders++;
	if (want && !nreaders)
		set_error(&u, -EAGAIN, 0);
	for (size_t i = 0; i < nreaders; i++)
		pthread_join(readers[i], NULL);
	stop_workers(&u);
	for (size_t i = 0; i < u.nspare; i++) {
		free(u.spare[i]->data);
		free(u.spare[i]);
	}
	pthread_cond_destroy(&u.changed);
	pthread_mutex_destroy(&u.lock);
	*failed = u.failed;
	return u.error;
}
