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
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "image-hash.h"
#include "fault.h"
#include "image-pack.h"
#include "image-serve.h"
#include "image-stage.h"
#include "image-unpack.h"
#include "preflight.h"
#include "progress.h"
#include "util.h"

/* A folder that an image is written into or restored from must be root's
 * and writable by root alone: whoever else can write there can plant a link
 * where stasis or CRIU writes, read what a careless mode lets out, or swap
 * a file between its check and CRIU's read. */
static int check_owned(const char *path, const struct stat *st, struct stasis_error **err)
{
	if (!S_ISDIR(st->st_mode)) {
		stasis_error_set(err, ENOTDIR, STASIS_DOMAIN_USAGE, 0, "%s is not a directory",
				 path);
		return stasis_error_hint(err, "give a directory");
	}
	if (st->st_uid != geteuid()) {
		stasis_error_set(
		    err, EPERM, STASIS_DOMAIN_USAGE, 0,
		    "%s belongs to uid %u, not to root: another user controls what is in it", path,
		    (unsigned int)st->st_uid);
		return stasis_error_hint(err, "use a folder that only root can write (copy an "
					      "image there to restore it)");
	}
	if (st->st_mode & 022) {
		stasis_error_set(err, EPERM, STASIS_DOMAIN_USAGE, 0,
				 "%s is writable by group or others (mode %04o)", path,
				 (unsigned int)(st->st_mode & 07777));
		return stasis_error_hint(err, "chmod go-w %s, or use a folder only root can write",
					 path);
	}
	return 0;
}

/* A folder above the image folder that a user other than root could
 * change: its owner, or anyone who may write it where it is not sticky and
 * writable by all, could rename the image folder in it and put one of
 * their own there between two of stasis's steps, which go by path. In a
 * sticky folder writable by all (/tmp, /dev/shm) no one else may rename
 * root's folder. */
static bool folder_others_can_change(const struct stat *st)
{
	bool others = st->st_mode & (S_IWGRP | S_IWOTH);

	return !S_ISDIR(st->st_mode) || st->st_uid != 0 ||
	       (others && !((st->st_mode & S_ISVTX) && (st->st_mode & S_IWOTH)));
}

/* Checks each folder of resolved ("/a/b", no link, no "." or "..") above
 * its last part, from the root down. */
static int check_ancestors(const char *resolved, const char *given, struct stasis_error **err)
{
	char at[PATH_MAX];
	size_t len = strlen(resolved);

	for (size_t i = 1; i < len; i++) {
		struct stat st;

		if (resolved[i] != '/')
			continue;
		memcpy(at, resolved, i);
		at[i] = '\0';
		if (lstat(at, &st) < 0)
			return stasis_error_errno(err, errno, "image directory %s: %s: %s", given,
						  at, strerror(errno));
		if (folder_others_can_change(&st)) {
			stasis_error_set(
			    err, EPERM, STASIS_DOMAIN_USAGE, 0,
			    "image directory %s is in %s, a folder that %s can change "
			    "(uid %u, mode %04o): it could swap the image folder for its "
			    "own between two steps",
			    given, at, st.st_uid ? "its owner" : "a user other than root",
			    (unsigned int)st.st_uid, (unsigned int)(st.st_mode & 07777));
			return stasis_error_hint(err, "use a folder whose every parent only root "
						      "can change (such as /var/lib or /tmp)");
		}
	}
	return 0;
}

int image_resolve_folder(const char *dir, char *out, size_t size, struct stasis_error **err)
{
	char abs[PATH_MAX], real[PATH_MAX];
	size_t cut;
	int n;

	if (!dir || !*dir)
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
					"no image directory given");
	if (dir[0] == '/')
		n = snprintf(abs, sizeof(abs), "%s", dir);
	else if (getcwd(real, sizeof(real)))
		n = snprintf(abs, sizeof(abs), "%s/%s", real, dir);
	else
		return stasis_error_errno(err, errno, "image directory %s: %s", dir,
					  strerror(errno));
	if (n < 0 || (size_t)n >= sizeof(abs))
		return stasis_error_set(err, ENAMETOOLONG, STASIS_DOMAIN_USAGE, 0,
					"image directory %s: name too long", dir);
	while (n > 1 && abs[n - 1] == '/')
		abs[--n] = '\0';
	/* The folder itself may not be there yet: its parent must. */
	cut = (size_t)n;
	if (!realpath(abs, real)) {
		char *slash = strrchr(abs, '/');
		const char *last = slash + 1;

		if (errno != ENOENT || !*last || !strcmp(last, ".") || !strcmp(last, ".."))
			return stasis_error_errno(err, errno, "image directory %s: %s", dir,
						  strerror(errno));
		cut = (size_t)(slash - abs);
		abs[cut] = '\0';
		if (!realpath(cut ? abs : "/", real))
			return stasis_error_errno(err, errno, "image directory %s: %s", dir,
						  strerror(errno));
		abs[cut] = '/';
		n = snprintf(out, size, "%s%s", strcmp(real, "/") ? real : "", abs + cut);
	} else {
		n = snprintf(out, size, "%s", real);
	}
	if (n < 0 || (size_t)n >= size)
		return stasis_error_set(err, ENAMETOOLONG, STASIS_DOMAIN_USAGE, 0,
					"image directory %s: name too long", dir);
	if (!strcmp(out, "/"))
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
					"image directory %s is the root folder", dir);
	return check_ancestors(out, dir, err);
}

int image_check_folder(const char *dir, struct stasis_error **err)
{
	char sub[PATH_MAX];
	struct stat st;
	int r;

	if (stat(dir, &st) < 0)
		return stasis_error_errno(err, errno, "image directory %s: %s", dir,
					  strerror(errno));
	r = check_owned(dir, &st, err);
	snprintf(sub, sizeof(sub), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	/* Its CRIU folder is not followed: a link there is someone's plant. */
	if (r == 0 && lstat(sub, &st) == 0)
		r = check_owned(sub, &st, err);
	return r;
}

int image_prepare(const char *dir, struct stasis_error **err)
{
	char sub[4096];
	int r = dir_is_empty(dir);
	bool made;

	if (r == 1) {
		stasis_error_set(err, EEXIST, STASIS_DOMAIN_USAGE, 0,
				 "image directory %s is not empty", dir);
		return stasis_error_hint(err, "give a new or empty directory");
	}
	if (r < 0 && r != -ENOENT)
		return stasis_error_errno(err, -r, "image directory %s: %s", dir, strerror(-r));
	made = r == -ENOENT;
	if (!made && (r = image_check_folder(dir, err)) < 0)
		return r;
	snprintf(sub, sizeof(sub), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	r = mkdir_p(sub);
	if (r < 0)
		return stasis_error_errno(err, -r, "creating %s: %s", sub, strerror(-r));
	/* Made just now by someone else, between the look and the mkdir. */
	if (made && (r = image_check_folder(dir, err)) < 0)
		return r;
	return made;
}

void image_discard(const char *dir, bool made)
{
	char sub[PATH_MAX];
	struct dirent *de;
	DIR *d;

	snprintf(sub, sizeof(sub), "%s/" MANIFEST_NAME, dir);
	if (access(sub, F_OK) == 0)
		return; /* complete: the failure came after */
	snprintf(sub, sizeof(sub), "%s/" SEAL_NAME, dir);
	unlink(sub);
	snprintf(sub, sizeof(sub), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	d = opendir(sub);
	while (d && (de = readdir(d))) {
		if (de->d_type != DT_DIR)
			unlinkat(dirfd(d), de->d_name, 0);
	}
	if (d)
		closedir(d);
	/* Each goes only if nothing is left in it. */
	rmdir(sub);
	if (made)
		rmdir(dir);
}

int image_take_logs(const char *dir, const char *work)
{
	char sub[PATH_MAX];
	_cleanup_close_ int to = -1;
	struct dirent *de;
	int r = 0;
	DIR *d;

	snprintf(sub, sizeof(sub), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	to = open(sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	d = opendir(work);
	if (to < 0 || !d) {
		r = -errno;
		if (d)
			closedir(d);
		return r;
	}
	while ((de = readdir(d)) && r == 0) {
		if (de->d_type != DT_REG ||
		    (!image_is_log_file(de->d_name) && strcmp(de->d_name, "stats-dump") != 0))
			continue;
		r = copy_file_at(dirfd(d), de->d_name, to);
	}
	closedir(d);
	return r;
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
	image_count_bytes(m);
	return 0;
}

/* The bytes of CRIU's pages images in dir so far (the folder CRIU
 * writes them into). */
static uint64_t pages_written(void *dir)
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	uint64_t bytes = 0;
	struct dirent *e;
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd)))
		return 0;
	fd = -1; /* the stream owns it */
	while ((e = readdir(d))) {
		struct stat st;

		if (strncmp(e->d_name, "pages-", 6) ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		bytes += (uint64_t)st.st_size;
	}
	closedir(d);
	return bytes;
}

void image_progress_pages(const struct manifest *m, const char *dir)
{
	struct image_estimate e;

	/* After the GPU step its copy is in the processes' own memory. */
	preflight_image_estimate(m, &e);
	progress_set_total(e.host);
	progress_poll_bytes(pages_written, (void *)dir);
}

void image_count_bytes(struct manifest *m)
{
	m->image_bytes = 0;
	for (size_t i = 0; i < m->nfiles; i++)
		m->image_bytes += m->files[i].size;
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
	char stage[PATH_MAX];	 /* a compressed image's staging folder, or "" */
	char mnt[PATH_MAX];	 /* where its pages are served from, or "" */
	char criu_dir[PATH_MAX]; /* what CRIU restores from */
	/* A compressed image's pages: each file's decompressed bytes, and
	 * its place among those served (or NULLs). */
	unsigned char **maps;
	struct serve_file *served;
	size_t *slot;
	size_t nserved;
	struct image_server *server;
	struct manifest_file *actual;
	pthread_t thread;
	bool running;
	atomic_bool cancel;
	int result; /* -errno of the hashing */
	size_t failed;
	uint64_t unpack_usec;	 /* how long the decompression took */
	struct unpack_sink sink; /* and where its time went */
};

static void pages_ready(void *ctx, size_t i, uint64_t bytes)
{
	struct image_verifier *v = ctx;

	image_serve_ready(v->server, v->slot[i], bytes);
}

/* Decompressing a file far ahead of CRIU's reads of it only holds memory:
 * CRIU takes the pages more slowly than they come, and they are given back
 * once it has. Each file may be this far ahead. */
#define SERVE_AHEAD (256ull << 20)

static bool pages_ahead(void *ctx, size_t i)
{
	struct image_verifier *v = ctx;

	return image_serve_ahead(v->server, v->slot[i], SERVE_AHEAD);
}

static void *verify_pages(void *arg)
{
	struct image_verifier *v = arg;
	/* Served, the decompression leaves half the cores to CRIU and the
	 * FUSE threads: it is ahead of them with that. */
	v->sink = (struct unpack_sink){.maps = v->maps,
				       .threads = v->server ? (pack_threads() + 1) / 2 : 0,
				       .ready = v->server ? pages_ready : NULL,
				       .pause = v->server ? pages_ahead : NULL,
				       .ctx = v};
	uint64_t start = now_usec();

	if (v->stage[0]) {
		v->result =
		    image_unpack(v->dirfd, v->m, v->actual, &v->sink, &v->cancel, &v->failed);
		v->unpack_usec = now_usec() - start;
	} else
		v->result = hash_files(v->dirfd, v->actual, v->m->nfiles, hash_skip_all_but_pages,
				       &v->cancel, &v->failed);
	/* Whoever reads what will not come fails instead of waiting. */
	if (v->result < 0 && v->server)
		image_serve_fail(v->server);
	return NULL;
}

static uint64_t unpacked_bytes(const struct manifest *m)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < m->nfiles; i++)
		sum += m->files[i].unpacked_size;
	return sum;
}

/* The decompressed pages must fit in memory, and when they are staged as
 * files, the staging folder too. */
static int check_stage_room(const struct manifest *m, bool in_files, struct stasis_error **err)
{
	const char *root = image_stage_root();
	uint64_t need = unpacked_bytes(m), room = preflight_mem_available();
	struct statfs sfs;
	char a[32], b[32], where[PATH_MAX + 32] = "memory";

	if (in_files && statfs(root, &sfs) < 0)
		return stasis_error_errno(err, errno, "staging folder %s: %s", root,
					  strerror(errno));
	if (in_files &&
	    (sfs.f_type != TMPFS_MAGIC || (uint64_t)sfs.f_bavail * (uint64_t)sfs.f_bsize < room))
		room = (uint64_t)sfs.f_bavail * (uint64_t)sfs.f_bsize;
	if (need <= room)
		return 0;
	if (in_files)
		snprintf(where, sizeof(where), "the staging folder %s", root);
	stasis_error_set(err, ENOSPC, STASIS_DOMAIN_USAGE, 0,
			 "the compressed image unpacks to %s, %s has room for %s",
			 format_bytes(need, a, sizeof(a)), where, format_bytes(room, b, sizeof(b)));
	return stasis_error_hint(err, "free memory, or set STASIS_STAGE_DIR to a roomier folder");
}

/* The staged name of a compressed pages image: NAME.img. */
static void staged_name(const char *packed, char *out, size_t len)
{
	const char *base = strrchr(packed, '/');

	base = base ? base + 1 : packed;
	snprintf(out, len, "%.*s", (int)(strlen(base) - strlen(IMAGE_PACKED_SUFFIX)), base);
}

/* Memory for each compressed pages image's decompressed bytes: served,
 * anonymous memory (listed in v->served); else a file NAME.img of the
 * staging folder, mapped. */
static int map_pages(struct image_verifier *v, int stagefd, bool served)
{
	int flags = served ? MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE : MAP_SHARED;

	for (size_t i = 0; i < v->m->nfiles; i++) {
		const struct manifest_file *mf = &v->m->files[i];
		struct serve_file *f = &v->served[v->nserved];
		char name[NAME_MAX + 1];
		_cleanup_close_ int fd = -1; /* stays -1 for anonymous memory */
		void *map = NULL;

		if (!image_is_packed_file(mf->name))
			continue;
		staged_name(mf->name, name, sizeof(name));
		if (!served && ((fd = openat(stagefd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
					     0600)) < 0 ||
				ftruncate(fd, (off_t)mf->unpacked_size) < 0))
			return -errno;
		if (mf->unpacked_size &&
		    (map = mmap(NULL, mf->unpacked_size, PROT_READ | PROT_WRITE, flags, fd, 0)) ==
			MAP_FAILED)
			return -errno;
		if (map)
			madvise(map, mf->unpacked_size, MADV_HUGEPAGE);
		v->maps[i] = map;
		if (!served)
			continue;
		snprintf(f->name, sizeof(f->name), "%s", name);
		f->data = map;
		f->size = mf->unpacked_size;
		v->slot[i] = v->nserved++;
	}
	return 0;
}

/* Serve the pages from memory while they are decompressed, through
 * NAME.img links to a FUSE folder: CRIU restores meanwhile. -errno when
 * this machine cannot mount one, with nothing left behind. */
static int stage_served(struct image_verifier *v, int stagefd)
{
	int r;

	if (fault_at("serve", 0))
		return -EPERM;
	/* Named after this run, as the staging folder: swept if it is killed. */
	r = image_stage_make(v->mnt, NULL);
	if (r < 0)
		return r;
	r = map_pages(v, stagefd, true);
	if (r == 0)
		r = image_serve_start(v->mnt, v->served, v->nserved, &v->server);
	for (size_t k = 0; r == 0 && k < v->nserved; k++) {
		char target[PATH_MAX + NAME_MAX];

		snprintf(target, sizeof(target), "%s/%s", v->mnt, v->served[k].name);
		if (symlinkat(target, stagefd, v->served[k].name) < 0)
			r = -errno;
	}
	return r;
}

/* Stops serving and unmaps the pages; what serving left is removed. */
static void unstage_pages(struct image_verifier *v)
{
	image_serve_stop(v->server);
	v->server = NULL;
	if (v->mnt[0] && rmdir(v->mnt) < 0)
		fprintf(stderr, "stasis: removing %s: %s\n", v->mnt, strerror(errno));
	v->mnt[0] = '\0';
	for (size_t i = 0; v->maps && i < v->m->nfiles; i++) {
		if (v->maps[i])
			munmap(v->maps[i], v->m->files[i].unpacked_size);
		v->maps[i] = NULL;
	}
	v->nserved = 0;
}

/* A staging folder CRIU restores from, with links to the image's other
 * files, and the pages served or staged as files. */
static int make_stage(struct image_verifier *v, struct stasis_error **err)
{
	_cleanup_close_ int stagefd = -1;
	size_t n = v->m->nfiles ? v->m->nfiles : 1;
	char abs[PATH_MAX];
	int r = 0;

	v->maps = calloc(n, sizeof(*v->maps));
	v->served = calloc(n, sizeof(*v->served));
	v->slot = calloc(n, sizeof(*v->slot));
	if (!v->maps || !v->served || !v->slot)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	r = image_stage_make(v->stage, NULL);
	if (r == 0 && ((stagefd = open(v->stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
		       !realpath(v->dir, abs)))
		r = -errno;
	for (size_t i = 0; r == 0 && i < v->m->nfiles; i++) {
		const char *name = v->m->files[i].name;
		char target[PATH_MAX + NAME_MAX];

		if (image_is_packed_file(name))
			continue;
		snprintf(target, sizeof(target), "%s/%s", abs, name);
		if (symlinkat(target, stagefd, strrchr(name, '/') + 1) < 0)
			r = -errno;
	}
	if (r < 0)
		return stasis_error_errno(err, -r, "preparing a staging folder in %s: %s",
					  image_stage_root(), strerror(-r));
	r = check_stage_room(v->m, false, err);
	if (r == 0 && stage_served(v, stagefd) < 0) {
		for (size_t k = 0; k < v->nserved; k++)
			unlinkat(stagefd, v->served[k].name, 0);
		unstage_pages(v);
		r = check_stage_room(v->m, true, err);
		if (r == 0 && (r = map_pages(v, stagefd, false)) < 0)
			r = stasis_error_errno(err, -r, "staging the pages in %s: %s", v->stage,
					       strerror(-r));
	}
	if (r == 0)
		snprintf(v->criu_dir, sizeof(v->criu_dir), "%s", v->stage);
	return r;
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

static int unlisted(const char *dir, const char *sub, const char *name, const char *what,
		    struct stasis_error **err)
{
	stasis_error_set(err, EBADMSG, STASIS_DOMAIN_IMAGE, 0,
			 "%s/%s%s%s is %s: not part of the image its manifest lists", dir, sub,
			 *sub ? "/" : "", name, what);
	return stasis_error_hint(err, "remove it, or checkpoint again into an empty directory");
}

/* Sorted names, for the image folder's check against its list. */
static int compare_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What CRIU writes beside the image and never reads back: its logs, and
 * its statistics (written after the image is sealed). */
static bool criu_writes_only(const char *name)
{
	return image_is_log_file(name) || !strcmp(name, "stats-dump") ||
	       !strcmp(name, "stats-restore");
}

/* Everything in the image's CRIU folder is a regular file the manifest
 * lists, or one that CRIU writes and never reads: CRIU restores
 * whatever it finds there, so a file that is not checked must not be
 * there. Beside it only the manifest, its seal, logs and a runtime's work
 * folders. */
static int check_listed(const char *dir, const struct manifest *m, struct stasis_error **err)
{
	char sub[PATH_MAX];
	_cleanup_free_ char **names = calloc(m->nfiles + 1, sizeof(char *));
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (!names)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < m->nfiles; i++)
		names[i] = m->files[i].name + strlen(IMAGE_CRIU_SUBDIR "/");
	qsort(names, m->nfiles, sizeof(char *), compare_names);
	snprintf(sub, sizeof(sub), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	d = opendir(sub);
	if (!d)
		return stasis_error_errno(err, errno, "opening %s: %s", sub, strerror(errno));
	while (r == 0 && (de = readdir(d))) {
		const char *name = de->d_name;
		struct stat st;

		if (!strcmp(name, ".") || !strcmp(name, ".."))
			continue;
		if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			r = stasis_error_errno(err, errno, "%s/%s: %s", sub, name, strerror(errno));
		else if (!S_ISREG(st.st_mode))
			r = unlisted(dir, IMAGE_CRIU_SUBDIR, name, "not a regular file", err);
		else if (!criu_writes_only(name) &&
			 !bsearch(&name, names, m->nfiles, sizeof(char *), compare_names))
			r = unlisted(dir, IMAGE_CRIU_SUBDIR, name, "a file", err);
	}
	closedir(d);
	d = r == 0 ? opendir(dir) : NULL;
	while (d && r == 0 && (de = readdir(d))) {
		const char *name = de->d_name;
		struct stat st;

		if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, IMAGE_CRIU_SUBDIR))
			continue;
		if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISREG(st.st_mode) && (!strcmp(name, MANIFEST_NAME) ||
					    !strcmp(name, SEAL_NAME) || criu_writes_only(name)))
			continue;
		/* A runtime's work folder: runc's, or a restore's. */
		if (S_ISDIR(st.st_mode) && (!strcmp(name, "runc") || !strncmp(name, "restore-", 8)))
			continue;
		r = unlisted(dir, "", name, S_ISREG(st.st_mode) ? "a file" : "not a regular file",
			     err);
	}
	if (d)
		closedir(d);
	return r;
}

int image_open_begin(const char *dir, const struct image_trust *trust, struct manifest *m,
		     struct image_verifier **out, struct stasis_error **err)
{
	struct image_verifier *v;
	int r = image_check_folder(dir, err);

	if (r == 0)
		r = image_read_trusted(dir, trust, m, err);
	if (r == 0)
		r = manifest_check_complete(m, err);
	if (r == 0)
		r = check_listed(dir, m, err);
	if (r < 0)
		return r;
	v = calloc(1, sizeof(*v));
	if (!v)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	v->dir = dir;
	v->m = m;
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

int image_verify_stop(struct image_verifier *v, struct stasis_error **err)
{
	if (v->running) {
		atomic_store(&v->cancel, true);
		pthread_join(v->thread, NULL);
		v->running = false;
	}
	return v->result == -ECANCELED ? 0 : verify_result(v, err);
}

void image_verifier_record(const struct image_verifier *v, struct manifest *m)
{
	uint64_t first, last;

	if (!v->unpack_usec)
		return;
	manifest_add_phase(m, "unpack", v->unpack_usec);
	manifest_add_phase(m, "unpack_read", v->sink.read_usec);
	manifest_add_phase(m, "unpack_queue_wait", v->sink.queue_usec);
	if (!v->server)
		return;
	manifest_add_phase(m, "unpack_paused", v->sink.pause_usec);
	image_serve_times(v->server, &first, &last);
	manifest_add_phase(m, "serve_first_read", first);
	manifest_add_phase(m, "serve_last_read", last);
}

bool image_verifier_serves(const struct image_verifier *v)
{
	return v->server != NULL;
}

void image_verifier_unstage(struct image_verifier *v)
{
	image_verify_stop(v, NULL);
	unstage_pages(v);
	if (v->stage[0])
		remove_dir_tree(v->stage);
	v->stage[0] = '\0';
}

void image_verifier_free(struct image_verifier *v)
{
	if (!v)
		return;
	image_verifier_unstage(v);
	if (v->dirfd >= 0)
		close(v->dirfd);
	free(v->maps);
	free(v->served);
	free(v->slot);
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

	r = image_open_begin(dir, NULL, m, &v, err);
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

	if (fault_at("sync", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_SYSTEM, EIO,
					"flushing %s to disk: injected fault", dir);
	if (fd < 0 || syncfs(fd) < 0)
		return stasis_error_errno(err, errno, "flushing %s to disk: %s", dir,
					  strerror(errno));
	manifest_add_phase(m, "sync", now_usec() - start);
	return 0;
}
