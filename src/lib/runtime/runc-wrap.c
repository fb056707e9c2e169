/* SPDX-License-Identifier: MIT */
#include "runc-wrap.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "criu-rpc.h"
#include "criu-settings.h"
#include "rootfs-diff.h"
#include "runc.h"
#include "util.h"

#define REQUEST "restore-request"
#define RESTORED "restored"
#define REQUEST_LINES 6

int runc_wrap_prepare(const char *dir, const struct runc_wrap_request *req, char *link, size_t len,
		      struct stasis_error **err)
{
	char self[PATH_MAX], text[REQUEST_LINES * PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int r;

	if (n <= 0)
		return stasis_error_errno(err, errno, "finding stasis's own binary");
	self[n] = '\0';
	if (mkdir_p(dir) < 0)
		return stasis_error_errno(err, errno, "creating %s", dir);
	snprintf(link, len, "%s/" RUNC_WRAP_NAME, dir);
	unlink(link);
	if (symlink(self, link) < 0)
		return stasis_error_errno(err, errno, "linking %s", link);
	snprintf(text, sizeof(text), "%s\n%s\n%s\n%s\n%s\n%s\n", req->images, req->work,
		 req->plugin_socket, req->dev_map, req->spec ? req->spec : "",
		 req->rootfs_diff ? req->rootfs_diff : "");
	r = write_file_atomic(dir, REQUEST, text, strlen(text));
	return r < 0 ? stasis_error_errno(err, -r, "writing the restore request in %s", dir) : 0;
}

void runc_wrap_remove(const char *dir)
{
	static const char *const names[] = {RUNC_WRAP_NAME, REQUEST, RESTORED, "config.json",
					    "address"};
	char path[PATH_MAX + 32];

	runc_criu_path_done(dir);

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	/* Its namespace's folder and the containerd folder too, once empty. */
	snprintf(path, sizeof(path), "%s", dir);
	for (int up = 0; up < 3 && rmdir(path) == 0; up++) {
		char parent[PATH_MAX + 32];

		snprintf(parent, sizeof(parent), "%s", path);
		snprintf(path, sizeof(path), "%s", dirname(parent));
	}
}

/* The request's lines, in place: images, work, socket, device map, spec,
 * rootfs diff. */
static bool read_request(char *text, char *lines[REQUEST_LINES])
{
	/* strsep keeps the empty lines an unset value leaves. */
	for (int i = 0; i < REQUEST_LINES; i++) {
		lines[i] = strsep(&text, "\n");
		if (!lines[i])
			lines[i] = (char *)"";
	}
	return lines[0][0] && lines[1][0];
}

/* runc's global options that take a value, up to its command. */
static bool takes_value(const char *flag)
{
	static const char *const flags[] = {"--root", "--log", "--log-format", "--criu",
					    "--rootless"};

	for (size_t i = 0; i < ARRAY_SIZE(flags); i++)
		if (strcmp(flag, flags[i]) == 0)
			return true;
	return false;
}

/* Runs argv with this process's stdio, which runc hands to the container. */
static int run_with_stdio(char **argv)
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return 1;
	if (pid == 0) {
		execvp(argv[0], argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return 1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A failure before runc runs, where the shim reads runc's: a line of
 * runc's JSON log (its global --log), else stderr. */
static void report(char **argv, int command, const char *fmt, ...)
{
	char msg[PATH_MAX * 2];
	const char *log = NULL;
	json_object *line;
	va_list ap;
	FILE *f;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: %s\n", RUNC_WRAP_NAME, msg);
	for (int i = 1; i < command - 1; i++)
		if (strcmp(argv[i], "--log") == 0)
			log = argv[i + 1];
	f = log ? fopen(log, "ae") : NULL;
	if (!f)
		return;
	line = json_object_new_object();
	json_object_object_add(line, "level", json_object_new_string("error"));
	json_object_object_add(line, "msg", json_object_new_string(msg));
	fprintf(f, "%s\n", json_object_to_json_string_ext(line, JSON_C_TO_STRING_PLAIN));
	json_object_put(line);
	fclose(f);
}

/* create's --bundle (-b), else the current folder, as runc reads it. */
static void bundle_of(char **argv, int command, int argc, char *out, size_t len)
{
	for (int i = command + 1; i < argc - 2; i++)
		if (strcmp(argv[i], "--bundle") == 0 || strcmp(argv[i], "-b") == 0) {
			snprintf(out, len, "%s", argv[i + 1]);
			return;
		}
	for (int i = command + 1; i < argc - 1; i++)
		if (strncmp(argv[i], "--bundle=", 9) == 0) {
			snprintf(out, len, "%s", argv[i] + 9);
			return;
		}
	if (!getcwd(out, len))
		snprintf(out, len, ".");
}

/* A container on an image snapshot: the shim has mounted a fresh snapshot
 * of the image as the bundle's root and written the spec that ctr run made
 * from the image; the image's own spec replaces it, and the writable
 * layer's changes go onto the root, so that CRIU finds every file the
 * processes had open. */
static int prepare_bundle(char **argv, int command, const char *bundle, const char *spec_file,
			  const char *diff)
{
	char root[PATH_MAX * 2 + 2];
	_cleanup_free_ char *spec = read_file_str(spec_file, NULL);
	json_object *o = spec ? json_tokener_parse(spec) : NULL, *root_o, *path;
	const char *root_path = "rootfs";
	_cleanup_error_ struct stasis_error *err = NULL;
	int r;

	if (!o) {
		report(argv, command, "cannot read the OCI spec %s", spec_file);
		return -1;
	}
	if (json_object_object_get_ex(o, "root", &root_o) &&
	    json_object_object_get_ex(root_o, "path", &path))
		root_path = json_object_get_string(path);
	if (root_path[0] == '/')
		snprintf(root, sizeof(root), "%s", root_path);
	else
		snprintf(root, sizeof(root), "%s/%s", bundle, root_path);
	json_object_put(o);
	r = write_file_atomic(bundle, "config.json", spec, strlen(spec));
	if (r < 0) {
		report(argv, command, "writing %s/config.json: %s", bundle, strerror(-r));
		return r;
	}
	if (!diff[0])
		return 0;
	r = rootfs_diff_apply(diff, root, &err);
	if (r < 0)
		report(argv, command, "%s", err ? err->message : "applying the rootfs diff failed");
	return r;
}

/* "runc GLOBALS create [options] ID" becomes "runc GLOBALS restore
 * --detach ... ID" for the image of the request; create's options that
 * restore does not take are dropped. */
static int restore_instead(char **argv, int command, int argc, char *request[REQUEST_LINES],
			   const char *dir)
{
	char **out = calloc((size_t)argc + 16, sizeof(*out));
	char done[PATH_MAX + 32], path[PATH_MAX + 32], bundle[PATH_MAX];
	static char criu_path[2 * PATH_MAX]; /* in the environment: putenv */
	static char conf_env[PATH_MAX + 64];
	struct stasis_error *e = NULL;
	int n = 0, r, made;

	if (!out)
		return 1;
	bundle_of(argv, command, argc, bundle, sizeof(bundle));
	if (request[4][0] && prepare_bundle(argv, command, bundle, request[4], request[5]) < 0) {
		snprintf(path, sizeof(path), "%s/" REQUEST, dir);
		unlink(path);
		free(out);
		return 1;
	}
	out[n++] = (char *)runc_binary();
	out[n++] = (char *)"--criu";
	out[n++] = (char *)criu_binary();
	for (int i = 1; i < command; i++)
		out[n++] = argv[i];
	out[n++] = (char *)"restore";
	for (int i = command + 1; i < argc - 1; i++) {
		if (strcmp(argv[i], "--no-new-keyring") == 0)
			continue;
		if (strcmp(argv[i], "--preserve-fds") == 0) {
			i++;
			continue;
		}
		out[n++] = argv[i];
	}
	char *fixed[] = {"--detach", "--no-subreaper", "--file-locks", "--image-path",
			 request[0], "--work-path",    request[1],     argv[argc - 1]};
	for (size_t i = 0; i < ARRAY_SIZE(fixed); i++)
		out[n++] = fixed[i];
	out[n] = NULL;
	made = mkdir_p(request[1]) < 0 ? -errno
				       : runc_criu_path(request[1], criu_path, sizeof(criu_path));
	/* This process only runs runc: what runc's CRIU gets goes into the
	 * environment it hands down. Without it the plugin would do the GPU
	 * restore by itself, behind stasis's back: no restore then. */
	if (made < 0)
		report(argv, command, "cannot put stasis's CRIU first on runc's PATH in %s: %s",
		       request[1], strerror(-made));
	else if (runc_criu_conf(
		     request[1],
		     &(struct criu_settings){.plugin_socket = request[2], .dev_map = request[3]},
		     NULL, conf_env, sizeof(conf_env), &e) < 0)
		report(argv, command, "CRIU's settings: %s", e->message);
	if (made < 0 || e) {
		stasis_error_free(e);
		if (made > 0)
			runc_criu_path_done(request[1]);
		snprintf(path, sizeof(path), "%s/" REQUEST, dir);
		unlink(path);
		free(out);
		return 1;
	}
	putenv(criu_path);
	putenv(conf_env);
	r = run_with_stdio(out);
	unlink(conf_env + strlen("CRIU_CONFIG_FILE="));
	if (made > 0)
		runc_criu_path_done(request[1]);
	free(out);
	snprintf(path, sizeof(path), "%s/" REQUEST, dir);
	snprintf(done, sizeof(done), "%s/" RESTORED, dir);
	if (r == 0)
		rename(path, done);
	else
		unlink(path);
	return r;
}

int runc_wrap_main(int argc, char **argv)
{
	static char criu_path[2 * PATH_MAX]; /* in the environment: putenv */
	char self[PATH_MAX], here[PATH_MAX], path[PATH_MAX + 32], *request[REQUEST_LINES];
	_cleanup_free_ char *text = NULL;
	char **out;
	int command = 1;

	snprintf(self, sizeof(self), "%s", argv[0]);
	snprintf(here, sizeof(here), "%s", dirname(self));
	while (command < argc && argv[command][0] == '-')
		command += takes_value(argv[command]) ? 2 : 1;
	if (command < argc - 1 && strcmp(argv[command], "create") == 0) {
		snprintf(path, sizeof(path), "%s/" REQUEST, here);
		text = read_file_str(path, NULL);
		if (text && read_request(text, request))
			return restore_instead(argv, command, argc, request, here);
	}
	if (command < argc && strcmp(argv[command], "start") == 0) {
		snprintf(path, sizeof(path), "%s/" RESTORED, here);
		if (unlink(path) == 0)
			return 0; /* restored: it runs already */
	}
	out = calloc((size_t)argc + 3, sizeof(*out));
	if (!out)
		return 1;
	out[0] = (char *)runc_binary();
	out[1] = (char *)"--criu";
	out[2] = (char *)criu_binary();
	memcpy(out + 3, argv + 1, (size_t)argc * sizeof(*out));
	/* The commands that run CRIU (the shim's state and kill polls do not
	 * touch the link). It stays in this container's folder until that
	 * goes. */
	if (command < argc &&
	    (strcmp(argv[command], "checkpoint") == 0 || strcmp(argv[command], "restore") == 0)) {
		int made;

		made = runc_criu_path(here, criu_path, sizeof(criu_path));
		if (made < 0) {
			report(argv, command,
			       "cannot put stasis's CRIU first on runc's PATH in %s: %s", here,
			       strerror(-made));
			free(out);
			return 1;
		}
		putenv(criu_path);
	}
	execvp(out[0], out);
	fprintf(stderr, "%s: cannot run %s: %s\n", RUNC_WRAP_NAME, out[0], strerror(errno));
	return 127;
}
