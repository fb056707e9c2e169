/* SPDX-License-Identifier: MIT */
/* Staging a --leave-running checkpoint in memory (image-stage.h). The copy
 * to the image folder reads each staged file once: it hashes what it
 * writes, and punches the written range out of tmpfs so that the staged
 * image gives its memory back as it goes. Nothing is copied while CRIU
 * dumps: an image is staged only where the disk would hold CRIU back, and
 * a copy beside CRIU slowed its dump into tmpfs by half on the GPU machine
 * (w1, a 4 GiB dirty limit: CRIU's dump 12.3-14.5 s against 8.0-8.6 s
 * written straight to disk), which is the pause the staging is for. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fault.h"
#include "image-hash.h"
#include "image-pack.h"
#include "image-stage.h"
#include "image.h"
#include "mounts.h"
#include "note.h"
#include "progress.h"
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
	remove_dir_tree(stage);
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

struct mounts_below {
	const char *path;
	size_t len;
};

static int unmount_if_below(const struct mount_entry *m, void *ctx)
{
	const struct mounts_below *b = ctx;

	if (strncmp(m->point, b->path, b->len) == 0 &&
	    (m->point[b->len] == '/' || m->point[b->len] == '\0'))
		umount2(m->point, MNT_DETACH);
	return 0;
}

/* What a killed owner left mounted at or below path (a FUSE folder that
 * served its pages, dead with it) is detached, so that the folder can go. */
static void unmount_below(const char *path)
{
	struct mounts_below b = {.path = path, .len = strlen(path)};

	mounts_each("/proc/self/mountinfo", unmount_if_below, &b, NULL);
}

/* Only a folder stasis made (root's, 0700, as mkdtemp makes it) is taken
 * for a killed run's: the staging root is writable by everyone, and a
 * link or folder another user planted under a staging name is left. */
static bool made_by_stasis(int rootfd, const char *name, struct stat *st)
{
	return fstatat(rootfd, name, st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st->st_mode) &&
	       st->st_uid == geteuid() && (st->st_mode & 07777) == 0700;
}

void image_stage_sweep(void)
{
	char root[PATH_MAX];
	_cleanup_close_ int rootfd = -1;
	DIR *d;
	struct dirent *de;

	/* Resolved, as mount points are listed. */
	if (!realpath(image_stage_root(), root))
		return;
	rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d = rootfd >= 0 ? opendir(root) : NULL;

	while (d && (de = readdir(d))) {
		pid_t owner = stage_owner(de->d_name);
		char path[PATH_MAX], size[32];
		uint64_t freed = 0;
		struct stat st;

		if (!owner || kill(owner, 0) == 0 || errno != ESRCH)
			continue;
		/* A FUSE folder its dead owner served pages from cannot even be
		 * looked at: it goes first (only root can have mounted it). */
		snprintf(path, sizeof(path), "%s/%s", root, de->d_name);
		unmount_below(path);
		if (!made_by_stasis(rootfd, de->d_name, &st))
			continue;
		if (remove_dir_at(rootfd, de->d_name, st.st_dev, &freed) == 0)
			stasis_note("removed %s (%s), left by stasis PID %d, which was killed",
				    path, format_bytes(freed, size, sizeof(size)), (int)owner);
	}
	if (d)
		closedir(d);
}

struct staged_file {
	char name[256];
	int in, out;
	int *parts; /* CRIU's parts of it, appended in order (image-stage.h) */
	size_t nparts;
	XXH3_state_t *state;
	uint64_t done, flushed;	      /* copied and hashed; writeback started */
	struct manifest_file *listed; /* its manifest entry; NULL for CRIU's log */
};

struct image_stager {
	char dir[PATH_MAX];
	int from, to; /* the staging folder, DIR/criu */
	DIR *scan;    /* the staging folder */
	struct staged_file *files;
	size_t nfiles, cap;
	/* The commit's workers take files in turn under the lock. */
	pthread_mutex_t lock;
	size_t next, failed;
	int error;
	char incomplete[256]; /* a file whose parts do not add up */
};

/* Open name in the stage and create it in DIR/criu; the array may move. */
static int add_file(struct image_stager *s, const char *name)
{
	struct staged_file *f, *grown = grow_array(s->files, s->nfiles, &s->cap, sizeof(*f), 32);
	struct stat st;

	if (!grown)
		return -ENOMEM;
	s->files = grown;
	f = &s->files[s->nfiles];
	*f = (struct staged_file){.in = -1, .out = -1};
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->in = openat(s->from, name, O_RDWR | O_CLOEXEC);
	if (f->in < 0 || fstat(f->in, &st) < 0)
		goto fail;
	f->out = openat(s->to, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (f->out < 0)
		goto fail;
	f->state = XXH3_createState();
	if (!f->state) {
		errno = ENOMEM;
		goto fail;
	}
	XXH3_128bits_reset(f->state);
	s->nfiles++;
	return 0;
fail:;
	int e = errno;

	if (f->in >= 0)
		close(f->in);
	if (f->out >= 0)
		close(f->out);
	return -e;
}

bool image_stage_part(const char *name, size_t *base_len, unsigned *k)
{
	const char *dot = strrchr(name, '.');
	char *end;
	unsigned long n;

	if (!dot || strncmp(dot, ".part-", 6) != 0 || dot == name || dot[6] < '1' || dot[6] > '9')
		return false;
	n = strtoul(dot + 6, &end, 10);
	if (*end || n > UINT_MAX)
		return false;
	*base_len = (size_t)(dot - name);
	*k = (unsigned)n;
	return true;
}

/* Append in, hashed, to f, giving back the staged memory behind it. */
static int copy_from(struct staged_file *f, int in, char *buf)
{
	uint64_t off = 0;
	struct stat st;

	if (fstat(in, &st) < 0)
		return -errno;
	while (off < (uint64_t)st.st_size) {
		ssize_t n = pread(in, buf, STAGE_CHUNK, (off_t)off);
		int r;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO; /* the staged file shrank */
		if (stasis_interrupted())
			return -EINTR;
		if (fault_at("stage-slow", 0))
			usleep(500000);
		XXH3_128bits_update(f->state, buf, (size_t)n);
		r = write_all(f->out, buf, (size_t)n);
		if (r < 0)
			return r;
		fallocate(in, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, n);
		off += (uint64_t)n;
		f->done += (uint64_t)n;
		progress_add_bytes((uint64_t)n);
		f->flushed = image_flush_step(f->out, f->flushed, f->done);
	}
	return 0;
}

/* What the commit writes: every staged file and part, for its progress. */
static uint64_t staged_bytes(const struct image_stager *s)
{
	uint64_t bytes = 0;
	struct stat st;

	for (size_t i = 0; i < s->nfiles; i++) {
		const struct staged_file *f = &s->files[i];

		if (fstat(f->in, &st) == 0)
			bytes += (uint64_t)st.st_size;
		for (size_t j = 0; j < f->nparts; j++)
			if (fstat(f->parts[j], &st) == 0)
				bytes += (uint64_t)st.st_size;
	}
	return bytes;
}

/* Copy f and its parts. */
static int copy_file(struct staged_file *f, char *buf)
{
	int r = copy_from(f, f->in, buf);

	for (size_t i = 0; r == 0 && i < f->nparts; i++)
		r = copy_from(f, f->parts[i], buf);
	return r;
}

int image_stage_start(const char *stage, const char *dir, struct image_stager **out,
		      struct stasis_error **err)
{
	struct image_stager *s = calloc(1, sizeof(*s));
	char sub[PATH_MAX];

	if (!s)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	snprintf(s->dir, sizeof(s->dir), "%s", dir);
	snprintf(sub, sizeof(sub), "%s/%s", dir, IMAGE_CRIU_SUBDIR);
	pthread_mutex_init(&s->lock, NULL);
	s->from = open(stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	s->to = open(sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	s->scan = opendir(stage);
	if (s->from < 0 || s->to < 0 || !s->scan) {
		int e = errno;

		image_stage_free(s);
		return stasis_error_errno(err, e, "staging the image in %s: %s", stage,
					  strerror(e));
	}
	*out = s;
	return 0;
}

void image_stage_free(struct image_stager *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nfiles; i++) {
		close(s->files[i].in);
		close(s->files[i].out);
		for (size_t k = 0; s->files[i].parts && k < s->files[i].nparts; k++)
			close(s->files[i].parts[k]);
		free(s->files[i].parts);
		if (s->files[i].state)
			XXH3_freeState(s->files[i].state);
	}
	free(s->files);
	if (s->scan)
		closedir(s->scan);
	if (s->from >= 0)
		close(s->from);
	if (s->to >= 0)
		close(s->to);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static void *commit_worker(void *arg)
{
	struct image_stager *s = arg;
	_cleanup_free_ char *buf = malloc(STAGE_CHUNK);

	for (;;) {
		size_t i;
		int r;

		pthread_mutex_lock(&s->lock);
		i = s->next++;
		pthread_mutex_unlock(&s->lock);
		if (i >= s->nfiles)
			return NULL;
		r = buf ? copy_file(&s->files[i], buf) : -ENOMEM;
		pthread_mutex_lock(&s->lock);
		if (r < 0 && !s->error) {
			s->error = r;
			s->failed = i;
		}
		/* After one failure the image is lost: the rest need not come. */
		if (s->error)
			s->next = s->nfiles;
		pthread_mutex_unlock(&s->lock);
	}
}

/* The staged file whose name is name's first len bytes, or NULL. */
static struct staged_file *find_file(struct image_stager *s, const char *name, size_t len)
{
	for (size_t i = 0; i < s->nfiles; i++)
		if (strlen(s->files[i].name) == len && strncmp(s->files[i].name, name, len) == 0)
			return &s->files[i];
	return NULL;
}

/* A part CRIU left in the stage: NAME.part-K, for the staged file NAME. */
struct staged_part {
	char name[256];
	unsigned k;
	struct staged_file *of;
};

/* Every part in the stage, each with its file (NULL where it has none),
 * into *out; how many, or -errno. */
static ssize_t find_parts(struct image_stager *s, struct staged_part **out)
{
	struct staged_part *parts = NULL, *grown;
	size_t n = 0, cap = 0, len;
	struct dirent *de;
	unsigned k;

	rewinddir(s->scan);
	while ((de = readdir(s->scan))) {
		if (de->d_type != DT_REG || !image_stage_part(de->d_name, &len, &k))
			continue;
		grown = grow_array(parts, n, &cap, sizeof(*parts), 16);
		if (!grown) {
			free(parts);
			return -ENOMEM;
		}
		parts = grown;
		snprintf(parts[n].name, sizeof(parts[n].name), "%s", de->d_name);
		parts[n].k = k;
		parts[n].of = find_file(s, de->d_name, len);
		n++;
	}
	*out = parts;
	return (ssize_t)n;
}

/* Open each part as its file's k-th. */
static int open_parts(struct image_stager *s, struct staged_part *parts, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct staged_file *f = parts[i].of;

		if (parts[i].k > f->nparts)
			f->nparts = parts[i].k;
	}
	for (size_t i = 0; i < s->nfiles; i++) {
		struct staged_file *f = &s->files[i];

		if (!f->nparts)
			continue;
		f->parts = malloc(f->nparts * sizeof(*f->parts));
		if (!f->parts) {
			f->nparts = 0;
			return -ENOMEM;
		}
		for (size_t j = 0; j < f->nparts; j++)
			f->parts[j] = -1;
	}
	for (size_t i = 0; i < n; i++) {
		int *fd = &parts[i].of->parts[parts[i].k - 1];

		*fd = openat(s->from, parts[i].name, O_RDWR | O_CLOEXEC);
		if (*fd < 0)
			return -errno;
	}
	return 0;
}

/* Each part to its file; a part without its file, or a gap in a file's
 * parts, is an image CRIU did not finish: -EBADMSG, naming it. */
static int list_parts(struct image_stager *s)
{
	struct staged_part *parts;
	ssize_t n = find_parts(s, &parts);
	int r = 0;

	if (n < 0)
		return (int)n;
	for (ssize_t i = 0; i < n && r == 0; i++)
		if (!parts[i].of) {
			snprintf(s->incomplete, sizeof(s->incomplete), "%s", parts[i].name);
			r = -EBADMSG;
		}
	if (r == 0)
		r = open_parts(s, parts, (size_t)n);
	free(parts);
	for (size_t i = 0; i < s->nfiles && r == 0; i++)
		for (size_t j = 0; j < s->files[i].nparts; j++)
			if (s->files[i].parts[j] < 0) {
				snprintf(s->incomplete, sizeof(s->incomplete), "%s",
					 s->files[i].name);
				r = -EBADMSG;
				break;
			}
	return r;
}

/* Every staged file with its parts, then each its manifest entry unless it
 * is a log. */
static int list_files(struct image_stager *s, struct manifest *m)
{
	struct dirent *de;
	size_t first = m->nfiles;
	unsigned k;
	size_t len;
	int r;

	rewinddir(s->scan); /* opened before CRIU wrote the files */
	while ((de = readdir(s->scan))) {
		if (de->d_type != DT_REG || image_stage_part(de->d_name, &len, &k))
			continue;
		r = add_file(s, de->d_name);
		if (r < 0)
			return r;
	}
	r = list_parts(s);
	if (r < 0)
		return r;
	/* Pointed to once all are added: adding one may move the array. */
	for (size_t i = 0; i < s->nfiles; i++) {
		struct manifest_file *mf;

		if (image_is_log_file(s->files[i].name))
			continue;
		mf = manifest_add_file(m);
		if (!mf || asprintf(&mf->name, "%s/%s", IMAGE_CRIU_SUBDIR, s->files[i].name) < 0)
			return -ENOMEM;
	}
	for (size_t i = 0; i < s->nfiles; i++)
		if (!image_is_log_file(s->files[i].name))
			s->files[i].listed = &m->files[first++];
	return 0;
}

static int copy_files(struct image_stager *s)
{
	pthread_t threads[STAGE_THREADS];
	size_t started = 0;

	for (size_t i = 0; i < STAGE_THREADS && i < s->nfiles; i++)
		if (pthread_create(&threads[started], NULL, commit_worker, s) == 0)
			started++;
	if (started == 0)
		commit_worker(s);
	for (size_t i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	for (size_t i = 0; i < s->nfiles && !s->error; i++) {
		struct staged_file *f = &s->files[i];

		if (f->listed) {
			hash_hex(f->state, f->listed->xxh128);
			f->listed->size = f->done;
		}
	}
	return s->error;
}

int image_stage_commit(struct image_stager *s, struct manifest *m, struct stasis_error **err)
{
	const char *failed = "";
	int r;

	r = list_files(s, m);
	if (r < 0 && s->incomplete[0])
		return stasis_error_errno(
		    err, -r,
		    "the image CRIU staged is incomplete: %s (a file in parts with "
		    "one missing, or a part without its file)",
		    s->incomplete);
	if (r == 0) {
		progress_set_total(staged_bytes(s));
		r = copy_files(s);
	}
	if (r < 0 && s->error)
		failed = s->files[s->failed].name;
	if (r == -EINTR)
		return stasis_error_set(err, EINTR, STASIS_DOMAIN_SYSTEM, EINTR,
					"interrupted by a signal while writing the image to %s",
					s->dir);
	if (r < 0 && *failed)
		return stasis_error_errno(err, -r, "writing %s/%s/%s from memory: %s", s->dir,
					  IMAGE_CRIU_SUBDIR, failed, strerror(-r));
	if (r < 0)
		return stasis_error_errno(err, -r, "writing the image from memory to %s: %s",
					  s->dir, strerror(-r));
	image_count_bytes(m);
	return image_sync(s->dir, m, err);
}
