/* SPDX-License-Identifier: MIT */
#include "image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "image-hash.h"
#include "image-pack.h"
#include "image-unpack.h"
#include "preflight.h"
#include "progress.h"
#include "util.h"

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

static bool listed(const struct manifest *m, const char *name)
{
	for (size_t i = 0; i < m->nfiles; i++)
		if (strcmp(m->files[i].name + strlen(IMAGE_CRIU_SUBDIR) + 1, name) == 0)
			return true;
	return false;
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
		if (strstr(de->d_name, ".log") || listed(m, de->d_name))
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

int image_checksum(const char *dir, struct manifest *m, struct image_follower *follower,
		   struct stasis_error **err)
{
	_cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	size_t failed = 0;
	int r;

	if (dirfd < 0)
		return stasis_error_errno(err, errno, "opening %s: %s", dir, strerror(errno));
	r = list_files(dir, m, err);
	if (r < 0)
		return r;
	/* What the follower could not finish is hashed whole below. */
	if (follower)
		image_follow_finish(follower, m->files, m->nfiles);
	r = hash_files(dirfd, m->files, m->nfiles, hash_skip_hashed, NULL, &failed);
	if (r < 0)
		return stasis_error_errno(err, -r, "checksumming %s/%s: %s", dir,
					  m->files[failed].name, strerror(-r));
	m->image_bytes = 0;
	for (size_t i = 0; i < m->nfiles; i++)
		m->image_bytes += m->files[i].size;
	return 0;
}

/* Checks the files of m whose "actual" entry is hashed (so far) against m. */
static int compare_files(const char *dir, const struct manifest *m,
			 const struct manifest_file *actual, struct stasis_error **err)
{
	for (size_t i = 0; i < m->nfiles; i++) {
		if (!actual[i].xxh128[0] || (actual[i].size == m->files[i].size &&
					     strcmp(actual[i].xxh128, m->files[i].xxh128) == 0))
			continue;
		stasis_error_set(err, EBADMSG, STASIS_DOMAIN_IMAGE, 0,
				 "image file %s/%s does not match its checksum in the manifest",
				 dir, m->files[i].name);
		return stasis_error_hint(err, "the image is damaged; checkpoint again");
	}
	return 0;
}

struct image_verifier {
	const char *dir;
	const struct manifest *m;
	int dirfd;
	int stagefd;		 /* a compressed image's staging folder, else -1 */
	char stage[PATH_MAX];	 /* its path, or "" */
	char criu_dir[PATH_MAX]; /* what CRIU restores from */
	struct manifest_file *actual;
	pthread_t thread;
	bool running;
	atomic_bool cancel;
	int result; /* -errno of the hashing */
	size_t failed;
};

static void *verify_pages(void *arg)
{
	struct image_verifier *v = arg;

	if (v->stagefd >= 0)
		v->result =
		    image_unpack(v->dirfd, v->m, v->actual, v->stagefd, &v->cancel, &v->failed);
	else
		v->result = hash_files(v->dirfd, v->actual, v->m->nfiles, hash_skip_all_but_pages,
				       &v->cancel, &v->failed);
	return NULL;
}

static uint64_t unpacked_bytes(const struct manifest *m)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < m->nfiles; i++)
		sum += m->files[i].unpacked_size;
	return sum;
}

/* The decompressed pages must fit the staging folder, and when that is
 * memory, the memory too. */
static int check_stage_room(const struct manifest *m, struct stasis_error **err)
{
	const char *root = image_stage_root();
	uint64_t need = unpacked_bytes(m), room, memory = preflight_mem_available();
	struct statfs sfs;
	char a[32], b[32];

	if (statfs(root, &sfs) < 0)
		return stasis_error_errno(err, errno, "staging folder %s: %s", root,
					  strerror(errno));
	room = (uint64_t)sfs.f_bavail * (uint64_t)sfs.f_bsize;
	if (sfs.f_type == TMPFS_MAGIC && memory < room)
		room = memory;
	if (need <= room)
		return 0;
	stasis_error_set(
	    err, ENOSPC, STASIS_DOMAIN_USAGE, 0,
	    "the compressed image unpacks to %s, the staging folder %s has room for %s",
	    format_bytes(need, a, sizeof(a)), root, format_bytes(room, b, sizeof(b)));
	return stasis_error_hint(err, "free memory, or set STASIS_STAGE_DIR to a roomier folder");
}

/* A staging folder where the pages are decompressed, with links to the
 * other files of the image. */
static int make_stage(struct image_verifier *v, struct stasis_error **err)
{
	char abs[PATH_MAX];
	int r = check_stage_room(v->m, err);

	if (r < 0)
		return r;
	snprintf(v->stage, sizeof(v->stage), "%s/stasis-restore-XXXXXX", image_stage_root());
	if (!mkdtemp(v->stage)) {
		r = -errno;
		v->stage[0] = '\0';
	}
	if (r == 0 && ((v->stagefd = open(v->stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
		       !realpath(v->dir, abs)))
		r = -errno;
	for (size_t i = 0; r == 0 && i < v->m->nfiles; i++) {
		const char *name = v->m->files[i].name;
		char target[PATH_MAX + NAME_MAX];

		if (image_is_packed_file(name))
			continue;
		snprintf(target, sizeof(target), "%s/%s", abs, name);
		if (symlinkat(target, v->stagefd, strrchr(name, '/') + 1) < 0)
			r = -errno;
	}
	if (r < 0)
		return stasis_error_errno(err, -r, "preparing a staging folder in %s: %s",
					  image_stage_root(), strerror(-r));
	snprintf(v->criu_dir, sizeof(v->criu_dir), "%s", v->stage);
	return 0;
}

static int verify_result(struct image_verifier *v, struct stasis_error **err)
{
	if (v->result < 0) {
		stasis_error_set(err, -v->result, STASIS_DOMAIN_IMAGE, 0, "image file %s/%s: %s",
				 v->dir, v->m->files[v->failed].name, strerror(-v->result));
		return stasis_error_hint(err, "the image is incomplete; checkpoint again");
	}
	return compare_files(v->dir, v->m, v->actual, err);
}

int image_open_begin(const char *dir, struct manifest *m, struct image_verifier **out,
		     struct stasis_error **err)
{
	struct image_verifier *v;
	int r = manifest_read(dir, m, err);

	if (r < 0)
		return r;
	v = calloc(1, sizeof(*v));
	if (!v)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	v->dir = dir;
	v->m = m;
	v->stagefd = -1;
	snprintf(v->criu_dir, sizeof(v->criu_dir), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	v->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (v->dirfd < 0)
		r = stasis_error_errno(err, errno, "opening %s: %s", dir, strerror(errno));
	v->actual = r == 0 ? calloc(m->nfiles ? m->nfiles : 1, sizeof(*v->actual)) : NULL;
	if (r == 0 && !v->actual)
		r = stasis_error_errno(err, ENOMEM, "out of memory");
	for (size_t i = 0; r == 0 && i < m->nfiles; i++)
		v->actual[i].name = m->files[i].name;
	/* Everything CRIU interprets is checked before it runs; the pages
	 * only fill memory, so they are checked while CRIU restores. */
	if (r == 0) {
		v->result =
		    hash_files(v->dirfd, v->actual, m->nfiles, hash_skip_pages, NULL, &v->failed);
		r = verify_result(v, err);
	}
	if (r == 0 && m->options.compress)
		r = make_stage(v, err);
	if (r == 0 && pthread_create(&v->thread, NULL, verify_pages, v) != 0)
		r = stasis_error_errno(err, EAGAIN, "starting the image verification");
	if (r < 0) {
		image_verifier_free(v);
		return r;
	}
	v->running = true;
	*out = v;
	return 0;
}

int image_verify_wait(struct image_verifier *v, struct stasis_error **err)
{
	if (v->running) {
		pthread_join(v->thread, NULL);
		v->running = false;
	}
	return verify_result(v, err);
}

void image_verifier_free(struct image_verifier *v)
{
	if (!v)
		return;
	if (v->running) {
		atomic_store(&v->cancel, true);
		pthread_join(v->thread, NULL);
	}
	if (v->dirfd >= 0)
		close(v->dirfd);
	if (v->stagefd >= 0)
		close(v->stagefd);
	if (v->stage[0])
		remove_flat_dir(v->stage);
	free(v->actual);
	free(v);
}

const char *image_verifier_criu_dir(const struct image_verifier *v)
{
	return v->criu_dir;
}

int image_open(const char *dir, struct manifest *m, struct stasis_error **err)
{
	struct image_verifier *v = NULL;
	int r;

	r = image_open_begin(dir, m, &v, err);
	if (r < 0)
		return r;
	progress_begin("verifying the image's checksums");
	r = image_verify_wait(v, err);
	progress_end();
	image_verifier_free(v);
	return r;
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
