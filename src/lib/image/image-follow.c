/* SPDX-License-Identifier: MIT */
/* Following the pages images while CRIU writes them: one thread hashes each
 * up to its current end, another asks the kernel to start writing it back.
 * Without them the whole image is read again for the checksum after the
 * dump, with the tree still frozen, and its writeback starts only when the
 * dirty page limits say so. They are two threads because starting the
 * writeback blocks at the disk's pace while hashing goes at memory speed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "image-hash.h"
#include "image.h"
#include "util.h"

#define FOLLOW_IDLE_US 5000

struct followed_file {
	char *name; /* relative to the image directory, like the manifest's */
	int fd;
	ino_t ino;
	XXH3_state_t *state;
	uint64_t hashed;
	uint64_t flushed; /* the flusher's, under the lock */
};

struct image_follower {
	int dirfd; /* the image directory */
	DIR *criu_dir;
	pthread_t thread, flusher;
	bool running;
	atomic_bool stop;
	pthread_mutex_t lock; /* files as the flusher sees them */
	char *buf;	      /* the hashing's, HASH_CHUNK bytes */
	struct followed_file *files;
	size_t nfiles;
	int error; /* the first error of the thread, as -errno */
};

static bool following(const struct image_follower *f, const char *name)
{
	for (size_t i = 0; i < f->nfiles; i++)
		if (strcmp(f->files[i].name + strlen(IMAGE_CRIU_SUBDIR) + 1, name) == 0)
			return true;
	return false;
}

/* Start following the pages image name, unless it is followed already. */
static int follow_file(void *ctx, const char *name)
{
	struct image_follower *f = ctx;
	struct followed_file ff = {0}, *grown;
	struct stat st;

	if (following(f, name))
		return 0;
	if (asprintf(&ff.name, "%s/%s", IMAGE_CRIU_SUBDIR, name) < 0)
		return -ENOMEM;
	ff.state = XXH3_createState();
	ff.fd = openat(f->dirfd, ff.name, O_RDONLY | O_CLOEXEC);
	if (!ff.state || ff.fd < 0 || fstat(ff.fd, &st) < 0) {
		int e = ff.state ? errno : ENOMEM;

		if (ff.fd >= 0)
			close(ff.fd);
		XXH3_freeState(ff.state);
		free(ff.name);
		return -e;
	}
	ff.ino = st.st_ino;
	XXH3_128bits_reset(ff.state);
	pthread_mutex_lock(&f->lock);
	grown = realloc(f->files, (f->nfiles + 1) * sizeof(*grown));
	if (grown) {
		f->files = grown;
		f->files[f->nfiles++] = ff;
	}
	pthread_mutex_unlock(&f->lock);
	if (!grown) {
		close(ff.fd);
		XXH3_freeState(ff.state);
		free(ff.name);
		return -ENOMEM;
	}
	return 0;
}

static int scan(struct image_follower *f)
{
	return image_scan_pages(f->criu_dir, follow_file, f);
}

/* Hash what CRIU has written so far; *moved when there was something. */
static int advance(struct followed_file *ff, char *buf, bool *moved)
{
	uint64_t before = ff->hashed;
	int r = hash_tail(ff->fd, ff->state, buf, &ff->hashed, NULL);

	*moved = *moved || ff->hashed != before;
	return r;
}

/* Start the writeback of what CRIU wrote of file i since the last time;
 * syncfs waits for it at the end. */
static void flush_file(struct image_follower *f, size_t i)
{
	struct stat st;
	uint64_t from;
	int fd;

	pthread_mutex_lock(&f->lock);
	fd = f->files[i].fd;
	from = f->files[i].flushed;
	pthread_mutex_unlock(&f->lock);
	if (fstat(fd, &st) < 0)
		return;
	from = image_flush_step(fd, from, (uint64_t)st.st_size);
	pthread_mutex_lock(&f->lock);
	f->files[i].flushed = from;
	pthread_mutex_unlock(&f->lock);
}

static void *flush_thread(void *arg)
{
	struct image_follower *f = arg;

	while (!atomic_load(&f->stop)) {
		size_t n;

		pthread_mutex_lock(&f->lock);
		n = f->nfiles;
		pthread_mutex_unlock(&f->lock);
		for (size_t i = 0; i < n; i++)
			flush_file(f, i);
		usleep(IMAGE_FLUSH_IDLE_US);
	}
	return NULL;
}

static void *follow_thread(void *arg)
{
	struct image_follower *f = arg;

	while (!atomic_load(&f->stop)) {
		bool moved = false;
		int r = scan(f);

		for (size_t i = 0; i < f->nfiles && r == 0; i++)
			r = advance(&f->files[i], f->buf, &moved);
		if (r < 0) {
			f->error = r;
			return NULL;
		}
		if (!moved)
			usleep(FOLLOW_IDLE_US);
	}
	return NULL;
}

int image_follow_start(const char *dir, struct image_follower **out, struct stasis_error **err)
{
	struct image_follower *f = calloc(1, sizeof(*f));
	char sub[4096];

	if (!f)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	pthread_mutex_init(&f->lock, NULL);
	snprintf(sub, sizeof(sub), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	f->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	f->criu_dir = opendir(sub);
	f->buf = malloc(HASH_CHUNK);
	if (f->dirfd < 0 || !f->criu_dir || !f->buf) {
		int e = f->buf ? errno : ENOMEM;

		image_follow_free(f);
		return stasis_error_errno(err, e, "opening %s: %s", sub, strerror(e));
	}
	if (pthread_create(&f->thread, NULL, follow_thread, f) != 0) {
		image_follow_free(f);
		return stasis_error_errno(err, EAGAIN, "starting the image follower");
	}
	if (pthread_create(&f->flusher, NULL, flush_thread, f) != 0) {
		atomic_store(&f->stop, true);
		pthread_join(f->thread, NULL);
		image_follow_free(f);
		return stasis_error_errno(err, EAGAIN, "starting the image flusher");
	}
	f->running = true;
	*out = f;
	return 0;
}

static void follow_stop(struct image_follower *f)
{
	if (!f->running)
		return;
	atomic_store(&f->stop, true);
	pthread_join(f->thread, NULL);
	pthread_join(f->flusher, NULL);
	f->running = false;
}

/* The file CRIU finished must still be the one followed, read to its end. */
static int finish_file(struct image_follower *f, struct followed_file *ff,
		       struct manifest_file *out)
{
	struct stat st;
	int r;

	if (fstatat(f->dirfd, ff->name, &st, 0) < 0)
		return -errno;
	if (st.st_ino != ff->ino)
		return -ESTALE;
	r = hash_tail(ff->fd, ff->state, f->buf, &ff->hashed, NULL);
	if (r < 0)
		return r;
	hash_hex(ff->state, out->xxh128);
	out->size = ff->hashed;
	return 0;
}

int image_follow_finish(struct image_follower *f, struct manifest_file *files, size_t nfiles)
{
	follow_stop(f);
	if (f->error < 0)
		return f->error;
	for (size_t i = 0; i < nfiles; i++) {
		for (size_t j = 0; j < f->nfiles; j++) {
			int r;

			if (strcmp(f->files[j].name, files[i].name) != 0)
				continue;
			r = finish_file(f, &f->files[j], &files[i]);
			if (r < 0) {
				for (size_t k = 0; k <= i; k++)
					files[k].xxh128[0] = '\0';
				return r;
			}
		}
	}
	return 0;
}

void image_follow_free(struct image_follower *f)
{
	if (!f)
		return;
	follow_stop(f);
	for (size_t i = 0; i < f->nfiles; i++) {
		close(f->files[i].fd);
		XXH3_freeState(f->files[i].state);
		free(f->files[i].name);
	}
	free(f->files);
	free(f->buf);
	if (f->criu_dir)
		closedir(f->criu_dir);
	if (f->dirfd >= 0)
		close(f->dirfd);
	pthread_mutex_destroy(&f->lock);
	free(f);
}
