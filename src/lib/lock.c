/* SPDX-License-Identifier: MIT */
#include "lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>

#include "util.h"

const char *stasis_run_dir(void)
{
	const char *dir = getenv("STASIS_RUN_DIR");

	if (!dir || !*dir)
		dir = "/run/stasis";
	mkdir_p(dir);
	return dir;
}

int pid_lock(pid_t pid, struct stasis_error **err)
{
	char path[4096], owner[32];
	int fd;

	snprintf(path, sizeof(path), "%s/pid-%d.lock", stasis_run_dir(), (int)pid);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return stasis_error_errno(err, errno, "opening lock file %s: %s", path,
					  strerror(errno));
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		ssize_t n = pread(fd, owner, sizeof(owner) - 1, 0);

		owner[n > 0 ? n : 0] = '\0';
		close(fd);
		stasis_error_set(err, EBUSY, STASIS_DOMAIN_USAGE, 0,
				 "another stasis operation (PID %s) is working on PID %d",
				 *owner ? strip_trailing(owner) : "?", (int)pid);
		return stasis_error_hint(err, "wait for it to finish; lock file %s", path);
	}
	snprintf(owner, sizeof(owner), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) == 0)
		(void)!pwrite(fd, owner, strlen(owner), 0);
	return fd;
}

void pid_unlock(int fd)
{
	if (fd >= 0)
		close(fd);
}
