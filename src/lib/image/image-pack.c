/* SPDX-License-Identifier: MIT */
/* Compressing the image while CRIU writes it. CRIU dumps into a staging
 * folder in memory, where its pages images are pipes (image-pipe.c): a
 * reader cuts them into PACK_FRAME frames, and a pool of threads
 * compresses the frames side by side and writes them in order to
 * DIR/criu/NAME.img.zst. Pages images beyond the pipes, or all of them
 * where pipes cannot be made, land in the folder as files, which the pool
 * takes in PACK_FRAME steps as they grow, freeing the staged bytes it took.
 * A thread of its own starts the writeback of what was written, as the
 * image follower does. At the end the other (small) files are copied over.
 * So the disk sees only the compressed bytes, once. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <xxhash.h>
#include <zstd.h>

#include "fault.h"
#include "image-hash.h"
#include "image-pack.h"
#include "image-pipe.h"
#include "image-stage.h"
#include "image.h"
#include "util.h"

#define PACK_IDLE_US 2000
/* Pipes for the pages images beyond one per process: CRIU writes one more
 * for each shared memory segment it saves. */
#define PIPES_SPARE 32u
#define PIPES_MAX 256u
/* The share of a frame tried both ways to choose between them. */
#define PACK_SAMPLE (64u << 10)

void pack_shuffle(const unsigned char *in, unsigned char *out, size_t len)
{
	size_t words = len / PACK_SHUFFLE_WIDTH, tail = words * PACK_SHUFFLE_WIDTH;

	for (size_t i = 0; i < words; i++)
		for (size_t b = 0; b < PACK_SHUFFLE_WIDTH; b++)
			out[b * words + i] = in[i * PACK_SHUFFLE_WIDTH + b];
	memcpy(out + tail, in + tail, len - tail);
}

void pack_unshuffle(const unsigned char *in, unsigned char *out, size_t len)
{
	size_t words = len / PACK_SHUFFLE_WIDTH, tail = words * PACK_SHUFFLE_WIDTH;

	for (size_t i = 0; i < words; i++)
		for (size_t b = 0; b < PACK_SHUFFLE_WIDTH; b++)
			out[i * PACK_SHUFFLE_WIDTH + b] = in[b * words + i];
	memcpy(out + tail, in + tail, len - tail);
}

unsigned int pack_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > PACK_MAX_THREADS ? PACK_MAX_THREADS : (unsigned int)n;
}

const char *image_stage_root(void)
{
	const char *root = getenv("STASIS_STAGE_DIR");

	return root && *root ? root : "/dev/shm";
}

/* The staging folder holds what CRIU wrote and the threads have not yet
 * compressed: a few frames when they keep up. */
#define PACK_STAGE_MIN (1ull << 30)

int image_pack_preflight(struct stasis_error **err)
{
	const char *root = image_stage_root();
	struct statvfs sv;
	char a[32];

	if (access(root, W_OK) < 0 || statvfs(root, &sv) < 0) {
		stasis_error_set(err, errno, STASIS_DOMAIN_USAGE, 0,
				 "no staging folder for --compress: %s: %s", root, strerror(errno));
		return stasis_error_hint(err, "set STASIS_STAGE_DIR to a writable tmpfs folder");
	}
	if ((uint64_t)sv.f_bavail * sv.f_frsize >= PACK_STAGE_MIN)
		return 0;
	stasis_error_set(err, ENOSPC, STASIS_DOMAIN_USAGE, 0,
			 "the staging folder %s for --compress has %s free, less than 1 GiB", root,
			 format_bytes((uint64_t)sv.f_bavail * sv.f_frsize, a, sizeof(a)));
	return stasis_error_hint(err, "set STASIS_STAGE_DIR to a roomier tmpfs folder");
}

struct packed_file {
	char *name; /* in the staging folder; the output adds IMAGE_PACKED_SUFFIX */
	int in, out;
	XXH3_state_t *state; /* of the output, fed in order */
	uint64_t taken;	     /* staged bytes handed to a worker */
	uint64_t next_frame, turn;
	uint64_t written; /* output bytes, in order */
	uint64_t flushed; /* the flusher's */
	bool final;	  /* CRIU closed it: final_size is all there is */
	bool piped;	  /* its frames come from a pipe; in is -1 */
	uint64_t final_size;
};

struct pack_job {
	size_t file;
	uint64_t frame, offset;
	size_t len;
	unsigned char *buf; /* a piped frame, given back once compressed */
};

struct image_packer {
	char stage[PATH_MAX];
	int stagefd, outfd; /* the staging folder, DIR/criu */
	DIR *stage_dir;
	pthread_mutex_t lock;
	pthread_cond_t turn, work;
	struct packed_file *files; /* grows: workers keep indexes */
	size_t nfiles;
	struct page_pipes *pipes;
	unsigned int npipes;
	struct pack_job *queue; /* piped frames to compress, a ring */
	size_t qhead, qlen, qcap;
	pthread_t workers[PACK_MAX_THREADS], flusher;
	unsigned int nworkers;
	bool flushing, finishing;
	atomic_bool stop;
	int error; /* the first, as -errno */
};

/* One worker's buffers. */
struct pack_buffers {
	unsigned char *raw, *shuffled, *out;
	size_t cap;
	ZSTD_CCtx *cctx;
};

/* The index of the pages image name among those being packed, or -1. */
static int find_file(const struct image_packer *p, const char *name)
{
	for (size_t i = 0; i < p->nfiles; i++)
		if (strcmp(p->files[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* Start packing the pages image name, staged or piped (no input file). */
static int new_file(struct image_packer *p, const char *name, bool piped)
{
	struct packed_file pf = {.in = -1, .out = -1, .piped = piped}, *grown;
	char out[NAME_MAX + 1];

	snprintf(out, sizeof(out), "%s%s", name, IMAGE_PACKED_SUFFIX);
	pf.name = strdup(name);
	pf.state = XXH3_createState();
	if (!pf.name || !pf.state)
		goto nomem;
	/* The pipes' links are not followed: they are read elsewhere. */
	if (!piped && (pf.in = openat(p->stagefd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC)) < 0)
		goto fail;
	pf.out = openat(p->outfd, out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (pf.out < 0)
		goto fail;
	XXH3_128bits_reset(pf.state);
	grown = realloc(p->files, (p->nfiles + 1) * sizeof(*grown));
	if (!grown)
		goto nomem;
	p->files = grown;
	p->files[p->nfiles++] = pf;
	return 0;
nomem:
	errno = ENOMEM;
fail : {
	int e = errno;

	if (pf.in >= 0)
		close(pf.in);
	if (pf.out >= 0)
		close(pf.out);
	XXH3_freeState(pf.state);
	free(pf.name);
	return -e;
}
}

/* One of the pipes' links, which the pipe reader reads. */
static bool piped_name(const struct image_packer *p, const char *name)
{
	unsigned int id;
	int end = 0;

	return sscanf(name, "pages-%u.img%n", &id, &end) == 1 && name[end] == '\0' && id >= 1 &&
	       id <= p->npipes;
}

/* Start packing the staged pages image name, unless it is known. */
static int add_file(void *ctx, const char *name)
{
	struct image_packer *p = ctx;

	if (piped_name(p, name) || find_file(p, name) >= 0)
		return 0;
	return new_file(p, name, false);
}

/* New pages images in the staging folder; under the lock. */
static int scan(struct image_packer *p)
{
	return image_scan_pages(p->stage_dir, add_file, p);
}

/* The next piped frame, else the next whole frame CRIU has written to a
 * staged file, or the last piece of a file it closed; under the lock. */
static bool take_job(struct image_packer *p, struct pack_job *job)
{
	if (p->qlen) {
		*job = p->queue[p->qhead];
		p->qhead = (p->qhead + 1) % p->qcap;
		p->qlen--;
		return true;
	}
	for (size_t i = 0; i < p->nfiles; i++) {
		struct packed_file *f = &p->files[i];
		uint64_t have = f->final_size;
		struct stat st;

		if (f->piped)
			continue;
		if (!f->final) {
			if (fstat(f->in, &st) < 0)
				continue;
			have = (uint64_t)st.st_size;
		}
		if (have < f->taken + PACK_FRAME && !(f->final && have > f->taken))
			continue;
		*job = (struct pack_job){.file = i, .frame = f->next_frame++, .offset = f->taken};
		job->len = have - f->taken < PACK_FRAME ? (size_t)(have - f->taken) : PACK_FRAME;
		f->taken += job->len;
		return true;
	}
	return false;
}

/* Compress the frame raw into b->out: shuffled when a sample says that
 * pays. */
static ssize_t compress_frame(struct pack_buffers *b, const unsigned char *raw, size_t len)
{
	size_t sample = len < PACK_SAMPLE ? len : PACK_SAMPLE, plain, shuffled, n;
	const unsigned char *src = raw;
	size_t mark = 0;

	plain = ZSTD_compressCCtx(b->cctx, b->out, b->cap, raw, sample, PACK_LEVEL);
	pack_shuffle(raw, b->shuffled, sample);
	shuffled = ZSTD_compressCCtx(b->cctx, b->out, b->cap, b->shuffled, sample, PACK_LEVEL);
	if (ZSTD_isError(plain) || ZSTD_isError(shuffled))
		return -EIO;
	if (shuffled + sample / 32 < plain) {
		static const unsigned char mark_frame[PACK_MARK_LEN] = {
		    PACK_SKIPPABLE_MAGIC & 0xff,
		    (PACK_SKIPPABLE_MAGIC >> 8) & 0xff,
		    (PACK_SKIPPABLE_MAGIC >> 16) & 0xff,
		    PACK_SKIPPABLE_MAGIC >> 24,
		    4,
		    0,
		    0,
		    0,
		    PACK_SHUFFLE_WIDTH,
		    0,
		    0,
		    0};

		pack_shuffle(raw, b->shuffled, len);
		src = b->shuffled;
		memcpy(b->out, mark_frame, PACK_MARK_LEN);
		mark = PACK_MARK_LEN;
	}
	n = ZSTD_compressCCtx(b->cctx, b->out + mark, b->cap - mark, src, len, PACK_LEVEL);
	return ZSTD_isError(n) ? -EIO : (ssize_t)(mark + n);
}

/* Compress a piped frame and give it back; or read a staged one, free it
 * from the staging folder, and compress it. */
static ssize_t pack_job(struct image_packer *p, const struct pack_job *job, struct pack_buffers *b)
{
	int in;
	ssize_t n;

	if (job->buf) {
		n = compress_frame(b, job->buf, job->len);
		page_pipes_give_back(p->pipes, job->buf);
		return n;
	}
	pthread_mutex_lock(&p->lock);
	in = p->files[job->file].in;
	pthread_mutex_unlock(&p->lock);
	for (size_t got = 0; got < job->len; got += (size_t)n) {
		n = pread(in, b->raw + got, job->len - got, (off_t)(job->offset + got));
		if (n < 0 && errno == EINTR) {
			n = 0;
			continue;
		}
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
	}
	/* CRIU never reads back what it wrote: the memory can go now. */
	fallocate(in, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)job->offset,
		  (off_t)job->len);
	return compress_frame(b, b->raw, job->len);
}

/* Append the compressed frame in its turn; called with the lock held. The
 * turn covers only its place in the file and the hash, which must go in
 * order; the frames are written side by side. */
static int commit(struct image_packer *p, const struct pack_job *job, const unsigned char *out,
		  ssize_t len)
{
	struct packed_file *f;
	XXH3_state_t *state;
	int r = 0, fd;
	uint64_t at;

	while (p->files[job->file].turn != job->frame && !p->error)
		pthread_cond_wait(&p->turn, &p->lock);
	if (p->error)
		return p->error;
	if (len < 0)
		return (int)len;
	f = &p->files[job->file];
	fd = f->out;
	at = f->written;
	state = f->state;
	/* Only the holder of the turn touches the hash; p->files may move. */
	pthread_mutex_unlock(&p->lock);
	XXH3_128bits_update(state, out, (size_t)len);
	pthread_mutex_lock(&p->lock);
	f = &p->files[job->file];
	f->written += (uint64_t)len;
	f->turn++;
	pthread_cond_broadcast(&p->turn);
	pthread_mutex_unlock(&p->lock);
	for (ssize_t done = 0; done < len && r == 0;) {
		ssize_t n = pwrite(fd, out + done, (size_t)(len - done), (off_t)(at + done));

		if (n < 0 && errno != EINTR)
			r = -errno;
		done += n > 0 ? n : 0;
	}
	pthread_mutex_lock(&p->lock);
	return r;
}

static void buffers_free(struct pack_buffers *b)
{
	free(b->raw);
	free(b->shuffled);
	free(b->out);
	ZSTD_freeCCtx(b->cctx);
}

static int buffers_alloc(struct pack_buffers *b)
{
	b->cap = ZSTD_compressBound(PACK_FRAME) + PACK_MARK_LEN;
	b->raw = malloc(PACK_FRAME);
	b->shuffled = malloc(PACK_FRAME);
	b->out = malloc(b->cap);
	b->cctx = ZSTD_createCCtx();
	return b->raw && b->shuffled && b->out && b->cctx ? 0 : -ENOMEM;
}

/* The first error stops the packing; the piped frames still queued go
 * back, so that the pipe reader keeps taking what CRIU writes until CRIU
 * is done: it must never wait on a full pipe. Under the lock. */
static void fail(struct image_packer *p, int r)
{
	if (!p->error)
		p->error = r;
	for (; p->qlen; p->qlen--, p->qhead = (p->qhead + 1) % p->qcap)
		page_pipes_give_back(p->pipes, p->queue[p->qhead].buf);
	pthread_cond_broadcast(&p->turn);
}

static int piped_file(struct image_packer *p, unsigned int id)
{
	char name[NAME_MAX + 1];
	int r;

	snprintf(name, sizeof(name), "pages-%u.img", id);
	if ((r = find_file(p, name)) >= 0)
		return r;
	r = new_file(p, name, true);
	return r < 0 ? r : (int)p->nfiles - 1;
}

/* The pipe reader's: queue a frame of pages-ID.img in its order. */
static void deliver(void *ctx, unsigned int id, unsigned char *buf, size_t len, bool end)
{
	struct image_packer *p = ctx;
	struct packed_file *f;
	int i;

	pthread_mutex_lock(&p->lock);
	i = p->error ? p->error : piped_file(p, id);
	if (i < 0) {
		fail(p, i);
		if (buf)
			page_pipes_give_back(p->pipes, buf);
		pthread_mutex_unlock(&p->lock);
		return;
	}
	f = &p->files[i];
	if (len) {
		/* As many frames as buffers are out, so the ring has room. */
		p->queue[(p->qhead + p->qlen++) % p->qcap] =
		    (struct pack_job){.file = (size_t)i,
				      .frame = f->next_frame++,
				      .offset = f->taken,
				      .len = len,
				      .buf = buf};
		f->taken += len;
		pthread_cond_signal(&p->work);
	}
	if (end) {
		f->final = true;
		f->final_size = f->taken;
	}
	pthread_mutex_unlock(&p->lock);
}

/* Wait for a piped frame, or PACK_IDLE_US to look at staged files again. */
static void wait_for_work(struct image_packer *p)
{
	struct timespec ts;

	deadline_in_usec(&ts, PACK_IDLE_US);
	pthread_cond_timedwait(&p->work, &p->lock, &ts);
}

static void *pack_worker(void *arg)
{
	struct image_packer *p = arg;
	struct pack_buffers b = {0};
	int r = buffers_alloc(&b);

	pthread_mutex_lock(&p->lock);
	if (r < 0)
		fail(p, r);
	while (!p->error) {
		struct pack_job job;

		if (take_job(p, &job)) {
			ssize_t len;

			pthread_mutex_unlock(&p->lock);
			len = pack_job(p, &job, &b);
			pthread_mutex_lock(&p->lock);
			r = commit(p, &job, b.out, len);
			if (r < 0)
				fail(p, r);
			pthread_cond_broadcast(&p->turn);
			continue;
		}
		if (p->finishing)
			break;
		r = scan(p);
		if (r < 0)
			fail(p, r);
		else
			wait_for_work(p);
	}
	pthread_mutex_unlock(&p->lock);
	buffers_free(&b);
	return NULL;
}

/* Start the writeback of what was written; syncfs waits for it later.
 * A frame still being written when its range is started is left to the
 * syncfs. */
static void *flush_thread(void *arg)
{
	struct image_packer *p = arg;

	while (!atomic_load(&p->stop)) {
		pthread_mutex_lock(&p->lock);
		for (size_t i = 0; i < p->nfiles; i++) {
			uint64_t from = p->files[i].flushed, to = p->files[i].written;
			int fd = p->files[i].out;

			/* Only this thread moves flushed; p->files may move. */
			pthread_mutex_unlock(&p->lock);
			from = image_flush_step(fd, from, to);
			pthread_mutex_lock(&p->lock);
			p->files[i].flushed = from;
		}
		pthread_mutex_unlock(&p->lock);
		usleep(IMAGE_FLUSH_IDLE_US);
	}
	return NULL;
}

static int make_stage(struct image_packer *p, const char *dir)
{
	char out[PATH_MAX];
	/* Named after this run, so that the next checkpoint sweeps it away if
	 * this run is killed. */
	int r = image_stage_make(p->stage, NULL);

	if (r < 0)
		return r;
	snprintf(out, sizeof(out), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	p->stagefd = open(p->stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	p->outfd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	p->stage_dir = opendir(p->stage);
	return p->stagefd < 0 || p->outfd < 0 || !p->stage_dir ? -errno : 0;
}

/* Pipes for the first pages images CRIU will write, unless
 * STASIS_FAULT=pipe says to stage them all as files. Twice as many frames
 * as compressing threads keep them all busy while the reader fills more. */
static int start_pipes(struct image_packer *p, size_t nprocs)
{
	size_t n = nprocs + PIPES_SPARE < PIPES_MAX ? nprocs + PIPES_SPARE : PIPES_MAX;
	size_t nbuffers = 2 * (size_t)pack_threads();

	if (fault_at("pipe", 0))
		return 0;
	p->queue = calloc(nbuffers, sizeof(*p->queue));
	if (!p->queue)
		return -ENOMEM;
	p->qcap = nbuffers;
	p->npipes = (unsigned int)n;
	return page_pipes_start(p->stagefd, p->npipes, nbuffers, PACK_FRAME, deliver, p, &p->pipes);
}

int image_pack_start(const char *dir, size_t nprocs, struct image_packer **out,
		     struct stasis_error **err)
{
	struct image_packer *p = calloc(1, sizeof(*p));
	int r;

	if (!p)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	p->stagefd = p->outfd = -1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->turn, NULL);
	pthread_cond_init(&p->work, NULL);
	r = make_stage(p, dir);
	if (r < 0) {
		stasis_error_errno(err, -r, "creating a staging folder in %s: %s",
				   image_stage_root(), strerror(-r));
		image_pack_free(p);
		return stasis_error_hint(err, "set STASIS_STAGE_DIR to a writable tmpfs folder");
	}
	r = start_pipes(p, nprocs);
	if (r < 0) {
		image_pack_free(p);
		return stasis_error_errno(err, -r, "making pipes for CRIU's pages: %s",
					  strerror(-r));
	}
	for (unsigned int n = pack_threads(); p->nworkers < n; p->nworkers++)
		if (pthread_create(&p->workers[p->nworkers], NULL, pack_worker, p) != 0)
			break;
	p->flushing = pthread_create(&p->flusher, NULL, flush_thread, p) == 0;
	if (!p->nworkers || !p->flushing) {
		image_pack_free(p);
		return stasis_error_errno(err, EAGAIN, "starting the compression threads");
	}
	*out = p;
	return 0;
}

const char *image_pack_stage(const struct image_packer *p)
{
	return p->stage;
}

/* Reads what CRIU left in the pipes, compresses what is left, and stops. */
static void pack_stop(struct image_packer *p)
{
	page_pipes_stop(p->pipes);
	pthread_mutex_lock(&p->lock);
	p->finishing = true;
	pthread_mutex_unlock(&p->lock);
	for (unsigned int i = 0; i < p->nworkers; i++)
		pthread_join(p->workers[i], NULL);
	p->nworkers = 0;
	atomic_store(&p->stop, true);
	if (p->flushing)
		pthread_join(p->flusher, NULL);
	p->flushing = false;
}

/* CRIU is done and the pipes are read: every staged pages image is known
 * and final. */
static int finalize_files(struct image_packer *p)
{
	int r;

	page_pipes_stop(p->pipes);
	pthread_mutex_lock(&p->lock);
	r = p->error ? p->error : scan(p);
	for (size_t i = 0; i < p->nfiles && r == 0; i++) {
		struct stat st;

		if (p->files[i].piped) {
			r = p->files[i].final ? 0 : -EIO;
			continue;
		}
		if (fstat(p->files[i].in, &st) < 0)
			r = -errno;
		p->files[i].final_size = (uint64_t)st.st_size;
		p->files[i].final = true;
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* The small files CRIU wrote go to the image as they are. */
static int copy_others(struct image_packer *p, const char **failed)
{
	struct dirent *de;

	rewinddir(p->stage_dir);
	while ((de = readdir(p->stage_dir))) {
		int r;

		if (de->d_type != DT_REG || image_is_pages_file(de->d_name))
			continue;
		r = copy_file_at(p->stagefd, de->d_name, p->outfd);
		if (r < 0) {
			*failed = de->d_name;
			return r;
		}
	}
	return 0;
}

static int add_to_manifest(struct image_packer *p, struct manifest *m)
{
	for (size_t i = 0; i < p->nfiles; i++) {
		struct manifest_file *mf = manifest_add_file(m);

		if (!mf || asprintf(&mf->name, "%s/%s%s", IMAGE_CRIU_SUBDIR, p->files[i].name,
				    IMAGE_PACKED_SUFFIX) < 0)
			return -ENOMEM;
		mf->size = p->files[i].written;
		mf->unpacked_size = p->files[i].final_size;
		hash_hex(p->files[i].state, mf->xxh128);
	}
	return 0;
}

int image_pack_finish(struct image_packer *p, struct manifest *m, struct stasis_error **err)
{
	const char *failed = "";
	int r = finalize_files(p);

	pack_stop(p);
	if (r == 0)
		r = p->error;
	if (r < 0)
		return stasis_error_errno(err, -r, "compressing the image: %s", strerror(-r));
	r = copy_others(p, &failed);
	if (r < 0)
		return stasis_error_errno(err, -r, "copying %s from %s: %s", failed, p->stage,
					  strerror(-r));
	m->options.compress = true;
	if (p->pipes)
		manifest_add_phase(m, "compress_stall", page_pipes_stall_usec(p->pipes));
	if (add_to_manifest(p, m) < 0)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	return 0;
}

void image_pack_free(struct image_packer *p)
{
	if (!p)
		return;
	pack_stop(p);
	for (size_t i = 0; i < p->nfiles; i++) {
		close(p->files[i].in);
		close(p->files[i].out);
		XXH3_freeState(p->files[i].state);
		free(p->files[i].name);
	}
	free(p->files);
	page_pipes_free(p->pipes);
	free(p->queue);
	if (p->stage_dir)
		closedir(p->stage_dir);
	if (p->stagefd >= 0)
		close(p->stagefd);
	if (p->outfd >= 0)
		close(p->outfd);
	if (p->stage[0])
		remove_dir_tree(p->stage);
	pthread_cond_destroy(&p->turn);
	pthread_cond_destroy(&p->work);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
