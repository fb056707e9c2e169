/* SPDX-License-Identifier: MIT */
#include "image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "progress.h"
#include "util.h"

#define HASH_CHUNK (1u << 20)
#define HASH_THREADS 4

int image_prepare(const char *dir, struct stasis_error **err)
{
	char sub[4096];
	int r = dir_is_empty(dir);

	if (r == 1) {
		stasis_error_set(err, EEXIST, STASIS_DOMAIN_USAGE, 0,
				 "image directory %s is not empty", dir);
		return stasis_error_hint(err, "give a new or empty directory");
	}
	if (r < 0 && r != -ENOENT)
		return stasis_error_errno(err, -r, "image directory %s: %s", dir, strerror(-r));
	snprintf(sub, sizeof(sub), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	r = mkdir_p(sub);
	if (r < 0)
		return stasis_error_errno(err, -r, "creating %s: %s", sub, strerror(-r));
	return 0;
}

int image_hash_file(int dirfd, const char *name, char hex[33], uint64_t *size)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	_cleanup_free_ char *buf = NULL;
	XXH3_state_t *state;
	XXH128_hash_t h;
	uint64_t total = 0;
	ssize_t n;

	if (fd < 0)
		return -errno;
	buf = malloc(HASH_CHUNK);
	state = XXH3_createState();
	if (!buf || !state) {
		XXH3_freeState(state);
		return -ENOMEM;
	}
	XXH3_128bits_reset(state);
	while ((n = read(fd, buf, HASH_CHUNK)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;

			XXH3_freeState(state);
			return -e;
		}
		XXH3_128bits_update(state, buf, (size_t)n);
		total += (uint64_t)n;
	}
	h = XXH3_128bits_digest(state);
	XXH3_freeState(state);
	snprintf(hex, 33, "%016llx%016llx", (unsigned long long)h.high64,
		 (unsigned long long)h.low64);
	if (size)
		*size = total;
	return 0;
}

/* Files are hashed by a few threads at once: the big pages image dominates,
 * but the many small ones should not serialise behind it. */
struct hash_job {
	int dirfd;
	struct manifest_file *files;
	size_t nfiles;
	size_t next;
	pthread_mutex_t lock;
	int error;
	size_t failed;
};

static void *hash_worker(void *arg)
{
	struct hash_job *job = arg;

	for (;;) {
		size_t i;
		int r;

		pthread_mutex_lock(&job->lock);
		i = job->next++;
		pthread_mutex_unlock(&job->lock);
		if (i >= job->nfiles)
			return NULL;
		r = image_hash_file(job->dirfd, job->files[i].name, job->files[i].xxh128,
				    &job->files[i].size);
		if (r < 0) {
			pthread_mutex_lock(&job->lock);
			if (!job->error) {
				job->error = -r;
				job->failed = i;
			}
			pthread_mutex_unlock(&job->lock);
		}
	}
}

static int hash_files(int dirfd, struct manifest_file *files, size_t nfiles, size_t *failed)
{
	struct hash_job job = {.dirfd = dirfd, .files = files, .nfiles = nfiles};
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

static int list_files(const char *dir, struct manifest *m, struct stasis_error **err)
{
	char sub[4096];
	DIR *d;
	struct dirent *de;

	snprintf(sub, sizeof(sub), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	d = opendir(sub);
	if (!d)
		return stasis_error_errno(err, errno, "opening %s: %s", sub, strerror(errno));
	while ((de = readdir(d))) {
		struct manifest_file *f;

		if (de->d_type != DT_REG)
			continue;
		/* CRIU's own log is not part of the image. */
		if (strstr(de->d_name, ".log"))
			continue;
		f = manifest_add_file(m);
		if (!f || asprintf(&f->name, "%s/%s", IMAGE_CRIU_SUBDIR, de->d_name) < 0) {
			closedir(d);
			return stasis_error_errno(err, ENOMEM, "out of memory");
		}
	}
	closedir(d);
	return 0;
}

int image_checksum(const char *dir, struct manifest *m, struct stasis_error **err)
{
	_cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	size_t failed = 0;
	int r;

	if (dirfd < 0)
		return stasis_error_errno(err, errno, "opening %s: %s", dir, strerror(errno));
	r = list_files(dir, m, err);
	if (r < 0)
		return r;
	r = hash_files(dirfd, m->files, m->nfiles, &failed);
	if (r < 0)
		return stasis_error_errno(err, -r, "checksumming %s/%s: %s", dir,
					  m->files[failed].name, strerror(-r));
	m->image_bytes = 0;
	for (size_t i = 0; i < m->nfiles; i++)
		m->image_bytes += m->files[i].size;
	return 0;
}

int image_open(const char *dir, struct manifest *m, struct stasis_error **err)
{
	_cleanup_close_ int dirfd = -1;
	struct manifest_file *actual;
	size_t failed = 0;
	int r;

	r = manifest_read(dir, m, err);
	if (r < 0)
		return r;
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return stasis_error_errno(err, errno, "opening %s: %s", dir, strerror(errno));
	actual = calloc(m->nfiles ? m->nfiles : 1, sizeof(*actual));
	if (!actual)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < m->nfiles; i++)
		actual[i].name = m->files[i].name;
	progress_begin("verifying the image's checksums");
	r = hash_files(dirfd, actual, m->nfiles, &failed);
	progress_end();
	if (r < 0) {
		stasis_error_set(err, -r, STASIS_DOMAIN_IMAGE, 0, "image file %s/%s: %s", dir,
				 m->files[failed].name, strerror(-r));
		free(actual);
		return stasis_error_hint(err, "the image is incomplete; checkpoint again");
	}
	for (size_t i = 0; i < m->nfiles; i++) {
		if (actual[i].size == m->files[i].size &&
		    strcmp(actual[i].xxh128, m->files[i].xxh128) == 0)
			continue;
		stasis_error_set(err, EBADMSG, STASIS_DOMAIN_IMAGE, 0,
				 "image file %s/%s does not match its checksum in the manifest",
				 dir, m->files[i].name);
		free(actual);
		return stasis_error_hint(err, "the image is damaged; checkpoint again");
	}
	free(actual);
	return 0;
}

int image_sync(const char *dir, struct manifest *m, struct stasis_error **err)
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	uint64_t start = now_usec();

	if (fd < 0 || syncfs(fd) < 0)
		return stasis_error_errno(err, errno, "flushing %s to disk: %s", dir,
					  strerror(errno));
	manifest_add_phase(m, "sync", now_usec() - start);
	return 0;
}
