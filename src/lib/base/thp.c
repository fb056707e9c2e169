/* SPDX-License-Identifier: MIT */
#include "thp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lock.h"
#include "util.h"

#define THP_SYSFS "/sys/kernel/mm/transparent_hugepage/enabled"

const char *thp_setting_path(void)
{
	const char *env = getenv("STASIS_THP_FILE");

	return env && *env ? env : THP_SYSFS;
}

/* The mode in brackets: "always [madvise] never" -> "madvise". */
static int read_mode(char *mode, size_t len)
{
	_cleanup_free_ char *text = read_file_str(thp_setting_path(), NULL);
	char *open, *close;

	if (!text)
		return -errno;
	open = strchr(text, '[');
	close = open ? strchr(open, ']') : NULL;
	if (!open || !close || (size_t)(close - open) > len)
		return -EINVAL;
	snprintf(mode, len, "%.*s", (int)(close - open - 1), open + 1);
	return 0;
}

static int write_str(const char *path, const char *text)
{
	_cleanup_close_ int fd =
	    open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0)
		return -errno;
	return write_all(fd, text, strlen(text));
}

/* The directory where runs register, locked; returns its fd. */
static int lock_registry(char *dir, size_t len)
{
	char lock[4096];
	int fd;

	snprintf(dir, len, "%s/thp", stasis_run_dir());
	if (mkdir_p(dir) < 0)
		return -errno;
	snprintf(lock, sizeof(lock), "%s/lock", dir);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

/* Registered runs still alive; the files of dead ones are removed. */
static int live_users(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char path[4096];
		int pid;

		if (sscanf(de->d_name, "user-%d", &pid) != 1)
			continue;
		if (kill(pid, 0) == 0 || errno == EPERM) {
			n++;
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
	return n;
}

/* The registration of user (a pid) ends: its file goes, and the last user
 * out puts the saved mode back. */
static void thp_release(pid_t user)
{
	char dir[4096], path[4096];
	_cleanup_free_ char *mode = NULL;
	int fd = lock_registry(dir, sizeof(dir));

	if (fd < 0)
		return;
	snprintf(path, sizeof(path), "%s/user-%d", dir, (int)user);
	unlink(path);
	snprintf(path, sizeof(path), "%s/saved", dir);
	if (live_users(dir) == 0 && (mode = read_file_str(path, NULL))) {
		if (write_str(thp_setting_path(), mode) == 0)
			unlink(path);
	}
	close(fd);
}

/* A guard process for this run's registration: it reads a pipe that only
 * this process writes, and when the pipe closes (thp_always_end, or this
 * process killed by SIGKILL) it ends the registration in its place. So a
 * killed run leaves "always" for a moment, not until the next stasis run.
 * A grandchild in a session of its own: init reaps it, this process never
 * waits for it, and the signals of this one's terminal or group miss it. */
static int guard_fd = -1;

static void guard_run(int rfd, pid_t user)
{
	char c;
	int null;

	if (rfd <= STDERR_FILENO)
		rfd = fcntl(rfd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
	/* Nothing of this process held open: not the registry's lock, not a
	 * pipe whose reader waits for its end, not a device. */
	close_range(STDERR_FILENO + 1, (unsigned int)rfd - 1, 0);
	close_range((unsigned int)rfd + 1, ~0U, 0);
	null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
	}
	(void)!chdir("/");
	prctl(PR_SET_NAME, "stasis-thp-guard");
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	while (read(rfd, &c, 1) < 0 && errno == EINTR)
		;
	thp_release(user);
	_exit(0);
}

static void guard_start(void)
{
	pid_t user = getpid(), pid;
	int fds[2], status;

	if (guard_fd >= 0 || pipe2(fds, O_CLOEXEC) < 0)
		return;
	pid = fork();
	if (pid == 0) {
		close(fds[1]);
		setsid();
		if (fork() == 0)
			guard_run(fds[0], user);
		_exit(0);
	}
	close(fds[0]);
	if (pid < 0) {
		close(fds[1]);
		return;
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	guard_fd = fds[1];
}

/* The guard then ends the registration again, which changes nothing. */
static void guard_stop(void)
{
	if (guard_fd >= 0)
		close(guard_fd);
	guard_fd = -1;
}

int thp_always_begin(struct stasis_error **err)
{
	char dir[4096], path[4096], mode[32];
	int fd = lock_registry(dir, sizeof(dir)), r = 0;
	bool saved_here = false;

	if (fd < 0)
		return stasis_error_errno(err, -fd, "registering for --thp under %s: %s",
					  stasis_run_dir(), strerror(-fd));
	snprintf(path, sizeof(path), "%s/saved", dir);
	/* A saved mode with no live user is one a crashed run left: keep it. */
	if (live_users(dir) == 0 && access(path, F_OK) < 0) {
		r = read_mode(mode, sizeof(mode));
		if (r == 0)
			r = write_str(path, mode);
		saved_here = r == 0;
	}
	if (r == 0)
		r = write_str(thp_setting_path(), "always");
	/* Not set (a read-only sysfs): a mode saved now would outlive the
	 * setting it stands for, and a later run would put it back. */
	if (r < 0 && saved_here)
		unlink(path);
	if (r == 0) {
		snprintf(path, sizeof(path), "%s/user-%d", dir, (int)getpid());
		r = write_str(path, "");
	}
	close(fd);
	if (r == 0)
		guard_start();
	if (r < 0) {
		stasis_error_set(err, -r, STASIS_DOMAIN_SYSTEM, -r,
				 "setting transparent huge pages to always in %s: %s",
				 thp_setting_path(), strerror(-r));
		thp_always_end();
		return stasis_error_hint(err, "run without --thp");
	}
	return 0;
}

void thp_always_end(void)
{
	thp_release(getpid());
	guard_stop();
}

void thp_repair(void)
{
	/* Such a run has no registration: only a dead run's mode goes back. */
	thp_release(getpid());
}

int thp_machine_mode(char *mode, size_t len)
{
	char dir[4096], path[4096];
	_cleanup_free_ char *saved = NULL;
	int fd = lock_registry(dir, sizeof(dir)), r = 0;

	if (fd < 0)
		return fd;
	snprintf(path, sizeof(path), "%s/saved", dir);
	saved = read_file_str(path, NULL);
	if (saved)
		saved[strcspn(saved, " \n")] = '\0';
	if (saved && *saved && strlen(saved) < len)
		snprintf(mode, len, "%s", saved);
	else
		r = read_mode(mode, len);
	close(fd);
	return r;
}
