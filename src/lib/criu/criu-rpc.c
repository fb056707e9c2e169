/* SPDX-License-Identifier: MIT */
#include "criu-rpc.h"

#include <criu/criu.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "breakpoints.h"
#include "criu-causes.h"
#include "criu-settings.h"
#include "exec.h"
#include "interrupt.h"
#include "stasis.h"
#include "util.h"

#define CRIU_LOG_LEVEL 4

static char criu_path[PATH_MAX];

static bool executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

bool criu_find_in_path(const char *name, char *out, size_t len)
{
	const char *path = getenv("PATH");
	_cleanup_free_ char *copy = strdup(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
	char *save = NULL;

	for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, len, "%s/%s", dir, name);
		if (executable(out))
			return true;
	}
	return false;
}

const char *criu_binary(void)
{
	const char *env = getenv("STASIS_CRIU");
	char self[PATH_MAX];

	if (criu_path[0])
		return criu_path;
	if (env && *env) {
		snprintf(criu_path, sizeof(criu_path), "%s", env);
		return criu_path;
	}
	/* The CRIU built with stasis sits at ../criu/sbin/criu from bin/stasis
	 * in the build, at ../sbin/criu once installed (make install). */
	if (self_dir(self, sizeof(self)) == 0) {
		snprintf(criu_path, sizeof(criu_path), "%s/../criu/sbin/criu", self);
		if (executable(criu_path))
			return criu_path;
		snprintf(criu_path, sizeof(criu_path), "%s/../sbin/criu", self);
		if (executable(criu_path))
			return criu_path;
	}
	if (criu_find_in_path("criu", criu_path, sizeof(criu_path)))
		return criu_path;
	snprintf(criu_path, sizeof(criu_path), "criu");
	return criu_path;
}

const char *criu_version_string(int version, char *buf, size_t len)
{
	snprintf(buf, len, "%d.%d.%d", version / 10000, version / 100 % 100, version % 100);
	return buf;
}

int criu_require(struct stasis_error **err)
{
	if (!executable(criu_binary())) {
		stasis_error_set(err, ENOENT, STASIS_DOMAIN_CRIU, 0, "CRIU not found (%s)",
				 criu_binary());
		return stasis_error_hint(
		    err, "build it with 'make' or set STASIS_CRIU to a criu 4.x binary");
	}
	return 0;
}

static int new_opts(criu_opts **opts, struct stasis_error **err)
{
	const char *bin = criu_binary();
	int r = criu_require(err);

	if (r < 0)
		return r;
	if (criu_local_init_opts(opts) < 0)
		return stasis_error_errno(err, ENOMEM, "initialising libcriu");
	if (criu_local_set_service_binary(*opts, bin) < 0) {
		criu_local_free_opts(*opts);
		return stasis_error_errno(err, ENOMEM, "initialising libcriu");
	}
	return 0;
}

int criu_version(struct stasis_error **err)
{
	static int known; /* the binary does not change under a run */
	criu_opts *opts = NULL;
	char have[32], need[32];
	enum hw_breakpoints breakpoints;
	int version, r;

	if (known) {
		r = criu_require(err);
		return r < 0 ? r : known;
	}
	r = new_opts(&opts, err);
	if (r < 0)
		return r;
	version = criu_local_get_version(opts);
	criu_local_free_opts(opts);
	if (version < 0)
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, version,
					"could not ask %s for its version", criu_binary());
	if (version < CRIU_MIN_VERSION) {
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CRIU, version,
				 "CRIU %s at %s is too old; stasis needs %s or newer",
				 criu_version_string(version, have, sizeof(have)), criu_binary(),
				 criu_version_string(CRIU_MIN_VERSION, need, sizeof(need)));
		return stasis_error_hint(err, "build CRIU 4.x with 'make'");
	}
	/* Asked here, in the preflight, rather than when the dump starts
	 * (the breakpoints' answer is cached for the boot). Where they do not
	 * work CRIU must be told (CRIU_FAULT), else it waits for ever on its
	 * parasite: a CRIU without settings only through the user's
	 * environment. */
	breakpoints = hw_breakpoints_probe(true);
	if (!criu_takes_settings() && !getenv("CRIU_FAULT") &&
	    breakpoints == HW_BREAKPOINTS_BROKEN) {
		stasis_error_set(
		    err, ENOTSUP, STASIS_DOMAIN_CRIU, 0,
		    "hardware breakpoints do not work on this machine, and the CRIU at "
		    "%s takes no settings to be told so",
		    criu_binary());
		return stasis_error_hint(err,
					 "run stasis with CRIU_FAULT=" CRIU_FAULT_NO_BREAKPOINTS
					 " in its environment, or with stasis's CRIU");
	}
	known = version;
	return version;
}

/* Less room than this where CRIU wrote, and its file system was full. */
#define LOG_ROOM_MIN (1u << 20)

static bool is_full(const char *dir)
{
	struct statvfs fs;

	return dir && statvfs(dir, &fs) == 0 && (uint64_t)fs.f_bavail * fs.f_frsize < LOG_ROOM_MIN;
}

/* dir: CRIU's work folder, which holds log_file; images: where a dump
 * wrote the image (NULL for a restore, which writes only its log). */
static int criu_failure(struct stasis_error **err, const char *what, int ret, const char *dir,
			const char *log_file, const char *images)
{
	char log_path[4096];
	_cleanup_free_ char *log = NULL;
	struct criu_cause cause;
	const char *full;
	int r;

	snprintf(log_path, sizeof(log_path), "%s/%s", dir, log_file);
	log = read_file_str(log_path, NULL);
	if (stasis_interrupted()) {
		/* Ctrl-C reaches CRIU too (one process group): the user's own
		 * stop, not a crash, also where it came while libcriu started
		 * CRIU ("Can't read swrk pid: Interrupted system call"). */
		stasis_error_set(err, EINTR, STASIS_DOMAIN_CRIU, ret,
				 "criu %s was interrupted by a signal (Ctrl-C or SIGTERM)", what);
		return stasis_error_hint(err, "its log: %s", log_path);
	}
	if (ret == -ECOMM) {
		/* The socket closed without an answer: CRIU was killed, by a
		 * signal or the OOM killer. Its log stops where it died. */
		stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, ret,
				 "criu %s failed: CRIU died without answering (killed by a signal, "
				 "or out of memory: see the kernel log); its log ends: %s",
				 what,
				 log && *last_line(log) ? criu_log_without_timestamp(last_line(log))
							: "(empty)");
		return stasis_error_hint(err, "full log: %s", log_path);
	}
	if (criu_cause_find(log, &cause) < 0)
		return stasis_error_errno(err, ENOMEM, "criu %s failed; its log: %s", what,
					  log_path);
	/* On a full file system CRIU's log is cut short too, maybe before
	 * its cause: the file system says it, the image's or the log's. */
	full = is_full(images) ? images : is_full(dir) ? dir : NULL;
	if (full)
		stasis_error_set(err, ENOSPC, STASIS_DOMAIN_CRIU, ret,
				 "criu %s failed: No space left on device in %s; its log: %s", what,
				 full, cause.line ? cause.line : "(no error lines)");
	else
		stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, ret, "criu %s failed: %s", what,
				 cause.line ? cause.line : "no error lines in its log");
	/* The line that names the cause, what to do about it, and where the
	 * rest is. */
	r = cause.remedy ? stasis_error_hint(err, "%s; full log: %s", cause.remedy, log_path)
			 : stasis_error_hint(err, "full log: %s", log_path);
	criu_cause_free(&cause);
	return r;
}

/* CRIU's own "criu check": its RPC form answers without saying why, so the
 * command is run and its last line kept. */
int criu_run_check(struct stasis_error **err)
{
	const char *argv[] = {criu_binary(), "check", NULL};
	_cleanup_free_ char *out = NULL;
	int r = criu_require(err);

	if (r < 0)
		return r;
	r = exec_run(argv, &out);
	if (r == 0)
		return 0;
	if (r < 0)
		return stasis_error_errno(err, -r, "running criu check");
	return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, r, "'criu check' failed: %s",
				*last_line(out) ? last_line(out) : "no output");
}

/* CRIU opens its log by name in its work folder and follows a link there:
 * stasis makes it first, a new regular file of root's alone, so that CRIU
 * writes where stasis means it to, and a folder CRIU could not write its
 * log in is said so before CRIU starts. */
static int make_log(int workfd, const char *work, const char *name, struct stasis_error **err)
{
	int fd;

	if (unlinkat(workfd, name, 0) < 0 && errno != ENOENT && errno != EROFS)
		return stasis_error_errno(err, errno, "removing the old %s/%s: %s", work, name,
					  strerror(errno));
	fd = openat(workfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		stasis_error_errno(err, errno, "cannot create CRIU's log %s/%s: %s", work, name,
				   strerror(errno));
		return stasis_error_hint(err,
					 errno == EROFS || errno == EACCES
					     ? "restore from a copy of the image in a writable "
					       "folder"
					     : "check the folder");
	}
	close(fd);
	return 0;
}

/* The log's name: the user's (-o), else the operation's. */
static const char *log_name(const struct stasis_criu_log *log, const char *otherwise)
{
	return log && log->file ? log->file : otherwise;
}

/* CRIU's log level: the user's (-v), else all of it, which a failure's
 * summary reads. */
static int log_level(const struct stasis_criu_log *log)
{
	return log && log->level_given ? log->level : CRIU_LOG_LEVEL;
}

/* Whether an executable name is on PATH, as CRIU's exec of it finds it. */
static bool on_path(const char *name)
{
	const char *path = getenv("PATH");
	char dir[PATH_MAX], file[PATH_MAX + 64];

	while (path && *path) {
		size_t len = strcspn(path, ":");

		snprintf(dir, sizeof(dir), "%.*s", (int)len, path);
		snprintf(file, sizeof(file), "%s/%s", len ? dir : ".", name);
		if (access(file, X_OK) == 0)
			return true;
		path += len + (path[len] == ':');
	}
	return false;
}

/* CRIU locks a tree's TCP connections while it saves or restores them, by
 * default with iptables-restore, which a machine without iptables lacks
 * (the GPU machines: "Failed to lock TCP connection", after the GPU
 * checkpoint); stasis's CRIU is built with libnftables, which needs no
 * program, and takes it there. */
static void choose_network_lock(criu_opts *opts, bool tcp_established)
{
	if (tcp_established && !on_path("iptables-restore"))
		criu_local_set_network_lock(opts, CRIU_NETWORK_LOCK_NFTABLES);
}

/* Deleted files that a process still holds are saved into the image, as
 * CRIU's ghost files, up to this size each. CRIU's default, 1 MiB, is less
 * than a buffer of NCCL's shared memory (9.2 MiB measured between two
 * ranks, deleted as soon as both hold it): without more, CRIU's dump of any
 * NCCL rank failed. */
#define GHOST_LIMIT (256u << 20)

/* libcriu calls back with no pointer of the caller's: the operation that
 * runs CRIU from this thread. */
static _Thread_local criu_notify_fn current_notify;
static _Thread_local void *current_notify_ctx;

/* The last notification's answer; -1 until one comes. */
static _Thread_local int notify_result = -1;

static int notify_trampoline(char *action, criu_notify_arg_t arg)
{
	(void)arg;
	notify_result = current_notify ? current_notify(action, current_notify_ctx) : 0;
	return notify_result;
}

/* After a notification that stasis's callback did not refuse, libcriu's -1
 * is the answer it could not send: CRIU died while stasis worked on it (a
 * seal while CRIU holds the tree takes seconds). Before any, -1 is a CRIU
 * that could not be started. */
static int criu_call_result(int r)
{
	int answered = notify_result;

	notify_result = -1;
	return r == -1 && answered == 0 ? -ECOMM : r;
}

/* The operation's settings, in a configuration file CRIU reads (opts
 * takes its path; fd stays open until CRIU is done). */
static int give_settings(criu_opts *opts, const struct criu_settings *given,
			 const char *link_remap_dir, int *fd, struct stasis_error **err)
{
	struct criu_settings s = given ? *given : (struct criu_settings){0};
	char path[64];
	int r;

	s.link_remap_dir = link_remap_dir;
	r = criu_settings_file(&s, fd, path, sizeof(path), err);
	if (r == 0 && criu_local_set_config_file(opts, path) < 0)
		r = stasis_error_errno(err, ENOMEM, "giving CRIU its settings");
	return r;
}

int criu_run_dump(const struct criu_dump_request *req, struct stasis_error **err)
{
	const char *work = req->work_dir ? req->work_dir : req->images_dir;
	const char *log_file = log_name(req->log, req->log_file);
	_cleanup_close_ int dirfd = open(req->images_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int workfd = open(work, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int settings_fd = -1;
	criu_opts *opts = NULL;
	int r;

	if (dirfd < 0 || workfd < 0)
		return stasis_error_errno(err, errno, "opening %s: %s",
					  dirfd < 0 ? req->images_dir : work, strerror(errno));
	r = make_log(workfd, work, log_file, err);
	if (r == 0)
		r = new_opts(&opts, err);
	if (r < 0)
		return r;
	r = give_settings(opts, req->settings, req->link_remap ? req->link_remap_dir : NULL,
			  &settings_fd, err);
	if (r < 0) {
		criu_local_free_opts(opts);
		return r;
	}
	criu_local_set_pid(opts, req->pid);
	criu_local_set_images_dir_fd(opts, dirfd);
	criu_local_set_work_dir_fd(opts, workfd);
	criu_local_set_log_file(opts, log_file);
	criu_local_set_log_level(opts, log_level(req->log));
	criu_local_set_leave_running(opts, req->leave_running);
	criu_local_set_shell_job(opts, req->shell_job);
	criu_local_set_tcp_established(opts, req->tcp_established);
	criu_local_set_ext_unix_sk(opts, req->ext_unix_sk);
	choose_network_lock(opts, req->tcp_established);
	criu_local_set_link_remap(opts, req->link_remap);
	criu_local_set_ghost_limit(opts, GHOST_LIMIT);
	criu_local_set_file_locks(opts, true);
	for (size_t i = 0; i < req->nexternals; i++)
		criu_local_add_external(opts, req->externals[i]);
	current_notify = req->notify;
	current_notify_ctx = req->notify_ctx;
	if (req->notify)
		criu_local_set_notify_cb(opts, notify_trampoline);
	r = criu_call_result(criu_local_dump(opts));
	current_notify = NULL;
	criu_local_free_opts(opts);
	if (r < 0)
		return criu_failure(err, "dump", r, work, log_file, req->images_dir);
	return 0;
}

int criu_run_restore(const struct criu_restore_request *req, pid_t *root_out,
		     struct stasis_error **err)
{
	const char *log_file = log_name(req->log, req->log_file);
	_cleanup_close_ int dirfd = open(req->images_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int workfd = open(req->work_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int settings_fd = -1;
	criu_opts *opts = NULL;
	int r;

	if (dirfd < 0 || workfd < 0)
		return stasis_error_errno(err, errno, "opening %s: %s",
					  dirfd < 0 ? req->images_dir : req->work_dir,
					  strerror(errno));
	r = make_log(workfd, req->work_dir, log_file, err);
	if (r == 0)
		r = new_opts(&opts, err);
	if (r < 0)
		return r;
	r = give_settings(opts, req->settings, req->link_remap_dir, &settings_fd, err);
	if (r < 0) {
		criu_local_free_opts(opts);
		return r;
	}
	criu_local_set_images_dir_fd(opts, dirfd);
	criu_local_set_work_dir_fd(opts, workfd);
	criu_local_set_log_file(opts, log_file);
	criu_local_set_log_level(opts, log_level(req->log));
	criu_local_set_shell_job(opts, req->shell_job);
	criu_local_set_ext_unix_sk(opts, req->ext_unix_sk);
	criu_local_set_tcp_established(opts, req->tcp_established);
	choose_network_lock(opts, req->tcp_established);
	criu_local_set_file_locks(opts, true);
	for (size_t i = 0; i < req->ninherit; i++)
		criu_local_add_inherit_fd(opts, req->inherit_fds[i], req->inherit_keys[i]);
	current_notify = req->notify;
	current_notify_ctx = req->notify_ctx;
	if (req->notify)
		criu_local_set_notify_cb(opts, notify_trampoline);
	/* restore_child makes the restored root our child; plain restore leaves
	 * it to the init process (detached). */
	r = criu_call_result(req->detach ? criu_local_restore(opts)
					 : criu_local_restore_child(opts));
	current_notify = NULL;
	criu_local_free_opts(opts);
	if (r < 0)
		return criu_failure(err, "restore", r, req->work_dir, log_file, NULL);
	*root_out = r;
	return 0;
}
