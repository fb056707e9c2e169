/* SPDX-License-Identifier: MIT */
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

uint64_t now_nsec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t now_usec(void)
{
	return now_nsec() / 1000u;
}

void deadline_in_usec(struct timespec *ts, uint64_t us)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += (time_t)(us / 1000000u);
	ts->tv_nsec += (long)(us % 1000000u) * 1000;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

void *grow_array(void *items, size_t n, size_t *cap, size_t size, size_t first)
{
	size_t bigger;
	void *moved;

	if (n < *cap)
		return items;
	bigger = *cap ? *cap * 2 : first;
	if (bigger < *cap || bigger > SIZE_MAX / size)
		return NULL;
	moved = realloc(items, bigger * size);
	if (moved)
		*cap = bigger;
	return moved;
}

char *read_file_str(const char *path, size_t *len_out)
{
	return read_file_str_max(path, SIZE_MAX - 1, len_out);
}

char *read_file_str_max(const char *path, size_t max, size_t *len_out)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t cap = 4096, len = 0;
	char *buf;

	if (fd < 0)
		return NULL;
	buf = malloc(cap);
	if (!buf)
		return NULL;
	for (;;) {
		ssize_t n;

		if (len > max) {
			free(buf);
			errno = EFBIG;
			return NULL;
		}
		if (len + 1 >= cap) {
			char *bigger = realloc(buf, cap * 2);

			if (!bigger) {
				free(buf);
				return NULL;
			}
			buf = bigger;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			return NULL;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	if (len_out)
		*len_out = len;
	return buf;
}

uint64_t read_file_u64(const char *path, uint64_t otherwise)
{
	_cleanup_free_ char *text = read_file_str(path, NULL);

	return text && isdigit((unsigned char)text[0]) ? strtoull(text, NULL, 10) : otherwise;
}

int parse_uint_in(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	/* strtoull takes leading spaces and a minus sign ("-1" is its
	 * largest value): only digits are a number here. */
	if (!text || !isdigit((unsigned char)text[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (*end)
		return -EINVAL;
	if (errno == ERANGE || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int write_file_atomic(const char *dir, const char *name, const char *data, size_t len)
{
	char tmp[4096], final[4096];
	_cleanup_close_ int dirfd = -1;
	int fd, r;

	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
	snprintf(final, sizeof(final), "%s/%s", dir, name);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = write_all(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, final) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return r;
	}
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd >= 0 && fsync(dirfd) < 0)
		return -errno;
	return 0;
}

int mkdir_p(const char *path)
{
	char buf[4096];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int r = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			r = 1;
			break;
		}
	}
	closedir(d);
	return r;
}

/* Empty the folder open at fd: entries are looked at without following a
 * link, and a folder on another file system (a mount point) is left alone,
 * so that no link or mount planted below leads the removal elsewhere. */
static int empty_dir_at(int fd, dev_t dev, uint64_t *freed)
{
	DIR *d = fdopendir(fd);
	struct dirent *de;
	int r = 0;

	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		struct stat st;
		int s = 0;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			s = errno == ENOENT ? 0 : -errno;
		else if (S_ISDIR(st.st_mode))
			s = remove_dir_at(dirfd(d), de->d_name, dev, freed);
		else if (unlinkat(dirfd(d), de->d_name, 0) < 0)
			s = errno == ENOENT ? 0 : -errno;
		else if (freed && S_ISREG(st.st_mode))
			*freed += (uint64_t)st.st_blocks * 512u;
		if (s < 0 && r == 0)
			r = s;
	}
	closedir(d);
	return r;
}

int remove_dir_at(int parent, const char *name, dev_t dev, uint64_t *freed)
{
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	int r;

	if (fd < 0)
		return -errno;
	r = fstat(fd, &st) < 0 ? -errno : st.st_dev != dev ? -EXDEV : 0;
	if (r < 0) {
		close(fd);
		return r;
	}
	r = empty_dir_at(fd, dev, freed);
	if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && r == 0)
		r = -errno;
	return r;
}

int remove_dir_tree(const char *path)
{
	_cleanup_free_ char *copy = strdup(path);
	_cleanup_close_ int parent = -1;
	char *slash = copy ? strrchr(copy, '/') : NULL;
	const char *name = path;
	struct stat st;

	if (!copy)
		return -ENOMEM;
	/* The folder's own name is not followed either: only what leads to
	 * it (a staging root such as /dev/shm, an image folder's parents). */
	if (slash) {
		*slash = '\0';
		name = slash + 1;
		parent = open(slash == copy ? "/" : copy, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	} else
		parent = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (parent < 0)
		return -errno;
	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	return remove_dir_at(parent, name, st.st_dev, NULL);
}

/* The bytes of in from *done on into out, through a buffer: for copies
 * between file systems that copy_file_range refuses. */
static int copy_by_reading(int in, int out, off_t *done, off_t size)
{
	char buf[1 << 16];
	int r;

	while (*done < size) {
		ssize_t n = pread(in, buf, sizeof(buf), *done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		r = write_all(out, buf, (size_t)n);
		if (r < 0)
			return r;
		*done += n;
	}
	return 0;
}

int copy_file_at(int from_dirfd, const char *name, int to_dirfd)
{
	_cleanup_close_ int in = openat(from_dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_close_ int out = -1;
	struct stat st;
	off_t done = 0;

	if (in < 0 || fstat(in, &st) < 0)
		return -errno;
	out = openat(to_dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0)
		return -errno;
	while (done < st.st_size) {
		ssize_t n = copy_file_range(in, &done, out, NULL, (size_t)(st.st_size - done), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EXDEV || errno == EOPNOTSUPP || errno == EINVAL))
			return copy_by_reading(in, out, &done, st.st_size);
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO; /* the file shrank */
	}
	return 0;
}

char *strip_trailing(char *s)
{
	size_t n = strlen(s);

	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t'))
		s[--n] = '\0';
	return s;
}

const char *format_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024.0 && u + 1 < ARRAY_SIZE(units)) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

int self_dir(char *out, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", out, len - 1);
	char *slash;

	if (n <= 0)
		return -1;
	out[n] = '\0';
	slash = strrchr(out, '/');
	if (!slash)
		return -1;
	*slash = '\0';
	return 0;
}
