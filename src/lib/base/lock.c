/* SPDX-License-Identifier: MIT */
#include "lock.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

const char *stasis_run_dir(void)
{
	const char *dir = getenv("STASIS_RUN_DIR");

	if (!dir || !*dir)
		dir = "/run/stasis";
	mkdir_p(dir);
	return dir;
}

static void lock_path(pid_t pid, char *path, size_t len)
{
	snprintf(path, len, "%s/pid-%d.lock", stasis_run_dir(), (int)pid);
}

/* Whether fd is still the file at path: pid_unlock removes the file it
 * held, so a lock taken on the file it removed is no lock. */
static bool still_linked(int fd, const char *path)
{
	struct stat held, named;

	return fstat(fd, &held) == 0 && stat(path, &named) == 0 && held.st_dev == named.st_dev &&
	       held.st_ino == named.st_ino;
}

int pid_lock(pid_t pid, struct stasis_error **err)
{
	char path[4096], owner[32];
	int fd;

	lock_path(pid, path, sizeof(path));
	for (;;) {
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return stasis_error_errno(err, errno, "opening lock file %s: %s", path,
						  strerror(errno));
		if (flock(fd, LOCK_EX | LOCK_NB) < 0)
			break;
		if (still_linked(fd, path)) {
			snprintf(owner, sizeof(owner), "%d\n", (int)getpid());
			if (ftruncate(fd, 0) == 0)
				(void)!pwrite(fd, owner, strlen(owner), 0);
			return fd;
		}
		close(fd);
	}
	ssize_t n = pread(fd, owner, sizeof(owner) - 1, 0);

	owner[n > 0 ? n : 0] = '\0';
	close(fd);
	stasis_error_set(err, EBUSY, STASIS_DOMAIN_USAGE, 0,
			 "another stasis operation (PID %s) is working on PID %d",
			 *owner ? strip_trailing(owner) : "?", (int)pid);
	return stasis_error_hint(err, "wait for it to finish; lock file %s", path);
}

void pid_unlock(pid_t pid, int fd)
{
	char path[4096];

	if (fd < 0)
		return;
	/* Removed while still held, so that no lock file outlives its run. */
	lock_path(pid, path, sizeof(path));
	if (still_linked(fd, path))
		unlink(path);
	close(fd);
}
