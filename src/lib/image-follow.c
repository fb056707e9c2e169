/* SPDX-License-Identifier: MIT */
/* Following the pages images while CRIU writes them: a thread hashes each
 * one up to its current end and asks the kernel to start writing it back.
 * Without it the whole image is read again for the checksum after the dump,
 * with the tree still frozen, and its writeback starts only when the dirty
 * page limits say so. */
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
/* Writeback is started in steps this big, behind the hashing. */
#define FLUSH_STEP (64ull << 20)

struct followed_file {
	char *name; /* relative to the image directory, like the manifest's */
	int fd;
	ino_t ino;
	XXH3_state_t *state;
	uint64_t hashed;
	uint64_t flushed;
};

struct image_follower {
	int dirfd; /* the image directory */
	DIR *criu_dir;
	pthread_t thread;
	bool running;
	atomic_bool stop;
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

static int follow_file(struct image_follower *f, const char *name)
{
	struct followed_file *grown, *ff;
	struct stat st;

	grown = realloc(f->files, (f->nfiles + 1) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	f->files = grown;
	ff = &f->files[f->nfiles];
	memset(ff, 0, sizeof(*ff));
	if (asprintf(&ff->name, "%s/%s", IMAGE_CRIU_SUBDIR, name) < 0)
		return -ENOMEM;
	ff->state = XXH3_createState();
	ff->fd = openat(f->dirfd, ff->name, O_RDONLY | O_CLOEXEC);
	if (!ff->state || ff->fd < 0 || fstat(ff->fd, &st) < 0) {
		int e = ff->state ? errno : ENOMEM;

		if (ff->fd >= 0)
			close(ff->fd);
		XXH3_freeState(ff->state);
		free(ff->name);
		return -e;
	}
	ff->ino = st.st_ino;
	XXH3_128bits_reset(ff->state);
	f->nfiles++;
	return 0;
}

static int scan(struct image_follower *f)
{
	struct dirent *de;

	rewinddir(f->criu_dir);
	while ((de = readdir(f->criu_dir))) {
		int r;

		if (!image_is_pages_file(de->d_name) || following(f, de->d_name))
			continue;
		r = follow_file(f, de->d_name);
		if (r < 0 && r != -ENOENT)
			return r;
	}
	return 0;
}

/* Hash what CRIU has written so far; true when something was. */
static int advance(struct followed_file *ff, bool *moved)
{
	uint64_t before = ff->hashed;
	int r = hash_tail(ff->fd, ff->state, &ff->hashed, NULL);

	if (r < 0)
		return r;
	*moved = *moved || ff->hashed != before;
	if (ff->hashed - ff->flushed >= FLUSH_STEP) {
		/* Only starts the writeback; syncfs waits for it at the end. */
		sync_file_range(ff->fd, (off_t)ff->flushed, (off_t)(ff->hashed - ff->flushed),
				SYNC_FILE_RANGE_WRITE);
		ff->flushed = ff->hashed;
	}
	return 0;
}

static void *follow_thread(void *arg)
{
	struct image_follower *f = arg;

	while (!atomic_load(&f->stop)) {
		bool moved = false;
		int r = scan(f);

		for (size_t i = 0; i < f->nfiles && r == 0; i++)
			r = advance(&f->files[i], &moved);
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
	snprintf(sub, sizeof(sub), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	f->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	f->criu_dir = opendir(sub);
	if (f->dirfd < 0 || !f->criu_dir) {
		int e = errno;

		image_follow_free(f);
		return stasis_error_errno(err, e, "opening %s: %s", sub, strerror(e));
	}
	if (pthread_create(&f->thread, NULL, follow_thread, f) != 0) {
		image_follow_free(f);
		return stasis_error_errno(err, EAGAIN, "starting the image follower");
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
	r = hash_tail(ff->fd, ff->state, &ff->hashed, NULL);
	if (r < 0)
		return r;
	hash_hex(ff->state, out->xxh128);
	out->size = ff->hashed;
	return 0;
}

int image_follow_finish(struct image_follower *f, struct manifest_file *files, size_t nfiles,
			size_t *failed)
{
	follow_stop(f);
	if (f->error < 0) {
		*failed = 0;
		return f->error;
	}
	for (size_t i = 0; i < nfiles; i++) {
		for (size_t j = 0; j < f->nfiles; j++) {
			int r;

			if (strcmp(f->files[j].name, files[i].name) != 0)
				continue;
			r = finish_file(f, &f->files[j], &files[i]);
			if (r < 0) {
				*failed = i;
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
	if (f->criu_dir)
		closedir(f->criu_dir);
	if (f->dirfd >= 0)
		close(f->dirfd);
	free(f);
}
