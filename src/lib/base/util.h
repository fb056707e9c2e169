/* SPDX-License-Identifier: MIT */
/* Small helpers shared by the whole library: cleanup attributes, ownership
 * transfer, time, and file utilities. */
#ifndef STASIS_UTIL_H
#define STASIS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline void freep(void *p)
{
	free(*(void **)p);
}

static inline void closep(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}

static inline void fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)

/* Hand the value of a cleanup variable to someone else: the variable is
 * reset so that its cleanup does nothing. */
#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _taken = (p);                                                        \
		(p) = NULL;                                                                        \
		_taken;                                                                            \
	})
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _taken = (fd);                                                                 \
		(fd) = -1;                                                                         \
		_taken;                                                                            \
	})

/* Monotonic time in nanoseconds, and in microseconds. */
uint64_t now_nsec(void);
uint64_t now_usec(void);

/* The CLOCK_REALTIME deadline us microseconds from now, as
 * pthread_cond_timedwait wants it. */
struct timespec;
void deadline_in_usec(struct timespec *ts, uint64_t us);

/* items (an array of n used of *cap, each size bytes) with room for one
 * more: itself, or moved and twice as big (first items the first time);
 * NULL, with items left as they were, when there is no memory. */
void *grow_array(void *items, size_t n, size_t *cap, size_t size, size_t first);

/* Read a whole small file (procfs, sysfs) into a NUL-terminated buffer. */
char *read_file_str(const char *path, size_t *len_out);

/* The same, or NULL (EFBIG) past max bytes: for what a process can make
 * as big as it likes (PR_SET_MM moves its environment and command line
 * over any mapping of its own). */
char *read_file_str_max(const char *path, size_t max, size_t *len_out);

/* Past an exec's limit on its arguments and environment (6 MiB). */
#define PROC_STRINGS_MAX (8u << 20)

/* The number a small file starts with, or otherwise where it cannot be
 * read or holds none (cgroup's "max"). */
uint64_t read_file_u64(const char *path, uint64_t otherwise);

/* Write all of buf, retrying on short writes and EINTR; -errno on failure. */
int write_all(int fd, const void *buf, size_t len);

/* Write a file atomically: temp file, fsync, rename, fsync of the folder. */
int write_file_atomic(const char *dir, const char *name, const char *data, size_t len);

/* mkdir -p; every folder it makes is root's only (0700): what stasis
 * keeps holds processes' memory. -errno on failure. */
int mkdir_p(const char *path);

/* 0 if the directory holds nothing, 1 if it holds something, -errno. */
int dir_is_empty(const char *path);

/* Remove a folder and everything in it (a staging folder holds files and a
 * runtime's work folder). Nothing is followed: a symbolic link, the
 * folder's own name included, is removed or refused (-ENOTDIR), never
 * entered, and a folder of another file system below it is left (-EXDEV);
 * -errno of the first failure. */
int remove_dir_tree(const char *path);

/* The same for the folder name in the folder open at parent, which must be
 * on the file system dev; adds the bytes of the files it removed to *freed
 * (NULL: not counted). */
int remove_dir_at(int parent, const char *name, dev_t dev, uint64_t *freed);

/* Copy the regular file name from one folder into another (new there). */
int copy_file_at(int from_dirfd, const char *name, int to_dirfd);

/* Strip trailing whitespace in place and return s. */
char *strip_trailing(char *s);

/* The folder of the running stasis binary (for files installed beside
 * it); -1 when /proc cannot say. */
int self_dir(char *out, size_t len);

/* A whole number in decimal, all of text, from min to max: 0, -EINVAL
 * where text is not one (empty, a sign, a suffix, spaces), -ERANGE where
 * it is outside [min, max]. */
int parse_uint_in(const char *text, uint64_t min, uint64_t max, uint64_t *out);

/* Human-readable byte count ("4.0 GiB") into buf. */
const char *format_bytes(uint64_t bytes, char *buf, size_t len);

#endif
