/* SPDX-License-Identifier: MIT */
/* Staging a --leave-running checkpoint in memory (image-stage.h). The copy
 * to the image folder reads each staged file once: it hashes what it
 * writes, and punches the written range out of tmpfs so that the staged
 * image gives its memory back as it goes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fault.h"
#include "image-hash.h"
#include "image-pack.h"
#include "image-stage.h"
#include "image.h"
#include "stasis.h"
#include "util.h"

#define STAGE_PREFIX "stasis-stage-"
#define STAGE_CHUNK (8u << 20)
#define STAGE_THREADS 4

int image_stage_make(char out[PATH_MAX], struct stasis_error **err)
{
	snprintf(out, PATH_MAX, "%s/" STAGE_PREFIX "%d-XXXXXX", image_stage_root(), (int)getpid());
	if (mkdtemp(out))
		return 0;
	out[0] = '\0';
	return stasis_error_errno(err, errno, "creating a staging folder in %s: %s",
				  image_stage_root(), strerror(errno));
}

void image_stage_remove(char stage[PATH_MAX])
{
	if (!stage[0])
		return;
	remove_flat_dir(stage);
	stage[0] = '\0';
}

/* The PID in a staging folder's name, or 0. */
static pid_t stage_owner(const char *name)
{
	char *end;
	long pid;

	if (strncmp(name, STAGE_PREFIX, strlen(STAGE_PREFIX)) != 0)
		return 0;
	pid = strtol(name + strlen(STAGE_PREFIX), &end, 10);
	return *end == '-' && pid > 0 ? (pid_t)pid : 0;
}

void image_stage_sweep(void)
{
	const char *root = image_stage_root();
	DIR *d = opendir(root);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		pid_t owner = stage_owner(de->d_name);
		char path[PATH_MAX];

		if (!owner || kill(owner, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", root, de->d_name);
		remove_flat_dir(path);
	}
	if (d)
		closedir(d);
}

struct stage_file {
	char name[256];
	struct manifest_file *listed; /* its manifest entry; NULL for CRIU's log */
};

struct stage_copy {
	int from, to; /* the staging folder, DIR/criu */
	struct stage_file *files;
	size_t nfiles, next, failed;
	pthread_mutex_t lock;
	int error; /* the first, as -errno */
};

/* Copy [0, size) of in to out, hashed into state, giving back the staged
 * memory behind it. */
static int copy_hashed(int in, int out, uint64_t size, XXH3_state_t *state, char *buf)
{
	uint64_t done = 0, flushed = 0;

	while (done < size) {
		ssize_t n = pread(in, buf, STAGE_CHUNK, (off_t)done);
		int r;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO; /* the staged file shrank */
		if (stasis_interrupted())
			return -EINTR;
		if (fault_at("stage-slow", 0))
			usleep(200000);
		XXH3_128bits_update(state, buf, (size_t)n);
		r = write_all(out, buf, (size_t)n);
		if (r < 0)
			return r;
		fallocate(in, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)done, n);
		done += (uint64_t)n;
		flushed = image_flush_step(out, flushed, done);
	}
	return 0;
}

static int copy_one(const struct stage_copy *c, struct stage_file *f, char *buf)
{
	_cleanup_close_ int in = openat(c->from, f->name, O_RDWR | O_CLOEXEC);
	_cleanup_close_ int out = -1;
	XXH3_state_t *state;
	struct stat st;
	int r;

	if (in < 0 || fstat(in, &st) < 0)
		return -errno;
	out = openat(c->to, f->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 0777);
	if (out < 0)
		return -errno;
	state = XXH3_createState();
	if (!state)
		return -ENOMEM;
	XXH3_128bits_reset(state);
	r = copy_hashed(in, out, (uint64_t)st.st_size, state, buf);
	if (r == 0 && f->listed) {
		hash_hex(state, f->listed->xxh128);
		f->listed->size = (uint64_t)st.st_size;
	}
	XXH3_freeState(state);
	return r;
}

static void *copy_worker(void *arg)
{
	struct stage_copy *c = arg;
	_cleanup_free_ char *buf = malloc(STAGE_CHUNK);

	for (;;) {
		size_t i;
		int r;

		pthread_mutex_lock(&c->lock);
		i = c->next++;
		pthread_mutex_unlock(&c->lock);
		if (i >= c->nfiles)
			return NULL;
		r = buf ? copy_one(c, &c->files[i], buf) : -ENOMEM;
		pthread_mutex_lock(&c->lock);
		if (r < 0 && !c->error) {
			c->error = r;
			c->failed = i;
		}
		/* After one failure the image is lost: the rest need not come. */
		if (c->error)
			c->next = c->nfiles;
		pthread_mutex_unlock(&c->lock);
	}
}

static bool is_log(const char *name)
{
	size_t len = strlen(name);

	return len > 4 && strcmp(name + len - 4, ".log") == 0;
}

/* The staged files, each with its manifest entry unless it is a log. */
static int list_staged(struct stage_copy *c, struct manifest *m)
{
	_cleanup_close_ int fd = dup(c->from);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *de;
	size_t cap = 0;

	if (!d)
		return -errno;
	fd = -1;
	while ((de = readdir(d))) {
		struct stage_file *grown, *f;

		if (de->d_type != DT_REG)
			continue;
		if (c->nfiles == cap) {
			cap = cap ? 2 * cap : 32;
			grown = realloc(c->files, cap * sizeof(*grown));
			if (!grown) {
				closedir(d);
				return -ENOMEM;
			}
			c->files = grown;
		}
		f = &c->files[c->nfiles++];
		snprintf(f->name, sizeof(f->name), "%s", de->d_name);
		f->listed = NULL;
	}
	closedir(d);
	/* Entries after the list is whole, pointed to once all are added:
	 * adding one may move the array. */
	size_t first = m->nfiles;

	for (size_t i = 0; i < c->nfiles; i++) {
		struct manifest_file *mf;

		if (is_log(c->files[i].name))
			continue;
		mf = manifest_add_file(m);
		if (!mf || asprintf(&mf->name, "%s/%s", IMAGE_CRIU_SUBDIR, c->files[i].name) < 0)
			return -ENOMEM;
	}
	for (size_t i = 0; i < c->nfiles; i++)
		if (!is_log(c->files[i].name))
			c->files[i].listed = &m->files[first++];
	return 0;
}

static int copy_all(struct stage_copy *c)
{
	pthread_t threads[STAGE_THREADS];
	size_t started = 0;

	pthread_mutex_init(&c->lock, NULL);
	for (size_t i = 0; i < STAGE_THREADS && i < c->nfiles; i++)
		if (pthread_create(&threads[started], NULL, copy_worker, c) == 0)
			started++;
	if (started == 0)
		copy_worker(c);
	for (size_t i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	pthread_mutex_destroy(&c->lock);
	return c->error;
}

int image_stage_commit(const char *stage, const char *dir, struct manifest *m,
		       struct stasis_error **err)
{
	char sub[PATH_MAX];
	struct stage_copy c = {.from = -1, .to = -1};
	int r;

	snprintf(sub, sizeof(sub), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	c.from = open(stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	c.to = open(sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	r = c.from < 0 || c.to < 0 ? -errno : list_staged(&c, m);
	if (r == 0)
		r = copy_all(&c);
	if (r == -EINTR)
		stasis_error_set(err, EINTR, STASIS_DOMAIN_SYSTEM, EINTR,
				 "interrupted by a signal while writing the image to %s", dir);
	else if (r < 0)
		stasis_error_errno(err, -r, "writing the image from memory to %s%s%s: %s", sub,
				   c.nfiles ? "/" : "", c.nfiles ? c.files[c.failed].name : "",
				   strerror(-r));
	if (c.from >= 0)
		close(c.from);
	if (c.to >= 0)
		close(c.to);
	free(c.files);
	if (r < 0)
		return r;
	m->image_bytes = 0;
	for (size_t i = 0; i < m->nfiles; i++)
		m->image_bytes += m->files[i].size;
	return image_sync(dir, m, err);
}
