/* SPDX-License-Identifier: MIT */
#include "rootfs-diff.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "util.h"

#define BLOCK 512
#define WHITEOUT ".wh."
#define OPAQUE ".wh..wh..opq"
#define MAX_XATTRS 16

struct xattr {
	char name[256];
	char *value;
	size_t len;
};

/* One member of the tar, its long names and PAX records already folded in. */
struct entry {
	char path[PATH_MAX];
	char link[PATH_MAX];
	char type;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	uint64_t size;
	time_t mtime;
	unsigned int major, minor;
	struct xattr xattrs[MAX_XATTRS];
	size_t nxattrs;
};

static void entry_clear(struct entry *e)
{
	for (size_t i = 0; i < e->nxattrs; i++)
		free(e->xattrs[i].value);
	memset(e, 0, sizeof(*e));
}

/* A numeric header field: octal text, or base-256 when its top bit is set. */
static uint64_t number(const unsigned char *field, size_t len)
{
	uint64_t v = 0;

	if (field[0] & 0x80) {
		v = field[0] & 0x7f;
		for (size_t i = 1; i < len; i++)
			v = (v << 8) | field[i];
		return v;
	}
	for (size_t i = 0; i < len && (field[i] == ' ' || (field[i] >= '0' && field[i] <= '7'));
	     i++)
		if (field[i] != ' ')
			v = v * 8 + (uint64_t)(field[i] - '0');
	return v;
}

static int read_exact(int fd, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = read(fd, (char *)buf + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

static int skip_data(int fd, uint64_t size)
{
	off_t pad = (off_t)((size + BLOCK - 1) / BLOCK * BLOCK);

	return lseek(fd, pad, SEEK_CUR) < 0 ? -errno : 0;
}

/* A member's data (a long name, PAX records) into a new string. */
static char *read_text(int fd, uint64_t size)
{
	char *text;

	if (size > 1 << 20)
		return NULL;
	text = calloc(1, (size_t)size + 1);
	if (text && (read_exact(fd, text, (size_t)size) < 0 ||
		     lseek(fd, (off_t)((BLOCK - size % BLOCK) % BLOCK), SEEK_CUR) < 0)) {
		free(text);
		return NULL;
	}
	return text;
}

/* "LEN key=value\n" records into e (the ones this applier uses). */
static void apply_pax(struct entry *e, const char *text, size_t total)
{
	const char *p = text, *end = text + total;

	while (p < end) {
		char *after;
		unsigned long len = strtoul(p, &after, 10);
		const char *key, *eq, *value;
		size_t vlen;

		if (len == 0 || *after != ' ' || len > (size_t)(end - p))
			return;
		key = after + 1;
		eq = memchr(key, '=', (size_t)(p + len - key));
		if (!eq)
			return;
		value = eq + 1;
		vlen = (size_t)(p + len - 1 - value); /* without the newline */
		if ((size_t)(eq - key) == 4 && strncmp(key, "path", 4) == 0)
			snprintf(e->path, sizeof(e->path), "%.*s", (int)vlen, value);
		else if ((size_t)(eq - key) == 8 && strncmp(key, "linkpath", 8) == 0)
			snprintf(e->link, sizeof(e->link), "%.*s", (int)vlen, value);
		else if ((size_t)(eq - key) == 4 && strncmp(key, "size", 4) == 0)
			e->size = strtoull(value, NULL, 10);
		else if ((size_t)(eq - key) == 5 && strncmp(key, "mtime", 5) == 0)
			e->mtime = (time_t)strtoll(value, NULL, 10);
		else if (strncmp(key, "SCHILY.xattr.", 13) == 0 && e->nxattrs < MAX_XATTRS) {
			struct xattr *x = &e->xattrs[e->nxattrs];

			x->value = malloc(vlen ? vlen : 1);
			if (x->value) {
				snprintf(x->name, sizeof(x->name), "%.*s", (int)(eq - key - 13),
					 key + 13);
				memcpy(x->value, value, vlen);
				x->len = vlen;
				e->nxattrs++;
			}
		}
		p += len;
	}
}

/* The next member into e, its data left to read; 0 at the end, 1 with a
 * member, -errno when the tar is cut short or not a tar. */
static int next_entry(int fd, struct entry *e)
{
	unsigned char h[BLOCK];
	char long_path[PATH_MAX] = "", long_link[PATH_MAX] = "";
	struct entry pax;
	bool have_pax = false;
	int r;

	memset(&pax, 0, sizeof(pax));
	entry_clear(e);
	for (;;) {
		uint64_t size;
		_cleanup_free_ char *text = NULL;

		r = read_exact(fd, h, sizeof(h));
		if (r < 0 || h[0] == '\0') {
			entry_clear(&pax);
			return r == -EIO || (r == 0 && h[0] == '\0') ? 0 : r;
		}
		size = number(h + 124, 12);
		if (h[156] != 'L' && h[156] != 'K' && h[156] != 'x' && h[156] != 'g')
			break;
		text = read_text(fd, size);
		if (!text) {
			entry_clear(&pax);
			return -EIO;
		}
		if (h[156] == 'L')
			snprintf(long_path, sizeof(long_path), "%s", text);
		else if (h[156] == 'K')
			snprintf(long_link, sizeof(long_link), "%s", text);
		else if (h[156] == 'x') {
			apply_pax(&pax, text, (size_t)size);
			have_pax = true;
		}
	}
	if (h[345])
		snprintf(e->path, sizeof(e->path), "%.155s/%.100s", (const char *)h + 345,
			 (const char *)h);
	else
		snprintf(e->path, sizeof(e->path), "%.100s", (const char *)h);
	snprintf(e->link, sizeof(e->link), "%.100s", (const char *)h + 157);
	e->type = h[156] ? (char)h[156] : '0';
	e->mode = (mode_t)number(h + 100, 8);
	e->uid = (uid_t)number(h + 108, 8);
	e->gid = (gid_t)number(h + 116, 8);
	e->size = number(h + 124, 12);
	e->mtime = (time_t)number(h + 136, 12);
	e->major = (unsigned int)number(h + 329, 8);
	e->minor = (unsigned int)number(h + 337, 8);
	if (long_path[0])
		snprintf(e->path, sizeof(e->path), "%s", long_path);
	if (long_link[0])
		snprintf(e->link, sizeof(e->link), "%s", long_link);
	if (have_pax) {
		if (pax.path[0])
			snprintf(e->path, sizeof(e->path), "%s", pax.path);
		if (pax.link[0])
			snprintf(e->link, sizeof(e->link), "%s", pax.link);
		if (pax.size)
			e->size = pax.size;
		if (pax.mtime)
			e->mtime = pax.mtime;
		memcpy(e->xattrs, pax.xattrs, sizeof(pax.xattrs));
		e->nxattrs = pax.nxattrs;
	}
	return 1;
}

/* A member's name relative to the root: no leading "/" or "./", no "."
 * (the root itself, left as the image has it). */
static const char *relative(const char *path)
{
	while (*path == '/' || (path[0] == '.' && path[1] == '/'))
		path += path[0] == '/' ? 1 : 2;
	return strcmp(path, ".") == 0 ? "" : path;
}

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

/* path and all below it; a path already gone is fine. */
static int remove_tree(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlink(path) < 0 ? -errno : 0;
	return nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) < 0 ? -errno : 0;
}

/* Everything in folder dir (an opaque folder: the image's files go). */
static int empty_dir(const char *dir)
{
	char path[PATH_MAX + 256];
	struct dirent *de;
	DIR *d = opendir(dir[0] ? dir : ".");
	int r = 0;

	if (!d)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	while (r == 0 && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s%s%s", dir, dir[0] ? "/" : "", de->d_name);
		r = remove_tree(path);
	}
	closedir(d);
	return r;
}

/* A whiteout's deletion, against the image's files. */
static int delete_whited_out(const char *path)
{
	const char *name = base_name(path);
	char dir[PATH_MAX], target[PATH_MAX + 8];
	size_t dir_len = (size_t)(name - path);

	snprintf(dir, sizeof(dir), "%.*s", (int)(dir_len ? dir_len - 1 : 0), path);
	if (strcmp(name, OPAQUE) == 0)
		return empty_dir(dir);
	snprintf(target, sizeof(target), "%s%s%s", dir, dir[0] ? "/" : "", name + strlen(WHITEOUT));
	return remove_tree(target);
}

static int copy_data(int fd, const char *path, const struct entry *e)
{
	char buf[65536];
	uint64_t left = e->size;
	int out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	int r = 0;

	if (out < 0)
		return -errno;
	while (r == 0 && left > 0) {
		size_t chunk = left < sizeof(buf) ? (size_t)left : sizeof(buf);

		r = read_exact(fd, buf, chunk);
		if (r == 0)
			r = write_all(out, buf, chunk);
		left -= chunk;
	}
	if (close(out) < 0 && r == 0)
		r = -errno;
	if (r == 0 && e->size % BLOCK)
		r = lseek(fd, (off_t)(BLOCK - e->size % BLOCK), SEEK_CUR) < 0 ? -errno : 0;
	return r;
}

/* Makes the member at path (relative to the root); its data is consumed. */
static int create(int fd, const char *path, const struct entry *e)
{
	struct stat st;
	bool have = lstat(path, &st) == 0;
	int r = 0;

	/* What the image has there goes, unless both are folders. */
	if (have && !(e->type == '5' && S_ISDIR(st.st_mode)))
		r = remove_tree(path);
	if (r < 0)
		return r;
	switch (e->type) {
	case '0':
	case '7':
		return copy_data(fd, path, e);
	case '5':
		r = mkdir(path, 0700) < 0 && errno != EEXIST ? -errno : 0;
		break;
	case '2':
		r = symlink(e->link, path) < 0 ? -errno : 0;
		break;
	case '1':
		r = link(relative(e->link), path) < 0 ? -errno : 0;
		break;
	case '3':
	case '4':
		/* A device node in a container is its runtime's to make, from
		 * the devices its spec lists; a diff that carries one (mode
		 * 0666 on a disk, say) is refused. */
		return -EPERM;
	case '6':
		r = mkfifo(path, 0600) < 0 ? -errno : 0;
		break;
	default:
		r = -ENOTSUP;
	}
	return r == 0 ? skip_data(fd, e->size) : r;
}

/* Owner, mode, extended attributes and time, in that order (chown clears
 * the set-ID bits). A hard link shares its target's. */
static int set_attributes(const char *path, const struct entry *e)
{
	struct timespec times[2] = {{.tv_sec = e->mtime}, {.tv_sec = e->mtime}};

	if (e->type == '1')
		return 0;
	if (lchown(path, e->uid, e->gid) < 0)
		return -errno;
	if (e->type != '2' && chmod(path, e->mode & 07777) < 0)
		return -errno;
	for (size_t i = 0; i < e->nxattrs; i++)
		if (lsetxattr(path, e->xattrs[i].name, e->xattrs[i].value, e->xattrs[i].len, 0) < 0)
			return -errno;
	return utimensat(AT_FDCWD, path, times, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

/* One pass over the tar: the whiteouts (deletions), or every other member. */
static int pass(int fd, bool deletions, char *msg, size_t len)
{
	struct entry e;
	int r;

	memset(&e, 0, sizeof(e));
	if (lseek(fd, 0, SEEK_SET) < 0)
		return -errno;
	while ((r = next_entry(fd, &e)) > 0) {
		size_t plen = strlen(e.path);
		const char *path;

		while (plen > 1 && e.path[plen - 1] == '/') /* a folder's "name/" */
			e.path[--plen] = '\0';
		path = relative(e.path);
		bool whiteout = path[0] && memcmp(base_name(path), WHITEOUT, 4) == 0;

		if (!path[0] || whiteout != deletions) {
			r = skip_data(fd, e.size);
		} else if (deletions) {
			r = delete_whited_out(path);
			if (r == 0)
				r = skip_data(fd, e.size);
		} else {
			r = create(fd, path, &e);
			if (r == 0)
				r = set_attributes(path, &e);
		}
		if (r < 0) {
			snprintf(msg, len, "/%s: %s", path,
				 r == -EPERM && (e.type == '3' || e.type == '4')
				     ? "a device node: a container's changes carry none (its "
				       "runtime makes the devices its spec lists)"
				     : strerror(-r));
			break;
		}
	}
	if (r < 0 && !msg[0])
		snprintf(msg, len, "not a whole tar: %s", strerror(-r));
	entry_clear(&e);
	return r;
}

/* In the child: chrooted into rootfs, both passes; the error's text to
 * report. */
static int apply_in_root(int fd, const char *rootfs, char *msg, size_t len)
{
	int r;

	if (chroot(rootfs) < 0 || chdir("/") < 0) {
		snprintf(msg, len, "entering %s: %s", rootfs, strerror(errno));
		return -errno;
	}
	umask(0);
	r = pass(fd, true, msg, len);
	return r < 0 ? r : pass(fd, false, msg, len);
}

int rootfs_diff_apply(const char *tar, const char *rootfs, struct stasis_error **err)
{
	_cleanup_close_ int fd = open(tar, O_RDONLY | O_CLOEXEC);
	char msg[PATH_MAX + 128] = "";
	int pipe_fds[2], status;
	ssize_t n;
	pid_t pid;

	if (fd < 0)
		return stasis_error_errno(err, errno, "opening %s: %s", tar, strerror(errno));
	if (pipe2(pipe_fds, O_CLOEXEC) < 0)
		return stasis_error_errno(err, errno, "pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		close(pipe_fds[0]);
		close(pipe_fds[1]);
		return stasis_error_errno(err, errno, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		close(pipe_fds[0]);
		if (apply_in_root(fd, rootfs, msg, sizeof(msg)) < 0) {
			write_all(pipe_fds[1], msg, strlen(msg));
			_exit(1);
		}
		_exit(0);
	}
	close(pipe_fds[1]);
	n = read(pipe_fds[0], msg, sizeof(msg) - 1);
	msg[n > 0 ? n : 0] = '\0';
	close(pipe_fds[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return stasis_error_errno(err, errno, "waiting for the rootfs diff: %s",
						  strerror(errno));
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	return stasis_error_set(err, EIO, STASIS_DOMAIN_SYSTEM, 0, "applying %s onto %s failed: %s",
				tar, rootfs, msg[0] ? msg : "its process died");
}
