/* SPDX-License-Identifier: MIT */
#include "image-hash.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "util.h"

#define HASH_THREADS 4

static bool pages_named(const char *name, const char *suffix)
{
	const char *base = strrchr(name, '/');
	size_t len, slen = strlen(suffix);

	base = base ? base + 1 : name;
	len = strlen(base);
	return strncmp(base, "pages-", 6) == 0 && len > 6 + slen &&
	       strcmp(base + len - slen, suffix) == 0;
}

bool image_is_pages_file(const char *name)
{
	return pages_named(name, ".img") || image_is_packed_file(name);
}

bool image_is_packed_file(const char *name)
{
	return pages_named(name, ".img" IMAGE_PACKED_SUFFIX);
}

int image_open_file(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	/* Read as a file is: O_NONBLOCK was for what is not one. */
	fcntl(fd, F_SETFL, 0);
	return fd;
}

bool image_is_log_file(const char *name)
{
	size_t len = strlen(name);

	return len > 4 && strcmp(name + len - 4, ".log") == 0;
}

int image_scan_pages(DIR *d, int (*add)(void *ctx, const char *name), void *ctx)
{
	struct dirent *de;

	rewinddir(d);
	while ((de = readdir(d))) {
		int r;

		if (!image_is_pages_file(de->d_name))
			continue;
		r = add(ctx, de->d_name);
		if (r < 0 && r != -ENOENT)
			return r;
	}
	return 0;
}

/* What the writeback is started for at a time. */
#define FLUSH_STEP (64ull << 20)

uint64_t image_flush_step(int fd, uint64_t from, uint64_t to)
{
	if (to < from + FLUSH_STEP)
		return from;
	sync_file_range(fd, (off_t)from, (off_t)(to - from), SYNC_FILE_RANGE_WRITE);
	return to;
}

int hash_tail(int fd, XXH3_state_t *state, char *buf, uint64_t *offset, const atomic_bool *cancel)
{
	uint64_t asked = *offset;

	for (;;) {
		ssize_t n;

		if (cancel && atomic_load(cancel))
			return -ECANCELED;
		if (*offset + HASH_READ_AHEAD / 2 >= asked) {
			asked = *offset + HASH_READ_AHEAD;
			posix_fadvise(fd, (off_t)asked, HASH_READ_AHEAD, POSIX_FADV_WILLNEED);
		}
		n = pread(fd, buf, HASH_CHUNK, (off_t)*offset);
		if (n == 0)
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		XXH3_128bits_update(state, buf, (size_t)n);
		*offset += (uint64_t)n;
	}
}

void hash_hex(XXH3_state_t *state, char hex[33])
{
	XXH128_hash_t h = XXH3_128bits_digest(state);

	snprintf(hex, 33, "%016llx%016llx", (unsigned long long)h.high64,
		 (unsigned long long)h.low64);
}

bool hash_skip_hashed(const struct manifest_file *f)
{
	return f->xxh128[0] != '\0';
}

bool hash_skip_pages(const struct manifest_file *f)
{
	return image_is_pages_file(f->name);
}

bool hash_skip_all_but_pages(const struct manifest_file *f)
{
	return !image_is_pages_file(f->name);
}

static int hash_file(int dirfd, struct manifest_file *f, char *buf, const atomic_bool *cancel)
{
	_cleanup_close_ int fd = image_open_file(dirfd, f->name);
	XXH3_state_t *state;
	uint64_t size = 0;
	int r;

	if (fd < 0)
		return fd;
	state = XXH3_createState();
	if (!state)
		return -ENOMEM;
	XXH3_128bits_reset(state);
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	r = hash_file_ahead(fd, state, buf, &size, cancel);
	if (r == 0) {
		hash_hex(state, f->xxh128);
		f->size = size;
	}
	XXH3_freeState(state);
	return r;
}

/* Files are hashed by a few threads at once: the big pages images
 * dominate, but the many small files should not queue behind them. */
struct hash_job {
	int dirfd;
	struct manifest_file *files;
	size_t nfiles;
	hash_skip_fn skip;
	const atomic_bool *cancel;
	size_t next;
	pthread_mutex_t lock;
	int error;
	size_t failed;
};

static void record_failure(struct hash_job *job, size_t i, int r)
{
	pthread_mutex_lock(&job->lock);
	if (!job->error) {
		job->error = -r;
		job->failed = i;
	}
	pthread_mutex_unlock(&job->lock);
}

static void *hash_worker(void *arg)
{
	struct hash_job *job = arg;
	_cleanup_free_ char *buf = malloc(HASH_CHUNK);

	for (;;) {
		size_t i;
		int r;

		pthread_mutex_lock(&job->lock);
		i = job->next++;
		pthread_mutex_unlock(&job->lock);
		if (i >= job->nfiles)
			return NULL;
		if (job->skip && job->skip(&job->files[i]))
			continue;
		r = buf ? hash_file(job->dirfd, &job->files[i], buf, job->cancel) : -ENOMEM;
		if (r < 0)
			record_failure(job, i, r);
	}
}

int hash_files(int dirfd, struct manifest_file *files, size_t nfiles, hash_skip_fn skip,
	       const atomic_bool *cancel, size_t *failed)
{
	struct hash_job job = {
	    .dirfd = dirfd, .files = files, .nfiles = nfiles, .skip = skip, .cancel = cancel};
	pthread_t threads[HASH_THREADS];
	size_t started = 0;

	pthread_mutex_init(&job.lock, NULL);
	for (size_t i = 0; i < HASH_THREADS && i < nfiles; i++)
		if (pthread_create(&threads[started], NULL, hash_worker, &job) == 0)
			started++;
	if (started == 0)
		hash_worker(&job);
	for (size_t i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	pthread_mutex_destroy(&job.lock);
	*failed = job.failed;
	return -job.error;
}
