/* SPDX-License-Identifier: MIT */
#include "runc.h"

#include <errno.h>
#include <libgen.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "criu-causes.h"
#include "criu-rpc.h"
#include "exec.h"
#include "proc.h"
#include "util.h"

const char *runc_binary(void)
{
	const char *env = getenv("STASIS_RUNC");

	return env && *env ? env : "runc";
}

/* The folder of runc_criu_path's link, in the caller's folder. */
#define CRIU_LINK_DIR "criu-bin"

/* owner/CRIU_LINK_DIR (root's, 0700) with a link criu -> stasis's CRIU,
 * replaced at once (a rename) where it points elsewhere: runc's PATH then
 * finds stasis's CRIU under the name it looks for. 0, or -errno. */
static int criu_link(const char *owner, const char *criu)
{
	char target[PATH_MAX], now[PATH_MAX];
	_cleanup_close_ int up = -1, dir = -1;
	struct stat st;
	ssize_t n;

	if (!realpath(criu, target))
		return -errno;
	up = open(owner, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (up < 0 || (mkdirat(up, CRIU_LINK_DIR, 0700) < 0 && errno != EEXIST))
		return -errno;
	dir = openat(up, CRIU_LINK_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir < 0)
		return -errno;
	if (fstat(dir, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 077))
		return -EPERM;
	n = readlinkat(dir, "criu", now, sizeof(now) - 1);
	if (n > 0 && (size_t)n < sizeof(now) - 1 && (now[n] = '\0', strcmp(now, target) == 0))
		return 0;
	unlinkat(dir, ".criu.new", 0);
	if (symlinkat(target, dir, ".criu.new") < 0 || renameat(dir, ".criu.new", dir, "criu") < 0)
		return -errno;
	return 0;
}

int runc_criu_path(const char *owner, char *buf, size_t len)
{
	char dir[PATH_MAX];
	const char *path = getenv("PATH"), *criu = criu_binary(), *base = strrchr(criu, '/');
	int made = 0, r;

	if (snprintf(dir, sizeof(dir), "%s", criu) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	if (strcmp(base ? base + 1 : criu, "criu") != 0) {
		if (snprintf(dir, sizeof(dir), "%s/" CRIU_LINK_DIR, owner) >= (int)sizeof(dir))
			return -ENAMETOOLONG;
		r = criu_link(owner, criu);
		if (r < 0)
			return r;
		made = 1;
	} else {
		dirname(dir);
	}
	if (snprintf(buf, len, "PATH=%s:%s", dir,
		     path && *path
			 ? path
			 : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") >=
	    (int)len)
		return -ENAMETOOLONG;
	return made;
}

void runc_criu_path_done(const char *owner)
{
	_cleanup_close_ int up = open(owner, O_RDONLY | O_DIRECTORY | O_CLOEXEC), dir = -1;
	struct stat st;

	/* Only a folder of root's, not a link, and what runc_criu_path put
	 * in it. */
	if (up < 0)
		return;
	dir = openat(up, CRIU_LINK_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir < 0 || fstat(dir, &st) < 0 || st.st_uid != geteuid())
		return;
	unlinkat(dir, "criu", 0);
	unlinkat(up, CRIU_LINK_DIR, AT_REMOVEDIR);
}

int runc_require(struct stasis_error **err)
{
	const char *argv[] = {runc_binary(), "--version", NULL};
	_cleanup_free_ char *out = NULL;

	if (exec_run(argv, &out) == 0)
		return 0;
	stasis_error_set(err, ENOENT, STASIS_DOMAIN_USAGE, 0, "runc not found (%s)", runc_binary());
	return stasis_error_hint(err, "install runc, or set STASIS_RUNC to its path");
}

static void from_json(json_object *o, struct runc_container *c)
{
	json_object *v;

	memset(c, 0, sizeof(*c));
	if (json_object_object_get_ex(o, "id", &v))
		snprintf(c->id, sizeof(c->id), "%s", json_object_get_string(v));
	if (json_object_object_get_ex(o, "status", &v))
		snprintf(c->status, sizeof(c->status), "%s", json_object_get_string(v));
	if (json_object_object_get_ex(o, "pid", &v))
		c->pid = json_object_get_int(v);
	if (json_object_object_get_ex(o, "bundle", &v))
		snprintf(c->bundle, sizeof(c->bundle), "%s", json_object_get_string(v));
}

int runc_state(const char *id, struct runc_container *c, struct stasis_error **err)
{
	return runc_state_at(NULL, id, c, err);
}

int runc_state_at(const char *root, const char *id, struct runc_container *c,
		  struct stasis_error **err)
{
	const char *with_root[] = {runc_binary(), "--root", root, "state", id, NULL};
	const char *plain[] = {runc_binary(), "state", id, NULL};
	const char *const *argv = root ? with_root : plain;
	_cleanup_free_ char *out = NULL;
	json_object *o;
	int r = exec_run(argv, &out);

	if (r != 0) {
		stasis_error_set(err, ENOENT, STASIS_DOMAIN_USAGE, 0, "no container '%s'", id);
		return stasis_error_hint(err, "'runc list' shows the containers runc knows");
	}
	o = json_tokener_parse(out);
	if (!o)
		return stasis_error_set(err, EIO, STASIS_DOMAIN_USAGE, 0,
					"runc state %s: unreadable answer", id);
	from_json(o, c);
	json_object_put(o);
	return 0;
}

int runc_list(struct runc_container **out, size_t *n, struct stasis_error **err)
{
	const char *argv[] = {runc_binary(), "list", "--format", "json", NULL};
	_cleanup_free_ char *text = NULL;
	json_object *arr;
	size_t len;

	*out = NULL;
	*n = 0;
	if (exec_run(argv, &text) != 0)
		return runc_require(err);
	arr = json_tokener_parse(text);
	if (!arr || !json_object_is_type(arr, json_type_array)) {
		json_object_put(arr);
		return 0; /* "null" when there is none */
	}
	len = json_object_array_length(arr);
	*out = calloc(len ? len : 1, sizeof(**out));
	if (!*out) {
		json_object_put(arr);
		return stasis_error_errno(err, ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < len; i++)
		from_json(json_object_array_get_idx(arr, i), &(*out)[i]);
	*n = len;
	json_object_put(arr);
	return 0;
}

/* runc's last error, from its JSON log, with the line of CRIU's log that
 * names the cause and what to do about it. */
static int runc_failure(struct stasis_error **err, const char *what, const char *id,
			const char *log, const char *criu_log)
{
	_cleanup_free_ char *text = read_file_str(log, NULL), *criu = read_file_str(criu_log, NULL);
	const char *msg = "no error in its log";
	struct criu_cause cause = {0};
	json_object *o = NULL, *v;
	int r;

	if (text && *last_line(text)) {
		o = json_tokener_parse(last_line(text));
		if (o && json_object_object_get_ex(o, "msg", &v))
			msg = json_object_get_string(v);
	}
	if (criu)
		criu_cause_find(criu, &cause);
	stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0, "runc %s of '%s' failed: %s%s%s", what,
			 id, msg, cause.line ? " | CRIU: " : "", cause.line ? cause.line : "");
	json_object_put(o);
	r = cause.remedy ? stasis_error_hint(err, "%s; logs: %s, %s", cause.remedy, log, criu_log)
			 : stasis_error_hint(err, "logs: %s, %s", log, criu_log);
	criu_cause_free(&cause);
	return r;
}

/* env with path ("PATH=<stasis's CRIU's folder>:$PATH") first, in full. */
static char *const *env_with(char *path, char *const env[], char *full[16])
{
	size_t n = 0;

	full[n++] = path;
	for (; env && *env && n < 15; env++)
		full[n++] = *env;
	full[n] = NULL;
	return full;
}

/* The user's CRIU_CONFIG_FILE, where set, as text into *text (NULL where
 * it is not set): a plain file of root's that no one else can change
 * (CRIU would take any option from it), opened without following a link
 * or waiting on a pipe. 0, or -errno with *err. */
static int users_criu_conf(char **text, struct stasis_error **err)
{
	const char *user = getenv("CRIU_CONFIG_FILE");
	_cleanup_close_ int fd = -1;
	char self[64];
	struct stat st;
	size_t len;

	*text = NULL;
	if (!user || !*user)
		return 0;
	fd = open(user, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0)
		return stasis_error_errno(err, errno, "reading CRIU_CONFIG_FILE %s: %s", user,
					  strerror(errno));
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) ||
	    st.st_size > 65536)
		return stasis_error_set(
		    err, EPERM, STASIS_DOMAIN_USAGE, 0,
		    "CRIU_CONFIG_FILE %s is not a plain file of root's that only "
		    "root can change, of 64 KiB at most",
		    user);
	/* The file opened, not the name again. */
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	*text = read_file_str_max(self, 65536, &len);
	if (!*text || strlen(*text) != len) {
		free(*text);
		*text = NULL;
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
					"CRIU_CONFIG_FILE %s cannot be read as text", user);
	}
	return 0;
}

int runc_criu_conf(const char *work, const struct criu_settings *settings, const char *extra,
		   char *env, size_t len, struct stasis_error **err)
{
	char conf[PATH_MAX + 32];
	_cleanup_free_ char *users = NULL;
	/* The variable is the user's way to give CRIU options: stasis's file
	 * takes its place, so its lines come first in it. */
	int r = users_criu_conf(&users, err);

	if (r < 0)
		return r;
	snprintf(conf, sizeof(conf), "%s/criu.conf", work);
	r = criu_settings_conf(settings, conf, users, extra, err);
	if (r == 0)
		snprintf(env, len, "CRIU_CONFIG_FILE=%s", conf);
	return r;
}

/* runc [--root ROOT] COMMAND ARGS... with its JSON log and CRIU's log in
 * work, CRIU's settings in a configuration file of the operation's. runc
 * 1.2 and later ignore --criu and run the criu of their PATH: stasis's
 * CRIU comes first in it too. The container keeps the stdio runc had:
 * /dev/null. */
static int run_criu_command(const char *root, const char *command, const char *criu_log_name,
			    const char *id, const char *work, const char *const *args,
			    const struct criu_settings *settings, const char *conf_extra,
			    struct stasis_error **err)
{
	char log[PATH_MAX + 16], criu_log[PATH_MAX + 16], path[2 * PATH_MAX];
	char conf_env[PATH_MAX + 64];
	char *full[16], *env[] = {conf_env, NULL};
	const char *argv[32] = {runc_binary(), "--log",	 log,	       "--log-format",
				"json",	       "--criu", criu_binary()};
	size_t n = 7;
	int r = criu_require(err), made;

	if (r < 0)
		return r;
	if (root) {
		argv[n++] = "--root";
		argv[n++] = root;
	}
	argv[n++] = command;
	while (*args && n < ARRAY_SIZE(argv) - 1)
		argv[n++] = *args++;
	argv[n] = NULL;
	snprintf(log, sizeof(log), "%s/runc.log", work);
	snprintf(criu_log, sizeof(criu_log), "%s/%s", work, criu_log_name);
	if (mkdir_p(work) < 0)
		return stasis_error_errno(err, errno, "creating %s", work);
	r = runc_criu_conf(work, settings, conf_extra, conf_env, sizeof(conf_env), err);
	if (r < 0)
		return r;
	made = runc_criu_path(work, path, sizeof(path));
	if (made < 0) {
		unlink(conf_env + strlen("CRIU_CONFIG_FILE="));
		return stasis_error_errno(err, -made,
					  "putting stasis's CRIU first on runc's PATH (%s): %s",
					  work, strerror(-made));
	}
	r = exec_run_env(argv, env_with(path, env, full), NULL);
	/* Not left in the image folder, where work may be. */
	unlink(conf_env + strlen("CRIU_CONFIG_FILE="));
	if (made)
		runc_criu_path_done(work);
	return r == 0 ? 0 : runc_failure(err, command, id, log, criu_log);
}

int runc_checkpoint(const char *root, const char *id, const char *images, const char *work,
		    bool leave_running, const struct criu_settings *settings,
		    struct stasis_error **err)
{
	const char *args[] = {"--image-path",
			      images,
			      "--work-path",
			      work,
			      "--file-locks",
			      leave_running ? "--leave-running" : id,
			      leave_running ? id : NULL,
			      NULL};

	return run_criu_command(root, "checkpoint", "dump.log", id, work, args, settings, NULL,
				err);
}

void runc_cgroup2_path(const char *own, const char *cgroups_path, const char *id, char *out,
		       size_t len)
{
	const char *inner = cgroups_path && *cgroups_path ? cgroups_path : id;
	const char *slash = strrchr(own, '/');
	int parent = slash ? (int)(slash - own) : 0;

	if (inner[0] == '/')
		snprintf(out, len, "%s", inner);
	else
		snprintf(out, len, "%.*s/%s", parent, own, inner);
}

/* The spec's linux.cgroupsPath in bundle, "" when it has none. */
static void spec_cgroups_path(const char *bundle, char *out, size_t len)
{
	char config[PATH_MAX + 16];
	json_object *spec, *linux_, *path;

	out[0] = '\0';
	snprintf(config, sizeof(config), "%s/config.json", bundle);
	spec = json_object_from_file(config);
	if (spec && json_object_object_get_ex(spec, "linux", &linux_) &&
	    json_object_object_get_ex(linux_, "cgroupsPath", &path))
		snprintf(out, len, "%s", json_object_get_string(path));
	json_object_put(spec);
}

/* On cgroup v2, runc gives CRIU no cgroup root at restore: CRIU would put
 * the restored tasks into the cgroup written in the image, the old
 * container's (on one host, frozen, when it was paused for a migration),
 * not the one runc made for id. The configuration file CRIU reads before
 * runc's requests gives it that root: its line into line, or "" on cgroup
 * v1. The path comes from the bundle's spec: one CRIU's parser would read
 * as more than a path (a line's end starts another option) is refused. */
static int cgroup2_root_line(const char *bundle, const char *id, char *line, size_t len,
			     struct stasis_error **err)
{
	char own[PATH_MAX], spec_path[PATH_MAX], root[PATH_MAX];

	line[0] = '\0';
	if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) < 0)
		return 0;
	proc_cgroup(getpid(), own, sizeof(own));
	if (!own[0])
		return 0;
	spec_cgroups_path(bundle, spec_path, sizeof(spec_path));
	runc_cgroup2_path(own, spec_path, id, root, sizeof(root));
	if (strpbrk(root, " \t\n\r\"\\#"))
		return stasis_error_set(
		    err, EINVAL, STASIS_DOMAIN_USAGE, 0,
		    "the bundle's linux.cgroupsPath gives a cgroup with a space, a "
		    "line's end, '#', a quote or a backslash");
	/* ":" names the cgroup v2 hierarchy alone (CRIU's controller ""). */
	snprintf(line, len, "cgroup-root :%s\n", root);
	return 0;
}

int runc_restore(const char *id, const char *bundle, const char *images, const char *work,
		 const struct criu_settings *settings, struct stasis_error **err)
{
	const char *args[] = {"--detach", "--image-path", images, "--work-path", work, "--bundle",
			      bundle,	  "--file-locks", id,	  NULL};
	char cgroup_root[PATH_MAX + 32];
	int r = cgroup2_root_line(bundle, id, cgroup_root, sizeof(cgroup_root), err);

	if (r < 0)
		return r;
	return run_criu_command(NULL, "restore", "restore.log", id, work, args, settings,
				cgroup_root, err);
}

void runc_destroy(const char *id)
{
	const char *argv[] = {runc_binary(), "delete", "--force", id, NULL};

	exec_run(argv, NULL);
}

/* runc COMMAND ID, its last line of output in the error. */
static int run_simple(const char *command, const char *id, struct stasis_error **err)
{
	const char *argv[] = {runc_binary(), command, id, NULL};
	_cleanup_free_ char *out = NULL;
	int r = exec_run(argv, &out);

	if (r == 0)
		return 0;
	return stasis_error_set(err, EIO, STASIS_DOMAIN_USAGE, 0, "runc %s %s failed: %s", command,
				id, out ? last_line(out) : "it did not run");
}

int runc_pause(const char *id, struct stasis_error **err)
{
	return run_simple("pause", id, err);
}

int runc_resume(const char *id, struct stasis_error **err)
{
	return run_simple("resume", id, err);
}

void runc_kill_paused(const char *id)
{
	const char *argv[] = {runc_binary(), "kill", "--all", id, "KILL", NULL};

	exec_run(argv, NULL);
	runc_destroy(id);
}
