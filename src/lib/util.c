/* SPDX-License-Identifier: MIT */
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

uint64_t now_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

char *read_file_str(const char *path, size_t *len_out)
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
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
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
